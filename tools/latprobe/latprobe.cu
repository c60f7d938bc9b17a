// Dependent-load latency on the GPU by pointer chasing (torch-free; issue 12's
// "slow round trip" question): one thread follows a chain of __ldcg loads
// (ld.global.cg: L2, not L1) whose addresses are `stride` bytes apart in a
// buffer of `span` bytes, visited in a shuffled order, and reports SM cycles
// per load after a warm-up lap (so the lines are in L2: what is left is L2
// latency plus address translation). Strides from 128 B (one 2 MB page) to
// 1.5 MB (the split kernel's distance between a block's pieces' candidate
// regions) show the TLB's reach.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tools/latprobe/latprobe.cu -o build/latprobe
//   build/latprobe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

__global__ void chase(const uint32_t* buf, uint32_t start, int hops, long long* cycles, uint32_t* sink) {
  uint32_t at = start;
  for (int i = 0; i < hops; ++i) at = __ldcg(buf + at);  // warm-up lap
  const long long t0 = clock64();
  for (int i = 0; i < hops; ++i) at = __ldcg(buf + at);
  const long long t1 = clock64();
  *cycles = t1 - t0;
  *sink = at;
}

int main() {
  const size_t span_max = size_t(256) << 20;  // 256 MiB (the op's workspace is ~200 MB)
  uint32_t* buf = nullptr;
  cudaMalloc(&buf, span_max);
  long long* cyc = nullptr;
  uint32_t* sink = nullptr;
  cudaMalloc(&cyc, sizeof(long long));
  cudaMalloc(&sink, sizeof(uint32_t));
  struct Case { size_t stride, span; const char* what; };
  const Case cases[] = {
      {128, size_t(64) << 10, "128 B apart in 64 KiB"},
      {128, size_t(2) << 20, "128 B apart in 2 MiB"},
      {8192, size_t(8) << 20, "8 KiB apart in 8 MiB (segments of one region)"},
      {8192, size_t(32) << 20, "8 KiB apart in 32 MiB"},
      {65536, size_t(64) << 20, "64 KiB apart in 64 MiB"},
      {size_t(3) << 19, size_t(24) << 20, "1.5 MiB apart in 24 MiB (16 pieces' regions)"},
      {size_t(3) << 19, size_t(192) << 20, "1.5 MiB apart in 192 MiB (128 CTAs' regions)"},
      {size_t(2) << 20, size_t(256) << 20, "2 MiB apart in 256 MiB"},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const size_t n = c.span / c.stride;
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin() + 1, order.end(), rng);
    std::vector<uint32_t> host(c.span / 4, 0u);
    for (size_t i = 0; i < n; ++i) {
      const size_t from = order[i] * (c.stride / 4), to = order[(i + 1) % n] * (c.stride / 4);
      host[from] = static_cast<uint32_t>(to);
    }
    cudaMemcpy(buf, host.data(), c.span, cudaMemcpyHostToDevice);
    const int hops = static_cast<int>(std::min<size_t>(n, 4096));
    chase<<<1, 1>>>(buf, 0u, hops, cyc, sink);
    long long h = 0;
    cudaMemcpy(&h, cyc, sizeof h, cudaMemcpyDeviceToHost);
    const cudaError_t e = cudaGetLastError();
    std::printf("%-48s %6zu lines, %5d hops: %7.1f cycles per dependent __ldcg%s\n", c.what, n, hops,
                double(h) / hops, e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  return 0;
}
