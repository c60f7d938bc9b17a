// kernelcheck: a torch-free device harness for the shipped kernels, built on
// any machine with nvcc (dev/kernelcheck/build.sh: the kernels' own
// translation units, csrc/kernels/*.cu, linked with this file) and carried to
// the GPU machine, where it runs with no extension build: a kernel check then
// costs the machine's start and the run, not the JIT build.
//
// It generates inputs on the host (gaussian / relu_saturated / rising / equal
// / zero_weights; causal, full or ragged ranges), computes the dense logits
// with the logits kernel, the exact reference sets on the host from them
// ((value desc, index asc); every fused kernel's logits are bitwise the dense
// kernel's, so the sets must be identical), and runs:
//   check KERNELS ROWS KEYS TOPK LAYOUT DIST [seed=S]
//         three runs per kernel with poisoned outputs and scrambled
//         workspaces: wrong rows, reruns differing in order or in set, rows
//         redone (the workspace header's count)
//   time  KERNELS ROWS KEYS TOPK LAYOUT DIST [reps=N]
//         cold-L2 medians, as mqa-topk bench: the logits alone, native dense
//         (logits + top-k) and each fused kernel; and each one's wrong rows
// KERNELS: a comma list of auto, whole, split, staged, hybrid (auto: the
// op's choice, fused/heuristics.h). Development only: never part of the
// extension or the package.
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/dense_kernels.h"
#include "kernels/fused_kernels.h"

#include "../harness_common.h"

namespace {
using namespace mqa_topk;
using namespace harness;

struct Work {
  int rows = 0, keys = 0, topk = 0;
  std::vector<uint8_t> q, k;
  std::vector<float> scales, weights;
  std::vector<int> starts, ends;
};

Work make_work(int rows, int keys, int topk, const std::string& layout, const std::string& dist, uint64_t seed) {
  Work w;
  w.rows = rows, w.keys = keys, w.topk = topk;
  Rng rng(seed);
  w.starts.resize(rows), w.ends.resize(rows);
  for (int i = 0; i < rows; ++i) {
    if (layout == "causal") {
      w.starts[i] = 0, w.ends[i] = std::max(0, std::min(keys, keys - rows + i + 1));
    } else if (layout == "full") {
      w.starts[i] = 0, w.ends[i] = keys;
    } else {  // ragged: random ranges, unaligned starts, some short or empty rows
      const int s = static_cast<int>(rng.next() % std::max(1, keys / 2));
      const int mode = static_cast<int>(rng.next() % 8);
      int len = mode == 0 ? 0 : mode == 1 ? static_cast<int>(rng.next() % (topk + 1)) : static_cast<int>(rng.next() % (keys - s + 1));
      w.starts[i] = s, w.ends[i] = std::min(keys, s + len);
    }
  }
  w.q.resize(size_t(rows) * 32 * 128), w.k.resize(size_t(keys) * 128);
  w.scales.resize(keys), w.weights.resize(size_t(rows) * 32);
  if (dist == "relu_saturated") {
    for (auto& x : w.k) x = fp8(1.0 + 0.3 * rng.gauss());
    for (int r = 0; r < rows; ++r) {
      const double b = -0.06 - 0.06 * rng.uni();
      for (int j = 0; j < 32 * 128; ++j) w.q[size_t(r) * 4096 + j] = fp8(b + 0.3 * rng.gauss());
    }
  } else if (dist == "rising") {
    std::vector<double> t(128);
    for (auto& x : t) x = rng.uni() < 0.5 ? -1.0 / std::sqrt(128.0) : 1.0 / std::sqrt(128.0);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < 32; ++h) {
        const double a = 0.5 + rng.uni();
        for (int d = 0; d < 128; ++d) w.q[(size_t(r) * 32 + h) * 128 + d] = fp8(a * t[d] * 8 + 0.25 * rng.gauss());
      }
    for (int j = 0; j < keys; ++j) {
      const double pos = double(j) / std::max(keys, 1);
      for (int d = 0; d < 128; ++d) w.k[size_t(j) * 128 + d] = fp8((0.25 + 1.75 * pos) * t[d] * 8 + 0.1 * rng.gauss());
    }
  } else if (dist == "equal") {  // every logit equal: pure tie-break
    for (auto& x : w.q) x = fp8(0.5);
    for (auto& x : w.k) x = fp8(0.5);
  } else {
    for (auto& x : w.q) x = fp8(rng.gauss());
    for (auto& x : w.k) x = fp8(rng.gauss());
  }
  for (int j = 0; j < keys; ++j)
    w.scales[j] = dist == "equal" ? 1.0f
                  : dist == "rising" ? static_cast<float>(std::exp2(-1.0 + 2.0 * j / std::max(keys, 1)))
                                     : static_cast<float>(0.5 + 1.5 * rng.uni());
  for (auto& x : w.weights)
    x = dist == "zero_weights" ? 0.f : dist == "equal" ? 1.f / 32 : static_cast<float>(std::fabs(rng.gauss()) / 32 + 1.0 / 1024);
  return w;
}

