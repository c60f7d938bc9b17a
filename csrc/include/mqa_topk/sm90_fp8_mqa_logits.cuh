// sm90_fp8_mqa_logits: dense FP8 MQA logits for the DeepSeek-V3.2 indexer on
// Hopper (sm_90a). Torch-free: kernel, schedule and a host launch helper.
//
//   logits[r, s] = scales[s] * sum_h weights[r, h] * relu(dot(q[r, h, :], k[s, :]))
//
// Design
// - Block = kBlockRows query rows x 32 heads = the wgmma N dimension (8 rows:
//   N = 256 by default; 4 rows: N = 128). Keys are the wgmma A operand: each
//   math warpgroup takes 64 keys of the tile. Eight rows per block halve the
//   key bytes streamed from L2 per FLOP against four (the four-row version was
//   L2-feed bound near 1.1 PFLOP/s even with no epilogue).
// - Persistent grid (one CTA per SM). All (block, tile) pairs of the call are
//   numbered in block order and every CTA takes an equal contiguous share, so
//   causal/ragged spans never leave the last wave half empty. Every CTA finds
//   its share with a block-wide scan of the per-block tile counts.
// - Warp specialisation: one producer warpgroup (one thread issues TMA) and four
//   math warpgroups. K tiles (32 KB) + key scales (1 KB) flow through a
//   kNumStages-deep mbarrier ring; Q (16 KB) + weights of the current block are
//   double-buffered so the next block's Q loads while the last tiles finish.
// - Epilogue per thread: 16 x kBlockRows accumulators = 2 keys x rows x 8 heads.
//   relu(x) as (x + |x|) (one FADD with an abs modifier instead of FMNMX; the 0.5
//   is folded into the key scale, exact since it is a power of two), weight FMAs,
//   then a reduce-scatter over the 4 lanes of a quad: each lane keeps a quarter
//   of the (row, key) sums. The masked logits go to a per-warpgroup shared
//   buffer and one TMA store writes the [rows x 64 keys] tile (coalesced,
//   asynchronous; scattered 4-byte stores cost more than the math).
// - The math warpgroups interleave: while one runs its epilogue the tensor
//   cores work on the others' MMAs.
// Output contract: inside [starts[r], ends[r]) the logit; in the rest of the
// block's computed span [min start rounded down to 16, max end) of its 4 rows
// the value -inf;
// everything else untouched. Rows with start == end are ignored for the span.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "ptx.cuh"
#include "range_check.cuh"
#include "tensor_map.h"

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

