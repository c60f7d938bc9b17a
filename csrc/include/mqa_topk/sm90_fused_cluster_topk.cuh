// sm90_fused_cluster_topk: the fused MQA-logits + top-k for few row blocks
// (issue 12, session 22), one launch, on thread block clusters. Torch-free.
//
// Why a second design. The split kernels (sm90_fused_mqa_topk_v3.cuh, 86 /
// 87) cut a block's keys into pieces that each sample, agree on a shared
// gate, filter and merge through L2 counters and polling: at 64 rows their
// ~112 us are ~45 us of tile loops and ~65 us of cross-CTA phases (sample
// publication, gate, copy, final bins, a merge on one CTA per block), each a
// chain of round trips on cold code (docs/FUSED.md, session 20). Native dense
// takes 74 us there: 37 us of logits and 37 us of top-k.
//
// Design. With B = ceil(rows / 8) row blocks and B * m <= SMs, block b runs on
// cluster b of m CTAs (m = 16 at 64 rows, 4 at 256, 2 at 512). CTA j of the
// cluster computes tiles [nt j / m, nt (j + 1) / m) of the block's span with
// the dense logits kernel's own tile loop (sm90_fp8_mqa_logits_v2.cuh, the
// op's configuration: the same producer, the same math, bitwise the same
// logits) and stores them into a logits workspace; at these sizes that is at
// most rows x keys x 4 bytes (16 MB at 64 rows x 64K keys: L2-resident). Then
// the cluster selects each row's top-k exactly, with no further launch:
//   - radix select on the order-preserving key (bits 31..21, 20..10, 9..0):
//     each CTA histograms its own piece of each row in shared memory; the
//     owner CTA of a row sums the m histograms through distributed shared
//     memory (ld.shared::cluster), finds the digit holding the k-th and
//     writes the row's new state into every CTA of the cluster;
//     barrier.cluster orders the steps (no counters, fences or polling);
//   - after the first digit each CTA marks its definite winners in a bitmap
//     over its piece and stages the threshold class's (key, index) pairs in
//     shared memory (if they fit), so the later digits read shared memory,
//     not the workspace;
//   - the final class: all taken (its count equals what is still needed) or
//     one exact key whose lowest indices win (ties); per-CTA counts of
//     winners and ties are exchanged, and each CTA writes its own winners at
//     its prefix offset, in ascending index order within the CTA, and its
//     ties while their cluster-wide rank is below what is needed.
// Exact: (value desc, index asc), like the native top-k kernel; the output is
// a pure function of the logits (histograms are order-independent, bitmaps
// are set with atomicOr, positions come from ordered scans), so reruns are
// bitwise identical. Output as every top-k path: indices relative to the row's
// start, min(topk, n) of them, the rest -1.
//
// Why clusters and not the split protocol's global memory: a cluster barrier
// and a peer's shared memory are a few hundred cycles away and need no
// polling (tools/clusterprobe). Correctness does not need the clusters to be
// resident together (each cluster only waits for its own CTAs).
//
// Limits (fused_cluster_plan): B * 2 <= SMs; a piece at most kMaxPieceKeys
// keys (bitmaps of 32K bits per row); a cluster of m > 8 CTAs is non-portable
// (the launcher sets cudaFuncAttributeNonPortableClusterSizeAllowed and
// checks cudaOccupancyMaxActiveClusters).
#pragma once

#include "range_check.cuh"
#include "sm90_fp8_mqa_logits_v2.cuh"

