// sm90_fp8_mqa_logits: dense FP8 MQA logits for the DeepSeek-V3.2 indexer on
// Hopper (sm_90a): the kernel, its schedule, a host launcher, and the pieces
// of its main loop that the fused logits + top-k kernels share. Torch-free.
//
//   logits[r, s] = scales[s] * sum_h weights[r, h] * relu(dot(q[r, h, :], k[s, :]))
//
// with q [rows, 32 heads, 128] and k [keys, 128] in e4m3, fp32 accumulation.
//
// Design
// - Work unit: a block of 8 query rows (256 Q rows of 128 bytes = one 32 KB
//   Q tile) against 128-key K tiles. The block's key span is the union of
//   its rows' [start, end), its first key rounded down to 16 (block_span);
//   only the tiles covering it are computed.
// - Persistent grid, one CTA per SM. Every (block, tile) pair of the call is
//   numbered in block order and each CTA takes a contiguous share of equal
//   cost, a block counting as two extra tiles for its Q load and setup
//   (find_work_share), so causal / ragged spans leave no CTA idle at the
//   end and shares that cross many short blocks get fewer tiles.
// - 640 threads: four math warpgroups and one producer warpgroup; setmaxnreg
//   gives the math warps 112 registers and the producer 32. Warpgroup
//   wg = 2 rg + kg computes rows [4 rg, +4) x keys [64 kg, +64) of a tile:
//   one m64n128k32 wgmma chain (keys are the A operand, the row group's 128
//   Q rows the B operand), 64 fp32 accumulators per thread. Sixteen math
//   warps (four per scheduler) hide each other's epilogues; a block of eight
//   rows streams half the K bytes per FLOP that a four-row block would.
// - Producer warp (lane 0 issues the TMA loads): K tiles (16 KB) and key
//   scales (512 B) through an 8-stage mbarrier ring; Q and the block's
//   weights double-buffered per block. It computes each block's span and
//   rows' ranges and publishes them in a shared slot per Q buffer, so the
//   math warps run a tight per-block tile loop with no block bookkeeping.
//   Warps 1-3 of the producer warpgroup check the row ranges
//   (range_check.cuh) and exit.
// - Epilogue per thread and tile: two keys x one row, 8 heads each, from the
//   accumulators: relu(x) as x + |x| (the 0.5 folded into the key scale,
//   exact), the weight FMAs in a fixed order (logits_head_partials), then a
//   reduce-scatter over the 4 lanes of a quad, and a predicated st.global of
//   the masked logit (no shared output tile, no TMA store).
// - Q layout: blocks with at least kPermMinTiles tiles in the CTA's share load
//   Q permuted (two-row TMA boxes from the producer warp's lanes) so that the
//   reduce-scatter needs no select by quad (logits_reduce_perm); shorter
//   blocks load the tile in one box and reduce with selects
//   (logits_reduce_select): 128 small TMA requests per block would put the Q
//   load on the critical path of short blocks. Both trees add the same
//   values in the same order: the logits are bitwise equal either way.
// - The fused kernels (sm90_fused_blocks.cuh, sm90_fused_staged.cuh,
//   sm90_fused_hybrid.cuh) run the same MMA and epilogue arithmetic,
//   so their logits are bitwise the dense kernel's; the staged and hybrid
//   kernels run this producer and tile loop themselves, with an epilogue
//   hook (LogitsEpiNone).
// Output contract: for row r with [start, end) clamped to [0, keys], the logit
// inside it and -inf at the other keys of its block's computed tiles, only at
// columns < keys; nothing else is written.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "mqa_topk/common/ptx.cuh"
#include "mqa_topk/common/range_check.cuh"
#include "mqa_topk/common/tensor_map.h"

