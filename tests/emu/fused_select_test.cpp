// Off-GPU test of the block kernels' selection (csrc/include/mqa_topk/fused/
// select.cuh), compiled with g++ and run by tests/test_fused_select_emu.py on
// the warp emulator. Parts (the first argument):
//
// pieces: order_key against float comparison; the scrambled tile walk; the
//   sample gate's rules (gate_rank, gate_rank_floor and its margin,
//   fused_sample_tiles, gate_threshold) and warp_rank_key (the gate's cap).
// select: the one-run pieces (Segs): warp_emit in place (the gate's drop in
//   sm90_fused_blocks.cuh) and finish_in_scratch (the selects' last step
//   over the gathered bin, with warp_index_cut under heavy ties), against
//   sorting references.
// protocol gate|nogate: the block kernel's per-row protocol (scrambled tile
//   walk, 8 segments of 16 keys per tile, the sample gate by the pair of
//   warps and the drop, compaction checks every kCheckTiles tiles, the pair's
//   block-end select with its one-warp fallback, the redo of an unsafe gated
//   row) on adversarial rows, against the exact top-k by (value desc, index
//   asc); nogate: every row scanned without a gate (a redo's scan).
// Exit status 0 when every check passes; the first failure is printed.
#define MQA_TOPK_HOST_EMULATION 1
#include "warp_emu.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "mqa_topk/fused/select.cuh"
#include "select_ref.h"

using namespace mqa_topk::fused_detail;