namespace mqa_topk {

struct ClusterTopkParams {
  Sm90LogitsParams lg;  // starts, ends, the logits workspace (pitch ld), rows, keys, range errors
  int* out;             // [rows, topk] int32
  int topk;
  uint32_t* marks;      // (dev, kMarks) thread 0's globaltimer marks: 16 words per CTA
};

namespace cluster_topk {

constexpr int kRows = 8;             // rows per block (the logits kernel's)
constexpr int kMath = 512;           // math threads (four warpgroups): they run the select
constexpr int kGroup = kMath / kRows;  // threads per row in the per-row passes
constexpr int kMaxPieceKeys = 32768;  // keys of a CTA's piece (bitmap bits per row)
constexpr int kWords = kMaxPieceKeys / 32;
constexpr int kCap = 6144;  // staged (key, index) pairs per CTA
// Shared memory after the tile loops (the K ring and Q buffers are free then).
constexpr int kOffHist = 0;                        // u32 [8][2048]
constexpr int kOffBitsA = kOffHist + 8 * 2048 * 4;  // u32 [8][kWords]: winners
constexpr int kOffBitsB = kOffBitsA + 8 * kWords * 4;  // u32 [8][kWords]: ties at the exact k-th key
constexpr int kOffStageKey = kOffBitsB + 8 * kWords * 4;
constexpr int kOffStageIdx = kOffStageKey + kCap * 4;
constexpr int kOffCtl = kOffStageIdx + kCap * 4;
constexpr int kBarMath = 15;  // named barrier of the 512 math threads
constexpr int kBarRow0 = 7;   // named barriers 7..14: a row's 64 threads

// A row's selection state (identical in every CTA of the cluster after each
// cluster barrier): the class is the keys u with (u >> s) == P (s = 32: all),
// `need` of them still belong to the top-k.
enum Mode : int { kActive = 0, kTakeClass = 1, kTies = 2, kTakeAll = 3, kAbsent = 4, kFailed = 5 };
struct RowState {
  uint32_t P;
  int s;
  int need;
  int mode;
};
struct Ctl {
  RowState st[kRows];       // written by the row's owner into every CTA (DSMEM)
  int cnt[16][kRows][2];    // (winners, ties) per CTA rank and row, written by each CTA into every CTA
  uint32_t P0[kRows];       // the class after the first digit (s = 21): what is staged
  int staged[kRows];        // the row's class is staged in shared memory
  int soff[kRows];          // its staging region
  int sfill[kRows];         // staged so far
  int scap[kRows];          // its size (the CTA's count of the class)
  int marked[kRows];        // the row's winners are all marked (decided at the first digit)
  int scan[kMath / 32];     // block scan scratch
  int rscan[kRows][2][2];   // row-group scan scratch: [row][warp][A/B]
  int found[4];             // the owner's digit search: digit, need, class count, found
};
static_assert(kOffCtl + static_cast<int>(sizeof(Ctl)) <= 196608, "select state inside the K ring and Q buffers");

__device__ __forceinline__ uint32_t okey(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t msk = 0u - (u >> 31);
  return ((u ^ msk) - msk) ^ (~msk & 0x80000000u);
}
__device__ __forceinline__ uint32_t nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t clusterid_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
// The address of shared word `saddr` of cluster CTA `rank`.
__device__ __forceinline__ uint32_t mapa(uint32_t saddr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(saddr), "r"(rank));
  return r;
}
__device__ __forceinline__ uint4 ld_cluster_v4(uint32_t caddr) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(caddr)
               : "memory");
  return v;
}
__device__ __forceinline__ uint2 ld_cluster_v2(uint32_t caddr) {
  uint2 v;
  asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(caddr) : "memory");
  return v;
}
__device__ __forceinline__ void st_cluster_v4(uint32_t caddr, uint4 v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(caddr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void st_cluster_v2(uint32_t caddr, uint32_t a, uint32_t b) {
  asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};" ::"r"(caddr), "r"(a), "r"(b) : "memory");
}
__device__ __forceinline__ void bar_math() { asm volatile("bar.sync %0, %1;" ::"n"(kBarMath), "n"(kMath) : "memory"); }
__device__ __forceinline__ void bar_row(int r) {
  asm volatile("bar.sync %0, %1;" ::"r"(kBarRow0 + r), "n"(kGroup) : "memory");
}
// Every math thread of the cluster (the producer warpgroups have exited: exited
// threads do not hold a cluster barrier): release this CTA's shared-memory
// writes, acquire the peers'.
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// (dev) thread 0's global-timer mark `id` of this CTA (v3check timeline, variant 96).
__device__ __forceinline__ void mark(const ClusterTopkParams& P, int id) {
  if (P.marks != nullptr && threadIdx.x == 0) {
    uint32_t t;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
    P.marks[blockIdx.x * 16 + id] = t | 1u;
  }
}

// Whether key u is in the class (P, s).
__device__ __forceinline__ bool in_class(uint32_t u, uint32_t P, int s) { return s >= 32 || (u >> s) == P; }

// Adds the 4 keys of a float4 group to a row's histogram (bins of `bits` bits at
// shift sh) where valid and in the class; equal neighbouring bins are merged
// first (runs of equal values cost one atomic).
__device__ __forceinline__ void hist4(uint32_t* h, const uint32_t (&u)[4], uint32_t valid, uint32_t P, int s, int sh,
                                      uint32_t mask) {
  int run_bin = -1;
  uint32_t run = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const bool take = ((valid >> c) & 1) && in_class(u[c], P, s);
    const int bin = take ? static_cast<int>((u[c] >> sh) & mask) : -1;
    if (bin != run_bin) {
      if (run) atomicAdd(h + run_bin, run);
      run_bin = bin;
      run = 0;
    }
    if (take) ++run;
  }
  if (run) atomicAdd(h + run_bin, run);
}