struct Dev {
  const Work* w = nullptr;
  void *q = nullptr, *k = nullptr;
  float *scales = nullptr, *weights = nullptr, *logits = nullptr;
  int *starts = nullptr, *ends = nullptr, *out = nullptr;
  void *ws = nullptr, *buffer = nullptr;
  size_t ws_bytes = 0, buffer_bytes = 0;
  int64_t ld = 0;
};

int g_sms = 132;

Dev upload_work(const Work& w) {
  Dev d;
  d.w = &w;
  upload_inputs(w, d);
  d.ld = (w.keys + 3) / 4 * 4;
  CK(cudaMalloc(&d.logits, std::max<size_t>(16, size_t(w.rows) * d.ld * 4)));
  CK(cudaMalloc(&d.out, std::max<size_t>(16, size_t(w.rows) * w.topk * 4)));
  d.ws_bytes = fused_workspace_bytes(w.topk, g_sms);
  CK(cudaMalloc(&d.ws, d.ws_bytes));
  for (int i = 0; i < 4; ++i)
    d.buffer_bytes = std::max(d.buffer_bytes, fused_buffer_bytes(static_cast<FusedKernel>(i), w.rows, w.keys, g_sms));
  CK(cudaMalloc(&d.buffer, std::max<size_t>(256, d.buffer_bytes)));
  return d;
}

void free_dev(Dev& d) {
  for (void* p : {d.q, d.k, static_cast<void*>(d.scales), static_cast<void*>(d.weights), static_cast<void*>(d.logits),
                  static_cast<void*>(d.starts), static_cast<void*>(d.ends), static_cast<void*>(d.out), d.ws, d.buffer})
    cudaFree(p);
}

cudaError_t launch_logits(const Dev& d) {
  const Work& w = *d.w;
  int me = 0;
  return logits_launch(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.logits, d.ld, w.rows, w.keys, 32, g_sms, 0, &me,
                       RangeErrorSink{});
}

cudaError_t launch_native(const Dev& d) {
  const Work& w = *d.w;
  const cudaError_t e = launch_logits(d);
  if (e != cudaSuccess) return e;
  return topk_launch(d.logits, d.ld, d.starts, d.ends, d.out, w.rows, w.keys, w.topk, 0, RangeErrorSink{});
}

// "auto", "whole", "split", "staged", "hybrid" -> the kernel (auto: the op's choice for the shape).
FusedKernel kernel_of(const std::string& name, const Work& w) {
  for (int i = 0; i < 4; ++i)
    if (name == fused_kernel_name(static_cast<FusedKernel>(i))) return static_cast<FusedKernel>(i);
  if (name != "auto") std::fprintf(stderr, "unknown kernel %s (auto, whole, split, staged, hybrid)\n", name.c_str()), std::exit(1);
  return choose_fused_kernel(w.rows, w.keys, g_sms, w.topk, 32);
}

cudaError_t launch_fused(FusedKernel kernel, const Dev& d) {
  const Work& w = *d.w;
  const FusedCall c{d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.out, w.rows, w.keys, w.topk, g_sms, 0,
                    RangeErrorSink{}, 32};
  int me = 0;
  return fused_launch(kernel, c, d.ws, d.buffer, &me);
}

std::vector<std::string> split_list(const char* s) {
  std::vector<std::string> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return v;
}

