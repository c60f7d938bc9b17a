// Shared by the emulator tests (fused_select_test.cpp, blocks_select_test.cpp):
// the checks and their count, the sorting references (the threshold a select
// over a set of entries must return; a row's exact top-k by float
// comparison), and a row's 8 candidate segments as the block kernels lay
// them out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mqa_topk/fused/select.cuh"

inline int g_checks = 0;  // checks run (printed by each test's main)

[[noreturn]] inline void die(const std::string& msg) {
  std::fprintf(stderr, "FAIL: %s\n", msg.c_str());
  std::exit(1);
}
inline void expect(bool ok, const std::string& msg) {
  ++g_checks;
  if (!ok) die(msg);
}

inline uint32_t okey(float v) { return mqa_topk::fused_detail::order_key(v); }

// The k-th largest composite among the entries whose key is at or above thr's
// key, or thr itself when at most k are.
inline uint64_t ref_threshold(const std::vector<std::pair<uint32_t, uint32_t>>& all, uint64_t thr, uint32_t k) {
  using mqa_topk::fused_detail::composite;
  const uint32_t tk = static_cast<uint32_t>(thr >> 32);
  std::vector<uint64_t> c;
  for (auto& e : all)
    if (e.first >= tk) c.push_back(composite(e.first, e.second));
  if (c.size() <= k) return thr;
  std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), std::greater<uint64_t>());
  return c[k - 1];
}

// The exact top-k of a row by (value desc, index asc), ranked with plain float
// comparisons: independent of the header's order_key / composite, so a bug in
// those (e.g. -0.0 ranked apart from +0.0, or negatives reversed) fails here.
inline std::vector<uint32_t> float_topk(const std::vector<float>& v, int k) {
  std::vector<uint32_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return v[a] > v[b]; });
  order.resize(std::min<size_t>(k, v.size()));
  return order;
}

// The select's shared-memory scratch of one row.
struct Scratch {
  uint32_t hist[256] = {};
  uint32_t sk[mqa_topk::fused_detail::kScratch], si[mqa_topk::fused_detail::kScratch];
};

// A row's 8 segments as the block kernels lay them out (fused/blocks_select.cuh):
// segment s's keys at s * stride words, its indices cap words after them;
// poison past the counts.
constexpr int NS = 8;
struct Row {
  int cap;
  uint32_t stride;
  std::vector<uint32_t> mem;
  uint32_t cnt[NS] = {};
  explicit Row(int cap_) : cap(cap_), stride(2u * cap_), mem(size_t(NS) * 2 * cap_ + 16, 0xdeadbeefu) {}
  uint32_t* key(int s) { return mem.data() + size_t(s) * stride; }
  uint32_t* idx(int s) { return key(s) + cap; }
  void push(int s, uint32_t k, uint32_t i) {
    if (cnt[s] >= static_cast<uint32_t>(cap)) die("candidate segment overflow");
    key(s)[cnt[s]] = k;
    idx(s)[cnt[s]] = i;
    ++cnt[s];
  }
  std::vector<std::pair<uint32_t, uint32_t>> entries() {
    std::vector<std::pair<uint32_t, uint32_t>> v;
    for (int s = 0; s < NS; ++s)
      for (uint32_t j = 0; j < cnt[s]; ++j) v.push_back({key(s)[j], idx(s)[j]});
    return v;
  }
  // One warp over all 8 segments (4 lanes each) and a pair warp's half (its 4, 8 lanes each).
  mqa_topk::fused_detail::SegLanes lanes(int lane) {
    return mqa_topk::fused_detail::make_seg_lanes(key(0), stride, static_cast<uint32_t>(cap), cnt, NS, lane);
  }
  mqa_topk::fused_detail::SegLanes half(int w, int lane) {
    return mqa_topk::fused_detail::make_pair_segs(key(4 * w), stride, static_cast<uint32_t>(cap), cnt + 4 * w, lane);
  }
};

// Candidates per segment (Sm90FusedBlocksConfig::cap).
constexpr int seg_cap(int k) { return ((k + 1920) / 4 + 3) & ~3; }
