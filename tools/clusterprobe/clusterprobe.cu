// clusterprobe: can the split kernel's shape (640 threads, ~232 KB of shared
// memory per CTA, one CTA per SM) run as thread block clusters on this GPU,
// and how far is a cluster peer's shared memory? (issue 12, session 20: the
// plan to exchange a split block's samples, bins and candidates through
// distributed shared memory instead of global memory and counters.)
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tools/clusterprobe/clusterprobe.cu -o build/clusterprobe
// Prints, per cluster size, the most clusters resident at once
// (cudaOccupancyMaxActiveClusters), whether 128 / 132 CTAs in clusters of
// 1-16 are in fact resident together (`resident`), the cost of summing 8 rows
// of 256 bins over a cluster through DSMEM and through global memory
// (`gatesum`, the shared gate's core), then launches 128 CTAs in clusters of 8
// and of 16 (non-portable) and times, in CTA 0 of each cluster, dependent
// loads from a peer's shared memory, a cluster barrier, and dependent
// global loads of lines another CTA wrote (__ldcg), in cycles.
// Development only: never part of the extension or the op.
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

constexpr int kThreads = 640;
constexpr int kSmem = 231 * 1024;

__global__ void __launch_bounds__(kThreads, 1) probe(unsigned long long* out, unsigned* g) {
  extern __shared__ unsigned sm[];
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank(), n = cl.num_blocks();
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) sm[i] = (i + 1) & 1023;  // a chain: sm[i] -> next index
  // every CTA writes its own global lines for the chase below
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) __stcg(g + blockIdx.x * 1024 + i, (i * 33 + 1) & 1023);
  __threadfence();
  cl.sync();
  if (threadIdx.x == 0) {
    unsigned* peer = cl.map_shared_rank(sm, (rank + 1) % n);
    unsigned v = 0;
    long long t0 = clock64();
    for (int i = 0; i < 64; ++i) v = *(volatile unsigned*)(peer + v);
    long long t1 = clock64();
    out[blockIdx.x * 4 + 0] = (t1 - t0) / 64;
    out[blockIdx.x * 4 + 3] = v;
  }
  __syncthreads();
  long long t2 = clock64();
  for (int i = 0; i < 16; ++i) cl.sync();
  long long t3 = clock64();
  if (threadIdx.x == 0) {
    out[blockIdx.x * 4 + 1] = (t3 - t2) / 16;
    const unsigned* other = g + ((blockIdx.x + 17) % gridDim.x) * 1024;
    unsigned v = 0;
    long long t4 = clock64();
    for (int i = 0; i < 64; ++i) v = __ldcg(other + v);
    long long t5 = clock64();
    out[blockIdx.x * 4 + 2] = (t5 - t4) / 64 + (v & 0);
  }
}

// Co-residency (session 21): every CTA counts itself on a global counter and
// waits (at most ~0.5 s of clock64) until all gridDim.x have: ok[0] counts the
// CTAs that saw every other one arrive, ok[1] the largest %smid + 1 seen. With
// grid CTAs in clusters of cs this shows whether grid / cs clusters of this
// shape are resident at once (what a split block as a cluster needs: 8 of 16
// at 64 rows, 32 of 4 at 256, 64 of 2 at 512).
__global__ void __launch_bounds__(kThreads, 1) resident(unsigned* ctr, unsigned* ok) {
  extern __shared__ unsigned sm[];
  if (threadIdx.x == 0) {
    sm[0] = 0;
    atomicAdd(ctr, 1u);
    const long long t0 = clock64();
    bool all = false;
    while (clock64() - t0 < (1ll << 30)) {
      if (*(volatile unsigned*)ctr >= gridDim.x) {
        all = true;
        break;
      }
    }
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (all) atomicAdd(ok, 1u);
    atomicMax(ok + 1, smid + 1);
  }
}

