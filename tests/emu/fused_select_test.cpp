// Off-GPU test of the fused kernel's selection (fused_select.cuh), compiled
// with g++ and run by tests/test_fused_select_emu.py on the warp emulator.
//
// 1. warp_select + warp_emit on crafted candidate buffers (one or two
//    segments, thresholds set or not, ties at the threshold key, heavy ties,
//    near ties, sizes around multiples of 4/32/128) against a sorting
//    reference: the threshold returned and the entries kept (in order).
// 2. The kernel's per-row protocol (scrambled tile walk, two warpgroups
//    appending what beats the shared threshold, compaction at cap - 64, the
//    block-end merge) on adversarial rows, against the exact top-k by
//    (value desc, index asc).
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

bool g_lean = false;  // test warp_select_lean instead of warp_select
bool g_gate = false;  // protocol: the v2 sample gate (and redo) before the scan
bool g_binned = false;  // protocol: also the scan-time bins and warp_finish_row_binned (kBinned)
bool g_binned_end = false;  // with g_binned: the bins counted by warp_bin_pass at the block end (kBinned = 2)
long g_binned_rows = 0;  // rows finished by warp_finish_row_binned
long g_gated_rows = 0, g_redo_rows = 0, g_rows = 0;
std::string g_row_name;  // the protocol case being simulated


// A candidate buffer as the kernel keeps it: capacity a multiple of 4 (and
// slack past the count, read by the vector passes and masked).
struct Buf {
  std::vector<uint32_t> key, idx;
  int n = 0;
  explicit Buf(int cap = 0) : key((cap + 3) / 4 * 4 + 4, 0xdeadbeefu), idx((cap + 3) / 4 * 4 + 4, 0xdeadbeefu) {}
  void push(uint32_t k, uint32_t i) {
    key[n] = k;
    idx[n] = i;
    ++n;
  }
};

struct Scratch {
  uint32_t hist[256] = {};
  uint32_t sk[kScratch], si[kScratch];
};

uint64_t run_select(Buf* a, Buf* b, uint64_t thr, uint32_t k, Scratch& sc) {
  Segs s{{a->key.data(), b ? b->key.data() : nullptr}, {a->idx.data(), b ? b->idx.data() : nullptr},
         {a->n, b ? b->n : 0}, b ? 2 : 1};
  uint64_t res[32];
  warp_emu::run([&](int lane) {
    res[lane] = g_lean ? warp_select_lean(s, thr, k, sc.hist, sc.sk, sc.si, lane)
                       : warp_select(s, thr, k, sc.hist, sc.sk, sc.si, lane);
  });
  for (int l = 1; l < 32; ++l) expect(res[l] == res[0], "lanes disagree on the threshold");
  for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, "histogram not left zeroed");
  return res[0];
}

// Keeps entries >= t: in place (one segment) or into out (any).
int run_emit_inplace(Buf* a, uint64_t t) {
  Segs s{{a->key.data(), nullptr}, {a->idx.data(), nullptr}, {a->n, 0}, 1};
  int res[32];
  uint32_t* kp = a->key.data();
  uint32_t* ip = a->idx.data();
  warp_emu::run([&](int lane) {
    res[lane] = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) {
      kp[at] = key;
      ip[at] = idx;
    });
  });
  for (int l = 1; l < 32; ++l) expect(res[l] == res[0], "lanes disagree on the kept count");
  return res[0];
}

std::vector<std::pair<uint32_t, uint32_t>> run_emit_out(Buf* a, Buf* b, uint64_t t) {
  Segs s{{a->key.data(), b ? b->key.data() : nullptr}, {a->idx.data(), b ? b->idx.data() : nullptr},
         {a->n, b ? b->n : 0}, b ? 2 : 1};
  std::vector<std::pair<uint32_t, uint32_t>> out(a->n + (b ? b->n : 0), {0, 0});
  int res[32];
  warp_emu::run([&](int lane) {
    res[lane] = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) { out[at] = {key, idx}; });
  });
  out.resize(res[0]);
  return out;
}

std::vector<std::pair<uint32_t, uint32_t>> entries(const Buf& a, const Buf* b) {
  std::vector<std::pair<uint32_t, uint32_t>> v;
  for (int i = 0; i < a.n; ++i) v.push_back({a.key[i], a.idx[i]});
  if (b)
    for (int i = 0; i < b->n; ++i) v.push_back({b->key[i], b->idx[i]});
  return v;
}