namespace mqa_topk {

struct Sm90LogitsParams {
  const int* starts;
  const int* ends;
  float* logits;
  int64_t ld;  // row pitch of logits, elements
  int rows;
  int keys;
  RangeErrorSink err;  // bad rows are recorded here (null: not recorded)
};

// The kernel's shape and shared-memory layout, by heads (32 or 64; 16-head
// calls run as 32 with zero heads, csrc/launch_common.h). The MMA always
// covers 32 heads of 4 rows (wgmma N = 128): with 64 heads a tile takes two
// passes over the heads' halves ("head passes"), each lane's head partials
// carried from the first into the second, so a row block stays 8 rows and a
// K tile feeds twice the FLOPs. The Q buffer holds one 32 KB sub-tile per
// pass (rows x 32 heads, laid out as the 32-head tile).
template <int kHeads_>
struct Sm90LogitsConfigH {
  static constexpr int kHeads = kHeads_;
  static_assert(kHeads == 32 || kHeads == 64, "heads: 32 or 64");
  static constexpr int kHeadDim = 128;
  static constexpr int kPassHeads = 32;                   // heads of one MMA pass
  static constexpr int kHeadPasses = kHeads / kPassHeads;
  static constexpr int kBlockRows = 8;                    // query rows per block
  static constexpr int kMathWarpgroups = 4;               // 2 row groups x 2 key groups
  static constexpr int kWgRows = 4;                       // rows of one warpgroup's MMA (its row group)
  static constexpr int kN = kWgRows * kPassHeads;         // wgmma N
  static constexpr int kAcc = kN / 2;                     // fp32 accumulators per thread
  static constexpr int kBlockKeys = 128;                  // keys per tile, 64 per key group
  static constexpr int kKSliceKeys = kBlockKeys;          // keys of the K and scale maps' box
  // Rows of the Q map's box: the whole tile (32 heads), one row's 32 heads of a pass (64).
  static constexpr int kQBoxRows = kHeadPasses == 1 ? kBlockRows * kHeads : kPassHeads;
  // K / scale ring depth: a 64-head tile has twice the MMA work, so fewer
  // stages cover the same time (and the larger Q buffers need the room).
  static constexpr int kNumStages = kHeadPasses == 1 ? 8 : 5;
  static constexpr int kThreads = 128 * (kMathWarpgroups + 1);
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  static constexpr int kMathRegs = 112;                   // setmaxnreg of the math warpgroups
  static constexpr int kProducerRegs = 32;                // and of the producer warpgroup
  static constexpr int kKTileBytes = kBlockKeys * kHeadDim;
  static constexpr int kQPassBytes = kBlockRows * kPassHeads * kHeadDim;  // one pass's sub-tile
  static constexpr int kQTileBytes = kHeadPasses * kQPassBytes;
  static constexpr int kScaleBytes = kBlockKeys * 4;
  static constexpr int kWeightBytes = kBlockRows * kHeads * 4;
  static constexpr int kOffK = 0;
  static constexpr int kOffQ = kOffK + kNumStages * kKTileBytes;
  static constexpr int kOffScales = kOffQ + 2 * kQTileBytes;
  static constexpr int kOffWeights = kOffScales + kNumStages * kScaleBytes;
  static constexpr int kOffBars = kOffWeights + 2 * kWeightBytes;
  static constexpr int kNumBars = 2 * kNumStages + 4;
  static constexpr int kSmemBytes = kOffBars + kNumBars * 8 + 1024;  // + alignment slack
  // The producer's per-Q-buffer slot: b, lo, t0, t1, last, permuted, -, -,
  // the rows' clamped starts [8, 16) and lengths [16, 24).
  static constexpr int kSlotInts = 24;
  // Blocks with at least this many tiles in a share load Q permuted.
  static constexpr int kPermMinTiles = 32;
  // What a block costs in the work shares beyond its tiles, in tiles.
  static constexpr int kBlockCost = 2;
  // The registers the CTA starts with (launch bounds: 64K / threads, a multiple of 8) must cover the split.
  static_assert(kMathRegs * kMathThreads + kProducerRegs * 128 <= ((65536 / kThreads) & ~7) * kThreads,
                "setmaxnreg split exceeds the CTA's registers");
  static_assert(kKTileBytes % 1024 == 0 && kQPassBytes % 1024 == 0, "swizzle atoms need 1 KB alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
};
using Sm90LogitsConfig = Sm90LogitsConfigH<32>;

// ---- work split ----------------------------------------------------------------

// The key span [lo, hi) of row block b over its non-empty rows, lo rounded
// down to a multiple of 16; returns its kBlockKeys-key tile count (0 when every
// row is empty). Ranges are clamped to [0, keys] so the kernels never address
// outside the tensors even for unchecked input (range_check.cuh).
template <int kBlockRows, int kBlockKeys>
__device__ __forceinline__ int block_span(const Sm90LogitsParams& p, int b, int& lo, int& hi) {
  lo = INT_MAX;
  hi = 0;
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const int r = b * kBlockRows + i;
    if (r < p.rows) {
      const int s = max(__ldg(p.starts + r), 0);
      const int e = min(__ldg(p.ends + r), p.keys);
      if (e > s) {
        lo = min(lo, s);
        hi = max(hi, e);
      }
    }
  }
  if (hi <= lo) return 0;
  // Tiles start on a 16-key boundary: a TMA box must start 16-byte aligned in
  // global memory, and the scales' box starts at the tile's first key.
  lo &= ~15;
  return (hi - lo + kBlockKeys - 1) / kBlockKeys;
}

// A CTA's share of the work: `count` tiles starting at tile t0 of block b0.
struct WorkShare {
  int b0;
  int t0;
  long long count;
};

// This CTA's share (every thread calls it: it synchronizes the CTA). The
// shares split the cost sum_b (tiles_b + C), C = Cfg::kBlockCost, evenly over
// the grid: a block scan of the per-block costs, then the thread whose blocks
// hold a share boundary maps it to a tile. A cost position G inside block b
// (acc <= G < acc + tiles_b + C, acc the cost before b) maps to tile
// max(0, G - acc - C) of b, i.e. to the global tile index tiles_before_b +
// that; the CTA takes the tiles [index(G0), index(G1)). The map is monotone
// with index(0) = 0 and index(total cost) = total tiles, so every tile goes
// to exactly one CTA (a CTA may get none).
template <class Cfg>
__device__ __forceinline__ WorkShare find_work_share(const Sm90LogitsParams& p) {
  constexpr long long C = Cfg::kBlockCost;
  __shared__ long long s_wc[Cfg::kThreads / 32], s_wt[Cfg::kThreads / 32];
  __shared__ long long s_idx[2];
  __shared__ int s_bt[2];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int nblocks = (p.rows + Cfg::kBlockRows - 1) / Cfg::kBlockRows;
  const int per = (nblocks + Cfg::kThreads - 1) / Cfg::kThreads;
  const int b_beg = min(tid * per, nblocks), b_end = min(b_beg + per, nblocks);
  long long mine_c = 0, mine_t = 0;
  for (int b = b_beg; b < b_end; ++b) {
    int lo, hi;
    const int n = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
    mine_t += n;
    mine_c += n > 0 ? n + C : 0;
  }
  long long inc_c = mine_c, inc_t = mine_t;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const long long vc = __shfl_up_sync(0xffffffffu, inc_c, d);
    const long long vt = __shfl_up_sync(0xffffffffu, inc_t, d);
    if (lane >= d) inc_c += vc, inc_t += vt;
  }
  if (lane == 31) s_wc[warp] = inc_c, s_wt[warp] = inc_t;
  __syncthreads();
  long long pre_c = 0, pre_t = 0, total_c = 0, total_t = 0;
#pragma unroll 1
  for (int w = 0; w < Cfg::kThreads / 32; ++w) {
    if (w < warp) pre_c += s_wc[w], pre_t += s_wt[w];
    total_c += s_wc[w];
    total_t += s_wt[w];
  }
  if (tid == 0) {
    s_bt[0] = s_bt[1] = 0;
    s_idx[0] = 0;
    s_idx[1] = total_t;  // index(total cost): the end of the last share
  }
  __syncthreads();
  const long long excl_c = pre_c + inc_c - mine_c, excl_t = pre_t + inc_t - mine_t;
  const long long G[2] = {total_c * blockIdx.x / gridDim.x, total_c * (blockIdx.x + 1) / gridDim.x};
#pragma unroll 1
  for (int e = 0; e < 2; ++e) {
    if (mine_c > 0 && excl_c <= G[e] && G[e] < excl_c + mine_c) {
      long long acc_c = excl_c, acc_t = excl_t;
      for (int b = b_beg; b < b_end; ++b) {
        int lo, hi;
        const int n = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
        const long long c = n > 0 ? n + C : 0;
        if (G[e] < acc_c + c) {
          const long long t = max(0LL, G[e] - acc_c - C);
          s_idx[e] = acc_t + t;
          if (e == 0) {
            s_bt[0] = b;
            s_bt[1] = static_cast<int>(t);
          }
          break;
        }
        acc_c += c;
        acc_t += n;
      }
    }
  }
  __syncthreads();
  return WorkShare{s_bt[0], s_bt[1], s_idx[1] - s_idx[0]};
}