namespace {

// ---- pieces ------------------------------------------------------------------

// order_key against float comparison: a < b exactly when key(a) < key(b) and
// a == b exactly when key(a) == key(b) (so -0.0 and +0.0 share a key), over
// the special values and a spread of random ones; every key is >= 1.
void order_key_cases() {
  std::vector<float> v = {-INFINITY, -FLT_MAX, -1e30f, -2.f, -1.f, -1.f + 1e-7f, -FLT_MIN, -FLT_TRUE_MIN, -0.f, 0.f,
                          FLT_TRUE_MIN, FLT_MIN, 1e-30f, 0.5f, 1.f, 1.f + 1e-7f, 3.f, 1e30f, FLT_MAX, INFINITY};
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  for (float a : v) {
    expect(order_key(a) >= 1u, "order_key: a key below 1 (key 0 is the selects' padding)");
    for (float b : v) {
      const uint32_t ka = order_key(a), kb = order_key(b);
      const bool ok = (a < b) == (ka < kb) && (a == b) == (ka == kb);
      // (the message only when it fails: formatting two floats per pair was most of this part's time)
      expect(ok, ok ? std::string() : "order_key orders " + std::to_string(a) + " and " + std::to_string(b) +
                                          " unlike float comparison");
    }
  }
}

// The walk from the last tile by tile_stride visits every tile once.
void walk_cases() {
  for (int nt = 1; nt < 700; nt += (nt < 100 ? 1 : 37)) {
    const int stride = tile_stride(nt);
    expect(stride >= 1 && (nt == 1 || stride < nt), "tile_stride range, nt " + std::to_string(nt));
    std::vector<int> seen(nt, 0);
    for (int t = 0, tp = nt - 1; t < nt; ++t, tp = next_tile(tp, nt, stride)) {
      expect(tp >= 0 && tp < nt, "next_tile range");
      ++seen[tp];
    }
    for (int x : seen) expect(x == 1, "the walk visits every tile once, nt " + std::to_string(nt));
  }
}

void gate_piece_cases() {
  std::mt19937 rng(4242);
  // warp_rank_key: the rank-th largest of 32 keys (padding 0), against a sort.
  for (int trial = 0; trial < 80; ++trial) {
    std::vector<uint32_t> v(32);
    const int nonzero = trial % 4 == 0 ? static_cast<int>(rng() % 33) : 32;
    for (int i = 0; i < 32; ++i)
      v[i] = i < nonzero ? (trial % 5 == 0 ? 0x80000000u + rng() % 7 : trial % 7 == 0 ? 0xffffffffu - rng() % 3
                                                                                      : 1u + rng())
                         : 0u;
    std::shuffle(v.begin(), v.end(), rng);
    std::vector<uint32_t> sorted = v;
    std::sort(sorted.begin(), sorted.end(), std::greater<uint32_t>());
    for (uint32_t rank : {1u, 2u, 3u, 4u, 16u, 31u, 32u}) {
      uint32_t res[32];
      warp_emu::run([&](int lane) { res[lane] = warp_rank_key(v.data(), rank, lane); });
      for (int l = 1; l < 32; ++l) expect(res[l] == res[0], "warp_rank_key: lanes disagree");
      expect(res[0] == sorted[rank - 1], "warp_rank_key: rank " + std::to_string(rank) + " trial " +
                                             std::to_string(trial));
    }
  }
  const uint32_t target = static_cast<uint32_t>(fused_gate_target(2048));
  expect(target == 2048 + 1024 + 256, "fused_gate_target: 1.5 k + 256");
  expect(gate_rank(0, 100000, target) == 0, "gate_rank: no sample, no gate");
  expect(gate_rank(3000, target, target) == 0, "gate_rank: a row of target keys is not gated");
  expect(gate_rank(300, target + 1, target) == 0, "gate_rank: a sample of most of the row is not gated");
  expect(gate_rank(300, 10 * target, target) == 30, "gate_rank: a long row is gated");
  expect(gate_rank(3072, 61440, target) == (uint64_t(target) * 3072 + 61439) / 61440, "gate_rank: rho");
  expect(gate_rank(3072, 1u << 22, target) == static_cast<uint32_t>(kMinGateRank), "gate_rank: floor");
  expect(gate_rank(100, 200000, 400000) == 0, "gate_rank: rho above the sample");
  expect(gate_rank(3000, 33984, 2900) == 257 && gate_rank(3000, 34000, 2900) == 256, "gate_rank: no list limit");
  expect(gate_rank(3000, 33984, 2900, 256) == 0 && gate_rank(3000, 34000, 2900, 256) == 256, "gate_rank: cap");
  for (int k : {512, 1024, 2048})
    for (int nt : {0, 1, 2, 7, 26, 64, 480, 4096, 32768}) {
      const int t = fused_gate_target(k);
      const int want = nt <= 0 ? 0 : std::min({std::max((kGateRank * nt + t - 1) / t, 1), kMaxSampleTiles, nt});
      expect(fused_sample_tiles(nt, k) == want, "fused_sample_tiles: nt " + std::to_string(nt));
    }
  // gate_threshold: a candidate passes (composite > thr) exactly when its key is at or above the gate.
  for (uint32_t gk : {1u, 2u, okey(-1.f), okey(0.f), okey(3.5f), 0xfffffff0u})
    for (uint32_t key : {gk - 1u, gk, gk + 1u})
      for (uint32_t idx : {0u, 1u, (1u << 22) - 1u})
        if (key >= 1u)
          expect((composite(key, idx) > gate_threshold(gk)) == (key >= gk), "gate_threshold: pass iff key >= gate");
  // tie_gate_threshold: key kt's gate with at most kScratch tied; else tied
  // keys pass up to ic = max(ic_s, start + ceil((rho - above) n / tied) - 1)
  // (the even-spread cut alone when at most m / 16 of the sample's m entries
  // are below kt), and kt's gate when that reaches the row's last key.
  {
    auto passes = [](uint64_t thr, uint32_t key, uint32_t idx) { return composite(key, idx) > thr; };
    constexpr uint32_t kM = 10000;  // (most of the sample below kt: the larger of the two cuts)
    expect(tie_gate_threshold(100, 500, 130, 40, 256, 65536, 1000, kM) == gate_threshold(100),
           "tie gate: 256 tied, no cut");
    const uint64_t a = tie_gate_threshold(100, 500, 130, 40, 768, 65536, 1000, kM);  // span ceil(90 * 65536 / 768) = 7680
    expect(passes(a, 100, 8679) && !passes(a, 100, 8680) && passes(a, 101, 60000) && !passes(a, 99, 0) &&
               passes(a, 100, 1000),
           "tie gate: the even-spread cut");
    const uint64_t b = tie_gate_threshold(100, 20000, 130, 40, 768, 65536, 1000, kM);
    expect(passes(b, 100, 20000) && !passes(b, 100, 20001), "tie gate: the sample's own cut when higher");
    // (rho - above) n / tied >= n: the cut reaches the end; one rank less, it does not
    expect(tie_gate_threshold(100, 500, 808, 40, 768, 7680, 1000, kM) == gate_threshold(100),
           "tie gate: a cut past the row's last key is the key's gate");
    const uint64_t c = tie_gate_threshold(100, 500, 807, 40, 768, 7680, 1000, kM);  // ceil(767 * 7680 / 768) = 7670
    expect(passes(c, 100, 8669) && !passes(c, 100, 8670), "tie gate: a cut just short of the end");
    expect(tie_gate_threshold(100, 500, 130, 130, 768, 65536, 0, kM) == gate_threshold(100),
           "tie gate: rank above the ties");
    const uint64_t d = tie_gate_threshold(100, 0, 300, 0, 2560, 65536, 0, 2560);  // ceil(300 * 65536 / 2560) = 7680
    expect(passes(d, 100, 7679) && !passes(d, 100, 7680), "tie gate: all tied");
    // nearly every sampled key ties or ranks above (below <= m / 16): the even-spread cut even when ic_s is higher
    const uint64_t e = tie_gate_threshold(100, 20000, 130, 40, 768, 65536, 1000, 808 + 53);  // 16 * 53 = 848 <= 861
    expect(passes(e, 100, 8679) && !passes(e, 100, 8680), "tie gate: spread ties take the even-spread cut");
    const uint64_t f = tie_gate_threshold(100, 20000, 130, 40, 768, 65536, 1000, 808 + 54);  // 16 * 54 = 864 > 862
    expect(passes(f, 100, 20000) && !passes(f, 100, 20001), "tie gate: one more below, the larger cut again");
    const uint64_t g = tie_gate_threshold(100, 20000, 3000, 0, 3072, 61440, 0, 3072);  // all-equal: span 60000
    expect(passes(g, 100, 59999) && !passes(g, 100, 60000), "tie gate: all-equal sample");
  }
  // cap_gate: a gate above the cap's key becomes the cap's key gate; one at
  // the cap's key keeps a cut by index; one below is kept.
  {
    const uint64_t cut = composite(100, 5000) - 1u;
    expect(cap_gate(cut, 100) == cut, "cap_gate: a cut at the cap's key is kept");
    expect(cap_gate(gate_threshold(100), 100) == gate_threshold(100), "cap_gate: the cap's own gate");
    expect(cap_gate(cut, 101) == cut && cap_gate(gate_threshold(90), 100) == gate_threshold(90), "cap_gate: below the cap");
    expect(cap_gate(cut, 99) == gate_threshold(99) && cap_gate(gate_threshold(120), 100) == gate_threshold(100),
           "cap_gate: above the cap");
  }
  // sample_gap_end: the key before the next sampled tile above ic's (the walk's first ns of nt tiles from lo).
  for (int nt : {1, 2, 5, 64, 512, 4099})
    for (int ns : {1, 3, 20, 24}) {
      if (ns > nt) continue;
      std::vector<bool> sampled(nt, false);
      for (int t = 0, tp = nt - 1; t < ns; ++t, tp = next_tile(tp, nt, tile_stride(nt))) sampled[tp] = true;
      const uint32_t lo = 1000;
      for (int tq = 0; tq < nt; tq += std::max(1, nt / 37))
        for (uint32_t off : {0u, 77u, 127u}) {
          int nxt = tq + 1;
          while (nxt < nt && !sampled[nxt]) ++nxt;
          expect(sample_gap_end(lo + 128u * tq + off, lo, nt, ns) == lo + 128u * nxt - 1u, "sample_gap_end");
        }
      expect(sample_gap_end(lo - 1, lo, nt, ns) == lo - 1 && sample_gap_end(lo + 128u * nt, lo, nt, ns) == lo + 128u * nt,
             "sample_gap_end: outside the block");
    }
  // gate_rank_floor: mu + z sqrt(mu) (mu = k m / n); 0 without a margin.
  expect(gate_rank_floor(768, 16384, 2048, 5) == 145, "gate_rank_floor: 96 + 5 sqrt(96)");
  expect(gate_rank_floor(6144, 262144, 512, 5) == 30, "gate_rank_floor: 12 + 5 sqrt(12)");
  expect(gate_rank_floor(768, 16384, 2048, 0) == 0 && gate_rank_floor(0, 16384, 2048, 5) == 0,
         "gate_rank_floor: no margin, no sample");
  // The margin holds: of m keys sampled from a row of n distinct values, more
  // than the floor at or above the k-th largest (the row would be redone) in
  // none of 20000 draws per case (the model's rate is ~1e-6; with the floor
  // at mu + 2 sqrt(mu) instead, ~2% of the draws would exceed it).
  {
    std::mt19937 rng2(7);
    struct Case { uint32_t m, n, k; };
    for (const Case c : {Case{768, 16384, 2048}, Case{6144, 262144, 512}, Case{6144, 262144, 2048}, Case{1536, 8192, 512}}) {
      const uint32_t fl = gate_rank_floor(c.m, c.n, c.k, 5), weak = gate_rank_floor(c.m, c.n, c.k, 2);
      int over = 0, over_weak = 0;
      for (int t = 0; t < 20000; ++t) {
        // Sampling m of n without replacement: the count of the k top keys among them.
        uint32_t hit = 0, left = c.n, top = c.k;
        for (uint32_t i = 0; i < c.m; ++i) {
          const bool is_top = std::uniform_int_distribution<uint32_t>(0, left - 1)(rng2) < top;
          hit += is_top;
          top -= is_top;
          --left;
        }
        over += hit > fl;
        over_weak += hit > weak;
      }
      expect(over == 0, "gate_rank_floor: a draw beyond the z = 5 margin");
      expect(over_weak > 0, "gate_rank_floor: the z = 2 margin is exceeded in some draw (the test can fail)");
    }
  }
}

// ---- select: the one-run pieces ----------------------------------------------

// A run as the kernel keeps a segment: capacity a multiple of 4, poison past
// the count (read by the vector pass, masked).
struct Run {
  std::vector<uint32_t> key, idx;
  int n = 0;
  explicit Run(int cap) : key((cap + 3) / 4 * 4 + 4, 0xdeadbeefu), idx((cap + 3) / 4 * 4 + 4, 0xdeadbeefu) {}
  void push(uint32_t k, uint32_t i) {
    key[n] = k;
    idx[n] = i;
    ++n;
  }
  Segs segs() const { return Segs{{key.data(), nullptr}, {idx.data(), nullptr}, {n, 0}, 1}; }
};

// warp_emit over one run in place (the gate's drop): the entries with
// composite >= t, in run order, at the run's head; the count; both runs of a
// two-run Segs out of place, numbered in run order.
void emit_cases() {
  std::mt19937 rng(31);
  for (int n : {0, 1, 3, 4, 5, 63, 64, 127, 128, 129, 511, 512, 513, 1000, 2048}) {
    Run a(n);
    for (int i = 0; i < n; ++i) a.push(1u + rng() % (i % 3 ? 1000u : 10u), static_cast<uint32_t>(i * 5 + rng() % 5));
    // thresholds: gates (low word 0), composites between entries and those of entries (a compaction's)
    const uint64_t at_entry = n ? composite(a.key[n / 2], a.idx[n / 2]) : composite(7, 7);
    const uint64_t at_last = n ? composite(a.key[n - 1], a.idx[n - 1]) : composite(7, 7);
    for (uint64_t t : {uint64_t(0), gate_threshold(5), gate_threshold(500), composite(5, 40), composite(999, 0),
                       gate_threshold(2000), at_entry, at_last}) {
      std::vector<std::pair<uint32_t, uint32_t>> want;
      for (int i = 0; i < n; ++i)
        if (composite(a.key[i], a.idx[i]) >= t) want.push_back({a.key[i], a.idx[i]});
      Run c = a;
      const Segs s = c.segs();
      uint32_t* kp = c.key.data();
      uint32_t* ip = c.idx.data();
      int res[32];
      warp_emu::run([&](int lane) {
        res[lane] = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) {
          kp[at] = key;
          ip[at] = idx;
        });
      });
      const std::string name = "emit n=" + std::to_string(n) + " t=" + std::to_string(t);
      for (int l = 1; l < 32; ++l) expect(res[l] == res[0], name + ": lanes disagree on the kept count");
      expect(res[0] == static_cast<int>(want.size()), name + ": kept count");
      for (size_t i = 0; i < want.size(); ++i)
        expect(c.key[i] == want[i].first && c.idx[i] == want[i].second, name + ": in-place order / content");
    }
  }
  {  // two runs, out of place
    Run a(300), b(77);
    for (int i = 0; i < 300; ++i) a.push(1u + rng() % 100, 2u * i);
    for (int i = 0; i < 77; ++i) b.push(1u + rng() % 100, 2u * i + 1u);
    const Segs s{{a.key.data(), b.key.data()}, {a.idx.data(), b.idx.data()}, {a.n, b.n}, 2};
    const uint64_t t = composite(50, 100);
    std::vector<std::pair<uint32_t, uint32_t>> want, got(a.n + b.n);
    for (const Run* r : {&a, &b})
      for (int i = 0; i < r->n; ++i)
        if (composite(r->key[i], r->idx[i]) >= t) want.push_back({r->key[i], r->idx[i]});
    int res[32];
    warp_emu::run([&](int lane) {
      res[lane] = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) { got[at] = {key, idx}; });
    });
    got.resize(res[0]);
    expect(got == want, "emit two runs: list (order or content)");
  }
}

