// Off-GPU test of the block kernels' selection over a row's 8 candidate
// segments (csrc/include/mqa_topk/fused/select.cuh as fused/blocks_select.cuh
// and fused/blocks_split.cuh run it), compiled with g++ and run by
// tests/test_fused_select_emu.py on the warp emulator.
//
// 1. warp_select_lean over 8 segments (SegLanes: counts 0..cap, sizes around
//    multiples of 4/16/64; gaussian, all equal, ties at the k-th, threshold
//    set) against a sorting reference: the kept set, the count, and the
//    emitted list (warp_emit, in the traversal order the reference
//    recomputes).
// 2. The compaction: the row group's threshold (group_compact_threshold, 8
//    warps, each its own segment) and each warp's in-place keep, against the
//    reference k-th; the kept entries re-emitted round-robin into the same
//    segments (entry p to segment p mod 8, slot p / 8) while the traversal
//    reads them (a crowded row), against the reference list.
// 3. warp_finish_row over 8 segments: the output row (relative indices, -1
//    padding) and the unsafe-gate answer.
// 4. The pair selects (two warps, 4 segments each): pair_select and
//    pair_gate_fast against warp_select_lean and the bin rule, and the block
//    end (pair_finish_row_gated, with and without the gate's fast path)
//    against warp_finish_row on one warp.
// 5. A split block's pieces (PieceSegs in the split workspace layout):
//    piece_flat's visits, the shared gate's select (pair_select with
//    kTieGate), the merge from the pieces' bins (pair_count_gate_bins per
//    piece, pair_finish_row_prebinned) and the one-warp fallback
//    (warp_finish_row over the pieces), against sorting references.
// Exit status 0 when every check passes; the first failure is printed.
#define MQA_TOPK_HOST_EMULATION 1
#include "warp_emu.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "mqa_topk/fused/select.cuh"
#include "select_ref.h"

using namespace mqa_topk::fused_detail;

namespace {

int g_group_cases = 0;  // group_case runs

SegLanes lanes_of(Row& r, int lane) { return r.lanes(lane); }

// The traversal order of for_each / warp_emit over SegLanes: batch j0 (step
// 64), step u (4), lane (32: segment lane / 4, sub-lane lane % 4), entry e (4):
// position j0 + (u * 4 + sub) * 4 + e of segment lane / 4.
std::vector<std::pair<uint32_t, uint32_t>> traversal(Row& r) {
  uint32_t nmax = 0;
  for (int s = 0; s < NS; ++s) nmax = std::max(nmax, r.cnt[s]);
  std::vector<std::pair<uint32_t, uint32_t>> v;
  for (uint32_t j0 = 0; j0 < nmax; j0 += 64)
    for (int u = 0; u < 4; ++u)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int s = lane >> 2, sub = lane & 3;
          const uint32_t j = j0 + (u * 4 + sub) * 4 + e;
          if (j < r.cnt[s]) v.push_back({r.key(s)[j], r.idx(s)[j]});
        }
  return v;
}

// The compaction by a row group's 8 warps (group_compact_threshold, each warp
// its own segment, then each warp's in-place keep): the same threshold in
// every warp, thr when at most k are eligible, else one with at least k
// eligible entries at or above it (never above the reference k-th) and at
// most k - 1 + kScratch; each segment then holds its entries at or above
// max(t, thr) in their order.
void group_case(const std::string& name, Row row, uint64_t thr, uint32_t k) {
  const auto all = row.entries();
  const uint32_t tk1 = std::max(static_cast<uint32_t>(thr >> 32), 1u);
  uint32_t elig = 0;
  for (auto& e : all) elig += e.first >= tk1;
  Scratch sc;
  uint32_t xch[4 * 2 * kGroupWarps] = {};
  uint64_t got[256];
  int kept[kGroupWarps] = {};
  const Row before = row;
  warp_emu::run8([&](int w, int lane) {
    GroupCtx g{xch, 5, w, 0};
    uint32_t* kp = row.key(w);
    uint32_t* ip = row.idx(w);
    const int n = static_cast<int>(row.cnt[w]);
    uint64_t t = group_compact_threshold(SegLanes{kp, ip, n, n}, g, thr, k, sc.hist, lane);
    got[w * 32 + lane] = t;
    t = t > thr ? t : thr;
    const Segs sg{{kp, nullptr}, {ip, nullptr}, {n, 0}, 1};
    const int m = warp_emit(sg, t, lane, [&](int at, uint32_t key, uint32_t idx) {
      kp[at] = key;
      ip[at] = idx;
    });
    if (lane == 0) kept[w] = m;
  });
  for (int l = 1; l < 256; ++l) expect(got[l] == got[0], name + ": group: warps or lanes disagree");
  for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, name + ": group: histogram not left zeroed");
  const uint64_t t = got[0] > thr ? got[0] : thr;
  if (elig <= k) {
    expect(got[0] == thr, name + ": group: at most k eligible, yet a new threshold");
  } else {
    uint32_t at_or_above = 0;
    for (auto& e : all) at_or_above += e.first >= tk1 && composite(e.first, e.second) >= got[0];
    expect(got[0] <= ref_threshold(all, thr, k), name + ": group: threshold above the k-th");
    expect(at_or_above >= k, name + ": group: fewer than k kept");
    expect(at_or_above <= k - 1 + kScratch, name + ": group: more than k - 1 + kScratch kept");
  }
  for (int s = 0; s < NS; ++s) {
    std::vector<std::pair<uint32_t, uint32_t>> want;
    Row& b = const_cast<Row&>(before);
    for (uint32_t j = 0; j < b.cnt[s]; ++j)
      if (composite(b.key(s)[j], b.idx(s)[j]) >= t) want.push_back({b.key(s)[j], b.idx(s)[j]});
    expect(kept[s] == static_cast<int>(want.size()), name + ": group: kept count of segment " + std::to_string(s));
    for (size_t j = 0; j < want.size(); ++j)
      expect(row.key(s)[j] == want[j].first && row.idx(s)[j] == want[j].second,
             name + ": group: segment " + std::to_string(s) + " entry " + std::to_string(j));
  }
  ++g_group_cases;
}