// A row's keys [a, e) of the workspace row `rowp` in float4 groups (idx0: the
// group's first key), 64 threads (sub) striding, four groups in flight.
template <class Op>
__device__ __forceinline__ void for_each_group(const float* rowp, int a, int e, int sub, Op&& op) {
  if (a >= e) return;
  const int v0 = a >> 2, v1 = (e + 3) >> 2;
  const float4* p4 = reinterpret_cast<const float4*>(rowp);
  int v = v0 + sub;
  for (; v + 3 * kGroup < v1; v += 4 * kGroup) {
    float4 x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = __ldcg(p4 + v + i * kGroup);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = 4 * (v + i * kGroup);
      uint32_t valid = 0;
#pragma unroll
      for (int c = 0; c < 4; ++c) valid |= (k + c >= a && k + c < e) ? (1u << c) : 0u;
      const uint32_t u[4] = {okey(x[i].x), okey(x[i].y), okey(x[i].z), okey(x[i].w)};
      op(k, u, valid);
    }
  }
  for (; v < v1; v += kGroup) {
    const float4 x = __ldcg(p4 + v);
    const int k = 4 * v;
    uint32_t valid = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) valid |= (k + c >= a && k + c < e) ? (1u << c) : 0u;
    const uint32_t u[4] = {okey(x.x), okey(x.y), okey(x.z), okey(x.w)};
    op(k, u, valid);
  }
}

// The owner's step for row r at a digit of `bits` bits below shift s (the new
// shift s - bits): sums the cluster's m histograms of the row (DSMEM), finds
// the digit holding the need-th largest, and writes the new state into every
// CTA of the cluster. Every math thread calls it (block scans).
__device__ __forceinline__ void owner_step(uint8_t* smem, Ctl* ctl, int r, int m, int bits) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const RowState st = ctl->st[r];
  const int nb = 1 << bits, per = nb / kMath;  // 4 (2048 bins) or 2 (1024)
  uint32_t h[4] = {0, 0, 0, 0};
  const uint32_t base = ptx::smem_addr(smem + kOffHist) + (r * 2048 + tid * per) * 4;
  if (per == 4) {
#pragma unroll 4
    for (int j = 0; j < m; ++j) {
      const uint4 v = ld_cluster_v4(mapa(base, j));
      h[0] += v.x, h[1] += v.y, h[2] += v.z, h[3] += v.w;
    }
  } else {
#pragma unroll 4
    for (int j = 0; j < m; ++j) {
      const uint2 v = ld_cluster_v2(mapa(base, j));
      h[0] += v.x, h[1] += v.y;
    }
  }
  const uint32_t tsum = h[0] + h[1] + h[2] + h[3];
  // Keys in bins above this thread's: a suffix scan over the threads.
  uint32_t incl = tsum;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t v = __shfl_down_sync(0xffffffffu, incl, d);
    if (lane + d < 32) incl += v;
  }
  if (lane == 0) ctl->scan[warp] = static_cast<int>(incl);
  if (tid == 0) ctl->found[3] = 0;
  bar_math();
  uint32_t above = incl - tsum;
  for (int w = warp + 1; w < kMath / 32; ++w) above += static_cast<uint32_t>(ctl->scan[w]);
  const uint32_t need = static_cast<uint32_t>(st.need);