void check_select_case(const std::string& name, Buf a, Buf* b, uint64_t thr, uint32_t k) {
  Scratch sc;
  const auto all = entries(a, b);
  const uint64_t want = ref_threshold(all, thr, k);
  const uint64_t got = run_select(&a, b, thr, k, sc);
  // The threshold may sit below the k-th composite (e.g. (key, any index) when
  // every entry with the k-th key is in) but must keep exactly the same set.
  std::vector<std::pair<uint32_t, uint32_t>> kept, kept_ref;
  for (auto& e : all) {
    if (composite(e.first, e.second) >= got) kept.push_back(e);
    if (composite(e.first, e.second) >= want) kept_ref.push_back(e);
  }
  expect(got <= want && kept == kept_ref,
         name + ": threshold " + std::to_string(got) + " keeps another set than " + std::to_string(want));
  if (want == thr) expect(got == thr, name + ": threshold moved though at most k are eligible");
  if (!b) {
    Buf c = a;
    const int n = run_emit_inplace(&c, got);
    expect(n == static_cast<int>(kept.size()), name + ": in-place kept count");
    for (int i = 0; i < n; ++i)
      expect(c.key[i] == kept[i].first && c.idx[i] == kept[i].second, name + ": in-place order/content");
  }
  const auto out = run_emit_out(&a, b, got);
  expect(out == kept, name + ": emitted list (order or content)");
  // Whenever at least k entries are at or above thr, exactly the top k are kept.
  size_t at_or_above = 0;
  for (auto& e : all) at_or_above += composite(e.first, e.second) >= thr;
  if (at_or_above >= k) expect(kept.size() == k, name + ": not exactly k kept");
}

uint32_t okey(float v) { return order_key(v); }

// order_key against float comparison: a < b exactly when key(a) < key(b) and
// a == b exactly when key(a) == key(b) (so -0.0 and +0.0 share a key), over
// the special values and a spread of random ones.
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
  for (float a : v)
    for (float b : v) {
      const uint32_t ka = order_key(a), kb = order_key(b);
      const bool ok = (a < b) == (ka < kb) && (a == b) == (ka == kb);
      // (the message only when it fails: formatting two floats per pair was most of this part's time)
      expect(ok, ok ? std::string() : "order_key orders " + std::to_string(a) + " and " + std::to_string(b) +
                                          " unlike float comparison");
    }
}

void select_cases() {
  std::mt19937 rng(1234);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (uint32_t k : {512u, 2048u}) {
    for (int n : {0, 1, 3, 31, 100, int(k) - 1, int(k), int(k) + 1, int(k) + 3, 2 * int(k) + 61, 3 * int(k) + 64}) {
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(gauss(rng)), rng() % (1u << 22));
      check_select_case("gauss n=" + std::to_string(n) + " k=" + std::to_string(k), a, nullptr, 0, k);
    }
    const int n = 3 * int(k) + 64;
    {  // every key equal: heavy ties resolved by index
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(0.25f), (i * 7919u) % (1u << 22));
      check_select_case("all equal", a, nullptr, 0, k);
    }
    {  // thousands tied at the k-th value, some above
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(i % 5 == 0 ? 2.f + gauss(rng) * 0.001f + 3.f : 1.5f), i * 3u);
      check_select_case("boundary ties", a, nullptr, 0, k);
    }
    {  // near ties: thousands of distinct values within 1e-4 relative
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(100.f * (1.f + 1e-4f * (rng() % 1000) / 1000.f)), i);
      check_select_case("near ties", a, nullptr, 0, k);
    }
    {  // rising scores, negative values, both zeros
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(i % 7 == 0 ? (i % 2 ? -0.f : 0.f) : float(i) - n / 2.f), i);
      check_select_case("rising/negative/zeros", a, nullptr, 0, k);
    }
    {  // a threshold set, entries below it present (appended before it rose),
       // ties at the threshold key with indices on both sides of its index
      Buf a(n);
      const uint32_t tk = okey(1.0f);
      for (int i = 0; i < n; ++i) {
        const int r = i % 4;
        a.push(r == 0 ? okey(0.5f) : r == 1 ? tk : okey(1.0f + float(rng() % 1000) / 100.f), i * 2u);
      }
      for (uint32_t ti : {0u, 100u, uint32_t(n), 0xffffffffu}) {
        const uint64_t thr = (uint64_t(tk) << 32) | (0xffffffffu - (ti == 0xffffffffu ? 0 : ti));
        check_select_case("threshold set ti=" + std::to_string(ti), a, nullptr, thr, k);
      }
    }
    {  // few at or above the threshold: nothing to cut, only filter
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(i < 10 ? 5.f : 0.1f), i);
      check_select_case("few eligible", a, nullptr, composite(okey(1.f), 0), k);
    }
    {  // two segments (the block-end merge)
      Buf a(n), b(n - 17);
      for (int i = 0; i < n; ++i) a.push(okey(gauss(rng)), 2 * i);
      for (int i = 0; i < n - 17; ++i) b.push(okey(gauss(rng)), 2 * i + 1);
      check_select_case("two segments", a, &b, 0, k);
      Buf e(0);
      check_select_case("two segments, one empty", a, &e, 0, k);
    }
  }
}