void check_case(const std::string& name, Row row, uint64_t thr, uint32_t k) {
  group_case(name, row, thr, k);
  const auto all = row.entries();
  const uint64_t want = ref_threshold(all, thr, k);
  Scratch sc;
  uint64_t got[32];
  uint32_t cnt[32];
  warp_emu::run([&](int lane) {
    const SegLanes sl = lanes_of(row, lane);
    got[lane] = warp_select_lean(sl, thr, k, sc.hist, sc.sk, sc.si, lane, &cnt[lane]);
  });
  for (int l = 1; l < 32; ++l) expect(got[l] == got[0] && cnt[l] == cnt[0], name + ": lanes disagree");
  for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, name + ": histogram not left zeroed");
  uint32_t elig = 0;
  for (auto& e : all) elig += e.first >= std::max(static_cast<uint32_t>(thr >> 32), 1u);
  expect(cnt[0] == elig, name + ": eligible count");
  std::vector<std::pair<uint32_t, uint32_t>> kept_ref;
  for (auto& e : traversal(row))
    if (composite(e.first, e.second) >= want) kept_ref.push_back(e);
  // The emitted list: the entries at or above the returned threshold, in traversal order.
  std::vector<std::pair<uint32_t, uint32_t>> out(all.size(), {0, 0});
  int n[32];
  warp_emu::run([&](int lane) {
    const SegLanes sl = lanes_of(row, lane);
    n[lane] = warp_emit(sl, got[0], lane, [&](int at, uint32_t key, uint32_t idx) { out[at] = {key, idx}; });
  });
  out.resize(n[0]);
  expect(out == kept_ref, name + ": emitted list (order or content) differs from the reference");
  size_t at_or_above = 0;
  for (auto& e : all) at_or_above += composite(e.first, e.second) >= thr;
  if (at_or_above >= k) expect(out.size() == k, name + ": not exactly k kept");
  // The compaction: re-emit in place, round-robin over the segments.
  Row c = row;
  warp_emu::run([&](int lane) {
    const SegLanes sl = lanes_of(c, lane);
    const int kept = warp_emit(sl, got[0], lane, [&](int at, uint32_t key, uint32_t idx) {
      uint32_t* d = c.key(at & (NS - 1)) + (at >> 3);
      d[0] = key;
      d[c.cap] = idx;
    });
    if (lane < NS) c.cnt[lane] = static_cast<uint32_t>((kept + NS - 1 - lane) / NS);
  });
  for (size_t p = 0; p < kept_ref.size(); ++p) {
    const int s = static_cast<int>(p % NS);
    const uint32_t j = static_cast<uint32_t>(p / NS);
    expect(j < c.cnt[s] && c.key(s)[j] == kept_ref[p].first && c.idx(s)[j] == kept_ref[p].second,
           name + ": in-place round-robin compaction, entry " + std::to_string(p));
  }
  uint32_t total = 0;
  for (int s = 0; s < NS; ++s) total += c.cnt[s];
  expect(total == kept_ref.size(), name + ": compacted counts");
}

// group_case over a sweep of k on a few rows, so that the k-th lands on every
// position of its bin (or of its index slice, for ties), its edges included.
void group_sweep() {
  std::mt19937 rng(5);
  std::normal_distribution<float> gauss(0.f, 1.f);
  const int cap = seg_cap(2048);
  Row g(cap), e(cap), q(cap), w(cap);
  uint32_t i = 0;
  for (int s = 0; s < NS; ++s)
    for (int j = 0; j < cap - 11 * s; ++j, ++i) {
      g.push(s, okey(gauss(rng)), i);
      e.push(s, okey(0.5f), (i * 7919u) % (1u << 22));
      q.push(s, okey(static_cast<float>(rng() % 24)), i * 3u);  // keys in 24 classes of about 300
      if (j < 250) w.push(s, okey(static_cast<float>(rng() % 20)), i);  // 20 classes of about 100
    }
  for (uint32_t k = 257; k < 2400; k += 13) {
    group_case("sweep gauss k=" + std::to_string(k), g, 0, k);
    group_case("sweep all equal k=" + std::to_string(k), e, 0, k);
    group_case("sweep classes k=" + std::to_string(k), q, 0, k);
    group_case("sweep small classes k=" + std::to_string(k), w, 0, k);  // (the k-th in the lowest class too)
  }
}