#pragma unroll
  for (int i = 3; i >= 0; --i) {
    if (i < per) {
      if (above < need && above + h[i] >= need) {
        ctl->found[0] = tid * per + i;
        ctl->found[1] = static_cast<int>(need - above);
        ctl->found[2] = static_cast<int>(h[i]);
        ctl->found[3] = 1;
      }
      above += h[i];
    }
  }
  bar_math();
  if (tid < m) {
    RowState ns;
    if (ctl->found[3]) {
      const int d = ctl->found[0];
      ns.s = st.s - bits;
      ns.P = st.s >= 32 ? static_cast<uint32_t>(d) : ((st.P << bits) | static_cast<uint32_t>(d));
      ns.need = ctl->found[1];
      ns.mode = ctl->found[2] == ns.need ? kTakeClass : ns.s == 0 ? kTies : kActive;
    } else {  // (inconsistent histograms: impossible for the kernel's own logits) the row is written as -1
      ns = RowState{0u, 0, 0, kFailed};
    }
    st_cluster_v4(mapa(ptx::smem_addr(&ctl->st[r]), tid), make_uint4(ns.P, static_cast<uint32_t>(ns.s),
                                                                   static_cast<uint32_t>(ns.need),
                                                                   static_cast<uint32_t>(ns.mode)));
  }
  bar_math();  // (ctl->scan / found are reused by the next row)
}