// ---- pipeline ------------------------------------------------------------------

// The pipeline's mbarriers (one thread): "full" ones complete on the
// producer's arrival plus the TMA bytes, "empty" ones when every consumer warp
// has arrived; S K/scales stages and 2 Q/weights buffers.
template <int S, int kConsumerWarps>
__device__ __forceinline__ void init_pipeline_barriers(uint64_t* full, uint64_t* empty, uint64_t* q_full,
                                                       uint64_t* q_empty) {
  for (int i = 0; i < S; ++i) {
    ptx::mbar_init(full + i, 1);
    ptx::mbar_init(empty + i, kConsumerWarps);
  }
  for (int i = 0; i < 2; ++i) {
    ptx::mbar_init(q_full + i, 1);
    ptx::mbar_init(q_empty + i, kConsumerWarps);
  }
  ptx::fence_barrier_init();
}

// One elected lane of the warp arrives on a barrier (elect.sync: no lane
// index kept live or rematerialized for it; it also converges the warp).
__device__ __forceinline__ void mbar_arrive_elect(uint64_t* bar) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
      "}\n" ::"r"(ptx::smem_addr(bar))
      : "memory");
}

// A warp-uniform int read from shared memory: every lane loads it, and the
// shuffle from lane 0 tells the compiler it is uniform (uniform registers).
__device__ __forceinline__ int lds_uniform(const volatile int* a) { return __shfl_sync(0xffffffffu, *a, 0); }

// ---- MMA -----------------------------------------------------------------------
// A tile's MMA: the warpgroup's 64 keys (A, K-major, 128-byte swizzle) x its
// row group's 128 Q rows (B, likewise), accumulated over the 128-dim head in
// 4 k32 steps. The high word of such a descriptor is a constant (kDescHi) and
// a k32 step advances the start address by 32 bytes, so the per-tile
// descriptor work is 32-bit adds of warp-uniform low words.

// The low word of the K-major 128-byte-swizzle descriptor of a shared-memory
// tile: its start address in 16-byte units, leading byte offset 1.
__device__ __forceinline__ uint32_t desc_lo_k128_sw128(const void* tile) {
  return ((ptx::smem_addr(tile) & 0x3FFFFu) >> 4) | (1u << 16);
}

// The MMA chain of a tile from the descriptors' low words: issued and
// committed, not waited for (the fused kernels wait later).
template <class Cfg>
__device__ __forceinline__ void logits_tile_mma_issue_lo(float (&acc)[Cfg::kAcc], uint32_t a_lo, uint32_t b_lo) {
  constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);  // stride byte offset 1024 B; 128-byte swizzle
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 32; ++kk) {
    uint64_t da, db;
    asm("mov.b64 %0, {%1, %2};" : "=l"(da) : "r"(a_lo + 2 * kk), "r"(kDescHi));
    asm("mov.b64 %0, {%1, %2};" : "=l"(db) : "r"(b_lo + 2 * kk), "r"(kDescHi));
    ptx::wgmma_e4m3<Cfg::kN>(acc, da, db, kk);
  }
  ptx::wgmma_commit();
  ptx::fence_regs(acc);
}

// New low words (start addresses alo + 2 kk) into four held descriptors; the
// high words are kept.
__device__ __forceinline__ void desc_pairs_set_lo(uint64_t (&d)[4], uint32_t alo) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t dhi;
    asm("{\n.reg .b32 lo;\nmov.b64 {lo, %0}, %1;\n}" : "=r"(dhi) : "l"(d[kk]));
    asm("mov.b64 %0, {%1, %2};" : "=l"(d[kk]) : "r"(alo + 2 * kk), "r"(dhi));
  }
}

// A tile's MMA chain (m64n128, 4 k32 steps) from held 64-bit descriptors, not waited for.
__device__ __forceinline__ void logits_mma_issue_dab(float (&acc)[64], const uint64_t (&da)[4], const uint64_t (&db)[4]) {
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) ptx::wgmma_e4m3<128>(acc, da[kk], db[kk], kk);
  ptx::wgmma_commit();
  ptx::fence_regs(acc);
}

// ---- epilogue arithmetic ---------------------------------------------------------
// After the MMA a lane of quad q (lane & 3) holds, for each of its two keys
// (key_local and key_local + 8 of the warpgroup's 64) and each of the row
// group's 4 rows ("slot" r), heads 8 jj + 2 q and 8 jj + 2 q + 1, jj = 0..3:
// accumulators 16 r + 4 jj + {0, 1} (first key) and + {2, 3} (second key).
// Its weights: w[r][jj] = weights[row r][8 jj + 2 q, +1].

// The key scales of this lane's two keys (key, key + 8 of the stage's scale
// row), halved (relu as x + |x|). Read them BEFORE the tile's MMAs are issued
// and release the stage after them: an mbarrier arrival does not wait for a
// shared-memory load still in flight, so a scale read issued just before the
// release could be served after the producer refilled the stage (the next
// tile's scale). (The dense tile loop reads them after its MMAs instead and
// releases the stage only after the stores that use them.)
__device__ __forceinline__ void tile_scales(const uint8_t* scales_smem, int key, float& scale0, float& scale1) {
  const float* sc = reinterpret_cast<const float*>(scales_smem);
  scale0 = 0.5f * sc[key];
  scale1 = 0.5f * sc[key + 8];
}