void select_cases() {
  std::mt19937 rng(77);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (uint32_t k : {512u, 2048u}) {
    const int cap = static_cast<int>(((k + 1920) / 4 + 3) & ~3u);
    for (int trial = 0; trial < 12; ++trial) {
      Row r(cap);
      for (int s = 0; s < NS; ++s) {
        // counts: 0, small, around multiples of 4 / 16 / 64, up to the capacity
        const int pick = static_cast<int>(rng() % 8);
        const int n = pick == 0 ? 0 : pick == 1 ? static_cast<int>(rng() % 5) : pick == 2 ? 64 * (1 + rng() % 4) - 1
                      : pick == 3 ? 16 * (1 + rng() % 8) + 1 : pick == 4 ? cap : static_cast<int>(rng() % cap);
        for (int j = 0; j < n; ++j) r.push(s, okey(gauss(rng)), static_cast<uint32_t>(rng() % (1u << 22)));
      }
      check_case("gauss trial " + std::to_string(trial) + " k=" + std::to_string(k), r, 0, k);
    }
    {  // every key equal, more than kScratch of them: the index cut (warp_index_cut_lean)
      Row r(cap);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap - 3 * s; ++j) r.push(s, okey(0.25f), (i++ * 7919u) % (1u << 22));
      check_case("all equal k=" + std::to_string(k), r, 0, k);
    }
    {  // every key equal, the indices a dense run plus far outliers: the first index slice
       // holds the run (more than kScratch), so the cut narrows again
      Row r(cap);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap - 5 * s; ++j, ++i)
          r.push(s, okey(-0.0f), j == 7 ? (1u << 21) + 13u * i : 5000u + i);
      check_case("clustered ties k=" + std::to_string(k), r, 0, k);
    }
    {  // ties at the k-th value with the tied indices in random clusters over 2^22 (distinct, as a
       // row's are), some keys above
      for (int trial = 0; trial < 6; ++trial) {
        Row r(cap);
        std::vector<uint32_t> pool;
        for (uint32_t c = 0; c < 4; ++c) {  // four clusters, dense (trial < 3) or spread over 2^19
          const uint32_t step = trial < 3 ? 1u : 1u + static_cast<uint32_t>(rng() % 200);
          for (uint32_t j = 0; j < 2u * static_cast<uint32_t>(cap); ++j) pool.push_back((c << 20) + j * step);
        }
        std::shuffle(pool.begin(), pool.end(), rng);
        size_t at = 0;
        for (int s = 0; s < NS; ++s)
          for (int j = 0; j < cap - static_cast<int>(rng() % 64); ++j)
            r.push(s, rng() % 9 == 0 ? okey(5.0f + gauss(rng)) : okey(1.0f), pool[at++]);
        check_case("random clustered ties trial " + std::to_string(trial) + " k=" + std::to_string(k), r, 0, k);
      }
    }
    {  // thousands tied at the k-th value, some above
      Row r(cap);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap / 2 + s; ++j, ++i) r.push(s, okey(i % 5 == 0 ? 3.f + gauss(rng) * 0.001f : 1.5f), i * 3u);
      check_case("boundary ties k=" + std::to_string(k), r, 0, k);
    }
    {  // a threshold set (a compacted row), ties at its key on both sides of its index
      Row r(cap);
      const uint32_t tk = okey(1.0f);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap - 40; ++j, ++i)
          r.push(s, j % 3 == 0 ? tk : okey(1.0f + float(rng() % 1000) / 100.f), i * 2u);
      for (uint32_t ti : {0u, 100u, 5000u}) {
        const uint64_t thr = (uint64_t(tk) << 32) | (0xffffffffu - ti);
        check_case("threshold set ti=" + std::to_string(ti), r, thr, k);
      }
    }
    {  // fewer than k in all: nothing to cut
      Row r(cap);
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < 7 * s; ++j) r.push(s, okey(gauss(rng)), static_cast<uint32_t>(s * 1000 + j));
      check_case("few k=" + std::to_string(k), r, 0, k);
    }
    {  // one segment holds everything (a concentrated row)
      Row r(cap);
      for (int j = 0; j < cap; ++j) r.push(5, okey(gauss(rng)), static_cast<uint32_t>(j));
      check_case("one segment k=" + std::to_string(k), r, 0, k);
    }
  }
}

// warp_finish_row over 8 segments: the output row against the reference set
// (relative to start, -1 padding), and a gated row with too few candidates
// reported unsafe with nothing written.
void finish_cases() {
  std::mt19937 rng(99);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (uint32_t k : {512u, 2048u}) {
    const int cap = static_cast<int>(((k + 1920) / 4 + 3) & ~3u);
    for (int trial = 0; trial < 6; ++trial) {
      Row r(cap);
      const int start = 1000 * trial;
      for (int s = 0; s < NS; ++s) {
        const int n = trial == 5 ? 30 : static_cast<int>(rng() % cap);
        for (int j = 0; j < n; ++j)
          r.push(s, okey(trial == 3 ? 0.f : gauss(rng)), static_cast<uint32_t>(start + s + 8 * j));
      }
      const auto all = r.entries();
      const uint32_t need = std::min<uint32_t>(k, static_cast<uint32_t>(all.size()));
      for (bool gated : {false, true}) {
        std::vector<int> row(k, -7);
        Scratch sc;
        bool ok[32];
        uint32_t cands[32];
        // A gated row must deliver `need` = k candidates (its row is long).
        const uint32_t need_g = gated ? k : need;
        warp_emu::run([&](int lane) {
          const SegLanes sl = lanes_of(r, lane);
          ok[lane] = warp_finish_row(sl, 0, k, need_g, gated, start, sc.hist, sc.sk, sc.si, lane, &cands[lane],
                                           [&](int at, int v, uint32_t) { row[at] = v; });
        });
        const std::string name = "finish trial " + std::to_string(trial) + " k=" + std::to_string(k) +
                                 (gated ? " gated" : "");
        if (gated && all.size() < k) {
          expect(!ok[0], name + ": too few candidates must be unsafe");
          for (int v : row) expect(v == -7, name + ": an unsafe row writes nothing");
          continue;
        }
        expect(ok[0], name + ": safe row");
        std::vector<uint64_t> comp;
        for (auto& e : all) comp.push_back(composite(e.first, e.second));
        std::sort(comp.begin(), comp.end(), std::greater<uint64_t>());
        std::vector<int> want;
        for (uint32_t i = 0; i < need; ++i) want.push_back(static_cast<int>(0xffffffffu - static_cast<uint32_t>(comp[i])) - start);
        std::vector<int> got(row.begin(), row.begin() + need);
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        expect(got == want, name + ": the row's top-k set");
        for (uint32_t j = need; j < k; ++j) expect(row[j] == -1, name + ": -1 padding");
      }
    }
  }
}