// The shared gate's core as a cluster would run it (session 21): every CTA
// holds 8 rows x 256 bins; after a cluster barrier warp r (< 8) sums row r's
// bins over the cluster's cs CTAs, each lane 8 bins of every peer, all loads
// in flight: through DSMEM (t[0]) and, the same sums, from copies each CTA
// published in global memory (__ldcg, t[1]); cycles of lane 0, summed over
// the 8 warps (out[c * 4 + 0 / 1]; out[c * 4 + 2] a checksum).
__global__ void __launch_bounds__(kThreads, 1) gatesum(unsigned long long* out, unsigned* g) {
  extern __shared__ unsigned sm[];
  cg::cluster_group cl = cg::this_cluster();
  const unsigned n = cl.num_blocks(), c0 = blockIdx.x - cl.block_rank();
  for (int i = threadIdx.x; i < 8 * 256; i += blockDim.x) {
    sm[i] = (blockIdx.x * 7 + i) & 15;
    __stcg(g + blockIdx.x * 2048 + i, sm[i]);
  }
  __threadfence();
  cl.sync();
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (w < 8) {
    unsigned a[8] = {}, b[8] = {};
    const long long t0 = clock64();
    for (unsigned q = 0; q < n; ++q) {
      const unsigned* peer = cl.map_shared_rank(sm, q) + w * 256 + lane * 8;
      const uint4 x = *reinterpret_cast<const uint4*>(peer), y = *reinterpret_cast<const uint4*>(peer + 4);
      a[0] += x.x, a[1] += x.y, a[2] += x.z, a[3] += x.w, a[4] += y.x, a[5] += y.y, a[6] += y.z, a[7] += y.w;
    }
    unsigned s = 0;
    for (int j = 0; j < 8; ++j) s += a[j];
    s = __reduce_add_sync(0xffffffffu, s);
    const long long t1 = clock64();
    for (unsigned q = 0; q < n; ++q) {
      const unsigned* src = g + (c0 + q) * 2048 + w * 256 + lane * 8;
      const uint4 x = __ldcg(reinterpret_cast<const uint4*>(src)), y = __ldcg(reinterpret_cast<const uint4*>(src + 4));
      b[0] += x.x, b[1] += x.y, b[2] += x.z, b[3] += x.w, b[4] += y.x, b[5] += y.y, b[6] += y.z, b[7] += y.w;
    }
    unsigned u = 0;
    for (int j = 0; j < 8; ++j) u += b[j];
    u = __reduce_add_sync(0xffffffffu, u);
    const long long t2 = clock64();
    if (lane == 0) {
      atomicAdd(out + blockIdx.x * 4 + 0, static_cast<unsigned long long>(t1 - t0));
      atomicAdd(out + blockIdx.x * 4 + 1, static_cast<unsigned long long>(t2 - t1));
      atomicAdd(out + blockIdx.x * 4 + 2, static_cast<unsigned long long>(s == u ? 0 : 1));
    }
  }
  cl.sync();  // (no CTA leaves while a peer may still read its shared memory)
}

// 128 CTAs of the probe in clusters of cs (at: the attribute's storage).
cudaLaunchConfig_t cluster_config(int cs, cudaLaunchAttribute (&at)[1]) {
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = cs;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(128);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cfg;
}