// finish_in_scratch: the need-th largest composite of up to kScratch entries
// in shared memory, given each lane's min / max key of the entries it
// gathered (here: entry j by lane j % 32), against a sort; hist left zero.
void scratch_cases() {
  std::mt19937 rng(77);
  int ties = 0;
  for (int n : {1, 2, 31, 32, 33, 100, 200, 255, 256}) {
    for (int kind = 0; kind < 7; ++kind) {
      std::vector<uint32_t> sk(kScratch, 0xdeadbeefu), si(kScratch, 0xdeadbeefu);
      std::vector<uint32_t> perm(1u << 12);
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<uint32_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int j = 0; j < n; ++j) {
        uint32_t key;
        switch (kind) {
          case 0: key = 1u + rng() % 0xfffffffeu; break;                  // the whole key range
          case 1: key = 0x80000000u + rng() % 4; break;                    // a few keys: heavy ties
          case 2: key = 0x3f800000u; break;                                // one key: the index cut alone
          case 3: key = 0xfffffff0u + rng() % 16; break;                   // at the top of the range
          case 4: key = 1u + rng() % 3; break;                             // at the bottom
          case 5: key = 0x12345600u + (rng() % 2) * 0x100000u; break;       // two far-apart keys
          default: key = 0x40000000u + static_cast<uint32_t>(rng() % 300); break;  // a narrow range
        }
        sk[j] = key;
        si[j] = kind == 2 || kind == 1 ? perm[j] * 1024u + rng() % 1024u : perm[j] * 997u % (1u << 22);
      }
      std::vector<uint64_t> comp;
      for (int j = 0; j < n; ++j) comp.push_back(composite(sk[j], si[j]));
      std::sort(comp.begin(), comp.end(), std::greater<uint64_t>());
      for (uint32_t need : {1u, static_cast<uint32_t>(n + 1) / 2, static_cast<uint32_t>(n)}) {
        uint32_t hist[256] = {};
        uint64_t res[32];
        warp_emu::run([&](int lane) {
          uint32_t gmin = 0xffffffffu, gmax = 0;
          for (int j = lane; j < n; j += 32) {
            gmin = std::min(gmin, sk[j]);
            gmax = std::max(gmax, sk[j]);
          }
          res[lane] = finish_in_scratch(sk.data(), si.data(), static_cast<uint32_t>(n), gmin, gmax, need, hist, lane);
        });
        const std::string name = "finish_in_scratch n=" + std::to_string(n) + " kind " + std::to_string(kind) +
                                 " need " + std::to_string(need);
        for (int l = 1; l < 32; ++l) expect(res[l] == res[0], name + ": lanes disagree");
        // The answer may be (key, any index) when every entry of the need-th key is in: the same kept set.
        const uint64_t want = comp[need - 1];
        size_t kept = 0;
        for (uint64_t c : comp) kept += c >= res[0];
        expect(res[0] <= want && kept == need, name + ": keeps " + std::to_string(kept) + " entries");
        ties += (res[0] >> 32) == (want >> 32) && n > 32 && kind == 2;
        for (int i = 0; i < 256; ++i) expect(hist[i] == 0, name + ": histogram not left zeroed");
      }
    }
  }
  expect(ties > 0, "finish_in_scratch: the one-key (index cut) cases ran");
}

