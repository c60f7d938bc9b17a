// Shared by the emulator tests (fused_select_test.cpp, fused_v3_test.cpp): the
// checks and their count, and the sorting reference of the threshold a select
// over a set of entries must return.
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