// An out() that records each row position's value and write count (bad: a
// position out of [0, k)).
struct PosRecorder {
  std::vector<int>& row;
  std::vector<int>& writes;
  uint32_t k;
  bool& bad;
  void operator()(int at, int v, uint32_t) const {
    if (at < 0 || at >= static_cast<int>(k)) {
      bad = true;
      return;
    }
    row[at] = v;
    ++writes[at];
  }
};

// pair_finish_row_gated (two warps, 4 segments each) against warp_finish_row
// on one warp: the same answer (written / unsafe), the same set, every position of
// the row written exactly once, deterministic, the histogram left clear; -1
// (the single-warp path applies) only where documented, with nothing written.
int g_pair_fallbacks = 0;
// want: 1 the pair must finish the row itself, -1 it must hand it to one warp, 0 either.
void pair_case(const std::string& name0, Row r, uint64_t thr, uint32_t k, bool gated, int start, int want = 0) {
  const std::string& name = name0;
  const auto all = r.entries();
  const uint32_t need = gated ? k : std::min<uint32_t>(k, static_cast<uint32_t>(all.size()));
  // The single-warp reference.
  std::vector<int> ref(k, -7);
  bool ok1[32];
  uint32_t c1[32];
  {
    Scratch sc;
    warp_emu::run([&](int lane) {
      const SegLanes sl = lanes_of(r, lane);
      ok1[lane] = warp_finish_row(sl, thr, k, need, gated, start, sc.hist, sc.sk, sc.si, lane, &c1[lane],
                                        [&](int at, int v, uint32_t) { ref[at] = v; });
    });
  }
  // pair_select (the gate's threshold) against warp_select_lean, for k and for a small rank.
  for (uint32_t kk : {k, 128u}) {
    uint64_t want_t[32];
    uint32_t want_c[32];
    {
      Scratch sc;
      warp_emu::run([&](int lane) {
        const SegLanes sl = lanes_of(r, lane);
        want_t[lane] = warp_select_lean(sl, thr, kk, sc.hist, sc.sk, sc.si, lane, &want_c[lane]);
      });
    }
    Scratch sc;
    uint32_t xch[16] = {};
    uint64_t t[64];
    uint32_t cnt[64];
    bool okp[64];
    warp_emu::run2([&](int w, int lane) {
      const SegLanes ps = r.half(w, lane);
      PairCtx pc{xch, 9, w, 0};
      okp[w * 32 + lane] = pair_select(ps, pc, thr, kk, sc.hist, sc.sk, sc.si, lane, &t[w * 32 + lane], &cnt[w * 32 + lane]);
    });
    const std::string nm = name + " pair_select k=" + std::to_string(kk);
    for (int l = 1; l < 64; ++l) expect(okp[l] == okp[0], nm + ": lanes disagree");
    for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, nm + ": histogram not left zeroed");
    expect(cnt[0] == want_c[0], nm + ": eligible count");
    if (okp[0]) {
      for (int l = 0; l < 64; ++l) expect(t[l] == want_t[0], nm + ": threshold differs from warp_select_lean's");
    } else {
      ++g_pair_fallbacks;
      expect(want_c[0] > static_cast<uint32_t>(kScratch), nm + ": fallback where none is documented");
    }
  }
  // pair_gate_fast (the sample gate's one pass) for the sample gate's case
  // (thr 0): the lowest key of the 2^16-key bin below the row's largest key
  // that holds the rho-th largest, or 0 when fewer than rho keys lie within
  // 2^24 below the largest or more than kScratch in that bin; the same in
  // both warps; the histogram left zero.
  if (thr == 0) {
    std::vector<uint32_t> keys;
    for (auto& e : all)
      if (e.first >= 1u) keys.push_back(e.first);
    std::sort(keys.begin(), keys.end(), std::greater<uint32_t>());
    const uint32_t smax = keys.empty() ? 0u : keys[0];
    for (uint32_t rho : {1u, 128u, k, static_cast<uint32_t>(keys.size()) + 1u}) {
      uint32_t want_g = 0;
      uint32_t inbins = 0;
      for (uint32_t key : keys) inbins += smax - key < (256u << 16) ? 1u : 0u;
      if (rho <= inbins) {
        const uint32_t bin = (smax - keys[rho - 1]) >> 16, below = (bin + 1u) << 16;
        uint32_t in_bin = 0;
        for (uint32_t key : keys) in_bin += smax - key < (256u << 16) && (smax - key) >> 16 == bin ? 1u : 0u;
        want_g = in_bin > static_cast<uint32_t>(kScratch) ? 0u : smax >= below ? smax - below + 1u : 1u;
      }
      Scratch sc;
      uint32_t xch[16] = {};
      uint32_t g[64];
      warp_emu::run2([&](int w, int lane) {
        const SegLanes ps = r.half(w, lane);
        PairCtx pc{xch, 9, w, 0};
        g[w * 32 + lane] = pair_gate_fast(ps, pc, rho, smax, sc.hist, lane);
      });
      const std::string nm = name + " pair_gate_fast rho=" + std::to_string(rho);
      for (int l = 0; l < 64; ++l) expect(g[l] == want_g, nm + ": gate differs from the bin rule");
      for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, nm + ": histogram not left zeroed");
      if (want_g) {
        uint32_t at_or_above = 0;
        for (uint32_t key : keys) at_or_above += key >= want_g ? 1u : 0u;
        expect(at_or_above >= rho, nm + ": fewer than rho keys at or above the gate");
        expect(want_g <= keys[rho - 1], nm + ": the gate is above the exact rho-th");
      }
    }
  }
  // The block end (pair_finish_row_gated): smax 0 (no fast path: the general
  // passes), and for a gate threshold several sample maxima (the entries'
  // largest eligible key, below it, just above the gate, far above).
  std::vector<uint32_t> smaxes = {0u};
  const uint32_t gk = static_cast<uint32_t>(thr >> 32);
  if (gated && static_cast<uint32_t>(thr) == 0u && gk >= 1u) {
    uint32_t emax = 0;
    std::vector<uint32_t> el;
    for (auto& e : all)
      if (e.first >= gk) el.push_back(e.first);
    std::sort(el.begin(), el.end(), std::greater<uint32_t>());
    if (!el.empty()) emax = el[0];
    for (uint32_t v : {emax, el.empty() ? 0u : el[el.size() / 3], el.size() > k ? el[k / 2] : 0u, gk + 1u, 0xfffffff0u})
      if (v > gk) smaxes.push_back(v);
  }
  for (uint32_t smax : smaxes) {
  const std::string name = smax ? name0 + " gate-range smax=" + std::to_string(smax) : name0;
  std::vector<int> first;
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<int> row(k, -7), writes(k, 0);
    Scratch sc;
    uint32_t xch[16] = {};
    int res[64];
    uint32_t cands[64];
    bool bad_at = false;
    warp_emu::run2([&](int w, int lane) {
      const SegLanes ps = r.half(w, lane);
      PairCtx pc{xch, 9, w, 0};
      const PosRecorder outf{row, writes, k, bad_at};
      res[w * 32 + lane] = pair_finish_row_gated(ps, pc, thr, smax, k, need, w == 0 ? gated : false, start, sc.hist,
                                                 sc.sk, sc.si, lane, &cands[w * 32 + lane], outf);
    });
    expect(!bad_at, name + ": pair wrote out of range");
    for (int l = 1; l < 64; ++l) expect(res[l] == res[0], name + ": the pair's lanes disagree");
    for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, name + ": pair histogram not left zeroed");
    if (want) expect((res[0] < 0) == (want < 0), name + ": pair path taken (finished / handed to one warp)");
    if (res[0] < 0) {
      ++g_pair_fallbacks;
      for (int v : row) expect(v == -7, name + ": a pair fallback writes nothing");
      const bool compacted_few = static_cast<uint32_t>(thr) != 0u && c1[0] <= k;
      expect(compacted_few || c1[0] > static_cast<uint32_t>(kScratch), name + ": pair fallback where none is documented");
      return;
    }
    expect(cands[0] == c1[0], name + ": candidate count " + std::to_string(cands[0]) + " vs " + std::to_string(c1[0]) + " res " + std::to_string(res[0]));
    expect((res[0] == 1) == ok1[0], name + ": safe / unsafe answer differs from one warp's");
    if (res[0] == 0) {
      for (int v : row) expect(v == -7, name + ": an unsafe row writes nothing");
      return;
    }
    for (uint32_t j = 0; j < k; ++j) expect(writes[j] == 1, name + ": position " + std::to_string(j) + " written " + std::to_string(writes[j]) + " times");
    std::vector<int> a = row, b = ref;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    expect(a == b, name + ": the pair's set differs from one warp's");
    if (rep == 0) first = row;
    else expect(row == first, name + ": pair output not deterministic");
  }
  }
}