// ---- protocol: the block kernel's per-row protocol ------------------------------

constexpr int kCheckTiles = 12;  // Sm90FusedBlocksConfig::kCheckTiles
constexpr int kRankFloorZ = 5;   // fused/blocks_select.cuh: kGateRankFloorZ
long g_rows = 0, g_gated_rows = 0, g_redo_rows = 0, g_compactions = 0, g_drops = 0, g_pair_fallbacks = 0,
     g_fast_gates = 0, g_rebalances = 0, g_tie_cut_gates = 0;
std::string g_row_name;

// One row of n keys (values v) through the block kernel's steps
// (sm90_fused_blocks.cuh, fused/blocks_select.cuh), the row's warps emulated
// by warp_emu (one warp or the row's pair): the walk from the last tile by
// tile_stride; per tile, segment s (warp w of key group kg, s = 4 kg + w)
// takes keys [16 s, 16 s + 16) of the tile in order, what beats the row's
// threshold (composite > thr); the first ns = fused_sample_tiles tiles with
// no threshold (gate), their maxima; every kCheckTiles tiles a compaction
// check (a segment past cap - 16 kCheckTiles: the row group's
// group_compact_threshold, each of the 8 warps over its segment, each
// segment's keep in place, and a crowded row's round-robin by one warp; the
// row's threshold becomes the result). After the sample: the gate's rank (blocks_gate_rho_mn), the
// pair's pair_gate_fast, else pair_select and pair_tie_gate (heavy ties at
// the rank: the gate cut by index), capped at the C-th tile maximum
// (warp_rank_key), the drop (warp_emit over each segment in place) when the
// kernel drops (always for a gate cut by index). Block end: the pair's
// pair_finish_row_gated, or warp_finish_row on one warp when it hands over
// (-1); an unsafe gated row is redone without the gate. Returns the output
// row (relative indices, -1 padded).
std::vector<int> simulate_row(const std::vector<float>& v, int k, bool gate) {
  const int n = static_cast<int>(v.size());
  const int nt = (n + 127) / 128;
  const int stride = tile_stride(nt);
  const int cap = seg_cap(k);
  const uint32_t trigger = static_cast<uint32_t>(cap - 16 * kCheckTiles);
  Row row(cap);
  Scratch sc;
  uint64_t thr = 0;
  const int ns = gate ? fused_sample_tiles(nt, k) : 0;
  uint32_t tile_max[32] = {};
  auto append = [&](int tp, int t) {
    for (int s = 0; s < NS; ++s)
      for (int j = 0; j < 16; ++j) {
        const int i = tp * 128 + s * 16 + j;
        if (i >= n) continue;
        const uint32_t key = order_key(v[i]);
        if (t < ns) tile_max[t] = std::max(tile_max[t], key);
        if (composite(key, static_cast<uint32_t>(i)) > thr) row.push(s, key, static_cast<uint32_t>(i));
      }
  };
  auto check = [&](int t) {
    if ((t + 1) % kCheckTiles != 0 || t + 1 >= nt) return;
    bool over = false;
    for (int s = 0; s < NS; ++s) over = over || row.cnt[s] > trigger;
    if (!over) return;
    // The row group's 8 warps, each its own segment: the threshold, then each keeps its entries at or above it.
    uint64_t th[256];
    int kept[NS] = {};
    uint32_t xch[4 * 2 * kGroupWarps] = {};
    warp_emu::run8([&](int w, int lane) {
      GroupCtx g{xch, 5, w, 0};
      uint32_t* kp = row.key(w);
      uint32_t* ip = row.idx(w);
      const int c = static_cast<int>(row.cnt[w]);
      uint64_t t1 = group_compact_threshold(SegLanes{kp, ip, c, c}, g, thr, static_cast<uint32_t>(k), sc.hist, lane);
      t1 = t1 > thr ? t1 : thr;
      th[w * 32 + lane] = t1;
      const Segs sg{{kp, nullptr}, {ip, nullptr}, {c, 0}, 1};
      const int m = warp_emit<2>(sg, t1, lane, [&](int at, uint32_t key, uint32_t idx) {
        kp[at] = key;
        ip[at] = idx;
      });
      if (lane == 0) kept[w] = m;
    });
    for (int l = 1; l < 256; ++l) expect(th[l] == th[0], "compaction: warps or lanes disagree");
    uint32_t most = 0;
    for (int s = 0; s < NS; ++s) most = std::max(most, row.cnt[s] = static_cast<uint32_t>(kept[s]));
    if (most > trigger / 2) {  // crowded: round-robin over the segments by one warp
      int all[32];
      warp_emu::run([&](int lane) {
        all[lane] = warp_emit(row.lanes(lane), th[0], lane, [&](int at, uint32_t key, uint32_t idx) {
          uint32_t* d = row.key(at & (NS - 1)) + (at >> 3);
          d[0] = key;
          d[row.cap] = idx;
        });
      });
      for (int s = 0; s < NS; ++s) row.cnt[s] = static_cast<uint32_t>((all[0] + NS - 1 - s) / NS);
      ++g_rebalances;
    }
    thr = th[0];
    ++g_compactions;
  };
  int t = 0, tp = nt - 1;
  for (; t < ns; ++t, tp = next_tile(tp, nt, stride)) {
    append(tp, t);
    check(t);
  }
  bool gated = false;
  uint32_t smax = 0;
  if (ns > 0) {
    uint32_t m = 0;
    for (int s = 0; s < NS; ++s) m += row.cnt[s];
    const uint32_t target = static_cast<uint32_t>(fused_gate_target(k));
    uint32_t rho = gate_rank(m, static_cast<uint32_t>(n), target);
    if (rho && rho < static_cast<uint32_t>(kGateRank)) {
      rho = std::max(rho, gate_rank_floor(m, static_cast<uint32_t>(n), static_cast<uint32_t>(k), kRankFloorZ));
      if (rho >= m) rho = 0;
    }
    uint64_t g = 0;
    if (rho) {
      const uint32_t mx = *std::max_element(tile_max, tile_max + 32);
      uint32_t xch[16] = {};
      uint32_t fast[64], cnt[64];
      uint64_t th[64];
      bool ok[64];
      warp_emu::run2([&](int w, int lane) {
        PairCtx pc{xch, 9, w, 0};
        const int i = w * 32 + lane;
        fast[i] = pair_gate_fast(row.half(w, lane), pc, rho, mx, sc.hist, lane);
        th[i] = gate_threshold(fast[i]);
        ok[i] = true;
        if (fast[i] == 0) {
          uint64_t t1 = 0;
          ok[i] = pair_select(row.half(w, lane), pc, 0, rho, sc.hist, sc.sk, sc.si, lane, &t1, &cnt[i]);
          th[i] = pair_tie_gate(row.half(w, lane), pc, t1, rho, m, static_cast<uint32_t>(n), 0u, 0u, nt, ns, lane);
        }
      });
      for (int l = 1; l < 64; ++l) expect(th[l] == th[0] && ok[l] == ok[0], "gate: the pair's lanes disagree");
      for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, "gate: histogram not left zeroed");
      g_fast_gates += fast[0] != 0;
      expect(ok[0], "gate: the pair gave no answer");
      uint32_t capk[32];
      const uint32_t c = static_cast<uint32_t>(std::min(ns, kMinGateTiles));
      warp_emu::run([&](int lane) { capk[lane] = warp_rank_key(tile_max, c, lane); });
      g = cap_gate(th[0], capk[0]);
      if (g) smax = mx;
    }
    if (g) {
      gated = true;
      ++g_gated_rows;
      g_tie_cut_gates += static_cast<uint32_t>(g) != 0u;
      thr = std::max(thr, g);
      const bool drop = 16 * ns + (5 * static_cast<int>(target)) / 32 > cap - 32 * kCheckTiles ||
                        static_cast<uint32_t>(thr) != 0u;
      for (int s = 0; s < NS && drop; ++s) {
        if (row.cnt[s] == 0) continue;
        const Segs sg{{row.key(s), nullptr}, {row.idx(s), nullptr}, {static_cast<int>(row.cnt[s]), 0}, 1};
        uint32_t* kp = row.key(s);
        uint32_t* ip = row.idx(s);
        int left[32];
        warp_emu::run([&](int lane) {
          left[lane] = warp_emit(sg, thr, lane, [&](int at, uint32_t key, uint32_t idx) {
            kp[at] = key;
            ip[at] = idx;
          });
        });
        row.cnt[s] = static_cast<uint32_t>(left[0]);
        ++g_drops;
      }
    }
  }
  for (; t < nt; ++t, tp = next_tile(tp, nt, stride)) {
    append(tp, t);
    check(t);
  }
  // Block end: the pair, else one warp.
  const uint32_t need = std::min<uint32_t>(k, static_cast<uint32_t>(n));
  std::vector<int> out(k, -7), writes(k, 0);
  uint32_t xch[16] = {};
  int res[64];
  uint32_t cands[64];
  warp_emu::run2([&](int w, int lane) {
    PairCtx pc{xch, 9, w, 0};
    res[w * 32 + lane] = pair_finish_row_gated(row.half(w, lane), pc, thr, smax, static_cast<uint32_t>(k), need,
                                               w == 0 ? gated : false, 0, sc.hist, sc.sk, sc.si, lane,
                                               &cands[w * 32 + lane], [&](int at, int x, uint32_t) {
                                                 out[at] = x;
                                                 ++writes[at];
                                               });
  });
  for (int l = 1; l < 64; ++l) expect(res[l] == res[0], "block end: the pair's lanes disagree");
  for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, "block end: histogram not left zeroed");
  bool ok = res[0] > 0;
  if (res[0] < 0) {
    ++g_pair_fallbacks;
    std::fill(writes.begin(), writes.end(), 0);
    bool ok1[32];
    warp_emu::run([&](int lane) {
      ok1[lane] = warp_finish_row(row.lanes(lane), thr, static_cast<uint32_t>(k), need, gated, 0, sc.hist, sc.sk,
                                  sc.si, lane, &cands[lane], [&](int at, int x, uint32_t) {
                                    out[at] = x;
                                    ++writes[at];
                                  });
    });
    ok = ok1[0];
  }
  ++g_rows;
  if (!ok) {
    expect(gated, g_row_name + ": an ungated row asked for a redo");
    for (int x : out) expect(x == -7, g_row_name + ": an unsafe row wrote output");
    ++g_redo_rows;
    if (std::getenv("EMU_VERBOSE")) std::fprintf(stderr, "redo: %s n=%d k=%d cands=%u\n", g_row_name.c_str(), n, k, cands[0]);
    return simulate_row(v, k, false);  // the redo: no gate
  }
  for (int j = 0; j < k; ++j) expect(writes[j] == 1, g_row_name + ": position written " + std::to_string(writes[j]) + " times");
  return out;
}