// The select, by the 512 math threads of every CTA of the cluster, after the
// tile loops stored the piece's logits: keys [k0, k1) of rows 8 b.. (see the
// file's comment).
__device__ __forceinline__ void cluster_select(const ClusterTopkParams& P, uint8_t* smem, int m, int rank, int b, int k0,
                                               int k1) {
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x;
  const int r_me = tid / kGroup, sub = tid % kGroup;
  Ctl* ctl = reinterpret_cast<Ctl*>(smem + kOffCtl);
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + kOffHist);
  uint32_t* bitsA = reinterpret_cast<uint32_t*>(smem + kOffBitsA);
  uint32_t* bitsB = reinterpret_cast<uint32_t*>(smem + kOffBitsB);
  uint32_t* skey = reinterpret_cast<uint32_t*>(smem + kOffStageKey);
  uint32_t* sidx = reinterpret_cast<uint32_t*>(smem + kOffStageIdx);
  const int topk = P.topk;
  // This thread's row (of its 64-thread group): clamped range, its part in the piece.
  const int row = b * kRows + r_me;
  int sr = 0, n = 0;
  if (row < p.rows) {
    sr = max(__ldg(p.starts + row), 0);
    const int er = min(__ldg(p.ends + row), p.keys);
    n = max(er - sr, 0);
  }
  const int a = max(sr, k0), e = min(sr + n, k1);
  const float* rowp = p.logits + static_cast<int64_t>(row < p.rows ? row : 0) * p.ld;
  uint32_t* hrow = hist + r_me * 2048;
  uint32_t* arow = bitsA + r_me * kWords;
  uint32_t* brow = bitsB + r_me * kWords;

  bar_math();  // every math warp's tile loop is done: the K ring and Q buffers are free, the logits stored
  mark(P, 1);
  if (sub == 0) {
    ctl->st[r_me] = RowState{0u, 32, topk, row >= p.rows ? kAbsent : n <= topk ? kTakeAll : kActive};
    ctl->staged[r_me] = 0;
    ctl->marked[r_me] = 0;
    ctl->sfill[r_me] = 0;
  }
  const int nw = (k1 - k0 + 31) >> 5;  // bitmap words of the piece
  for (int i = sub; i < nw; i += kGroup) arow[i] = 0, brow[i] = 0;
  for (int i = sub; i < 2048; i += kGroup) hrow[i] = 0;
  // Every CTA's state is written before any owner overwrites it (the cluster barrier below).
  bar_math();

  for (int L = 0; L < 3; ++L) {
    const RowState st = ctl->st[r_me];
    if (L > 0) {
      bool any = false;
#pragma unroll
      for (int r = 0; r < kRows; ++r) any |= ctl->st[r].mode == kActive;
      if (!any) break;
      for (int i = sub; i < 2048; i += kGroup) hrow[i] = 0;
      bar_row(r_me);
    }
    const int bits = L < 2 ? 11 : 10, sh = st.s - bits;
    const uint32_t mask = (1u << bits) - 1;
    if (st.mode == kActive) {
      if (L > 0 && ctl->staged[r_me]) {
        const int o = ctl->soff[r_me], c = min(ctl->sfill[r_me], ctl->scap[r_me]);
        for (int i = sub; i < c; i += kGroup) {
          const uint32_t u = skey[o + i];
          if (in_class(u, st.P, st.s)) atomicAdd(hrow + ((u >> sh) & mask), 1u);
        }
      } else {
        for_each_group(rowp, a, e, sub, [&](int, const uint32_t(&u)[4], uint32_t valid) {
          hist4(hrow, u, valid, st.P, st.s, sh, mask);
        });
      }
    }
    bar_math();
    mark(P, 2 + 3 * L);
    cluster_barrier();  // every CTA's histograms of this digit are complete
    mark(P, 3 + 3 * L);
    for (int r = rank; r < kRows; r += m)
      if (ctl->st[r].mode == kActive) owner_step(smem, ctl, r, m, bits);
    cluster_barrier();  // every row's new state is in every CTA; the histograms are no longer read
    mark(P, 4 + 3 * L);
    if (L == 0) {
      // Staging: the rows still active keep their class's pairs in shared memory where they fit.
      if (tid == 0) {
        int cum = 0;
        for (int r = 0; r < kRows; ++r) {
          const RowState s2 = ctl->st[r];
          ctl->P0[r] = s2.P;
          ctl->marked[r] = s2.mode == kTakeClass;
          ctl->staged[r] = 0;
          if (s2.mode == kActive) {
            const int c = static_cast<int>(hist[r * 2048 + (s2.P & 2047u)]);
            if (cum + c <= kCap) {
              ctl->staged[r] = 1;
              ctl->soff[r] = cum;
              ctl->scap[r] = c;
              cum += c;
            }
          }
        }
      }
      bar_math();
      const RowState s2 = ctl->st[r_me];
      if (s2.mode == kActive || s2.mode == kTakeClass) {
        // Winners above the class into A (and the class itself where it is all taken); the class staged.
        const uint64_t hiA = (static_cast<uint64_t>(s2.P) + 1) << s2.s;
        const bool take_class = s2.mode == kTakeClass, stage = ctl->staged[r_me] != 0;
        const int o = ctl->soff[r_me], cap = ctl->scap[r_me];
        int* fill = &ctl->sfill[r_me];
        for_each_group(rowp, a, e, sub, [&](int k, const uint32_t(&u)[4], uint32_t valid) {
          uint32_t wa = 0;
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            if (!((valid >> c) & 1)) continue;
            const bool cls = (u[c] >> s2.s) == s2.P;
            if (static_cast<uint64_t>(u[c]) >= hiA || (cls && take_class)) {
              wa |= 1u << c;
            } else if (cls && stage) {
              const int pos = atomicAdd(fill, 1);
              if (pos < cap) {  // (always: the CTA's class count is the region's size)
                skey[o + pos] = u[c];
                sidx[o + pos] = static_cast<uint32_t>(k + c - k0);
              }
            }
          }
          if (wa) {
            const int lk = k - k0;  // k0 and k are multiples of 4: one word holds the group
            atomicOr(arow + (lk >> 5), wa << (lk & 31));
          }
        });
      }
      bar_math();
      mark(P, 11);
    }
  }

  // The final marks of the rows decided after the first digit: the class of
  // the first digit (staged or from the workspace) against the final state.
  {
    const RowState st = ctl->st[r_me];
    if ((st.mode == kTakeClass || st.mode == kTies) && !ctl->marked[r_me]) {
      const uint64_t hiA = (static_cast<uint64_t>(st.P) + 1) << st.s;
      const uint32_t P0 = ctl->P0[r_me];
      auto mark = [&](uint32_t u, int lk) {
        if (static_cast<uint64_t>(u) >= hiA || (st.mode == kTakeClass && (u >> st.s) == st.P))
          atomicOr(arow + (lk >> 5), 1u << (lk & 31));
        else if ((u >> st.s) == st.P)
          atomicOr(brow + (lk >> 5), 1u << (lk & 31));
      };
      if (ctl->staged[r_me]) {
        const int o = ctl->soff[r_me], c = min(ctl->sfill[r_me], ctl->scap[r_me]);
        for (int i = sub; i < c; i += kGroup) mark(skey[o + i], static_cast<int>(sidx[o + i]));
      } else {
        for_each_group(rowp, a, e, sub, [&](int k, const uint32_t(&u)[4], uint32_t valid) {
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (((valid >> c) & 1) && (u[c] >> 21) == P0) mark(u[c], k + c - k0);
        });
      }
    }
  }
  bar_math();

  // Counts: this thread's words [w0, w1) of the row's bitmaps, a scan over the row's 64 threads.
  const RowState st = ctl->st[r_me];
  const int per = (nw + kGroup - 1) / kGroup;
  const int w0 = min(sub * per, nw), w1 = min(w0 + per, nw);
  int ca = 0, cb = 0;
  if (st.mode == kTakeClass || st.mode == kTies)
    for (int w = w0; w < w1; ++w) ca += __popc(arow[w]), cb += __popc(brow[w]);
  const int lane = tid & 31, wr = (tid >> 5) & 1;
  int ia = ca, ib = cb;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int va = __shfl_up_sync(0xffffffffu, ia, d), vb = __shfl_up_sync(0xffffffffu, ib, d);
    if (lane >= d) ia += va, ib += vb;
  }
  if (lane == 31) ctl->rscan[r_me][wr][0] = ia, ctl->rscan[r_me][wr][1] = ib;
  bar_row(r_me);
  const int pa = ia - ca + (wr ? ctl->rscan[r_me][0][0] : 0), pb = ib - cb + (wr ? ctl->rscan[r_me][0][1] : 0);
  int tot_a = ctl->rscan[r_me][0][0] + ctl->rscan[r_me][1][0], tot_b = ctl->rscan[r_me][0][1] + ctl->rscan[r_me][1][1];
  if (st.mode == kTakeAll) tot_a = max(e - a, 0), tot_b = 0;
  // Every CTA's counts into every CTA (thread j of the row group writes CTA j's copy).
  if (sub < m)
    st_cluster_v2(mapa(ptx::smem_addr(&ctl->cnt[rank][r_me][0]), sub), static_cast<uint32_t>(tot_a),
                  static_cast<uint32_t>(tot_b));
  bar_math();
  mark(P, 12);
  cluster_barrier();  // the counts are everywhere; after it no CTA reads another's shared memory
  mark(P, 13);

  int* orow = P.out + static_cast<int64_t>(row) * topk;
  if (st.mode == kAbsent) return;
  if (st.mode == kTakeAll) {  // every valid key: index k - sr at position k - sr; rank 0 pads
    for (int k = a + sub; k < e; k += kGroup) orow[k - sr] = k - sr;
    if (rank == 0)
      for (int i = n + sub; i < topk; i += kGroup) orow[i] = -1;
    return;
  }
  if (st.mode != kTakeClass && st.mode != kTies) {  // (kFailed: impossible for consistent logits)
    if (rank == 0)
      for (int i = sub; i < topk; i += kGroup) orow[i] = -1;
    return;
  }
  int all_a = 0, off_a = 0, off_b = 0;
  for (int j = 0; j < m; ++j) {
    const int cA = ctl->cnt[j][r_me][0], cB = ctl->cnt[j][r_me][1];
    all_a += cA;
    if (j < rank) off_a += cA, off_b += cB;
  }
  const int need_ties = st.mode == kTies ? topk - all_a : 0;
  int ia2 = off_a + pa, ib2 = off_b + pb;
  for (int w = w0; w < w1; ++w) {
    uint32_t x = arow[w];
    while (x) {
      const int bit = __ffs(x) - 1;
      x &= x - 1;
      if (ia2 < topk) orow[ia2] = k0 + w * 32 + bit - sr;
      ++ia2;
    }
    uint32_t y = brow[w];
    while (y && ib2 < need_ties) {
      const int bit = __ffs(y) - 1;
      y &= y - 1;
      if (all_a + ib2 < topk) orow[all_a + ib2] = k0 + w * 32 + bit - sr;
      ++ib2;
    }
  }
}