// The 8 head-partials of each (key h, slot r) of a lane: relu as (x + |x|)
// and the weight FMAs in the fixed order every kernel shares. kCarry: the
// chains continue from part (a 64-head tile's second pass: its heads follow
// the first pass's in every chain).
template <bool kCarry = false>
__device__ __forceinline__ void logits_head_partials(const float (&acc)[64], const float2 (&w)[4][4],
                                                     float (&part)[2][4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    float s0 = kCarry ? part[0][r] : 0.f, s1 = kCarry ? part[1][r] : 0.f;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int j = 4 * r + jj;
      s0 = fmaf(w[r][jj].x, acc[4 * j + 0] + fabsf(acc[4 * j + 0]), s0);
      s0 = fmaf(w[r][jj].y, acc[4 * j + 1] + fabsf(acc[4 * j + 1]), s0);
      s1 = fmaf(w[r][jj].x, acc[4 * j + 2] + fabsf(acc[4 * j + 2]), s1);
      s1 = fmaf(w[r][jj].y, acc[4 * j + 3] + fabsf(acc[4 * j + 3]), s1);
    }
    part[0][r] = s0;
    part[1][r] = s1;
  }
}

// The reduce-scatter over the quad with slot r = row r: lanes with quad bit 1
// keep rows 2-3 and send rows 0-1 to the xor-2 partner (and the other way
// round), then bit 0 splits again. fin[h][0]: the (unscaled) logit of row
// `quad` of the row group, key h.
__device__ __forceinline__ void logits_reduce_select_part(const float (&part)[2][4], int quad, float (&fin)[2][1]) {
  const int hb = (quad >> 1) & 1, lb = quad & 1;
  float half[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float send = hb ? part[h][i] : part[h][2 + i];
      const float keep = hb ? part[h][2 + i] : part[h][i];
      half[h][i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float send = lb ? half[h][0] : half[h][1];
    const float keep = lb ? half[h][1] : half[h][0];
    fin[h][0] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
  }
}
__device__ __forceinline__ void logits_reduce_select(const float (&acc)[64], const float2 (&w)[4][4], int quad,
                                                     float (&fin)[2][1]) {
  float part[2][4];
  logits_head_partials(acc, w, part);
  logits_reduce_select_part(part, quad, fin);
}

// The same reduction with Q permuted (slot s of this lane, accumulators
// 16 s .. 16 s + 15 and weights w[s], holds row s ^ quad): the partial sums
// are the same FMA chains, and the butterfly forms the same sums in the same
// order without selecting by quad: after the xor-2 step slot 0 holds
// (v_q + v_q^2) of row q and slot 1 that of row q ^ 1, which the xor-1
// partner (whose slot 1 is row q) adds. fin[h][0]: this lane's row, quad.
__device__ __forceinline__ void logits_reduce_perm_part(const float (&part)[2][4], float (&fin)[2][1]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float h0 = part[h][0] + __shfl_xor_sync(0xffffffffu, part[h][2], 2);
    const float h1 = part[h][1] + __shfl_xor_sync(0xffffffffu, part[h][3], 2);
    fin[h][0] = h0 + __shfl_xor_sync(0xffffffffu, h1, 1);
  }
}
__device__ __forceinline__ void logits_reduce_perm(const float (&acc)[64], const float2 (&w)[4][4],
                                                   float (&fin)[2][1]) {
  float part[2][4];
  logits_head_partials(acc, w, part);
  logits_reduce_perm_part(part, fin);
}

// A lane's weights of one head pass (heads 32 kPass + 8 jj + 2 quad, +1 of
// slot r), read from the block's weight buffer: ra[r], the shared address of
// slot r's row plus 8 quad bytes; the pass and jj are immediate offsets.
template <int kPass>
__device__ __forceinline__ void logits_pass_weights(const uint32_t (&ra)[4], float2 (&w)[4][4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
    asm volatile(
        "ld.shared.v2.f32 {%0, %1}, [%8+%9];\n\tld.shared.v2.f32 {%2, %3}, [%8+%10];\n\t"
        "ld.shared.v2.f32 {%4, %5}, [%8+%11];\n\tld.shared.v2.f32 {%6, %7}, [%8+%12];"
        : "=f"(w[r][0].x), "=f"(w[r][0].y), "=f"(w[r][1].x), "=f"(w[r][1].y), "=f"(w[r][2].x), "=f"(w[r][2].y),
          "=f"(w[r][3].x), "=f"(w[r][3].y)
        : "r"(ra[r]), "n"(kPass * 128), "n"(kPass * 128 + 32), "n"(kPass * 128 + 64), "n"(kPass * 128 + 96));
}

// ---- producer ------------------------------------------------------------------

// One row block's span, computed by a warp: lane i < 8 reads row 8 b + i,
// clamped to [0, keys] (block_span's arithmetic, so the tile counts match the
// work shares'); returns the tile count (0: every row empty) and lo, both
// warp-uniform; lane i < 8 gets its row's clamped start and length (0 for
// rows past the last or empty ones).
__device__ __forceinline__ int slot_block_span(const Sm90LogitsParams& p, int b, int lane, int& lo, int& s,
                                                int& len) {
  int sr = 0, er = 0;
  const int r = b * 8 + (lane & 7);
  if (lane < 8 && r < p.rows) {
    sr = __ldg(p.starts + r);
    er = __ldg(p.ends + r);
    clamp_row_range(sr, er, p.keys);  // (range_check.cuh: er - sr cannot overflow for any int32 pair)
  }
  s = sr;
  len = er - sr;
  int mn = er > sr ? sr : INT_MAX, mx = er > sr ? er : 0;
#pragma unroll
  for (int d = 1; d < 8; d <<= 1) {
    mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, d));
    mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  }
  mn = __shfl_sync(0xffffffffu, mn, 0);
  mx = __shfl_sync(0xffffffffu, mx, 0);
  if (mx <= mn) return 0;
  lo = mn & ~15;
  return (mx - lo + 127) / 128;
}