// kProbe is for measuring only (never used by the ops): 1 skips the epilogue
// arithmetic, 2 skips the MMAs; 0 is the real kernel.
// kInlineProducer (experimental, measured through the dev probes only): no
// producer warpgroup; thread 0 of the first math warpgroup issues the TMA loads
// a few tiles ahead, so three math warpgroups fit the 168-register budget of
// 384 threads.
template <int kBlockRows_, int kMathWarpgroups_, int kNumStages_, int kProbe_ = 0, bool kInlineProducer_ = false>
struct Sm90LogitsConfig {
  static constexpr bool kInlineProducer = kInlineProducer_;
  static constexpr int kBlockRows = kBlockRows_;
  static constexpr int kMathWarpgroups = kMathWarpgroups_;
  static constexpr int kNumStages = kNumStages_;
  static constexpr int kProbe = kProbe_;
  static constexpr int kHeads = 32;
  static constexpr int kHeadDim = 128;
  static constexpr int kN = kBlockRows * kHeads;  // wgmma N
  static constexpr int kAcc = kN / 2;              // fp32 accumulators per thread
  static constexpr int kBlockKeys = 64 * kMathWarpgroups;
  static constexpr int kThreads = 128 * (kMathWarpgroups + (kInlineProducer ? 0 : 1));
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  static constexpr int kKTileBytes = kBlockKeys * kHeadDim;
  static constexpr int kQTileBytes = kN * kHeadDim;
  static constexpr int kScaleBytes = kBlockKeys * 4;
  static constexpr int kWeightBytes = kBlockRows * kHeads * 4;
  static constexpr int kOutBytes = kBlockRows * 64 * 4;  // one warpgroup's output tile
  static constexpr int kOffK = 0;
  static constexpr int kOffQ = kOffK + kNumStages * kKTileBytes;
  static constexpr int kOffOut = kOffQ + 2 * kQTileBytes;
  static constexpr int kOffScales = kOffOut + 2 * kMathWarpgroups * kOutBytes;
  static constexpr int kOffWeights = kOffScales + kNumStages * kScaleBytes;
  static constexpr int kOffBars = kOffWeights + 2 * kWeightBytes;
  static constexpr int kNumBars = 2 * kNumStages + 4;
  static constexpr int kSmemBytes = kOffBars + kNumBars * 8 + 1024;  // + alignment slack
  static_assert(kBlockRows == 4 || kBlockRows == 8, "wgmma N = 128 or 256");
  static_assert(kKTileBytes % 1024 == 0 && kQTileBytes % 1024 == 0, "swizzle atoms need 1 KB alignment");
  static_assert(kBlockKeys <= 256 && kN <= 256, "one TMA box per tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
};

// The key span [lo, hi) of row block b over its non-empty rows, lo rounded down
// to a multiple of 16; returns its 256-key tile count (0 when every row is empty). Ranges are clamped to [0, keys] so the
// kernel never addresses outside the tensors even for unchecked input
// (range_check.cuh; the epilogue masks compare keys of these tiles only, and
// the TMA store clips columns past `keys`, so they mask the clamped range).
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

// Moves b to the next row block that has tiles; returns its tile count. Only
// called while the share has tiles left, so such a block exists.
template <int kBlockRows, int kBlockKeys>
__device__ __forceinline__ int next_block(const Sm90LogitsParams& p, int& b, int& lo, int& hi) {
  int nt;
  do {
    ++b;
    nt = block_span<kBlockRows, kBlockKeys>(p, b, lo, hi);
  } while (nt == 0);
  return nt;
}

// The CTA's share of the work: `count` tiles starting at tile t0 of block b0.
struct WorkShare {
  int b0;
  int t0;
  long long count;
};

template <class Cfg>
__device__ __forceinline__ WorkShare find_work_share(const Sm90LogitsParams& p) {
  __shared__ long long s_warp[Cfg::kThreads / 32];
  __shared__ int s_start[2];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int nblocks = (p.rows + Cfg::kBlockRows - 1) / Cfg::kBlockRows;
  const int per = (nblocks + Cfg::kThreads - 1) / Cfg::kThreads;
  const int b_beg = min(tid * per, nblocks), b_end = min(b_beg + per, nblocks);
  long long mine = 0;
  for (int b = b_beg; b < b_end; ++b) {
    int lo, hi;
    mine += block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
  }
  long long incl = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const long long v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) s_warp[warp] = incl;
  if (tid == 0) s_start[0] = s_start[1] = 0;
  __syncthreads();
  long long warp_prefix = 0, total = 0;
#pragma unroll 1
  for (int w = 0; w < Cfg::kThreads / 32; ++w) {
    if (w < warp) warp_prefix += s_warp[w];
    total += s_warp[w];
  }
  const long long excl = warp_prefix + incl - mine;
  const long long g0 = total * blockIdx.x / gridDim.x;
  const long long g1 = total * (blockIdx.x + 1) / gridDim.x;
  if (mine > 0 && excl <= g0 && g0 < excl + mine) {
    long long acc = excl;
    for (int b = b_beg; b < b_end; ++b) {
      int lo, hi;
      const int n = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
      if (g0 < acc + n) {
        s_start[0] = b;
        s_start[1] = static_cast<int>(g0 - acc);
        break;
      }
      acc += n;
    }
  }
  __syncthreads();
  return WorkShare{s_start[0], s_start[1], g1 - g0};
}

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