// The select's entry after the tile loops: the cluster, the block and the
// piece found again here (not in values held across the loops: a call
// boundary, so the tile loop keeps the dense kernel's registers).
__device__ __noinline__ void cluster_select_entry(const ClusterTopkParams P) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int lane = threadIdx.x & 31;
  const int m = static_cast<int>(nctarank()), rank = static_cast<int>(ptx::cluster_ctarank());
  const int b = static_cast<int>(clusterid_x());
  int lo = 0, s_l = 0, len_l = 0;
  const int nt = lean2_block_span(P.lg, b, lane, lo, s_l, len_l);
  const int t0 = static_cast<int>(static_cast<long long>(nt) * rank / m);
  const int t1 = static_cast<int>(static_cast<long long>(nt) * (rank + 1) / m);
  const int k0 = t1 > t0 ? min(lo + t0 * 128, P.lg.keys) : 0, k1 = t1 > t0 ? min(lo + t1 * 128, P.lg.keys) : 0;
  cluster_select(P, smem, m, rank, b, k0, k1);
  if (P.marks != nullptr) {
    bar_math();
    mark(P, 14);
  }
}

}  // namespace cluster_topk

// The kernel: grid = B * m CTAs in clusters of m (B = ceil(rows / 8)); cluster
// b computes and selects row block b. Cfg: the dense logits configuration
// whose tile loop it runs (kLean2: the op's).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fused_cluster_topk_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                   const __grid_constant__ CUtensorMap tm_scales,
                                   const __grid_constant__ CUtensorMap tm_weights,
                                   const __grid_constant__ CUtensorMap tm_q2, const ClusterTopkParams P) {
  static_assert(Cfg::kLean2 != 0 && Cfg::kMathThreads == cluster_topk::kMath && Cfg::kBlockRows == 8 &&
                    Cfg::kBlockKeys == 128,
                "the op's lean 8-row, four-warpgroup logits loop");
  constexpr int S = Cfg::kNumStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* full = bars;
  uint64_t* empty = bars + S;
  uint64_t* q_full = bars + 2 * S;
  uint64_t* q_empty = bars + 2 * S + 2;
  __shared__ int lean2_slot[2][Cfg::kSlotInts];
  const Sm90LogitsParams& p = P.lg;
  cluster_topk::mark(P, 15);
  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  const int m = static_cast<int>(cluster_topk::nctarank()), rank = static_cast<int>(ptx::cluster_ctarank());
  const int b = static_cast<int>(cluster_topk::clusterid_x());
  // The block's span (every warp: lean2_block_span is warp-collective) and this piece's tiles.
  int lo = 0, s_l = 0, len_l = 0;
  const int nt = lean2_block_span(p, b, lane, lo, s_l, len_l);
  const int t0 = static_cast<int>(static_cast<long long>(nt) * rank / m);
  const int t1 = static_cast<int>(static_cast<long long>(nt) * (rank + 1) / m);
  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  __syncthreads();
  if (wg == Cfg::kMathWarpgroups) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid >= Cfg::kMathThreads + 32) {  // warps 1-3 check the row ranges, then exit
      constexpr int kCheckers = 96;
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelFused,
                       range_checker_index(tid, Cfg::kMathThreads + 32, kCheckers), gridDim.x * kCheckers);
      return;
    }
    if (t1 > t0)
      logits_v2_lean2_producer<Cfg>(p, smem, WorkShare{b, t0, t1 - t0}, full, empty, q_full, q_empty, lean2_slot,
                                    &tm_q, &tm_k, &tm_scales, &tm_weights, &tm_q2);
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  if (t1 > t0) logits_v2_lean2_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, lean2_slot);
  cluster_topk::cluster_select_entry(P);
}