// The producer: warp 0 of the producer warpgroup (all 32 lanes; lane 0 waits
// on and arrives at the barriers and issues the K loads) walks the CTA's
// share. For each block it publishes {b, lo, first tile, end tile, last,
// permuted} and its rows' clamped starts and lengths in the Q buffer's slot
// (written by lane 0 before its arrival on the buffer's q_full, which
// releases them to the math warps' wait), loads Q and the weights, then the
// block's K tiles and scales into the ring. tm_q2: the Q map with two-row
// boxes (the permuted load).
template <class Cfg>
__device__ __forceinline__ void logits_producer(const Sm90LogitsParams& p, uint8_t* smem,
                                                         const WorkShare& share, uint64_t* full, uint64_t* empty,
                                                         uint64_t* q_full, uint64_t* q_empty, int (*slot)[Cfg::kSlotInts],
                                                         const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                                         const CUtensorMap* tm_scales, const CUtensorMap* tm_weights,
                                                         const CUtensorMap* tm_q2) {
  constexpr int S = Cfg::kNumStages;
  const int lane = threadIdx.x & 31;
  if (lane == 0) {
    ptx::prefetch_tensor_map(tm_q);
    ptx::prefetch_tensor_map(tm_k);
    ptx::prefetch_tensor_map(tm_scales);
    ptx::prefetch_tensor_map(tm_weights);
    ptx::prefetch_tensor_map(tm_q2);
  }
  // One block's Q buffer: wait for it, publish the slot, issue Q and weights (the whole warp).
  auto load_q = [&](int qi, int b, int lo, int t, int n_here, bool last, bool perm, int s, int len) {
    const int qb = qi & 1;
    int* sl = slot[qb];
    if (lane == 0) ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
    __syncwarp();
#pragma unroll 1
    for (int i = 0; i < 8; ++i) {  // lane 0 writes the whole slot (its arrival releases it)
      const int si = __shfl_sync(0xffffffffu, s, i), li = __shfl_sync(0xffffffffu, len, i);
      if (lane == 0) {
        sl[8 + i] = si;
        sl[16 + i] = li;
      }
    }
    if (lane == 0) {
      sl[0] = b;
      sl[1] = lo;
      sl[2] = t;
      sl[3] = t + n_here;
      sl[4] = last;
      sl[5] = perm;
      ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
      ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, tm_weights, q_full + qb, 0, b * 8);
      if constexpr (Cfg::kHeadPasses == 1)
        if (!perm) ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes, tm_q, q_full + qb, 0, b * 8 * 32);
    }
    // 64 heads, not permuted: row r's heads [32 ps, +32) (one box) to pass
    // ps's sub-tile, row r; 16 boxes, one per lane (after lane 0's expect-tx).
    if constexpr (Cfg::kHeadPasses > 1) {
      __syncwarp();
      if (!perm && lane < 8 * Cfg::kHeadPasses) {
        const int r = lane & 7, ps = lane >> 3;
        ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes + ps * Cfg::kQPassBytes + r * 32 * 128, tm_q,
                         q_full + qb, 0, (b * 8 + r) * Cfg::kHeads + 32 * ps);
      }
    }
    __syncwarp();
    if (perm) {
      // Shared row n = 128 g + 32 s + 8 jj + 2 q + e of row group g (of pass
      // ps's sub-tile) holds Q row (4 g + (s ^ q), head 32 ps + 8 jj + 2 q +
      // e): 128 two-row boxes per pass, 4 per lane.
      uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
#pragma unroll
      for (int ps = 0; ps < Cfg::kHeadPasses; ++ps)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = 2 * (lane + 32 * i);
          const int sg = (n >> 5) & 3, q = (n >> 1) & 3;
          if constexpr (Cfg::kHeadPasses == 1) {
            const int src = (n & 128) + 32 * (sg ^ q) + (n & 31);
            ptx::tma_load_2d(qdst + n * 128, tm_q2, q_full + qb, 0, b * 8 * 32 + src);
          } else {
            const int row = b * 8 + 4 * (n >> 7) + (sg ^ q);
            ptx::tma_load_2d(qdst + ps * Cfg::kQPassBytes + n * 128, tm_q2, q_full + qb, 0,
                             row * Cfg::kHeads + 32 * ps + (n & 31));
          }
        }
    }
    __syncwarp();
  };
  int b = share.b0, t = share.t0, lo = 0, s = 0, len = 0;
  int nt = slot_block_span(p, b, lane, lo, s, len);
  long long left = share.count;
  uint32_t st = 0, ph = 0;
  int n_here = static_cast<int>(min(static_cast<long long>(nt - t), left));
  load_q(0, b, lo, t, n_here, left == n_here, n_here >= Cfg::kPermMinTiles, s, len);
  for (int qi = 0;; ++qi) {
    left -= n_here;
    const bool has_next = left > 0;
    // The next block (found before this one's K loads: ptxas keeps the loop spill-free this way).
    int nb = b, nlo = lo, ns = 0, nlen = 0, nn = 0;
    if (has_next) {
      int nnt;
      do {
        ++nb;
        nnt = slot_block_span(p, nb, lane, nlo, ns, nlen);
      } while (nnt == 0);
      nn = static_cast<int>(min(static_cast<long long>(nnt), left));
    }
#pragma unroll 1
    for (int i = 0; i < n_here; ++i) {
      if (lane == 0) {
        ptx::mbar_wait(empty + st, ph ^ 1);
        ptx::mbar_arrive_expect_tx(full + st, Cfg::kKTileBytes + Cfg::kScaleBytes);
        const int key0 = lo + (t + i) * Cfg::kBlockKeys;
        ptx::tma_load_2d(smem + Cfg::kOffK + st * Cfg::kKTileBytes, tm_k, full + st, 0, key0);
        ptx::tma_load_2d(smem + Cfg::kOffScales + st * Cfg::kScaleBytes, tm_scales, full + st, key0, 0);
      }
      if (++st == S) {
        st = 0;
        ph ^= 1;
      }
      __syncwarp();
    }
    if (!has_next) break;
    load_q(qi + 1, nb, nlo, 0, nn, left == nn, nn >= Cfg::kPermMinTiles, ns, nlen);
    b = nb, lo = nlo, t = 0, s = ns, len = nlen, n_here = nn;
  }
}