void pair_cases() {
  std::mt19937 rng(4242);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (uint32_t k : {512u, 1024u, 2048u}) {
    const int cap = static_cast<int>(((k + 1920) / 4 + 3) & ~3u);
    const std::string ks = " k=" + std::to_string(k);
    for (int trial = 0; trial < 16; ++trial) {
      Row r(cap);
      for (int s = 0; s < NS; ++s) {
        const int pick = static_cast<int>(rng() % 8);
        const int n = pick == 0 ? 0 : pick == 1 ? static_cast<int>(rng() % 5) : pick == 2 ? 64 * (1 + rng() % 4) - 1
                      : pick == 3 ? 16 * (1 + rng() % 8) + 1 : pick == 4 ? cap : static_cast<int>(rng() % cap);
        for (int j = 0; j < n; ++j) r.push(s, okey(gauss(rng)), static_cast<uint32_t>(s + 8 * j + 5));
      }
      pair_case("pair gauss " + std::to_string(trial) + ks, r, 0, k, false, 5, 1);
      pair_case("pair gauss gated " + std::to_string(trial) + ks, r, 0, k, true, 5);
      for (float gv : {-0.5f, 0.3f, 1.5f})
        pair_case("pair gauss gate " + std::to_string(gv) + " " + std::to_string(trial) + ks, r, uint64_t(okey(gv)) << 32,
                  k, true, 5);
    }
    {  // a gated row's candidates: every key at or above the gate, crowded near it
      Row r(cap);
      const float gate = 1.2f;
      const uint32_t gk = okey(gate);
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap * 3 / 5; ++j) {
          float v = gate + std::fabs(gauss(rng)) * 0.3f;
          r.push(s, okey(v), static_cast<uint32_t>(100 + s + 8 * j));
        }
      pair_case("pair gated crowd" + ks, r, uint64_t(gk) << 32, k, true, 100);
    }
    {  // every key equal, thousands: heavy ties, cut by index by the pair (pair_index_cut)
      Row r(cap);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap - 3 * s; ++j) r.push(s, okey(0.25f), (i++ * 7919u) % (1u << 22));
      pair_case("pair all equal" + ks, r, 0, k, false, 0, 1);
    }
    {  // thousands tied at the k-th value, some above
      Row r(cap);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap / 2 + s; ++j, ++i) r.push(s, okey(i % 5 == 0 ? 3.f + gauss(rng) * 0.001f : 1.5f), i * 3u);
      pair_case("pair boundary ties" + ks, r, 0, k, false, 0);
    }
    {  // exactly need_k tied at the k-th key: all of them in (no gather)
      Row r(cap);
      uint32_t i = 0;
      const uint32_t above = k - 300;  // 300 tied entries are all in: 300 > kScratch
      for (uint32_t j = 0; j < above; ++j, ++i) r.push(static_cast<int>(j % NS), okey(5.f + float(i % 97)), i * 2u + 1u);
      for (int j = 0; j < 300; ++j, ++i) r.push(j % NS, okey(1.f), i * 2u + 1u);
      for (int j = 0; j < 200; ++j, ++i) r.push(j % NS, okey(0.5f + 0.001f * j), i * 2u + 1u);
      pair_case("pair exact ties all in" + ks, r, 0, k, false, 1, 1);
    }
    {  // a compacted row's threshold with ties at its key on both sides
      Row r(cap);
      const uint32_t tk = okey(1.0f);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap - 40; ++j, ++i)
          r.push(s, j % 3 == 0 ? tk : okey(1.0f + float(rng() % 1000) / 100.f), i * 2u);
      for (uint32_t ti : {0u, 100u, 5000u}) {
        const uint64_t thr = (uint64_t(tk) << 32) | (0xffffffffu - ti);
        pair_case("pair threshold set ti=" + std::to_string(ti) + ks, r, thr, k, false, 0);
      }
    }
    {  // at most k under a compacted row's threshold, ties at its key below it: one warp
      Row r(cap);
      const uint32_t tk = okey(0.75f);
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < 20; ++j) r.push(s, j % 2 ? tk : okey(2.f + gauss(rng)), static_cast<uint32_t>(s + 8 * j));
      pair_case("pair few compacted" + ks, r, (uint64_t(tk) << 32) | (0xffffffffu - 60u), k, false, 0, -1);
    }
    for (int few : {0, 1, 7, 63}) {  // at most k in all (padding), gated or not
      Row r(cap);
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < few * (s % 3); ++j) r.push(s, okey(gauss(rng)), static_cast<uint32_t>(s * 1000 + j));
      pair_case("pair few " + std::to_string(few) + ks, r, 0, k, false, 0);
      pair_case("pair few gated " + std::to_string(few) + ks, r, uint64_t(okey(-3.f)) << 32, k, true, 0);
    }
    {  // one segment of each warp holds everything; the other warp's empty
      Row r(cap);
      for (int j = 0; j < cap; ++j) r.push(1, okey(gauss(rng)), static_cast<uint32_t>(8 * j + 1));
      for (int j = 0; j < cap; ++j) r.push(2, okey(gauss(rng)), static_cast<uint32_t>(8 * j + 2));
      pair_case("pair one warp" + ks, r, 0, k, false, 0);
    }
    {  // many levels: keys spread over a wide range with a dense cluster at the k-th
      Row r(cap);
      uint32_t i = 0;
      for (int s = 0; s < NS; ++s)
        for (int j = 0; j < cap - 8; ++j, ++i) {
          const float v = (i % 4 == 0) ? 1e6f * (1.f + gauss(rng)) : 1.f + 1e-5f * float(i % 1000);
          r.push(s, okey(v), i);
        }
      pair_case("pair clustered" + ks, r, 0, k, false, 0);
    }
  }
  expect(g_pair_fallbacks > 0, "pair: the fallback cases ran");
}