// The gate's pieces directly: top4_insert keeps the 4 largest, and
// warp_rank_key returns the rank-th largest of 256 keys (padding 0), both
// against a sort; gate_rank's edges.
void gate_piece_cases() {
  std::mt19937 rng(4242);
  for (int trial = 0; trial < 200; ++trial) {
    uint32_t t[4] = {0, 0, 0, 0};
    std::vector<uint32_t> seen;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint32_t x = trial % 3 == 0 ? 1u + rng() % 5 : rng();  // many duplicates in every third trial
      seen.push_back(x);
      top4_insert(t, x);
    }
    std::sort(seen.begin(), seen.end(), std::greater<uint32_t>());
    seen.resize(4, 0u);
    for (int j = 0; j < 4; ++j) expect(t[j] == seen[j], "top4_insert: slot " + std::to_string(j));
  }
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<uint32_t> v(256);
    const int nonzero = trial % 4 == 0 ? static_cast<int>(rng() % 256) : 256;
    for (int i = 0; i < 256; ++i)
      v[i] = i < nonzero ? (trial % 5 == 0 ? 0x80000000u + rng() % 7 : 1u + rng()) : 0u;
    std::shuffle(v.begin(), v.end(), rng);
    std::vector<uint32_t> sorted = v;
    std::sort(sorted.begin(), sorted.end(), std::greater<uint32_t>());
    for (uint32_t rank : {1u, 2u, 16u, 100u, 128u, 255u, 256u}) {
      uint32_t res[32];
      warp_emu::run([&](int lane) { res[lane] = warp_rank_key<256>(v.data(), rank, lane); });
      for (int l = 1; l < 32; ++l) expect(res[l] == res[0], "warp_rank_key<256>: lanes disagree");
      expect(res[0] == sorted[rank - 1], "warp_rank_key<256>: rank " + std::to_string(rank) + " trial " +
                                             std::to_string(trial));
      if (rank <= 32) {  // the 32-wide form on the first 32 keys
        std::vector<uint32_t> w(v.begin(), v.begin() + 32);
        std::sort(w.begin(), w.end(), std::greater<uint32_t>());
        warp_emu::run([&](int lane) { res[lane] = warp_rank_key<32>(v.data(), rank, lane); });
        expect(res[0] == w[rank - 1], "warp_rank_key<32>: rank " + std::to_string(rank));
      }
    }
  }
  {  // the gate is the smaller of the list's rank-rho key and the C-th tile maximum
    std::vector<uint32_t> lists(256), tmax(32, 0u);
    for (int i = 0; i < 256; ++i) lists[i] = 1000u + static_cast<uint32_t>(i);  // rank 10 -> 1246
    for (int ns : {1, 3, 4, 24}) {
      for (int t = 0; t < 32; ++t) tmax[t] = t < ns ? 500u + 100u * static_cast<uint32_t>(t) : 0u;
      std::vector<uint32_t> sorted(tmax.begin(), tmax.begin() + ns);
      std::sort(sorted.begin(), sorted.end(), std::greater<uint32_t>());
      const uint32_t cth = sorted[std::min(ns, kMinGateTiles) - 1];
      uint32_t res[32];
      warp_emu::run([&](int lane) { res[lane] = warp_gate_key(lists.data(), tmax.data(), 10, ns, lane); });
      expect(res[0] == std::min(1246u, cth), "warp_gate_key: ns=" + std::to_string(ns));
      warp_emu::run([&](int lane) { res[lane] = warp_gate_key(lists.data(), tmax.data(), 0, ns, lane); });
      expect(res[0] == 0, "warp_gate_key: rho 0 is no gate");
    }
  }
  const uint32_t target = static_cast<uint32_t>(fused_gate_target(2048));
  expect(gate_rank(0, 100000, target) == 0, "gate_rank: no sample, no gate");
  expect(gate_rank(3000, target, target) == 0, "gate_rank: a row of target keys is not gated");
  expect(gate_rank(300, target + 1, target) == 0, "gate_rank: a sample of most of the row is not gated");
  expect(gate_rank(300, 10 * target, target) == 30, "gate_rank: a long row is gated");
  expect(gate_rank(3072, 61440, target) == (uint64_t(target) * 3072 + 61439) / 61440, "gate_rank: rho");
  expect(gate_rank(3072, 1u << 22, target) == static_cast<uint32_t>(kMinGateRank), "gate_rank: floor");
  expect(gate_rank(100, 200000, 400000) == 0, "gate_rank: rho above the sample");
  expect(gate_rank(3000, 3040, 2900) == 0, "gate_rank: rho above the list");
  expect(gate_rank(3000, 34000, 2900) == 256 && gate_rank(3000, 33984, 2900) == 0, "gate_rank: list edge (256)");
  for (int k : {512, 1024, 2048})
    for (int nt : {1, 2, 7, 26, 64, 480, 4096, 32768}) {
      const int ns = fused_sample_tiles(nt, k);
      expect(ns >= 1 && ns <= nt && ns <= kMaxSampleTiles, "fused_sample_tiles range");
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
    std::mt19937 rng(7);
    struct Case { uint32_t m, n, k; };
    for (const Case c : {Case{768, 16384, 2048}, Case{6144, 262144, 512}, Case{6144, 262144, 2048}, Case{1536, 8192, 512}}) {
      const uint32_t fl = gate_rank_floor(c.m, c.n, c.k, 5), weak = gate_rank_floor(c.m, c.n, c.k, 2);
      int over = 0, over_weak = 0;
      for (int t = 0; t < 20000; ++t) {
        // Sampling m of n without replacement: the count of the k top keys among them.
        uint32_t hit = 0, left = c.n, top = c.k;
        for (uint32_t i = 0; i < c.m; ++i) {
          const bool is_top = std::uniform_int_distribution<uint32_t>(0, left - 1)(rng) < top;
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

// ---- the per-row protocol of the kernel --------------------------------------
// keys of the row: values v[0..n); returns the emitted relative indices.
// Mirrors sm90_fused_mqa_topk: the scrambled tile walk; two warpgroups of 64
// keys per tile, each thread (warpgroup, warp, lane group) holding keys
// +0 and +8 of its 16-key slice; with the gate (g_gate, and gate = true) the
// first fused_sample_tiles tiles with no threshold, the 4 largest keys per
// thread, the gate at sample rank gate_rank, the sample entries below it
// dropped; appends of what passes the threshold; compaction at cap - 64; the
// block-end warp_finish_row over both buffers, and a redo without gate when
// the gate was unsafe.
std::vector<uint32_t> simulate_row(const std::vector<float>& v, int k, int cap, std::mt19937& rng, bool gate) {
  const int n = static_cast<int>(v.size());
  const int nt = (n + 127) / 128;
  const int stride = tile_stride(nt);
  Buf buf[2] = {Buf(cap), Buf(cap)};
  uint64_t thr = 0;
  const uint32_t compact_above = static_cast<uint32_t>(k + (cap - k) / 2);
  Scratch sc;
  const int ns = gate ? fused_sample_tiles(nt, k) : 0;
  uint32_t lists[256] = {}, tile_max[32] = {};
  uint32_t msample = 0;
  bool gated = false;
  // kBinned: the row's bins (lo = 0: none), counted as the kernel does: the
  // sample entries the gate keeps, then every append; an exact compaction
  // makes them invalid.
  uint32_t bin_lo = 0, bin_mult = 0;
  uint32_t bh[256] = {};
  auto append_tile = [&](int tp, int w) {
    for (int j = 0; j < 64; ++j) {
      const int i = tp * 128 + w * 64 + j;
      if (i >= n) continue;
      const uint32_t key = order_key(v[i]);
      if (composite(key, i) > thr) {
        if (buf[w].n >= cap) die("candidate buffer overflow");
        buf[w].push(key, i);
        if (bin_lo && !g_binned_end) ++bh[scan_bin(key, bin_lo, bin_mult)];
      }
    }
    if (buf[w].n + 64 > cap && static_cast<uint32_t>(buf[w].n) > compact_above) {
      const uint64_t th = run_select(&buf[w], nullptr, thr, k, sc);
      buf[w].n = run_emit_inplace(&buf[w], th);
      thr = std::max(thr, th);
      if (!g_binned_end) bin_lo = 0;  // counted bins no longer describe the buffers
    }
  };
  int t = 0, tp = nt - 1;
  for (; t < ns; ++t, tp = next_tile(tp, nt, stride)) {
    for (int w = 0; w < 2; ++w) {
      for (int wi = 0; wi < 4; ++wi)
        for (int l = 0; l < 8; ++l)
          for (int h = 0; h < 2; ++h) {
            const int i = tp * 128 + w * 64 + wi * 16 + l + 8 * h;
            uint32_t* lst = lists + ((w * 4 + wi) * 8 + l) * 4;
            uint32_t top[4] = {lst[0], lst[1], lst[2], lst[3]};
            top4_insert(top, i < n ? order_key(v[i]) : 0u);
            std::copy(top, top + 4, lst);
            tile_max[t] = std::max(tile_max[t], i < n ? order_key(v[i]) : 0u);
            msample += i < n;
          }
      append_tile(tp, w);
    }
  }
  if (ns > 0) {
    const uint32_t rho = gate_rank(msample, static_cast<uint32_t>(n), static_cast<uint32_t>(fused_gate_target(k)));
    uint32_t gk = 0;
    if (rho) {
      uint32_t res[32];
      warp_emu::run([&](int lane) { res[lane] = warp_gate_key(lists, tile_max, rho, ns, lane); });
      gk = res[0];
    }
    if (gk) {
      thr = std::max(thr, gate_threshold(gk));
      gated = true;
      ++g_gated_rows;
      for (auto& b : buf) b.n = run_emit_inplace(&b, thr);  // the sample's entries below the gate
      if (g_binned) {  // bins over [gate, the sample's largest key]
        const uint32_t tk = *std::max_element(lists, lists + 256);
        bin_lo = gk;
        bin_mult = range_mult(tk > gk ? tk - gk : 0u);
        if (!g_binned_end)
          for (auto& b : buf)
            for (int j = 0; j < b.n; ++j) ++bh[scan_bin(b.key[j], bin_lo, bin_mult)];
      }
    }
  }
  for (; t < nt; ++t, tp = next_tile(tp, nt, stride)) {
    const int first = rng() & 1;  // the warpgroups run in either order
    for (int o = 0; o < 2; ++o) append_tile(tp, first ^ o);
  }
  Segs s{{buf[0].key.data(), buf[1].key.data()}, {buf[0].idx.data(), buf[1].idx.data()}, {buf[0].n, buf[1].n}, 2};
  std::vector<int> out(k, -7);
  bool ok[32];
  uint32_t cands[32];
  const uint32_t need = std::min<uint32_t>(k, static_cast<uint32_t>(n));
  if (bin_lo) {
    bool done[32];
    if (g_binned_end) warp_emu::run([&](int lane) { warp_bin_pass(s, bh, bin_lo, bin_mult, lane); });
    warp_emu::run([&](int lane) {
      done[lane] = warp_finish_row_binned(s, bh, bin_lo, bin_mult, k, 0, sc.hist, sc.sk, sc.si, lane,
                                          [&](int at, int x, uint32_t) { out[at] = x; });
    });
    for (int l = 1; l < 32; ++l) expect(done[l] == done[0], "lanes disagree in finish_row_binned");
    for (int i = 0; i < 256; ++i) expect(bh[i] == 0, "bins not left zeroed");
    for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, "histogram not left zeroed (binned)");
    if (done[0]) {
      ++g_rows;
      ++g_binned_rows;
      std::vector<uint32_t> got;
      for (int x : out) {
        expect(x >= 0 && x < n, "binned: output slot not written or out of range");
        got.push_back(static_cast<uint32_t>(x));
      }
      return got;
    }
    std::fill(out.begin(), out.end(), -7);  // the general select below rewrites the row
  }
  warp_emu::run([&](int lane) {
    if (g_lean)
      ok[lane] = warp_finish_row<true>(s, thr, k, need, gated, 0, sc.hist, sc.sk, sc.si, lane, &cands[lane],
                                       [&](int at, int x, uint32_t) { out[at] = x; });
    else
      ok[lane] = warp_finish_row<false>(s, thr, k, need, gated, 0, sc.hist, sc.sk, sc.si, lane, &cands[lane],
                                        [&](int at, int x, uint32_t) { out[at] = x; });
  });
  for (int l = 1; l < 32; ++l) expect(ok[l] == ok[0] && cands[l] == cands[0], "lanes disagree in finish_row");
  ++g_rows;
  if (!ok[0]) {
    expect(gated, "an ungated row asked for a redo");
    for (int x : out) expect(x == -7, "an unsafe row wrote output");
    ++g_redo_rows;
    if (std::getenv("EMU_VERBOSE")) std::fprintf(stderr, "redo: %s n=%d k=%d cands=%u\n", g_row_name.c_str(), n, k, cands[0]);
    return simulate_row(v, k, cap, rng, false);  // the redo: no gate
  }
  std::vector<uint32_t> got;
  for (int x : out) {
    expect(x != -7, "output slot not written");
    if (x >= 0) got.push_back(static_cast<uint32_t>(x));
  }
  for (size_t i = got.size(); i < static_cast<size_t>(k); ++i) expect(out[i] == -1, "padding is not -1 at the end");
  return got;
}

// The exact top-k of a row by (value desc, index asc), ranked with plain float
// comparisons: independent of the header's order_key/composite, so a bug in
// those (e.g. -0.0 ranked apart from +0.0, or negatives reversed) fails here.
std::vector<uint32_t> float_topk(const std::vector<float>& v, int k) {
  std::vector<uint32_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return v[a] > v[b]; });
  order.resize(std::min<size_t>(k, v.size()));
  return order;
}

void check_row(const std::string& name, const std::vector<float>& v, int k, std::mt19937& rng) {
  g_row_name = name;
  const int cap = g_gate ? k + 1920 : 3 * k + 128;  // Sm90FusedConfig::cap
  auto got = simulate_row(v, k, cap, rng, g_gate);
  const size_t m = std::min<size_t>(k, v.size());
  std::vector<uint32_t> want = float_topk(v, k);
  expect(got.size() == m, name + ": " + std::to_string(got.size()) + " emitted, expected " + std::to_string(m));
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  expect(got == want, name + ": index set differs from the exact top-k");
}

void protocol_cases() {
  std::mt19937 rng(99);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (int k : {512, 2048}) {
    for (int n : {1, 100, k - 1, k, k + 1, 4 * k + 77, 20000, 70000}) {
      std::vector<float> v(n);
      for (auto& x : v) x = gauss(rng);
      check_row("gauss n=" + std::to_string(n), v, k, rng);
    }
    const int n = 20000;
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = float(i);
    check_row("rising", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = float(n - i);
    check_row("falling", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = 0.f;
    check_row("all zero", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = (i % 3 == 0) ? -0.f : 0.f;
    check_row("signed zeros", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = (i % 9 == 0) ? 3.f + gauss(rng) : 1.f;  // thousands tie at the k-th
    check_row("boundary ties", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = 7.f * (1.f + 1e-5f * float(rng() % 4096));
    check_row("near ties", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = -std::fabs(gauss(rng));
    check_row("negative", v, k, rng);
    // Few distinct values, and a tied staircase.
    std::vector<float> u(60000);
    for (size_t i = 0; i < u.size(); ++i) u[i] = float((i * 7919u) % 37u);
    check_row("37 distinct values", u, k, rng);
    for (size_t i = 0; i < u.size(); ++i) u[i] = float(i / 64);
    check_row("staircase", u, k, rng);
    for (size_t i = 0; i < u.size(); ++i) u[i] = 1.0f + float((i * 40503u) % 3000u) * 1e-7f;
    check_row("3000 values in one float octave", u, k, rng);
    for (size_t i = 0; i < u.size(); ++i) {  // 200 adjacent floats
      const uint32_t bits = 0x3f800000u + static_cast<uint32_t>((i * 7919u) % 200u);
      std::memcpy(&u[i], &bits, 4);
    }
    check_row("200 adjacent floats", u, k, rng);
    // Relu-saturated: most logits exactly 0, a few hundred positive (the gate
    // lands on 0 and every zero passes it: compactions, exact ties by index).
    for (size_t i = 0; i < u.size(); ++i) u[i] = (i * 2654435761u) % 211u == 0 ? std::fabs(gauss(rng)) : 0.f;
    check_row("relu saturated", u, k, rng);
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
    check_row("hot sample tiles", u, k, rng);
    if (g_gate) expect(g_redo_rows > redo_before, "hot sample tiles: expected a redo");
    for (size_t i = 0; i < u.size(); ++i) u[i] = sampled[i / 128] ? gauss(rng) - 10.f : gauss(rng);
    check_row("cold sample tiles", u, k, rng);
  }
  if (g_gate) expect(g_gated_rows > 0, "no row was gated");
  if (g_binned) expect(g_binned_rows > 0, "no row was finished by the binned select");
}

// kSplit's two steps: each piece of a row (ungated here) writes its exact top
// min(k, n_piece) as (key, absolute index) to its slot of the region, key 0
// padding; the merge selects the row's top min(k, n) over the region with the
// threshold (key 1, any index), so the padding is never kept. Against the
// float reference, for piece counts up to 17 and pieces shorter than k.
void split_cases() {
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (int k : {512, 2048})
    for (int n : {1, 100, 3000, 20000})
      for (int np : {2, 5, 17})
        for (int kind = 0; kind < 2; ++kind) {
          std::vector<float> v(n);
          for (auto& x : v) x = kind ? float(rng() % 7) : gauss(rng);  // kind 1: heavy ties across pieces
          std::vector<uint32_t> rk(size_t(np) * k + 4, 0xdeadbeefu), ri(size_t(np) * k + 4, 0xdeadbeefu);
          Scratch sc;
          for (int pc = 0; pc < np; ++pc) {
            const int lo = int(int64_t(n) * pc / np), hi = int(int64_t(n) * (pc + 1) / np);
            Buf b(std::max(hi - lo, 4));
            for (int i = lo; i < hi; ++i) b.push(order_key(v[i]), static_cast<uint32_t>(i));
            Segs s{{b.key.data(), nullptr}, {b.idx.data(), nullptr}, {b.n, 0}, 1};
            const uint32_t need = std::min<uint32_t>(k, static_cast<uint32_t>(hi - lo));
            uint32_t cands[32];
            warp_emu::run([&](int lane) {
              warp_finish_row<true>(s, 0, k, need, false, 0, sc.hist, sc.sk, sc.si, lane, &cands[lane],
                                    [&](int at, int x, uint32_t key) {
                                      rk[size_t(pc) * k + at] = key;
                                      ri[size_t(pc) * k + at] = static_cast<uint32_t>(x);
                                    });
            });
          }
          Segs m{{rk.data(), nullptr}, {ri.data(), nullptr}, {np * k, 0}, 1};
          std::vector<int> out(k, -7);
          uint32_t cands[32];
          const uint32_t need = std::min<uint32_t>(k, static_cast<uint32_t>(n));
          warp_emu::run([&](int lane) {
            warp_finish_row<true>(m, uint64_t(1) << 32, k, need, false, 0, sc.hist, sc.sk, sc.si, lane,
                                  &cands[lane], [&](int at, int x, uint32_t) { out[at] = x; });
          });
          const std::string name = "split n=" + std::to_string(n) + " pieces=" + std::to_string(np) +
                                   " k=" + std::to_string(k) + (kind ? " ties" : " gauss");
          std::vector<uint32_t> got;
          for (int i = 0; i < k; ++i) {
            expect(out[i] != -7, name + ": output slot not written");
            if (i < static_cast<int>(need)) expect(out[i] >= 0 && out[i] < n, name + ": bad index");
            else expect(out[i] == -1, name + ": padding is not -1");
            if (out[i] >= 0) got.push_back(static_cast<uint32_t>(out[i]));
          }
          std::vector<uint32_t> want = float_topk(v, k);
          std::sort(got.begin(), got.end());
          std::sort(want.begin(), want.end());
          expect(got == want, name + ": index set differs from the exact top-k");
        }
}

// kSplitGate's pieces. (1) warp_write_top_keys publishes the J largest of a
// 256-key list (distinct, tied, zero-padded, all zero); (2)
// warp_rank_key_strided ranks the union of strided lists, ranks 1 .. total + 1;
// both against std::sort. (3) Pieces with thresholds emit what passes, or their
// exact top k when k or more pass (no constraint then); the merge keeps the
// union's top min(k, n) at or above the largest constraint, gated: whenever it
// accepts, the set must be the float reference's, and with every threshold at
// or below the row's k-th it must accept. One piece's threshold above the k-th
// must make it refuse at least once (a row whose top k that piece holds).
void split_gate_cases() {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 48; ++trial) {
    const int kind = trial % 4;  // 0 distinct, 1 ties, 2 zeros mixed in, 3 all zero
    auto draw = [&]() -> uint32_t {
      return kind == 0 ? rng() | 1u : kind == 1 ? 1000u + rng() % 5 : kind == 2 ? (rng() % 3 ? rng() | 1u : 0u) : 0u;
    };
    std::vector<uint32_t> lst(256);
    for (auto& x : lst) x = draw();
    for (int J : {32, 64, 128, 256}) {
      std::vector<uint32_t> dst(J, 0xdeadbeefu);
      warp_emu::run([&](int lane) { warp_write_top_keys(lst.data(), J, dst.data(), lane); });
      std::vector<uint32_t> want(lst);
      std::sort(want.begin(), want.end(), std::greater<uint32_t>());
      want.resize(J);
      std::sort(dst.begin(), dst.end(), std::greater<uint32_t>());
      expect(dst == want, "write_top_keys kind " + std::to_string(kind) + " J=" + std::to_string(J) +
                              ": not the J largest keys");
    }
    const int nseg = 1 + static_cast<int>(rng() % 9), len = 32 << (rng() % 4);
    const size_t stride = size_t(len) + 292;
    std::vector<uint32_t> buf(size_t(nseg) * stride, 0xdeadbeefu), all;
    for (int i = 0; i < nseg; ++i)
      for (int j = 0; j < len; ++j) all.push_back(buf[size_t(i) * stride + j] = draw());
    std::sort(all.begin(), all.end(), std::greater<uint32_t>());
    const uint32_t total = static_cast<uint32_t>(all.size());
    uint32_t hist[256] = {};
    for (uint32_t rank : {1u, 2u, total / 3 + 1, total - 1, total, total + 1}) {
      uint32_t got[32];
      warp_emu::run([&](int lane) {
        got[lane] = warp_rank_key_strided(buf.data(), nseg, stride, len, rank, hist, lane);
      });
      const uint32_t want = rank >= 1 && rank <= total ? all[rank - 1] : 0u;
      for (int l = 0; l < 32; ++l)
        expect(got[l] == want, "rank_key_strided kind " + std::to_string(kind) + " rank " + std::to_string(rank) +
                                   " of " + std::to_string(total) + ": wrong key");
      for (int i = 0; i < 256; ++i) expect(hist[i] == 0, "rank_key_strided: histogram not left zeroed");
    }
  }
  std::normal_distribution<float> gauss(0.f, 1.f);
  int refused = 0;
  for (int k : {512, 2048})
    for (int n : {700, 3000, 20000})
      for (int np : {2, 5, 17})
        for (int kind = 0; kind < 3; ++kind)
          for (int mode = 0; mode < 3; ++mode) {  // thresholds: 0 none, 1 at or below the k-th, 2 one above
            std::vector<float> v(n);
            for (int i = 0; i < n; ++i)
              v[i] = kind == 0 ? gauss(rng) : kind == 1 ? float(rng() % 7) : float(i) * 1e-3f + 0.1f * gauss(rng);
            const std::vector<uint32_t> ref = float_topk(v, k);
            const uint32_t need = static_cast<uint32_t>(ref.size());
            const uint32_t kth = order_key(v[ref.back()]);
            const uint32_t high = order_key(v[ref[need / 4]]);
            const int hot = static_cast<int>(rng() % np);
            std::vector<uint32_t> uk, ui, con(np);
            Scratch sc;
            for (int pc = 0; pc < np; ++pc) {
              const int lo = int(int64_t(n) * pc / np), hi = int(int64_t(n) * (pc + 1) / np);
              Buf b(std::max(hi - lo, 4));
              for (int i = lo; i < hi; ++i) b.push(order_key(v[i]), static_cast<uint32_t>(i));
              uint32_t t = 0;
              if (mode == 1) t = kth > 2000u ? kth - rng() % 2000u : 1u;
              if (mode == 2) t = pc == hot ? high : 0u;
              Segs s{{b.key.data(), nullptr}, {b.idx.data(), nullptr}, {b.n, 0}, 1};
              std::vector<uint32_t> pk(k, 0u), pi(k, 0u);
              uint32_t cands[32];
              warp_emu::run([&](int lane) {
                warp_finish_row<true>(s, t ? uint64_t(t) << 32 : 0u, k, 0u, false, 0, sc.hist, sc.sk, sc.si, lane,
                                      &cands[lane], [&](int at, int x, uint32_t key) {
                                        pk[at] = key;
                                        pi[at] = static_cast<uint32_t>(x);
                                      });
              });
              const uint32_t c = std::min<uint32_t>(cands[0], k);
              con[pc] = cands[0] >= static_cast<uint32_t>(k) ? 0u : t;
              for (uint32_t j = 0; j < c; ++j) {
                expect(pk[j] != 0, "split gate: a piece emitted padding inside its count");
                uk.push_back(pk[j]);
                ui.push_back(pi[j]);
              }
            }
            uint32_t gmax = 1;
            for (uint32_t x : con) gmax = std::max(gmax, x);
            Buf u(static_cast<int>(uk.size()) + 4);
            for (size_t j = 0; j < uk.size(); ++j) u.push(uk[j], ui[j]);
            Segs m{{u.key.data(), nullptr}, {u.idx.data(), nullptr}, {u.n, 0}, 1};
            std::vector<int> out(k, -7);
            bool ok[32];
            uint32_t cands[32];
            warp_emu::run([&](int lane) {
              ok[lane] = warp_finish_row<true>(m, uint64_t(gmax) << 32, k, need, true, 0, sc.hist, sc.sk, sc.si, lane,
                                               &cands[lane], [&](int at, int x, uint32_t) { out[at] = x; });
            });
            const std::string name = "split gate n=" + std::to_string(n) + " pieces=" + std::to_string(np) +
                                     " k=" + std::to_string(k) + " kind " + std::to_string(kind) + " mode " +
                                     std::to_string(mode);
            if (mode < 2) expect(ok[0], name + ": the merge refused thresholds at or below the k-th");
            if (!ok[0]) {
              ++refused;
              for (int i = 0; i < k; ++i) expect(out[i] == -7, name + ": a refused merge wrote the row");
              continue;
            }
            std::vector<uint32_t> got;
            for (int i = 0; i < k; ++i) {
              if (i < static_cast<int>(need)) expect(out[i] >= 0 && out[i] < n, name + ": bad index");
              else expect(out[i] == -1, name + ": padding is not -1");
              if (out[i] >= 0) got.push_back(static_cast<uint32_t>(out[i]));
            }
            std::vector<uint32_t> want(ref);
            std::sort(got.begin(), got.end());
            std::sort(want.begin(), want.end());
            expect(got == want, name + ": the merge accepted a set that is not the exact top-k");
          }
  expect(refused > 0, "split gate: no merge was refused (the check is never exercised)");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  g_lean = argc > 2 && (std::string(argv[2]) == "lean" || std::string(argv[2]) == "gate");
  const std::string mode = argc > 2 ? argv[2] : "";
  g_gate = mode == "gate" || mode == "binned" || mode == "binned-end";
  g_binned = mode == "binned" || mode == "binned-end";
  g_binned_end = mode == "binned-end";
  g_lean = g_lean || g_binned;
  // "pieces" does not depend on the mode (no g_* flag is read there), "select"
  // only on g_lean: the test runs pieces once and select in modes default and lean.
  if (which == "all" || which == "pieces") {
    order_key_cases();
    gate_piece_cases();
  }
  if (which == "all" || which == "select") select_cases();
  if (which == "all" || which == "protocol") {
    protocol_cases();
    if (g_binned_end) {  // kSplit builds on the default (kBinned = 2)
      split_cases();
      split_gate_cases();
    }
  }
  std::printf("fused_select emulation: %d checks passed (%ld warp exchanges; %ld rows, %ld gated, %ld redone, "
              "%ld binned)\n",
              g_checks, warp_emu::st().exchanges, g_rows, g_gated_rows, g_redo_rows, g_binned_rows);
  return 0;
}