// ---- math warpgroups -----------------------------------------------------------

// A tile epilogue's extra use of each lane's two logits (none: the dense
// kernel). row(rr) is called once per block with this lane's row of the block;
// its result, once per tile after the logits are formed, with their key
// relative to the row's clamped start (d; the second key is d + 8) and the
// row's clamped length (keys with d < len are the row's), and once after the
// block's last tile by every math thread: block_end(b, lo, t0, t1, slot), the
// block, its first key and the tiles [t0, t1) just done, the block's slot
// (its rows' clamped starts at [8, 16), lengths at [16, 24); valid until the
// Q buffer's release, which follows).
struct LogitsEpiNone {
  struct Row {
    __device__ __forceinline__ void operator()(int, uint32_t, float, float) {}
    __device__ __forceinline__ void block_end(int, int, int, int, const volatile int*) {}
  };
  __device__ __forceinline__ Row row(int) const { return {}; }
};

// The math warpgroups' loop: per block (from the producer's slot) a tight
// tile loop: wait for the stage, issue the MMA from held descriptors (only
// the A low words change per tile), read the scales, reduce, store the masked
// logits, release the stage. wg: the warpgroup, 2 rg + kg.
template <class Cfg, class Epi = LogitsEpiNone>
__device__ __forceinline__ void logits_math(const Sm90LogitsParams& p, uint8_t* smem, uint64_t* full,
                                                     uint64_t* empty, uint64_t* q_full, uint64_t* q_empty, int wg,
                                                     const int (*slot)[Cfg::kSlotInts], const Epi& epi = Epi{}) {
  constexpr int S = Cfg::kNumStages;
  constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);  // stride byte offset 1024 B; 128-byte swizzle
  const int tid = threadIdx.x;
  // The warpgroup through a shuffle from lane 0: the compiler then knows it
  // is warp-uniform and keeps what derives from it in uniform registers.
  const int wg_u = __shfl_sync(0xffffffffu, wg, 0);
  const int rg = wg_u >> 1, kg = wg_u & 1;
  const int lane = tid & 31;
  const int quad = lane & 3;
  const int key_off = kg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);  // this lane's key (and +8) in the tile
  const uint32_t a_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffK + kg * 64 * Cfg::kHeadDim);
  const uint32_t b_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffQ + rg * Cfg::kN * Cfg::kHeadDim);
  uint32_t sc_addr = ptx::smem_addr(smem + Cfg::kOffScales) + key_off * 4;
  const float ninf = -__int_as_float(0x7f800000);
  uint64_t da[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) asm("mov.b64 %0, {%1, %2};" : "=l"(da[kk]) : "r"(a_lo0 + 2 * kk), "r"(kDescHi));
  uint32_t st = 0, ph = 0;
  for (int qi = 0;; ++qi) {
    const int qb = qi & 1;
    ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
    const volatile int* sl = slot[qb];
    const int b = lds_uniform(sl), lo = lds_uniform(sl + 1), t0 = lds_uniform(sl + 2);
    const int t1 = lds_uniform(sl + 3), last = lds_uniform(sl + 4);
    const int rr = rg * 4 + quad;  // this lane's row of the block after the reduce-scatter
    const int rs = sl[8 + rr];
    uint32_t len = static_cast<uint32_t>(sl[16 + rr]);
    const int row = b * 8 + rr;
    auto ep = epi.row(rr);
    // Keys relative to the row's (clamped) start: d = key - rs. Stores only
    // where key < keys (limd = keys - rs), none for rows past the last.
    int limd = row < p.rows ? p.keys - rs : INT_MIN;
    float* rb = p.logits + static_cast<int64_t>(row < p.rows ? row : 0) * p.ld + rs;
    const float2* w2 = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + rg * 64;
    uint64_t db[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      asm("mov.b64 %0, {%1, %2};" : "=l"(db[kk]) : "r"(b_lo0 + qb * (Cfg::kQTileBytes >> 4) + 2 * kk), "r"(kDescHi));
    int d = lo + t0 * Cfg::kBlockKeys + key_off - rs;
    // The block's tiles with two head passes (64 heads): the weights are read
    // per pass from the block's buffer (both passes' would not fit in
    // registers beside the accumulators), the partials carried from the first
    // pass's chains into the second's.
    auto tiles_passes = [&](auto perm_tag) {
      constexpr bool kPerm = decltype(perm_tag)::value;
      uint32_t ra[4];  // slot r's weight row (row r ^ quad when permuted), + 8 quad bytes
#pragma unroll
      for (int r = 0; r < 4; ++r)
        ra[r] = ptx::smem_addr(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) +
                ((rg * 4 + (kPerm ? r ^ quad : r)) * Cfg::kHeads + 2 * quad) * 4;
#pragma unroll 1
      for (int n = t1 - t0; n > 0; --n) {
        ptx::mbar_wait(full + st, ph);
        desc_pairs_set_lo(da, a_lo0 + st * (Cfg::kKTileBytes >> 4));  // the A descriptors: this stage
        float acc[64];
        logits_mma_issue_dab(acc, da, db);
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(da[0]), "+l"(da[1]), "+l"(da[2]), "+l"(da[3]));
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(db[0]), "+l"(db[1]), "+l"(db[2]), "+l"(db[3]));
        asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;" : "+r"(sc_addr), "+r"(len), "+r"(limd));
        asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;\n\tmov.b32 %3, %3;"
                     : "+r"(ra[0]), "+r"(ra[1]), "+r"(ra[2]), "+r"(ra[3]));
        asm volatile("mov.b64 %0, %0;" : "+l"(rb));
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
        float part[2][4];
        {
          float2 w[4][4];
          logits_pass_weights<0>(ra, w);
          logits_head_partials(acc, w, part);
        }
        uint64_t db1[4];  // the second pass's Q sub-tile
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) db1[kk] = db[kk] + (Cfg::kQPassBytes >> 4);
        logits_mma_issue_dab(acc, da, db1);
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
        {
          float2 w[4][4];
          logits_pass_weights<1>(ra, w);
          logits_head_partials<true>(acc, w, part);
        }
        float sc0, sc1;
        asm volatile("ld.shared.f32 %0, [%2];\n\tld.shared.f32 %1, [%2+32];"
                     : "=f"(sc0), "=f"(sc1)
                     : "r"(sc_addr + st * Cfg::kScaleBytes));
        sc0 *= 0.5f;
        sc1 *= 0.5f;
        float fin[2][1];
        if constexpr (kPerm)
          logits_reduce_perm_part(part, fin);
        else
          logits_reduce_select_part(part, quad, fin);
        const float v0 = static_cast<uint32_t>(d) < len ? fin[0][0] * sc0 : ninf;
        const float v1 = static_cast<uint32_t>(d + 8) < len ? fin[1][0] * sc1 : ninf;
        float* const o = rb + d;
        asm volatile("{\n.reg .pred p0, p1;\nsetp.lt.s32 p0, %2, %4;\nsetp.lt.s32 p1, %3, %4;\n"
                     "@p0 st.global.f32 [%5], %0;\n@p1 st.global.f32 [%5+32], %1;\n}"
                     ::"f"(v0), "f"(v1), "r"(d), "r"(d + 8), "r"(limd), "l"(o)
                     : "memory");
        ep(d, len, v0, v1);
        mbar_arrive_elect(empty + st);
        if (++st == S) {
          st = 0;
          ph ^= 1;
        }
        d += Cfg::kBlockKeys;
      }
    };
    // The block's tiles; kPerm: Q permuted (slot r of this lane holds row r ^ quad).
    auto tiles = [&](auto perm_tag) {
      constexpr bool kPerm = decltype(perm_tag)::value;
      float2 w[4][4];  // the block's weights of this lane's heads, per slot
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) w[r][jj] = w2[(kPerm ? r ^ quad : r) * 16 + jj * 4 + quad];
#pragma unroll 1
      for (int n = t1 - t0; n > 0; --n) {
        ptx::mbar_wait(full + st, ph);
        desc_pairs_set_lo(da, a_lo0 + st * (Cfg::kKTileBytes >> 4));  // the A descriptors: this stage
        float acc[64];
        logits_mma_issue_dab(acc, da, db);
        // Opaque moves: the values are held across the tile (ptxas would
        // otherwise rematerialize them from S2R / the slot inside the loop).
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(da[0]), "+l"(da[1]), "+l"(da[2]), "+l"(da[3]));
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(db[0]), "+l"(db[1]), "+l"(db[2]), "+l"(db[3]));
        asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;" : "+r"(sc_addr), "+r"(len), "+r"(limd));
        asm volatile("mov.b64 %0, %0;" : "+l"(rb));
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
        // The scales after the MMAs (two more registers across them would
        // spill); the stage is released after the stores that use them (a
        // store issues only once its value, hence the scale, has arrived).
        float sc0, sc1;
        asm volatile("ld.shared.f32 %0, [%2];\n\tld.shared.f32 %1, [%2+32];"
                     : "=f"(sc0), "=f"(sc1)
                     : "r"(sc_addr + st * Cfg::kScaleBytes));
        sc0 *= 0.5f;
        sc1 *= 0.5f;
        float fin[2][1];