// The same over PieceSegs (a split block's pieces in the split workspace
// layout of CTAs c0 .. c0 + np - 1, the first in slot slot0, the others in
// slot 0; counts in the records), as fused/blocks_split.cuh runs them:
// piece_flat's visits; the shared gate's select (pair_select with kTieGate,
// the pair over its halves of the pieces: 1-8 lanes per segment by the piece
// count) against warp_select_lean over the pieces; the merge (each piece's
// fast-path bins by pair_count_gate_bins, summed as the last piece sums
// them, then pair_finish_row_prebinned; smax 0: the general passes) and the
// one-warp fallback (warp_finish_row over the pieces: for_each_key4,
// warp_hist_pass and warp_emit over pieces) against the sorting reference.
int g_piece_rounds = 0, g_prebinned = 0, g_tie_gates = 0;
void pieces_case(const std::string& name, std::vector<Row>& sl, uint64_t thr, uint32_t k, bool gated, int start,
                 int c0, int slot0, int r) {
  const int np = static_cast<int>(sl.size());
  const uint32_t cap = static_cast<uint32_t>(sl[0].cap);
  const size_t region = size_t(8) * NS * 2 * cap;
  const int ctas = c0 + np;
  std::vector<uint32_t> ws(size_t(ctas) * kPieceSlots * region + 16, 0xdeadbeefu);
  std::vector<uint32_t> rec(size_t(ctas) * kPieceSlots * 256, 0u);
  for (int i = 0; i < np; ++i) {
    const size_t sl_i = size_t(c0 + i) * kPieceSlots + (i == 0 ? slot0 : 0);
    for (int sg = 0; sg < NS; ++sg) {
      uint32_t* dst = ws.data() + sl_i * region + size_t(r * NS + sg) * 2 * cap;
      std::copy(sl[i].key(sg), sl[i].key(sg) + cap, dst);
      std::copy(sl[i].idx(sg), sl[i].idx(sg) + cap, dst + cap);
      rec[sl_i * 256 + r * 32 + 8 + sg] = sl[i].cnt[sg];
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> all;
  for (auto& x : sl)
    for (auto& e : x.entries()) all.push_back(e);
  std::vector<uint64_t> el;
  for (auto& e : all)
    if (composite(e.first, e.second) >= thr) el.push_back(composite(e.first, e.second));
  std::sort(el.begin(), el.end(), std::greater<uint64_t>());
  const uint32_t n = static_cast<uint32_t>(el.size());
  const uint32_t need = gated ? k : std::min(k, n);
  std::vector<int> want;
  for (uint32_t i = 0; i < std::min(k, n); ++i) want.push_back(static_cast<int>(0xffffffffu - uint32_t(el[i])) - start);
  while (want.size() < k) want.push_back(-1);
  std::sort(want.begin(), want.end());
  // Pieces [p0, p0 + cnt) as a PieceSegs (half: a pair warp's, or -1 for one warp over all 8 segments).
  auto pieces = [&](int p0, int cnt, int half) {
    return PieceSegs{ws.data() + size_t(r * NS) * 2 * cap, rec.data() + r * 32 + 8, cap, c0 + p0,
                     p0 == 0 ? slot0 : 0, cnt, half};
  };
  auto segs = [&](int half) { return pieces(0, np, half); };
  // piece_flat visits every entry of the half's (or all) segments once, with
  // the right key / index pairs.
  for (int half = -1; half < 2; ++half) {
    std::vector<std::pair<uint32_t, uint32_t>> want_e, got;
    for (int i = 0; i < np; ++i)
      for (int sg = (half < 0 ? 0 : 4 * half); sg < (half < 0 ? NS : 4 * half + 4); ++sg)
        for (uint32_t j = 0; j < sl[i].cnt[sg]; ++j) want_e.push_back({sl[i].key(sg)[j], sl[i].idx(sg)[j]});
    std::vector<std::pair<uint32_t, uint32_t>> per_lane[32];
    warp_emu::run([&](int lane) {
      piece_flat(segs(half), lane, [&](uint32_t key, uint32_t idx, bool valid) {
        if (valid) per_lane[lane].push_back({key, idx});
      });
    });
    for (auto& v : per_lane) got.insert(got.end(), v.begin(), v.end());
    std::sort(want_e.begin(), want_e.end());
    std::sort(got.begin(), got.end());
    expect(got == want_e, name + ": piece_flat visits every entry once (half " + std::to_string(half) + ")");
  }
  // The shared gate's select (thr 0, as the split gate runs it): the pair's
  // threshold is warp_select_lean's, or under heavy ties (more than kScratch
  // at the rank's key) that key's gate, composite(key, 0).
  if (thr == 0) {
    for (uint32_t rho : {16u, 128u, k}) {
      uint64_t tl[32];
      uint32_t cl[32];
      {
        Scratch sc;
        warp_emu::run([&](int lane) { tl[lane] = warp_select_lean(segs(-1), 0, rho, sc.hist, sc.sk, sc.si, lane, &cl[lane]); });
      }
      Scratch sc;
      uint32_t xch[16] = {};
      uint64_t tp[64];
      uint32_t cp[64];
      warp_emu::run2([&](int w, int lane) {
        PairCtx pc{xch, 9, w, 0};
        pair_select<true>(segs(w), pc, 0, rho, sc.hist, sc.sk, sc.si, lane, &tp[w * 32 + lane], &cp[w * 32 + lane]);
      });
      const std::string nm = name + " gate select rho=" + std::to_string(rho);
      for (int l = 1; l < 64; ++l) expect(tp[l] == tp[0] && cp[l] == cp[0], nm + ": lanes disagree");
      for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, nm + ": histogram not left zeroed");
      expect(cp[0] == cl[0], nm + ": eligible count");
      if (tp[0] != tl[0]) {
        uint32_t at_key = 0;
        for (auto& e : all) at_key += e.first == static_cast<uint32_t>(tl[0] >> 32);
        expect(tp[0] == composite(static_cast<uint32_t>(tl[0] >> 32), 0u) && at_key > static_cast<uint32_t>(kScratch),
               nm + ": threshold differs from warp_select_lean's (and is not the tied key's gate)");
        ++g_tie_gates;
      }
    }
  }
  // The merge: smax 0 (the general passes) and, for a gate threshold, the
  // largest eligible key, one below it and one just above the gate, with the
  // pieces' bins counted by pair_count_gate_bins (one piece at a time, as
  // each piece publishes them) and summed; then the one-warp fallback.
  const uint32_t gk = static_cast<uint32_t>(thr >> 32);
  std::vector<uint32_t> smaxes = {0u};
  if (gated && static_cast<uint32_t>(thr) == 0u && gk >= 1u) {
    std::vector<uint32_t> ek;
    for (auto& e : all)
      if (e.first >= gk) ek.push_back(e.first);
    std::sort(ek.begin(), ek.end(), std::greater<uint32_t>());
    for (uint32_t v : {ek.empty() ? 0u : ek[0], ek.size() > 3 ? ek[ek.size() / 4] : 0u, gk + 1u})
      if (v > gk) smaxes.push_back(v);
  }
  for (size_t mode = 0; mode <= smaxes.size(); ++mode) {  // smaxes[mode], then (mode == size) one warp
    const bool one = mode == smaxes.size();
    const uint32_t smax = one ? 0u : smaxes[mode];
    std::vector<int> first;
    for (int rep = 0; rep < 2; ++rep) {
      std::vector<int> row(k, -7), writes(k, 0);
      Scratch sc;
      uint32_t xch[16] = {};
      int res[64];
      uint32_t cands[64];
      bool bad_at = false;
      if (one) {
        warp_emu::run([&](int lane) {
          res[lane] = warp_finish_row(segs(-1), thr, k, need, gated, start, sc.hist, sc.sk, sc.si, lane,
                                      &cands[lane], PosRecorder{row, writes, k, bad_at}) ? 1 : 0;
        });
        for (int l = 32; l < 64; ++l) res[l] = res[0];
      } else {
        if (smax) {
          const uint32_t m0 = range_mult(smax - gk);
          for (int i = 0; i < np; ++i) {
            uint32_t h[256] = {}, want_h[256] = {};
            for (auto& e : sl[i].entries())
              if (e.first >= gk) ++want_h[std::min(range_bin(e.first, gk, m0), 255u)];
            uint32_t x2[16] = {};
            warp_emu::run2([&](int w, int lane) {
              PairCtx pc{x2, 9, w, 0};
              pair_count_gate_bins(pieces(i, 1, w), pc, gk, smax, h, lane);
            });
            for (int b = 0; b < 256; ++b) {
              expect(h[b] == want_h[b], name + ": pair_count_gate_bins, piece " + std::to_string(i) + " bin " +
                                            std::to_string(b));
              sc.hist[b] += h[b];
            }
          }
        }
        warp_emu::run2([&](int w, int lane) {
          PairCtx pc{xch, 9, w, 0};
          res[w * 32 + lane] = pair_finish_row_prebinned(segs(w), pc, thr, smax, k, need, w == 0 ? gated : false,
                                                         start, sc.hist, sc.sk, sc.si, lane, &cands[w * 32 + lane],
                                                         PosRecorder{row, writes, k, bad_at});
        });
      }
      const std::string nm = name + (one ? " one warp" : " merge smax=" + std::to_string(smax));
      expect(!bad_at, nm + ": wrote out of range");
      for (int l = 1; l < 64; ++l) expect(res[l] == res[0], nm + ": lanes disagree");
      for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, nm + ": histogram not left zeroed");
      if (res[0] < 0) {  // heavy ties at the k-th key: the documented hand-over to one warp
        ++g_pair_fallbacks;
        for (int v : row) expect(v == -7, nm + ": a fallback writes nothing");
        break;
      }
      if (smax && cands[0] > k) ++g_prebinned;
      expect(cands[0] == n, nm + ": candidate count");
      expect((res[0] == 0) == (gated && n < k), nm + ": unsafe exactly when a gated row has fewer than k");
      if (res[0] == 0) break;
      for (uint32_t j = 0; j < k; ++j) expect(writes[j] == 1, nm + ": position written " + std::to_string(writes[j]) + " times");
      std::vector<int> a = row;
      std::sort(a.begin(), a.end());
      expect(a == want, nm + ": the set differs from the sorting reference");
      if (rep == 0) first = row;
      else expect(row == first, nm + ": output not deterministic");
      ++g_piece_rounds;
    }
  }
}