void check_row(const std::string& name, const std::vector<float>& v, int k, bool gate) {
  g_row_name = name + " k=" + std::to_string(k);
  const std::vector<int> out = simulate_row(v, k, gate);
  const size_t m = std::min<size_t>(k, v.size());
  std::vector<uint32_t> got;
  for (size_t j = 0; j < out.size(); ++j) {
    if (j < m) expect(out[j] >= 0 && out[j] < static_cast<int>(v.size()), g_row_name + ": bad index");
    else expect(out[j] == -1, g_row_name + ": padding is not -1");
    if (out[j] >= 0) got.push_back(static_cast<uint32_t>(out[j]));
  }
  std::vector<uint32_t> want = float_topk(v, k);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  expect(got == want, g_row_name + ": index set differs from the exact top-k");
}

void protocol_cases(bool gate) {
  std::mt19937 rng(99);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (int k : {512, 2048}) {
    for (int n : {1, 100, k - 1, k, k + 1, 4 * k + 77, 20000, 70000}) {
      std::vector<float> v(n);
      for (auto& x : v) x = gauss(rng);
      check_row("gauss n=" + std::to_string(n), v, k, gate);
    }
    const int n = 20000;
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = float(i);
    check_row("rising", v, k, gate);
    for (int i = 0; i < n; ++i) v[i] = float(n - i);
    check_row("falling", v, k, gate);
    for (int i = 0; i < n; ++i) v[i] = 0.f;
    check_row("all zero", v, k, gate);
    for (int i = 0; i < n; ++i) v[i] = (i % 3 == 0) ? -0.f : 0.f;
    check_row("signed zeros", v, k, gate);
    for (int i = 0; i < n; ++i) v[i] = (i % 9 == 0) ? 3.f + gauss(rng) : 1.f;  // thousands tie at the k-th
    check_row("boundary ties", v, k, gate);
    for (int i = 0; i < n; ++i) v[i] = 7.f * (1.f + 1e-5f * float(rng() % 4096));
    check_row("near ties", v, k, gate);
    for (int i = 0; i < n; ++i) v[i] = -std::fabs(gauss(rng));
    check_row("negative", v, k, gate);
    // Few distinct values, and a tied staircase.
    std::vector<float> u(60000);
    for (size_t i = 0; i < u.size(); ++i) u[i] = float((i * 7919u) % 37u);
    check_row("37 distinct values", u, k, gate);
    for (size_t i = 0; i < u.size(); ++i) u[i] = float(i / 64);
    check_row("staircase", u, k, gate);
    for (size_t i = 0; i < u.size(); ++i) u[i] = 1.0f + float((i * 40503u) % 3000u) * 1e-7f;
    check_row("3000 values in one float octave", u, k, gate);
    for (size_t i = 0; i < u.size(); ++i) {  // 200 adjacent floats
      const uint32_t bits = 0x3f800000u + static_cast<uint32_t>((i * 7919u) % 200u);
      std::memcpy(&u[i], &bits, 4);
    }
    check_row("200 adjacent floats", u, k, gate);
    // Relu-saturated: most logits exactly 0, a few hundred positive (the gate
    // lands on 0 and every zero passes it: compactions, exact ties by index).
    for (size_t i = 0; i < u.size(); ++i) u[i] = (i * 2654435761u) % 211u == 0 ? std::fabs(gauss(rng)) : 0.f;
    check_row("relu saturated", u, k, gate);
    // The large values only at the key positions of one warp (16 of every
    // 128): a compaction keeps them all in one segment, which is crowded and
    // re-emitted round-robin.
    for (size_t i = 0; i < u.size(); ++i) u[i] = (i % 128) / 16 == 5 ? 5.f + gauss(rng) : gauss(rng) - 5.f;
    check_row("one warp's key positions", u, k, gate);
    // The sample tiles (the first of the walk) hold the row's largest values
    // and the rest sit below them: the gate is unsafe and the row is redone.
    // Then the opposite: a sample of the smallest values (a low gate).
    const long redo_before = g_redo_rows;
    std::vector<bool> sampled((u.size() + 127) / 128, false);
    {
      const int nt = static_cast<int>(sampled.size()), ns = fused_sample_tiles(nt, k);
      for (int t = 0, tp = nt - 1; t < ns; ++t, tp = next_tile(tp, nt, tile_stride(nt))) sampled[tp] = true;
    }
    for (size_t i = 0; i < u.size(); ++i) u[i] = sampled[i / 128] ? 10.f + gauss(rng) : gauss(rng);
    check_row("hot sample tiles", u, k, gate);
    if (gate) expect(g_redo_rows > redo_before, "hot sample tiles: expected a redo");
    for (size_t i = 0; i < u.size(); ++i) u[i] = sampled[i / 128] ? gauss(rng) - 10.f : gauss(rng);
    check_row("cold sample tiles", u, k, gate);
    // Heavy ties at the gate's rank crowded at one end of the row (the gate's
    // cut by index: the sample's own cut where they crowd at the end, the
    // even-spread estimate where they crowd at the start), and tied keys
    // only in the sampled tiles (the cut is too low: a redo).
    for (size_t i = 0; i < u.size(); ++i) u[i] = i % 97 == 0 ? 4.f + gauss(rng) : i >= u.size() * 4 / 5 ? 1.f : -1.f;
    check_row("ties at the row's end", u, k, gate);
    for (size_t i = 0; i < u.size(); ++i) u[i] = i % 97 == 0 ? 4.f + gauss(rng) : i < u.size() / 5 ? 1.f : -1.f;
    check_row("ties at the row's start", u, k, gate);
    const long redo_ties = g_redo_rows;
    for (size_t i = 0; i < u.size(); ++i) u[i] = i % 97 == 0 ? 4.f + gauss(rng) : sampled[i / 128] ? 1.f : -1.f;
    check_row("ties in the sample tiles only", u, k, gate);
    if (gate && k == 2048) expect(g_redo_rows > redo_ties, "ties in the sample tiles only: expected a redo");
  }
  if (gate) {
    expect(g_gated_rows > 0 && g_fast_gates > 0 && g_drops > 0, "protocol: no row was gated, fast-gated or dropped");
    expect(g_tie_cut_gates > 0, "protocol: no gate was cut by index");
  } else {
    expect(g_gated_rows == 0 && g_redo_rows == 0, "protocol nogate: a row was gated");
  }
  expect(g_compactions > 0, "protocol: no compaction ran");
  expect(g_rebalances > 0, "protocol: no crowded row was re-emitted round-robin");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  const std::string mode = argc > 2 ? argv[2] : "gate";
  if (which == "all" || which == "pieces") {
    order_key_cases();
    walk_cases();
    gate_piece_cases();
  }
  if (which == "all" || which == "select") {
    emit_cases();
    scratch_cases();
  }
  if (which == "all" || which == "protocol") protocol_cases(mode != "nogate");
  std::printf("fused_select emulation: %d checks passed (%ld warp exchanges; %ld rows, %ld gated (%ld by the fast "
              "gate, %ld cut by index), %ld redone, %ld compactions (%ld crowded), %ld drops, %ld one-warp block ends)\n",
              g_checks, warp_emu::st().exchanges, g_rows, g_gated_rows, g_fast_gates, g_tie_cut_gates, g_redo_rows,
              g_compactions, g_rebalances, g_drops, g_pair_fallbacks);
  return 0;
}