#ifdef MQA_TOPK_LOGITS_MMA_ONLY
        // (dev/logits_bound.py: the loop without the epilogue's arithmetic, a
        // bound on what the MMA feed alone allows; wrong logits)
        fin[0][0] = acc[0];
        fin[1][0] = acc[1];
#else
        if constexpr (kPerm)
          logits_reduce_perm(acc, w, fin);
        else
          logits_reduce_select(acc, w, quad, fin);
#endif
        // Masked (branch-free): the row's keys are 0 <= d < len.
        const float v0 = static_cast<uint32_t>(d) < len ? fin[0][0] * sc0 : ninf;
        const float v1 = static_cast<uint32_t>(d + 8) < len ? fin[1][0] * sc1 : ninf;
        float* const o = rb + d;
        asm volatile("{\n.reg .pred p0, p1;\nsetp.lt.s32 p0, %2, %4;\nsetp.lt.s32 p1, %3, %4;\n"
                     "@p0 st.global.f32 [%5], %0;\n@p1 st.global.f32 [%5+32], %1;\n}"
                     ::"f"(v0), "f"(v1), "r"(d), "r"(d + 8), "r"(limd), "l"(o)
                     : "memory");
        ep(d, len, v0, v1);
        mbar_arrive_elect(empty + st);
        if (++st == S) {
          st = 0;
          ph ^= 1;
        }
        d += Cfg::kBlockKeys;
      }
    };
    if constexpr (Cfg::kHeadPasses == 1) {
      if (lds_uniform(sl + 5))
        tiles(std::true_type{});
      else
        tiles(std::false_type{});
    } else {
      if (lds_uniform(sl + 5))
        tiles_passes(std::true_type{});
      else
        tiles_passes(std::false_type{});
    }
    ep.block_end(b, lo, t0, t1, sl);
    mbar_arrive_elect(q_empty + qb);  // the block's last MMA has read its Q buffer
    if (last) break;
  }
}

// ---- kernel --------------------------------------------------------------------
// A template on the configuration (always Sm90LogitsConfig) only so that the
// translation units that include this header for its helpers do not compile
// it: logits.cu instantiates it.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fp8_mqa_logits_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_scales,
                               const __grid_constant__ CUtensorMap tm_weights,
                               const __grid_constant__ CUtensorMap tm_q2, const Sm90LogitsParams p) {
  constexpr int S = Cfg::kNumStages;
  extern __shared__ uint8_t smem_raw[];
  // Offset the __shared__ array itself (not an integer address) so the compiler
  // keeps the shared address space: LDS/STS instead of generic LD/ST.
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* full = bars;
  uint64_t* empty = bars + S;
  uint64_t* q_full = bars + 2 * S;
  uint64_t* q_empty = bars + 2 * S + 2;

  const WorkShare share = find_work_share<Cfg>(p);
  __shared__ int slot[2][Cfg::kSlotInts];  // the block in each Q buffer (logits_producer)
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  // Range errors (range_check.cuh) are checked by threads with nothing else to
  // do: warps 1-3 of the producer warpgroup of every CTA (before the exit in
  // a CTA without work), so the check costs the pipeline nothing.
  constexpr int kCheckLo = Cfg::kMathThreads + 32;
  constexpr int kCheckers = 96;
  const int checker = range_checker_index(tid, kCheckLo, kCheckers);
  if (share.count <= 0) {  // uniform across the CTA
    check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
    return;
  }

  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  __syncthreads();

  if (wg == Cfg::kMathWarpgroups) {  // the producer warpgroup
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid >= Cfg::kMathThreads + 32) {  // warps 1-3 check the row ranges
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
      return;
    }
    logits_producer<Cfg>(p, smem, share, full, empty, q_full, q_empty, slot, &tm_q, &tm_k, &tm_scales,
                                  &tm_weights, &tm_q2);
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  logits_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, slot);
}

