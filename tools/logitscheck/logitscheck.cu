// logitscheck: a torch-free device harness for the dense logits kernel's
// variants (issue 10). Built on any machine with nvcc (tools/logitscheck/build.sh),
// carried to the GPU machine, so a device round spends no time compiling.
//
//   check VARIANTS ROWS KEYS LAYOUT [seed=S]
//       each variant into a NaN-poisoned buffer with extra rows and columns,
//       against the session-16 op kernel (variant 23): inside every row's [start, end)
//       bitwise equal, and where it writes outside: only -inf, only in
//       columns < keys of existing rows. Small shapes (rows * keys <= 2^22)
//       also against a host reference (double sums; tolerance 4e-3 of the
//       row-key's sum of |w * relu(dot)| * scale, the wgmma's fp8 accumulation).
//       Reruns bitwise equal.
//   time VARIANTS ROWS KEYS LAYOUT [reps=N]
//       cold-L2 medians (a 128 MiB memset before every sample, samples queued
//       back to back, one sync; the variants interleaved sample by sample),
//       ms and PF/s (8192 FLOP per visible pair).
// LAYOUT: causal (the last ROWS rows of a KEYS-key context), full, ragged
// (random ranges, unaligned starts, empty and short rows).
// VARIANTS (comma list): 23 the op's kernel until session 17 (Sm90LogitsV2Lean),
// 41 the op's kernel since (Sm90LogitsV2Default), 29 / 30 23
// with block-cost shares, 31 kLean2, 32 kLean2 + kQPerm, 33 / 34 32 with
// block-cost shares 2 / 4, 35 31 with block-cost shares 2, 36 kLean2 +
// kQPermLong (the permuted Q only for blocks of >= 8 tiles in a share), 37 36
// with block-cost shares 2 (38 / 39, the next block's Q issued early and
// permuted only then, were measured slower and removed); 40 / 41 / 42 37 with
// the permuted Q only for blocks of >= 64 / 32 / 128 tiles, 43 40 without
// the block-cost shares. Development only:
// never part of the extension.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mqa_topk/sm90_fp8_mqa_logits_v2.cuh"

#include "../harness_common.h"