// One warpgroup's MMA chain for a tile: its 64 keys (A, K-major 128B
// swizzle) x the block's rows * heads (B), accumulated over the 128-dim head
// in 4 k32 steps; returns with the accumulators ready. kMma = false skips the
// MMAs (measuring only).
template <class Cfg, bool kMma = true>
__device__ __forceinline__ void logits_tile_mma(float (&acc)[Cfg::kAcc], const uint8_t* k_tile, const uint8_t* q_tile) {
  const uint64_t desc_a = ptx::make_desc_k128_sw128(k_tile);
  const uint64_t desc_b = ptx::make_desc_k128_sw128(q_tile);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 32; ++kk)
    if constexpr (kMma) ptx::wgmma_e4m3<Cfg::kN>(acc, desc_a + 2 * kk, desc_b + 2 * kk, kk);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::fence_regs(acc);
}

// logits_tile_mma with the descriptors' low words given (the start address
// field, in 16-byte units, plus the leading byte offset): the high word of a
// K-major 128-byte-swizzle descriptor is the constant below, and the k32 steps
// advance the start address by 32 bytes, so the per-tile work is 32-bit adds
// of warp-uniform values instead of 64-bit descriptor arithmetic (used by the
// v2 logits kernel and the fused kernel's kLeanMma variant).
// logits_tile_mma_issue_lo issues and commits the chain without waiting (the
// ping-pong variant waits later).
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

template <class Cfg>
__device__ __forceinline__ void logits_tile_mma_lo(float (&acc)[Cfg::kAcc], uint32_t a_lo, uint32_t b_lo) {
  logits_tile_mma_issue_lo<Cfg>(acc, a_lo, b_lo);
  ptx::wgmma_wait<0>();
  ptx::fence_regs(acc);
}

// The low word of the K-major 128-byte-swizzle descriptor of a shared-memory tile.
__device__ __forceinline__ uint32_t desc_lo_k128_sw128(const void* tile) {
  return ((ptx::smem_addr(tile) & 0x3FFFFu) >> 4) | (1u << 16);
}

// The key scales of this lane's two keys (key, key + 8 of the stage's scale
// row), halved (relu as x + |x|), and the warp's release of the stage.
// Read the scales BEFORE the tile's MMAs are issued (tile_scales), release the
// stage after them (release_stage): the empty barrier's arrival does not wait
// for a shared-memory load still in flight, and under load (spills, other
// warps' memory traffic) a scale read issued just before the release was
// served after the producer had refilled the stage: the next fill's scale,
// wrong logits for that lane's keys (session 8, 2026-12-02: the fused v3
// kernel's weight-copy and asynchronous-select variants lost 1-3 keys in up
// to 1693 of 8192 rows; with the scales read before the MMAs, 0; BENCHMARKS.md).
__device__ __forceinline__ void tile_scales(const uint8_t* scales_smem, int key, float& scale0, float& scale1) {
  const float* sc = reinterpret_cast<const float*>(scales_smem);
  scale0 = 0.5f * sc[key];
  scale1 = 0.5f * sc[key + 8];
}
__device__ __forceinline__ void release_stage(uint64_t* empty_bar, int lane) {
  __syncwarp();
  if (lane == 0) ptx::mbar_arrive(empty_bar);
}

