// Sorting reference shared by the emulator tests (fused_select_test.cpp,
// fused_v3_test.cpp): the threshold a select over these entries must return.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "mqa_topk/fused_select.cuh"

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