// ---- host ----------------------------------------------------------------------

// The five tensor maps of the logits kernels (q, k, scales, weights, logits),
// with the boxes of a configuration: q_box_rows rows of q (block rows x heads),
// key_box keys of k and of the scales, weights of w_box_rows rows, and output
// tiles of 64 keys x out_box_rows rows. Scales are a [1, keys] 2-D map so a box
// past the last key reads zeros (the outer stride is never used; it only has to
// be a multiple of 16). The output map's width is `keys`: a tile's columns past
// it are clipped. Returns first_map_error's code (0: every map encoded).
inline int make_logits_maps(CUtensorMap& tm_q, CUtensorMap& tm_k, CUtensorMap& tm_s, CUtensorMap& tm_w,
                            CUtensorMap& tm_o, const void* q, const void* k, const float* scales,
                            const float* weights, float* logits, int64_t ld, int rows, int keys, int q_box_rows,
                            int key_box, int w_box_rows, int out_box_rows, int kHeads = 32) {
  constexpr int kHeadDim = 128;
  const uint64_t q_rows = static_cast<uint64_t>(rows) * kHeads;
  const int res[5] = {
      make_tensor_map_2d(&tm_q, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, kHeadDim, q_rows, kHeadDim, kHeadDim, q_box_rows,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_k, k, CU_TENSOR_MAP_DATA_TYPE_UINT8, kHeadDim, keys, kHeadDim, kHeadDim, key_box,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_s, scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, keys, 1, (uint64_t(keys) * 4 + 15) / 16 * 16,
                         key_box, 1, CU_TENSOR_MAP_SWIZZLE_NONE),
      make_tensor_map_2d(&tm_w, weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, kHeads, rows, kHeads * 4, kHeads,
                         w_box_rows, CU_TENSOR_MAP_SWIZZLE_NONE),
      make_tensor_map_2d(&tm_o, logits, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, keys, rows, uint64_t(ld) * 4, 64,
                         out_box_rows, CU_TENSOR_MAP_SWIZZLE_NONE)};
  return first_map_error(res, 5);
}

// The maps of a kernel that runs the logits tile loop (the dense kernel, the
// staged kernel and the hybrid's staged part): make_logits_maps with Cfg's
// boxes, the logits map only validated (the loop stores directly), and in its
// place tm_q2, the two-row-box Q map of the permuted Q load. Returns
// first_map_error's code (a failure of tm_q2 reads as the q map's); 0: all
// encoded.
template <class Cfg>
inline int make_logits_loop_maps(CUtensorMap& tm_q, CUtensorMap& tm_k, CUtensorMap& tm_s, CUtensorMap& tm_w,
                                 CUtensorMap& tm_q2, const void* q, const void* k, const float* scales,
                                 const float* weights, float* logits, int64_t ld, int rows, int keys) {
  if (const int e = make_logits_maps(tm_q, tm_k, tm_s, tm_w, tm_q2, q, k, scales, weights, logits, ld, rows, keys,
                                     Cfg::kQBoxRows, Cfg::kKSliceKeys, Cfg::kBlockRows, Cfg::kWgRows, Cfg::kHeads))
    return e;
  const int res[1] = {make_tensor_map_2d(&tm_q2, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128,
                                         static_cast<uint64_t>(rows) * Cfg::kHeads, 128, 128, 2,
                                         CU_TENSOR_MAP_SWIZZLE_128B)};
  return first_map_error(res, 1);
}

// Launches the kernel; q [rows, 32, 128] fp8, k [keys, 128] fp8, scales [keys]
// fp32, weights [rows, 32] fp32 (all contiguous, 16-byte aligned), logits with
// row pitch ld >= keys (elements, a multiple of 4; 16-byte aligned base).
// Returns cudaErrorInvalidValue when a tensor map cannot be encoded
// (*map_error = 1000 * map index (q, k, scales, weights, logits) + the driver's
// CUresult, 999 for a missing driver entry point; the two-row-box Q map's
// failure is reported as the q map's). The kernel stores directly, so the
// logits map is only validated; its place carries the two-row-box Q map. Bad
// row ranges are clamped and, with a non-null err.word, recorded there
// (range_check.cuh); with no keys only the check runs.
template <class Cfg = Sm90LogitsConfig>
inline cudaError_t launch_sm90_fp8_mqa_logits(const void* q, const void* k, const float* scales,
                                              const float* weights, const int* starts, const int* ends,
                                              float* logits, int64_t ld, int rows, int keys, int num_sms,
                                              cudaStream_t stream, int* map_error = nullptr,
                                              RangeErrorSink range_err = {}) {
  if (rows <= 0) return cudaSuccess;
  if (keys <= 0) return launch_row_range_check<kKernelLogits>(range_err, starts, ends, rows, 0, stream);
  CUtensorMap tm_q, tm_k, tm_s, tm_w, tm_q2;
  if (const int e = make_logits_loop_maps<Cfg>(tm_q, tm_k, tm_s, tm_w, tm_q2, q, k, scales, weights, logits, ld,
                                               rows, keys)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fp8_mqa_logits_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  Sm90LogitsParams p{starts, ends, logits, ld, rows, keys, range_err};
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, tm_q2, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