// Runs kernel(out, g) on 128 CTAs in clusters of cs (out zeroed first) and
// returns out's 128 x 4 words; empty when the launch failed (reported). A
// failed run ends the probe.
template <class Kernel>
std::vector<unsigned long long> run_clusters(Kernel kernel, int cs, unsigned long long* out, unsigned* g,
                                             const char* what) {
  cudaLaunchAttribute at[1];
  const cudaLaunchConfig_t cfg = cluster_config(cs, at);
  std::vector<unsigned long long> h(128 * 4);
  if (cudaMemset(out, 0, h.size() * 8) != cudaSuccess) std::exit(1);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, out, g);
  if (e != cudaSuccess) {
    std::printf("%s: 128 CTAs in clusters of %d: launch failed: %s\n", what, cs, cudaGetErrorString(e));
    cudaGetLastError();
    return {};
  }
  const cudaError_t s = cudaDeviceSynchronize();
  if (s != cudaSuccess || cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::printf("%s: clusters of %d: %s\n", what, cs, cudaGetErrorString(s));
    std::exit(1);
  }
  return h;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("SMs %d, %d threads, %d KB shared memory per CTA\n", sms, kThreads, kSmem / 1024);
  for (int cs : {1, 2, 4, 8, 16}) {
    cudaLaunchAttribute at[1];
    const cudaLaunchConfig_t cfg = cluster_config(cs, at);
    int nc = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&nc, probe, &cfg);
    std::printf("cluster size %2d: max active clusters %d (%d CTAs)%s%s\n", cs, nc, nc * cs,
                e == cudaSuccess ? "" : " error: ", e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  CK(cudaFuncSetAttribute(resident, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(resident, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  {
    unsigned* rc = nullptr;
    CK(cudaMalloc(&rc, 4 * sizeof(unsigned)));
    for (int cs : {1, 2, 4, 8, 16}) {
      for (int grid : {128, 132}) {
        if (grid % cs) continue;
        cudaLaunchAttribute at[1];
        cudaLaunchConfig_t cfg = cluster_config(cs, at);
        cfg.gridDim = dim3(grid);
        int nc = 0;
        CK(cudaOccupancyMaxActiveClusters(&nc, resident, &cfg));
        CK(cudaMemset(rc, 0, 4 * sizeof(unsigned)));
        const cudaError_t e = cudaLaunchKernelEx(&cfg, resident, rc, rc + 2);
        if (e != cudaSuccess) {
          std::printf("resident: %d CTAs in clusters of %d: launch failed: %s\n", grid, cs, cudaGetErrorString(e));
          cudaGetLastError();
          continue;
        }
        const cudaError_t sy = cudaDeviceSynchronize();
        unsigned h[4] = {};
        CK(cudaMemcpy(h, rc, sizeof(h), cudaMemcpyDeviceToHost));
        std::printf("resident: %3d CTAs in %2d clusters of %2d (max active %d): %u of %u CTAs saw all arrive%s; "
                    "largest smid + 1 %u\n", grid, grid / cs, cs, nc, h[2], h[0], sy == cudaSuccess ? "" : " (error)",
                    h[3]);
      }
    }
    cudaFree(rc);
  }
  unsigned long long* out = nullptr;
  unsigned* g = nullptr;
  CK(cudaMalloc(&out, 128 * 4 * sizeof(unsigned long long)));
  CK(cudaMalloc(&g, 128 * 2048 * sizeof(unsigned)));
  CK(cudaFuncSetAttribute(gatesum, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(gatesum, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int cs : {2, 4, 8, 16}) {
    const auto h = run_clusters(gatesum, cs, out, g, "gatesum");
    if (h.empty()) continue;
    double a = 0, b = 0, bad = 0;
    for (int i = 0; i < 128; ++i) a += h[i * 4], b += h[i * 4 + 1], bad += h[i * 4 + 2];
    std::printf("gatesum: 128 CTAs in clusters of %2d, 8 warps x 256 bins summed over the cluster: DSMEM %.0f cycles, "
                "global (__ldcg) %.0f cycles per warp (mean); mismatches %.0f\n", cs, a / 128 / 8, b / 128 / 8, bad);
  }
  for (int cs : {8, 16}) {
    const auto h = run_clusters(probe, cs, out, g, "probe");
    if (h.empty()) continue;
    double a = 0, b = 0, c = 0;
    for (int i = 0; i < 128; ++i) a += h[i * 4], b += h[i * 4 + 1], c += h[i * 4 + 2];
    std::printf("cluster size %2d, 128 CTAs: peer shared-memory dependent load %.0f cycles, cluster barrier %.0f, "
                "dependent __ldcg of another CTA's lines %.0f (means over CTAs)\n", cs, a / 128, b / 128, c / 128);
  }
  return 0;
}