// The cluster size for rows x keys on num_sms SMs (0: this kernel does not
// apply): the largest m of 16, 8, 4, 2 with ceil(rows / 8) * m <= num_sms and
// pieces of at most kMaxPieceKeys keys (a block's span is at most keys + 15).
inline int fused_cluster_size(int rows, int keys, int num_sms) {
  const long long nb = (static_cast<long long>(rows) + 7) / 8;
  const long long nt = (static_cast<long long>(keys) + 15 + 127) / 128;
  if (rows <= 0) return 0;
  for (int m = 16; m >= 2; m /= 2)
    if (nb * m <= num_sms && (nt + m - 1) / m * 128 <= cluster_topk::kMaxPieceKeys) return m;
  return 0;
}

template <class Cfg = Sm90LogitsV2Default>
inline cudaLaunchConfig_t fused_cluster_config(int rows, int m, cudaStream_t stream, cudaLaunchAttribute (&attr)[1]) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = m;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>((rows + 7) / 8 * m));
  lc.blockDim = dim3(Cfg::kThreads);
  lc.dynamicSmemBytes = Cfg::kSmemBytes;
  lc.stream = stream;
  lc.attrs = attr;
  lc.numAttrs = 1;
  return lc;
}

// The kernel's attributes (shared memory; clusters above 8 CTAs), once per process.
template <class Cfg = Sm90LogitsV2Default>
inline cudaError_t fused_cluster_attributes() {
  static cudaError_t done = [] {
    auto kernel = &sm90_fused_cluster_topk_kernel<Cfg>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    return e;
  }();
  return done;
}