namespace {
using namespace mqa_topk;
using namespace harness;

double unfp8(uint8_t b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<double>(static_cast<float>(v));
}

struct Work {
  int rows = 0, keys = 0;
  std::vector<uint8_t> q, k;
  std::vector<float> scales, weights;
  std::vector<int> starts, ends;
};

Work make_work(int rows, int keys, const std::string& layout, uint64_t seed) {
  Work w;
  w.rows = rows, w.keys = keys;
  Rng rng(seed);
  w.starts.resize(rows), w.ends.resize(rows);
  for (int i = 0; i < rows; ++i) {
    if (layout == "causal") {
      w.starts[i] = 0, w.ends[i] = std::max(0, std::min(keys, keys - rows + i + 1));
    } else if (layout == "full") {
      w.starts[i] = 0, w.ends[i] = keys;
    } else {  // ragged
      const int s = static_cast<int>(rng.next() % std::max(1, keys));
      const int mode = static_cast<int>(rng.next() % 8);
      const int len = mode == 0 ? 0 : mode == 1 ? static_cast<int>(rng.next() % 300) : static_cast<int>(rng.next() % (keys - s + 1));
      w.starts[i] = s, w.ends[i] = std::min(keys, s + len);
    }
  }
  w.q.resize(size_t(rows) * 32 * 128), w.k.resize(size_t(keys) * 128);
  w.scales.resize(keys), w.weights.resize(size_t(rows) * 32);
  for (auto& x : w.q) x = fp8(rng.gauss());
  for (auto& x : w.k) x = fp8(rng.gauss());
  for (auto& x : w.scales) x = static_cast<float>(0.5 + 1.5 * rng.uni());
  for (auto& x : w.weights) {
    const double v = std::fabs(rng.gauss()) / 32;
    x = static_cast<float>(rng.uni() < 0.1 ? -v : v);
  }
  return w;
}

constexpr int kExtraRows = 9;   // poisoned rows past the last: nothing may land there
constexpr int kExtraCols = 20;  // poisoned columns past keys (the pitch's padding and more)

struct Dev {
  const Work* w = nullptr;
  void *q = nullptr, *k = nullptr;
  float *scales = nullptr, *weights = nullptr, *logits = nullptr;
  int *starts = nullptr, *ends = nullptr;
  int64_t ld = 0;
  size_t out_elems = 0;
};

Dev upload_work(const Work& w) {
  Dev d;
  d.w = &w;
  upload_inputs(w, d);
  d.ld = (w.keys + kExtraCols + 3) / 4 * 4;
  d.out_elems = size_t(w.rows + kExtraRows) * d.ld;
  CK(cudaMalloc(&d.logits, d.out_elems * 4));
  return d;
}

void free_dev(Dev& d) {
  for (void* p : {d.q, d.k, static_cast<void*>(d.scales), static_cast<void*>(d.weights), static_cast<void*>(d.logits),
                  static_cast<void*>(d.starts), static_cast<void*>(d.ends)})
    cudaFree(p);
}

int g_sms = 132;

template <int kLean2, int kCost = 0>
using Lean2 = Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true, false, kCost, kLean2>;

cudaError_t launch(int v, const Dev& d, cudaStream_t st = 0) {
  const Work& w = *d.w;
  int me = 0;
  auto go = [&](auto cfg) {
    return launch_sm90_fp8_mqa_logits_v2<decltype(cfg)>(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.logits,
                                                        d.ld, w.rows, w.keys, g_sms, st, &me);
  };
  switch (v) {
    case 23: return go(Sm90LogitsV2Lean{});
    case 41: return go(Sm90LogitsV2Default{});
    case 29: return go(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true, false, 2>{});
    case 30: return go(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true, false, 4>{});
    case 31: return go(Lean2<1>{});
    case 32: return go(Lean2<3>{});
    case 33: return go(Lean2<3, 2>{});
    case 34: return go(Lean2<3, 4>{});
    case 35: return go(Lean2<1, 2>{});
    case 36: return go(Lean2<5>{});
    case 37: return go(Lean2<5, 2>{});
    case 40: return go(Lean2<5 | (64 << 8), 2>{});
    case 42: return go(Lean2<5 | (128 << 8), 2>{});
    case 43: return go(Lean2<5 | (64 << 8)>{});
    default: std::fprintf(stderr, "unknown variant %d\n", v); std::exit(2);
  }
}

std::vector<float> run_poisoned(int v, const Dev& d) {
  CK(cudaMemset(d.logits, 0xff, d.out_elems * 4));  // NaN
  CK(launch(v, d));
  CK(cudaDeviceSynchronize());
  std::vector<float> h(d.out_elems);
  CK(cudaMemcpy(h.data(), d.logits, d.out_elems * 4, cudaMemcpyDeviceToHost));
  return h;
}

int cmd_check(int argc, char** argv) {
  if (argc < 6) return std::fprintf(stderr, "check VARIANTS ROWS KEYS LAYOUT [seed=S]\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int rows = std::atoi(argv[3]), keys = std::atoi(argv[4]);
  const std::string layout = argv[5];
  const Work w = make_work(rows, keys, layout, opt_int(argc, argv, "seed", 5));
  Dev d = upload_work(w);
  const auto ref = run_poisoned(23, d);
  int bad_total = 0;
  // Host reference on small shapes (the op kernel's values within the tolerance).
  if (double(rows) * keys <= double(1 << 22)) {
    long long off = 0;
    double worst = 0;
    for (int r = 0; r < rows; ++r)
      for (int s = std::max(0, w.starts[r]); s < std::min(w.ends[r], keys); ++s) {
        double v = 0, mag = 0;
        for (int h = 0; h < 32; ++h) {
          double dot = 0;
          for (int x = 0; x < 128; ++x)
            dot += unfp8(w.q[(size_t(r) * 32 + h) * 128 + x]) * unfp8(w.k[size_t(s) * 128 + x]);
          const double t = double(w.weights[size_t(r) * 32 + h]) * std::max(dot, 0.0);
          v += t;
          mag += std::fabs(t);
        }
        v *= w.scales[s];
        mag *= w.scales[s];
        const double got = ref[size_t(r) * d.ld + s];
        const double err = std::fabs(got - v);
        worst = std::max(worst, mag > 0 ? err / mag : err);
        if (!(err <= 4e-3 * mag + 1e-30)) ++off;
      }
    std::printf("check %s %dx%d: op kernel vs host reference: %lld off tolerance, worst err / magnitude %.3e\n",
                layout.c_str(), rows, keys, off, worst);
    bad_total += off != 0;
  }
  for (int v : vars) {
    const auto a = run_poisoned(v, d);
    const auto a2 = run_poisoned(v, d);
    long long diff = 0, wrong_outside = 0, oob = 0, rerun = 0;
    for (int r = 0; r < rows + kExtraRows; ++r)
      for (int c = 0; c < d.ld; ++c) {
        const size_t i = size_t(r) * d.ld + c;
        uint32_t ua, ub, u2;
        std::memcpy(&ua, &a[i], 4), std::memcpy(&ub, &ref[i], 4), std::memcpy(&u2, &a2[i], 4);
        if (ua != u2) ++rerun;
        const bool is_nan = std::isnan(a[i]);
        if (r >= rows || c >= keys) {
          oob += !is_nan;
          continue;
        }
        const bool inside = c >= w.starts[r] && c < w.ends[r];
        if (inside) {
          diff += ua != ub || is_nan;
        } else if (!is_nan && !(std::isinf(a[i]) && a[i] < 0)) {
          ++wrong_outside;
        }
      }
    const bool ok = diff == 0 && wrong_outside == 0 && oob == 0 && rerun == 0;
    bad_total += !ok;
    std::printf("check v%d %s %dx%d: %s (inside differing %lld, outside not -inf %lld, out of bounds %lld, rerun differing %lld)\n",
                v, layout.c_str(), rows, keys, ok ? "OK" : "FAIL", diff, wrong_outside, oob, rerun);
  }
  free_dev(d);
  return bad_total ? 3 : 0;
}

int cmd_time(int argc, char** argv) {
  if (argc < 6) return std::fprintf(stderr, "time VARIANTS ROWS KEYS LAYOUT [reps=N]\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int rows = std::atoi(argv[3]), keys = std::atoi(argv[4]);
  const std::string layout = argv[5];
  const int reps = opt_int(argc, argv, "reps", 30);
  const int nv = static_cast<int>(vars.size());
  const Work w = make_work(rows, keys, layout, 7);
  Dev d = upload_work(w);
  double pairs = 0;
  for (int r = 0; r < rows; ++r) pairs += std::max(0, std::min(w.ends[r], keys) - std::max(w.starts[r], 0));
  void* flush = nullptr;
  const size_t flush_bytes = size_t(128) << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  // Interleaved: sample i runs every variant in turn, so all of them see the
  // same clock / power history (the H200 drops from 1980 MHz to ~1650 MHz at
  // its 700 W limit within a second of sustained load).
  std::vector<cudaEvent_t> ev(2 * (reps + 1) * nv);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int v : vars) CK(launch(v, d));  // warm-up
  for (int i = 0; i <= reps; ++i)
    for (int j = 0; j < nv; ++j) {
      CK(cudaMemsetAsync(flush, (i + j) & 0xff, flush_bytes));
      CK(cudaEventRecord(ev[2 * (i * nv + j)]));
      CK(launch(vars[j], d));
      CK(cudaEventRecord(ev[2 * (i * nv + j) + 1]));
    }
  CK(cudaDeviceSynchronize());
  for (int j = 0; j < nv; ++j) {
    std::vector<float> ms;
    for (int i = 1; i <= reps; ++i) {
      float t = 0;
      CK(cudaEventElapsedTime(&t, ev[2 * (i * nv + j)], ev[2 * (i * nv + j) + 1]));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const float med = ms[ms.size() / 2];
    std::printf("time v%d %s %dx%d: %.4f ms (p20 %.4f, p80 %.4f) %.3f PF/s\n", vars[j], layout.c_str(), rows, keys,
                med, ms[ms.size() / 5], ms[ms.size() * 4 / 5], 8192.0 * pairs / med * 1e-12);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cudaFree(flush);
  free_dev(d);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "logitscheck check|time ...\n"), 1;
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  const std::string cmd = argv[1];
  if (cmd == "check") return cmd_check(argc, argv);
  if (cmd == "time") return cmd_time(argc, argv);
  return std::fprintf(stderr, "unknown command %s\n", cmd.c_str()), 1;
}