uint32_t okey(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t m = 0u - (u >> 31);
  return ((u ^ m) - m) ^ (~m & 0x80000000u);
}
float okey_to_float(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : (0u - k);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> host_logits(const Dev& d) {
  const Work& w = *d.w;
  std::vector<float> h(size_t(w.rows) * d.ld);
  if (!h.empty()) CK(cudaMemcpy(h.data(), d.logits, h.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

// Per row: the sorted relative indices of the exact top min(k, n) ((value desc, index asc)).
std::vector<std::vector<int>> reference_sets(const Work& w, const std::vector<float>& lg, int64_t ld) {
  std::vector<std::vector<int>> ref(w.rows);
  const int nth = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (int t = 0; t < nth; ++t)
    th.emplace_back([&, t] {
      std::vector<uint64_t> c;
      for (int r = t; r < w.rows; r += nth) {
        const int s = w.starts[r], e = w.ends[r];
        c.clear();
        for (int j = s; j < e; ++j)
          c.push_back((uint64_t(okey(lg[size_t(r) * ld + j])) << 32) | (0xffffffffu - uint32_t(j - s)));
        const size_t m = std::min<size_t>(w.topk, c.size());
        std::nth_element(c.begin(), c.begin() + m, c.end(), std::greater<uint64_t>());
        for (size_t i = 0; i < m; ++i) ref[r].push_back(static_cast<int>(0xffffffffu - uint32_t(c[i])));
        std::sort(ref[r].begin(), ref[r].end());
      }
    });
  for (auto& x : th) x.join();
  return ref;
}

std::vector<int> host_out(const Dev& d) {
  std::vector<int> h(size_t(d.w->rows) * d.w->topk);
  CK(cudaMemcpy(h.data(), d.out, h.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

// Rows whose output (indices >= 0, -1 padding after them) is not the reference set.
int wrong_rows(const Work& w, const std::vector<int>& out, const std::vector<std::vector<int>>& ref, int show = 0) {
  int bad = 0;
  for (int r = 0; r < w.rows; ++r) {
    std::vector<int> got;
    bool pad_ok = true;
    for (int i = 0; i < w.topk; ++i) {
      const int v = out[size_t(r) * w.topk + i];
      if (v >= 0) got.push_back(v);
      if (i >= static_cast<int>(ref[r].size()) && v != -1) pad_ok = false;
    }
    std::sort(got.begin(), got.end());
    if (got != ref[r] || !pad_ok) {
      if (bad < show) {
        std::vector<int> miss, extra;
        std::set_difference(ref[r].begin(), ref[r].end(), got.begin(), got.end(), std::back_inserter(miss));
        std::set_difference(got.begin(), got.end(), ref[r].begin(), ref[r].end(), std::back_inserter(extra));
        std::printf("    row %d [%d,%d): got %zu want %zu, missing %zu (first %d) extra %zu (first %d)%s\n", r,
                    w.starts[r], w.ends[r], got.size(), ref[r].size(), miss.size(), miss.empty() ? -1 : miss[0],
                    extra.size(), extra.empty() ? -1 : extra[0], pad_ok ? "" : " bad padding");
      }
      ++bad;
    }
  }
  return bad;
}

void poison(const Dev& d, int v) { CK(cudaMemset(d.out, v & 0xff, size_t(d.w->rows) * d.w->topk * 4)); }
void scramble(const Dev& d, int v) {
  CK(cudaMemset(d.ws, v, d.ws_bytes));
  CK(cudaMemset(d.buffer, v, d.buffer_bytes));
}

void sync_or_exit(const char* what) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("%s: %s\n", what, cudaGetErrorString(e));
    std::fflush(stdout);
    std::exit(3);
  }
}

// The workload of "ROWS KEYS TOPK LAYOUT DIST" at argv[3..7].
Work work_from_args(char** argv, int seed) {
  return make_work(std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), argv[6], argv[7], seed);
}

int cmd_check(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "check KERNELS ROWS KEYS TOPK LAYOUT DIST [seed=S]\n"), 1;
  const auto names = split_list(argv[2]);
  Work w = work_from_args(argv, opt_int(argc, argv, "seed", 11));
  const int rows = w.rows, topk = w.topk;
  Dev d = upload_work(w);
  CK(launch_logits(d));
  sync_or_exit("logits");
  const auto ref = reference_sets(w, host_logits(d), d.ld);
  int failures = 0;
  for (const auto& name : names) {
    const FusedKernel kernel = kernel_of(name, w);
    if (!fused_kernel_runs(kernel, w.rows, w.keys, g_sms)) {
      std::printf("check %s: the %s kernel does not run %d rows x %d keys on %d SMs\n", name.c_str(),
                  fused_kernel_name(kernel), w.rows, w.keys, g_sms);
      continue;
    }
    std::vector<std::vector<int>> outs;
    int wrong = 0, redone = 0;
    for (int run = 0; run < 3; ++run) {
      poison(d, run == 0 ? 0x7f : run == 1 ? 0x80 : 0xff);
      scramble(d, 0x5a + run);
      CK(launch_fused(kernel, d));
      sync_or_exit("fused");
      outs.push_back(host_out(d));
      if (run == 0) {
        wrong = wrong_rows(w, outs[0], ref, 3);
        int header[2] = {0, 0};
        CK(cudaMemcpy(header, d.ws, sizeof header, cudaMemcpyDeviceToHost));
        redone = kernel == FusedKernel::kStaged ? 0 : header[1];
      }
    }
    int order_diff = 0, set_diff = 0;
    for (int i = 1; i < 3; ++i)
      for (int r = 0; r < rows; ++r) {
        auto a = std::vector<int>(outs[0].begin() + size_t(r) * topk, outs[0].begin() + size_t(r + 1) * topk);
        auto b = std::vector<int>(outs[i].begin() + size_t(r) * topk, outs[i].begin() + size_t(r + 1) * topk);
        if (a != b) ++order_diff;
        std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
        if (a != b) ++set_diff;
      }
    failures += wrong + order_diff + set_diff;
    std::printf("check %s-%s %dx%d top-%d %s (%s): wrong rows %d, reruns differing in order %d, in set %d; rows redone %d\n",
                argv[6], argv[7], rows, w.keys, topk, name.c_str(), fused_kernel_name(kernel), wrong, order_diff,
                set_diff, redone);
    std::fflush(stdout);
  }
  free_dev(d);
  return failures ? 4 : 0;
}

int cmd_time(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "time KERNELS ROWS KEYS TOPK LAYOUT DIST [reps=N]\n"), 1;
  const auto names = split_list(argv[2]);
  const int reps = opt_int(argc, argv, "reps", 30);
  Work w = work_from_args(argv, 11);
  const int rows = w.rows, keys = w.keys, topk = w.topk;
  Dev d = upload_work(w);
  void* flush = nullptr;
  const size_t flush_bytes = size_t(128) << 20;  // >= 2x the H200's 60 MiB L2
  CK(cudaMalloc(&flush, flush_bytes));
  // As timing.time_fn does (mqa-topk bench): every sample queued back to back
  // (flush, start event, launch, end event) with one sync at the end, so the
  // GPU runs a sustained load, as in serving.
  const int reps_all = reps + 1;
  std::vector<cudaEvent_t> ev(2 * reps_all);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  auto timed = [&](auto&& launch) {
    CK(launch());  // warm-up (excluded)
    for (int i = 0; i < reps_all; ++i) {
      CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
      CK(cudaEventRecord(ev[2 * i]));
      CK(launch());
      CK(cudaEventRecord(ev[2 * i + 1]));
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int i = 1; i < reps_all; ++i) {
      float t = 0;
      CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  double pairs = 0;
  for (int r = 0; r < rows; ++r) pairs += double(w.ends[r] - w.starts[r]);
  const double flops = pairs * 32 * 128 * 2;
  const float t_logits = timed([&] { return launch_logits(d); });
  sync_or_exit("logits");
  const auto ref = reference_sets(w, host_logits(d), d.ld);
  const float t_native = timed([&] { return launch_native(d); });
  sync_or_exit("native");
  const int wrong_native = wrong_rows(w, host_out(d), ref);
  std::printf("time %s-%s %dx%d top-%d: logits alone %.3f ms (%.3f PF/s), native dense %.3f ms (wrong rows %d)\n",
              argv[6], argv[7], rows, keys, topk, t_logits, flops / t_logits * 1e-12, t_native, wrong_native);
  for (const auto& name : names) {
    const FusedKernel kernel = kernel_of(name, w);
    if (!fused_kernel_runs(kernel, w.rows, w.keys, g_sms)) continue;
    poison(d, 0xff);
    const float t = timed([&] { return launch_fused(kernel, d); });
    sync_or_exit("fused");
    const int wrong = wrong_rows(w, host_out(d), ref, 2);
    std::printf("  fused %s (%s): %.3f ms = %.3fx logits alone, %.3fx faster than native dense; wrong rows %d\n",
                name.c_str(), fused_kernel_name(kernel), t, t / t_logits, t_native / t, wrong);
    std::fflush(stdout);
  }
  cudaFree(flush);
  free_dev(d);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: kernelcheck check|time ...\n"), 1;
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  const std::string cmd = argv[1];
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = cmd == "check"  ? cmd_check(argc, argv)
                 : cmd == "time" ? cmd_time(argc, argv)
                                 : (std::fprintf(stderr, "unknown command %s\n", cmd.c_str()), 1);
  std::printf("[%s: %.1f s]\n", cmd.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return rc;
}