void pieces_cases() {
  std::mt19937 rng(777);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (uint32_t k : {512u, 2048u}) {
    const int cap = seg_cap(static_cast<int>(k));
    for (int np : {1, 2, 3, 8, 17}) {
      for (int trial = 0; trial < 5; ++trial) {
        std::vector<Row> sl;
        uint32_t idx = 0;
        const bool ties = trial == 4;  // a few distinct values: heavy ties at every rank
        for (int i = 0; i < np; ++i) {
          sl.emplace_back(cap);
          for (int s = 0; s < NS; ++s) {
            const int pick = static_cast<int>(rng() % 6);
            const int nmax = std::min(cap, static_cast<int>(3 * k / (NS * np)) + 8);
            const int n = pick == 0 ? 0 : pick == 1 ? static_cast<int>(rng() % 4) : static_cast<int>(rng() % (nmax + 1));
            for (int j = 0; j < n; ++j) sl.back().push(s, okey(ties ? float(rng() % 3) : gauss(rng)), 7 + idx++);
          }
        }
        const std::string nm = "pieces np=" + std::to_string(np) + " k=" + std::to_string(k) + " #" + std::to_string(trial);
        pieces_case(nm, sl, 0, k, false, 7, 3, trial % 3, trial % 8);
        // (ties: the gate at a key many entries have)
        pieces_case(nm + " gate 0.4", sl, uint64_t(okey(ties ? 1.f : 0.4f)) << 32, k, true, 7, 0, 1, 5);
        pieces_case(nm + " gate -1.5", sl, uint64_t(okey(-1.5f)) << 32, k, true, 7, 2, 2, 3);
      }
    }
  }
}

}  // namespace

int main() {
  group_sweep();
  select_cases();
  finish_cases();
  pair_cases();
  pieces_cases();
  expect(g_piece_rounds > 0, "pieces: cases ran");
  expect(g_prebinned > 0, "pieces: merges from the pieces' bins ran");
  expect(g_tie_gates > 0, "pieces: the shared gate's heavy-tie answer ran");
  expect(g_group_cases > 0, "group compactions ran");
  std::printf("blocks_select emulation: %d checks passed (%ld warp exchanges; %d one-warp hand-overs, %d tie gates)\n",
              g_checks, warp_emu::st().exchanges, g_pair_fallbacks, g_tie_gates);
  return 0;
}