// The per-element arithmetic of the logits epilogue, shared by the dense and the
// fused kernels so both produce bitwise-identical logits: relu as (x + |x|)
// (the 0.5 lives in the key scale), 8 head-partials per (key half, row) with
// the weights, then a reduce-scatter over the 4 lanes of a quad. On return
// fin[h][i] is the (unscaled) logit of row 2 * quad + i (8-row blocks; rows
// hb * R/2 + lb * R/4 + i in general) and key key_local + 8 * h of the
// warpgroup's 64 keys.
template <class Cfg>
__device__ __forceinline__ void logits_epilogue_reduce(const float (&acc)[Cfg::kAcc], const uint8_t* weights_smem,
                                                       int quad, float (&fin)[2][Cfg::kBlockRows / 4]) {
  constexpr int R = Cfg::kBlockRows;
  constexpr int RQ = R / 4;
  const int hb = (quad >> 1) & 1, lb = quad & 1;
  const float2* w2 = reinterpret_cast<const float2*>(weights_smem);
  float part[2][R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const float2 w = w2[r * 16 + jj * 4 + quad];
      const int j = 4 * r + jj;
      s0 = fmaf(w.x, acc[4 * j + 0] + fabsf(acc[4 * j + 0]), s0);
      s0 = fmaf(w.y, acc[4 * j + 1] + fabsf(acc[4 * j + 1]), s0);
      s1 = fmaf(w.x, acc[4 * j + 2] + fabsf(acc[4 * j + 2]), s1);
      s1 = fmaf(w.y, acc[4 * j + 3] + fabsf(acc[4 * j + 3]), s1);
    }
    part[0][r] = s0;
    part[1][r] = s1;
  }
  // Lanes with bit 1 set keep the upper half of the rows, then bit 0 splits again.
  float half[2][R / 2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < R / 2; ++i) {
      const float send = hb ? part[h][i] : part[h][R / 2 + i];
      const float keep = hb ? part[h][R / 2 + i] : part[h][i];
      half[h][i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      const float send = lb ? half[h][i] : half[h][RQ + i];
      const float keep = lb ? half[h][RQ + i] : half[h][i];
      fin[h][i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
}

// The TMA issuer of the inline-producer variant: the same walk over the CTA's
// share as the consumers, run ahead by one thread. step() issues the next
// tile (and the block's Q + weights first when the block changes); with
// blocking = false it gives up instead of waiting for a free buffer.
template <class Cfg>
struct InlineTileProducer {
  int b, t, nt, lo, qi, it;
  long long left;
  bool need_q;

  __device__ __forceinline__ bool step(bool blocking, const Sm90LogitsParams& p, uint8_t* smem,
                                       const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                       const CUtensorMap* tm_scales, const CUtensorMap* tm_weights,
                                       uint64_t* full, uint64_t* empty, uint64_t* q_full, uint64_t* q_empty) {
    constexpr int S = Cfg::kNumStages;
    if (left <= 0) return false;
    if (need_q) {
      const int qb = qi & 1;
      const uint32_t parity = ((qi >> 1) & 1) ^ 1;
      if (blocking) ptx::mbar_wait(q_empty + qb, parity);
      else if (!ptx::mbar_test(q_empty + qb, parity)) return false;
      ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
      ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes, tm_q, q_full + qb, 0,
                       b * Cfg::kBlockRows * Cfg::kHeads);
      ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, tm_weights, q_full + qb, 0,
                       b * Cfg::kBlockRows);
      need_q = false;
    }
    const int stage = it % S;
    const uint32_t parity = ((it / S) & 1) ^ 1;
    if (blocking) ptx::mbar_wait(empty + stage, parity);
    else if (!ptx::mbar_test(empty + stage, parity)) return false;
    ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
    const int key0 = lo + t * Cfg::kBlockKeys;
    ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, tm_k, full + stage, 0, key0);
    ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, tm_scales, full + stage, key0, 0);
    ++it;
    if (--left > 0 && ++t == nt) {
      int hi;
      nt = next_block<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
      t = 0;
      ++qi;
      need_q = true;
    }
    return true;
  }
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fp8_mqa_logits_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_scales,
                               const __grid_constant__ CUtensorMap tm_weights,
                               const __grid_constant__ CUtensorMap tm_out, const Sm90LogitsParams p) {
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
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  // Range errors (range_check.cuh) are checked by threads with nothing else to
  // do: warps 1-3 of the producer warpgroup of every CTA (warp 0 holds the
  // TMA thread; every thread in the inline-producer variant, which has no idle
  // ones), so the check costs the pipeline nothing; find_work_share just read
  // the same values (L1 hits).
  constexpr int kCheckLo = Cfg::kInlineProducer ? 0 : Cfg::kMathThreads + 32;
  constexpr int kCheckers = Cfg::kInlineProducer ? Cfg::kThreads : 96;
  const int checker = range_checker_index(tid, kCheckLo, kCheckers);
  if (Cfg::kInlineProducer || share.count <= 0)
    check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
  if (share.count <= 0) return;  // uniform across the CTA

  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  __syncthreads();

  if (wg == Cfg::kMathWarpgroups) {
    // ---------------- producer: one thread issues every TMA ----------------
    if (tid != Cfg::kMathThreads) {
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
      return;
    }
    ptx::prefetch_tensor_map(&tm_q);
    ptx::prefetch_tensor_map(&tm_k);
    ptx::prefetch_tensor_map(&tm_scales);
    ptx::prefetch_tensor_map(&tm_weights);
    int b = share.b0, t = share.t0, lo, hi;
    int nt = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
    int it = 0, qi = 0;
    bool new_block = true;
    for (long long left = share.count; left > 0; --left) {
      if (new_block) {
        const int qb = qi & 1;
        ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
        ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
        ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes, &tm_q, q_full + qb, 0,
                         b * Cfg::kBlockRows * Cfg::kHeads);
        ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, &tm_weights, q_full + qb, 0,
                         b * Cfg::kBlockRows);
        new_block = false;
      }
      const int stage = it % S;
      ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
      ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
      const int key0 = lo + t * Cfg::kBlockKeys;
      ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, full + stage, 0, key0);
      ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, full + stage, key0, 0);
      ++it;
      if (++t == nt && left > 1) {
        nt = next_block<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
        t = 0;
        ++qi;
        new_block = true;
      }
    }
    return;
  }

  // ---------------- math warpgroups ----------------
  constexpr int R = Cfg::kBlockRows;
  constexpr int RQ = R / 4;  // rows per lane after the reduce-scatter
  const int lane = tid & 31;
  const int warp_in_wg = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int hb = (quad >> 1) & 1, lb = quad & 1;
  const int row_local0 = hb * (R / 2) + lb * RQ;  // this lane's first row after the reduce-scatter
  const int key_local = warp_in_wg * 16 + (lane >> 2);  // and +8, within the warpgroup's 64 keys
  const bool elected = (tid & 127) == 0;
  float* out_buf = reinterpret_cast<float*>(smem + Cfg::kOffOut + wg * 2 * Cfg::kOutBytes);

  int b = share.b0, t = share.t0, lo, hi;
  int nt = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
  int it = 0, qi = 0;
  bool new_block = true;
  int row_start[RQ], row_end[RQ];
  float acc[Cfg::kAcc];
  [[maybe_unused]] InlineTileProducer<Cfg> prod;
  if constexpr (Cfg::kInlineProducer) {
    if (tid == 0) {
      prod.b = share.b0;
      prod.t = share.t0;
      int hi_unused;
      prod.nt = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(p, prod.b, prod.lo, hi_unused);
      prod.qi = 0;
      prod.it = 0;
      prod.left = share.count;
      prod.need_q = true;
    }
  }

  for (long long left = share.count; left > 0; --left) {
    if constexpr (Cfg::kInlineProducer) {
      if (tid == 0) {
        // Tile `it` must be issued before anyone waits for it (blocking); then
        // run ahead as far as free buffers allow (never blocking).
        while (prod.it <= it && prod.step(true, p, smem, &tm_q, &tm_k, &tm_scales, &tm_weights, full, empty,
                                           q_full, q_empty)) {
        }
        for (int n = 0; n < S && prod.it < it + S &&
                        prod.step(false, p, smem, &tm_q, &tm_k, &tm_scales, &tm_weights, full, empty, q_full,
                                  q_empty);
             ++n) {
        }
      }
    }
    const int qb = qi & 1;
    if (new_block) {
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const int row = b * R + row_local0 + i;
        row_start[i] = row < p.rows ? __ldg(p.starts + row) : 0;
        row_end[i] = row < p.rows ? __ldg(p.ends + row) : 0;
      }
      ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
      new_block = false;
    }
    const int stage = it % S;
    ptx::mbar_wait(full + stage, (it / S) & 1);

    const uint8_t* k_tile = smem + Cfg::kOffK + stage * Cfg::kKTileBytes + wg * 64 * Cfg::kHeadDim;
    const uint8_t* q_tile = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
    float scale0, scale1;
    tile_scales(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, wg * 64 + key_local, scale0, scale1);
    logits_tile_mma<Cfg, Cfg::kProbe != 2>(acc, k_tile, q_tile);
    release_stage(empty + stage, lane);

    // Epilogue: 8 head-partials per (key half, row), then a reduce-scatter over the quad.
    float fin[2][RQ];
    if constexpr (Cfg::kProbe == 1) {
#pragma unroll
      for (int i = 0; i < RQ; ++i) fin[0][i] = acc[i], fin[1][i] = acc[Cfg::kAcc - 1 - i];
    } else {
      logits_epilogue_reduce<Cfg>(acc, smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, quad, fin);
    }

    const bool last_of_block = (t + 1 == nt);
    if (last_of_block) {
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    }

    // Masked logits -> this warpgroup's shared output tile -> one TMA store.
    const int key_wg0 = lo + t * Cfg::kBlockKeys + wg * 64;
    const int ob = it & 1;
    float* obuf = out_buf + ob * (Cfg::kOutBytes / 4);
    if (elected) ptx::bulk_wait_group_read<1>();  // the store from this buffer two tiles ago has read it
    ptx::named_barrier_sync(1 + wg, 128);
    const float ninf = -__int_as_float(0x7f800000);
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      const int ka = key_wg0 + key_local, kb = ka + 8;
      obuf[(row_local0 + i) * 64 + key_local] = (ka >= row_start[i] && ka < row_end[i]) ? fin[0][i] * scale0 : ninf;
      obuf[(row_local0 + i) * 64 + key_local + 8] =
          (kb >= row_start[i] && kb < row_end[i]) ? fin[1][i] * scale1 : ninf;
    }
    ptx::fence_proxy_async();
    ptx::named_barrier_sync(1 + wg, 128);
    if (elected) {
      ptx::tma_store_2d(&tm_out, obuf, key_wg0, b * R);
      ptx::bulk_commit_group();
    }

    ++it;
    if (++t == nt && left > 1) {
      nt = next_block<Cfg::kBlockRows, Cfg::kBlockKeys>(p, b, lo, hi);
      t = 0;
      ++qi;
      new_block = true;
    }
  }
  if (elected) ptx::bulk_wait_group<0>();
}