// The cluster size the launch will use for rows x keys on num_sms SMs: from
// fused_cluster_size down, the first whose clusters can all be resident at once
// (cudaOccupancyMaxActiveClusters >= blocks; 0: none, the caller takes
// another path). *max_active: that size's answer.
template <class Cfg = Sm90LogitsV2Default>
inline int fused_cluster_plan(int rows, int keys, int num_sms, int* max_active = nullptr) {
  if (fused_cluster_attributes<Cfg>() != cudaSuccess) return 0;
  const int nb = (rows + 7) / 8;
  for (int m = fused_cluster_size(rows, keys, num_sms); m >= 2; m /= 2) {
    if ((static_cast<long long>(keys) + 15 + 127) / 128 > static_cast<long long>(m) * (cluster_topk::kMaxPieceKeys / 128))
      return 0;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t lc = fused_cluster_config<Cfg>(rows, m, 0, attr);
    int mc = 0;
    if (cudaOccupancyMaxActiveClusters(&mc, &sm90_fused_cluster_topk_kernel<Cfg>, &lc) != cudaSuccess) {
      (void)cudaGetLastError();
      mc = 0;
    }
    if (max_active) *max_active = mc;
    if (mc >= nb) return m;
  }
  return 0;
}

// Launches the fused cluster kernel: q, k, scales, weights, starts, ends as the
// logits launcher; logits: the workspace [rows, ld] fp32 (ld >= keys, a
// multiple of 4, 16-byte aligned); out [rows, topk] int32; m from
// fused_cluster_plan. Returns cudaErrorInvalidValue for an unusable m or a
// tensor map that cannot be encoded (*map_error as the logits launcher's).
template <class Cfg = Sm90LogitsV2Default>
inline cudaError_t launch_sm90_fused_cluster_topk(const void* q, const void* k, const float* scales,
                                                  const float* weights, const int* starts, const int* ends,
                                                  float* logits, int64_t ld, int* out, int rows, int keys, int topk,
                                                  int m, cudaStream_t stream, int* map_error = nullptr,
                                                  RangeErrorSink range_err = {}, uint32_t* marks = nullptr) {
  if (rows <= 0) return cudaSuccess;
  if (m < 2 || m > 16 || (m & (m - 1)) || keys <= 0) return cudaErrorInvalidValue;
  if ((static_cast<long long>(keys) + 15 + 127) / 128 > static_cast<long long>(m) * (cluster_topk::kMaxPieceKeys / 128))
    return cudaErrorInvalidValue;
  CUtensorMap tm_q, tm_k, tm_s, tm_w, tm_o;
  if (const int e = make_logits_maps(tm_q, tm_k, tm_s, tm_w, tm_o, q, k, scales, weights, logits, ld, rows, keys,
                                     Cfg::kQBoxRows, Cfg::kKSliceKeys, Cfg::kBlockRows, Cfg::kWgRows)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  if constexpr (Cfg::kQPermLong) {  // the 2-row-box Q map (the permuted Q of pieces of >= 32 tiles)
    const int e = make_tensor_map_2d(&tm_o, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, static_cast<uint64_t>(rows) * 32, 128,
                                     128, 2, CU_TENSOR_MAP_SWIZZLE_128B);
    if (e) {
      const int res[1] = {e};
      if (map_error) *map_error = first_map_error(res, 1);
      return cudaErrorInvalidValue;
    }
  }
  cudaError_t err = fused_cluster_attributes<Cfg>();
  if (err != cudaSuccess) return err;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t lc = fused_cluster_config<Cfg>(rows, m, stream, attr);
  const ClusterTopkParams P{Sm90LogitsParams{starts, ends, logits, ld, rows, keys, range_err}, out, topk, marks};
  return cudaLaunchKernelEx(&lc, &sm90_fused_cluster_topk_kernel<Cfg>, tm_q, tm_k, tm_s, tm_w, tm_o, P);
}

}  // namespace mqa_topk