// ---- host --------------------------------------------------------------------
using Sm90LogitsDefault = Sm90LogitsConfig<8, 2, 8>;

template <class Cfg = Sm90LogitsDefault>
inline const void* sm90_fp8_mqa_logits_kernel_ptr() {
  return reinterpret_cast<const void*>(&sm90_fp8_mqa_logits_kernel<Cfg>);
}

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
                            int key_box, int w_box_rows, int out_box_rows) {
  constexpr int kHeads = 32, kHeadDim = 128;
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

// Launches the kernel; q [rows, 32, 128] fp8, k [keys, 128] fp8, scales [keys]
// fp32, weights [rows, 32] fp32 (all contiguous, 16-byte aligned), logits with
// row pitch ld >= keys (elements, a multiple of 4; 16-byte aligned base).
// Returns cudaErrorInvalidValue when a tensor map cannot be encoded
// (*map_error = 1000 * map index (q, k, scales, weights, logits) + the driver's
// CUresult, 999 for a missing driver entry point). Bad row ranges are clamped
// and, with a non-null err.word, recorded there (range_check.cuh); with no keys
// only the check runs.
template <class Cfg = Sm90LogitsDefault>
inline cudaError_t launch_sm90_fp8_mqa_logits(const void* q, const void* k, const float* scales,
                                              const float* weights, const int* starts, const int* ends,
                                              float* logits, int64_t ld, int rows, int keys, int num_sms,
                                              cudaStream_t stream, int* map_error = nullptr,
                                              RangeErrorSink range_err = {}) {
  if (rows <= 0) return cudaSuccess;
  if (keys <= 0) return launch_row_range_check<kKernelLogits>(range_err, starts, ends, rows, 0, stream);
  CUtensorMap tm_q, tm_k, tm_s, tm_w, tm_o;
  if (const int e = make_logits_maps(tm_q, tm_k, tm_s, tm_w, tm_o, q, k, scales, weights, logits, ld, rows, keys,
                                     Cfg::kN, Cfg::kBlockKeys, Cfg::kBlockRows, Cfg::kBlockRows)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fp8_mqa_logits_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  Sm90LogitsParams p{starts, ends, logits, ld, rows, keys, range_err};
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, tm_o, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
