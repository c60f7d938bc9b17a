// sm90_fp8_mqa_logits_v2: the dense logits op's kernel since 2026-12-02
// (issue 10; docs/LOGITS.md), and the configurable template its development
// variants come from. Torch-free.
//
// The op's configuration (Sm90LogitsV2Default): 8-row blocks (the K bytes per
// FLOP of the 8-row kernel) on FOUR math warpgroups at wgmma N = 128: warpgroup
// wg takes rows [4 * (wg / 2), +4) x keys [64 * (wg % 2), +64) of a 128-key
// tile, so each thread holds 64 accumulators and 16 math warps (4 per
// scheduler, as in DeepGEMM's kernel) hide the epilogue by occupancy;
// setmaxnreg 112 / 32; 8 K stages; the block's weights in registers; direct
// st.global stores. Since session 17 (kLean2): the producer warp computes each
// block's span and rows and publishes them in a slot per Q buffer, so the math
// warps run a per-block tile loop of 187-200 SASS instructions per tile (128 of
// them the epilogue's FADD / FFMA; the session-16 loop had 259): stage and
// phase counters, MMA descriptors held as 64-bit pairs, elected barrier
// arrivals, a branch-free masked store; blocks of >= 32 tiles in a CTA's share
// take the permuted Q layout (no select in the reduce-scatter); the work
// shares count every block as 2 extra tiles (short causal blocks).
// Why this matters on the H200: under sustained load the GPU sits at its 700 W
// limit (1620-1755 MHz instead of 1980), so instructions are power and power
// is clock; the leaner loop kept the clock up (headline 4.43 -> 3.75 ms in the
// same interleaved run). Its per-element arithmetic and reduction tree are
// those of sm90_fp8_mqa_logits.cuh (the fused kernel's main loop), so the dense
// and fused logits stay bitwise equal (scripts/logits_variants.py checks it).
// Output contract: as sm90_fp8_mqa_logits.cuh (inside [start, end) the logit,
// -inf in the rest of the block's computed tiles, columns < keys; nothing else written).
//
// The other switches are kept for the dev variants (csrc/dev/logits_probes.cu):
// setmaxnreg off, 2-CTA clusters with TMA multicast of the K tiles, TMA stores
// through shared memory, weights read per tile, one row group.
#pragma once

#include "sm90_fp8_mqa_logits.cuh"

namespace mqa_topk {

// Switches (docs/LOGITS.md): kMathRegs_ > 0 moves registers from the producer warpgroup (down to
// kProducerRegs) to the math warpgroups (up to kMathRegs_) with setmaxnreg;
// kCluster_ = 2 runs 2-CTA clusters whose CTAs take adjacent row blocks, walk
// the union of their key spans and each load half of every K tile (and its
// scales) by TMA multicast to both; kDirectStore_ writes the masked logits
// with st.global from registers instead of the shared tile + TMA store.
// kRowGroups_ = 2 splits the block's rows between the math warpgroups: warpgroup
// wg takes rows [rg * R/2, (rg + 1) * R/2) (rg = wg / key groups) and 64 keys
// (kg = wg % key groups) of a tile of 64 * key-groups keys, so four math
// warpgroups run 8-row blocks at wgmma N = 128 (64 accumulators, 16 math warps
// as in DeepGEMM) while the K bytes per FLOP stay those of the 8-row kernel.
// Each thread's heads of a row and the reduction tree are those of the real
// kernel, so the logits stay bitwise equal. kRegWeights_ keeps the block's
// weights in registers (loaded once per block) instead of reading them from
// shared memory every tile.
template <int kBlockRows_, int kMathWarpgroups_, int kNumStages_, int kProbe_ = 0, int kMathRegs_ = 0,
          int kCluster_ = 1, bool kDirectStore_ = false, int kRowGroups_ = 1, bool kRegWeights_ = false,
          bool kLean_ = false, bool kPingPong_ = false, int kBlockCost_ = 0, int kLean2_ = 0>
struct Sm90LogitsV2Config {
  // kLean2 (bit 1; issue 10, session 17): the producer warp computes each
  // block's span and its rows' ranges and publishes them in a per-Q-buffer
  // slot, so the math warps run a tight per-block tile loop with no block
  // bookkeeping (no next_block loads), stage / phase counters, the MMA
  // descriptors held as 64-bit pairs (each tile writes the A low words only),
  // the scale address held, and a branch-free masked store. Bit 2 (kQPerm):
  // the Q rows permuted in shared memory (128 two-row TMA boxes per block,
  // issued by the producer warp's 32 lanes) so that the reduce-scatter needs
  // no select (logits_reduce_perm); the logits stay bitwise equal. Bit 4
  // (kQPermLong): the permuted layout only for blocks with at least
  // kPermMinTiles tiles in the CTA's share (128 small TMA requests per block
  // made short causal blocks Q-load bound: 8192 x 8192 ran 2x slower), the
  // whole-tile load and the selecting reduce-scatter for the others; the
  // producer publishes the choice in the slot. The 2-row-box Q map then
  // travels in the kernel's otherwise unused tm_out parameter.
  static constexpr int kLean2 = kLean2_;
  static constexpr bool kQPermLong = (kLean2_ & 4) != 0;
  static constexpr bool kQPerm = (kLean2_ & 2) != 0 || kQPermLong;
  static_assert(kLean2_ < 256 || kQPermLong, "kPermMinTiles only with kQPermLong");
  // (bits 8 and up: kPermMinTiles, default 8)
  static constexpr int kPermMinTiles = (kLean2_ >> 8) != 0 ? (kLean2_ >> 8) : 8;
  // Whether a block with n tiles in the CTA's share loads Q permuted.
  static constexpr __host__ __device__ bool q_perm(int n) { return kQPermLong ? n >= kPermMinTiles : kQPerm; }
  static constexpr int kSlotInts = 24;  // kLean2 slot: b, lo, t0, t1, last, -, -, -, start[8], len[8]
  // kBlockCost (dev): the work shares count every block as kBlockCost extra
  // tiles (its Q load from memory, its rows' setup), so a CTA whose share
  // crosses many short blocks (causal rows at few keys) gets fewer tiles.
  static constexpr int kBlockCost = kBlockCost_;
  static constexpr bool kLean = kLean_;
  // kPingPong (dev): each math warpgroup keeps two accumulator sets and issues
  // the next tile's MMA before its epilogue of the current one (needs one key
  // group: 64-key tiles, and the registers of two math warpgroups).
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kRowGroups = kRowGroups_;
  static constexpr bool kRegWeights = kRegWeights_;
  static constexpr int kMathRegs = kMathRegs_;
  static constexpr int kProducerRegs = 32;
  static constexpr int kCluster = kCluster_;
  static constexpr bool kDirectStore = kDirectStore_;
  static constexpr int kBlockRows = kBlockRows_;
  static constexpr int kMathWarpgroups = kMathWarpgroups_;
  static constexpr int kNumStages = kNumStages_;
  static constexpr int kProbe = kProbe_;
  static constexpr int kHeads = 32;
  static constexpr int kHeadDim = 128;
  static constexpr int kWgRows = kBlockRows / kRowGroups;  // rows of one warpgroup's MMA
  static constexpr int kKeyGroups = kMathWarpgroups / kRowGroups;
  static constexpr int kN = kWgRows * kHeads;  // wgmma N
  static constexpr int kAcc = kN / 2;          // fp32 accumulators per thread
  static constexpr int kQRows = kBlockRows * kHeads;  // rows of the Q tile
  static constexpr int kQBoxRows = kQPerm && !kQPermLong ? 2 : kQRows;  // rows of the Q tensor map's box
  static constexpr int kBlockKeys = 64 * kKeyGroups;
  static constexpr int kThreads = 128 * (kMathWarpgroups + 1);
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  static constexpr int kKTileBytes = kBlockKeys * kHeadDim;
  static constexpr int kQTileBytes = kQRows * kHeadDim;
  static constexpr int kScaleBytes = kBlockKeys * 4;
  static constexpr int kWeightBytes = kBlockRows * kHeads * 4;
  static constexpr int kOutBytes = kWgRows * 64 * 4;  // one warpgroup's output tile
  static constexpr int kOffK = 0;
  static constexpr int kOffQ = kOffK + kNumStages * kKTileBytes;
  static constexpr int kOffOut = kOffQ + 2 * kQTileBytes;
  static constexpr int kOffScales = kOffOut + (kDirectStore ? 0 : 2 * kMathWarpgroups * kOutBytes);
  static constexpr int kOffWeights = kOffScales + kNumStages * kScaleBytes;
  static constexpr int kOffBars = kOffWeights + 2 * kWeightBytes;
  static constexpr int kNumBars = 2 * kNumStages + 4;
  static constexpr int kSmemBytes = kOffBars + kNumBars * 8 + 1024;  // + alignment slack
  static constexpr int kSpanRows = kBlockRows * kCluster;  // rows that walk one key span (the cluster's)
  static constexpr int kKSliceKeys = kBlockKeys / kCluster;  // keys of a tile each CTA of the cluster loads
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static_assert(kMathRegs % 8 == 0 && (kMathRegs == 0 || (kMathRegs >= 24 && kMathRegs <= 256)), "setmaxnreg range");
  // The registers the CTA starts with (launch bounds: 64K / threads, a multiple of 8) must cover the split.
  static_assert(kMathRegs == 0 ||
                    kMathRegs * kMathThreads + kProducerRegs * 128 <= ((65536 / kThreads) & ~7) * kThreads,
                "setmaxnreg split exceeds the CTA's registers");
  static_assert(kBlockRows == 4 || kBlockRows == 8, "4 or 8 rows per block");
  static_assert(kWgRows == 4 || kWgRows == 8, "wgmma N = 128 or 256");
  static_assert(kRowGroups == 1 || (kRowGroups == 2 && kMathWarpgroups % 2 == 0 && kCluster == 1),
                "row groups split an unclustered block between an even number of math warpgroups");
  static_assert(kQRows <= 256, "one TMA box per Q tile");
  static_assert(!kLean || (kDirectStore && kRegWeights && kCluster == 1), "the lean tile path stores directly");
  static_assert(!kPingPong || (kLean && kKeyGroups == 1 && kWgRows == 4), "ping-pong: lean, 4 rows x 64 keys per warpgroup");
  static_assert(kLean2_ == 0 || (kLean && !kPingPong && kBlockRows == 8 && kRowGroups == 2 && kKeyGroups == 2 &&
                                 kProbe_ == 0),
                "kLean2: the lean 8-row, four-warpgroup structure");
  static_assert(kLean2_ == 0 || (kLean2_ & 255) == 1 || (kLean2_ & 255) == 3 || (kLean2_ & 255) == 5,
                "kLean2: 1, 3 (kQPerm) or 5 (kQPermLong)");
  static_assert(kKTileBytes % 1024 == 0 && kQTileBytes % 1024 == 0, "swizzle atoms need 1 KB alignment");
  static_assert(kBlockKeys <= 256 && kN <= 256, "one TMA box per tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
};


// kBlockCost > 0: the shares split the cost sum_b (tiles_b + C) evenly. A cost
// position G inside block b (acc <= G < acc + tiles_b + C, acc the cost before
// b) maps to tile max(0, G - acc - C) of b, i.e. to the global tile index
// tiles_before_b + that; the CTA takes the tiles [index(G0), index(G1)). The
// map is monotone with index(0) = 0 and index(total cost) = total tiles, so
// every tile goes to exactly one CTA (a CTA may get none).
template <class Cfg>
__device__ __forceinline__ WorkShare find_work_share_cost(const Sm90LogitsParams& p) {
  constexpr long long C = Cfg::kBlockCost;
  __shared__ long long s_wc[Cfg::kThreads / 32], s_wt[Cfg::kThreads / 32];
  __shared__ long long s_idx[2];
  __shared__ int s_bt[2];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int nblocks = (p.rows + Cfg::kSpanRows - 1) / Cfg::kSpanRows;
  const int per = (nblocks + Cfg::kThreads - 1) / Cfg::kThreads;
  const int b_beg = min(tid * per, nblocks), b_end = min(b_beg + per, nblocks);
  long long mine_c = 0, mine_t = 0;
  for (int b = b_beg; b < b_end; ++b) {
    int lo, hi;
    const int n = block_span<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
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
        const int n = block_span<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
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

template <class Cfg>
__device__ __forceinline__ WorkShare find_work_share_v2(const Sm90LogitsParams& p) {
  if constexpr (Cfg::kBlockCost > 0) return find_work_share_cost<Cfg>(p);
  __shared__ long long s_warp[Cfg::kThreads / 32];
  __shared__ int s_start[2];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int nblocks = (p.rows + Cfg::kSpanRows - 1) / Cfg::kSpanRows;
  const int per = (nblocks + Cfg::kThreads - 1) / Cfg::kThreads;
  const int b_beg = min(tid * per, nblocks), b_end = min(b_beg + per, nblocks);
  long long mine = 0;
  for (int b = b_beg; b < b_end; ++b) {
    int lo, hi;
    mine += block_span<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
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
  // One share per cluster (both CTAs of a cluster walk the same tiles).
  long long g0, g1;
  if constexpr (Cfg::kCluster == 1) {
    g0 = total * blockIdx.x / gridDim.x;
    g1 = total * (blockIdx.x + 1) / gridDim.x;
  } else {
    const unsigned cid = blockIdx.x / Cfg::kCluster, ncl = gridDim.x / Cfg::kCluster;
    g0 = total * cid / ncl;
    g1 = total * (cid + 1) / ncl;
  }
  if (mine > 0 && excl <= g0 && g0 < excl + mine) {
    long long acc = excl;
    for (int b = b_beg; b < b_end; ++b) {
      int lo, hi;
      const int n = block_span<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
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

// logits_epilogue_reduce's arithmetic, in its order, for W rows whose weights
// this lane needs are given (w[r][jj] = weights[r * 32 + jj * 8 + 2 * quad],
// +1), so the result is bitwise that of the real kernel.
// The 8 head-partials of each (key half h, accumulator slot r) of a lane: relu
// as (x + |x|) and the weight FMAs in the fixed order every kernel shares.
template <int W, int kAcc>
__device__ __forceinline__ void logits_head_partials(const float (&acc)[kAcc], const float2 (&w)[W][4],
                                                     float (&part)[2][W]) {
  static_assert(kAcc == 16 * W, "2 keys x W rows x 8 heads per lane");
#pragma unroll
  for (int r = 0; r < W; ++r) {
    float s0 = 0.f, s1 = 0.f;
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

template <int W, int kAcc>
__device__ __forceinline__ void logits_epilogue_reduce_w(const float (&acc)[kAcc], const float2 (&w)[W][4], int quad,
                                                         float (&fin)[2][W / 4]) {
  constexpr int RQ = W / 4;
  const int hb = (quad >> 1) & 1, lb = quad & 1;
  float part[2][W];
  logits_head_partials<W>(acc, w, part);
  float half[2][W / 2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < W / 2; ++i) {
      const float send = hb ? part[h][i] : part[h][W / 2 + i];
      const float keep = hb ? part[h][W / 2 + i] : part[h][i];
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

// ---- ping-pong math warpgroups (dev, kPingPong) -------------------------------
// One cursor over the CTA's share of (block, tile) pairs, as the producer
// walks it. The block sequence comes from the producer through blk_slot (one
// {b, lo, nt} per Q buffer, written before the buffer's q_full arrive), so
// advancing is branch-light: no block-span loops while an MMA is in flight.
struct TileCursor {
  int b, t, nt, lo, qi, it;
  long long left;  // tiles left, this one included
  bool new_block;
  __device__ __forceinline__ void advance() {
    ++it;
    --left;
    if (++t == nt) {
      t = 0;
      ++qi;
      new_block = true;
    }
  }
  // At a new block: its {b, lo, nt} from the slot of its Q buffer.
  __device__ __forceinline__ void take_block(const volatile int (*blk_slot)[4]) {
    const int qb = qi & 1;
    b = blk_slot[qb][0];
    lo = blk_slot[qb][1];
    nt = blk_slot[qb][2];
    new_block = false;
  }
};

// Issues the MMA of cursor c's tile into acc (no wait) and advances c.
template <class Cfg>
__device__ __forceinline__ void pingpong_issue(TileCursor& c, float (&acc)[Cfg::kAcc], float2& sc, int key_local,
                                               const uint8_t* scales0, uint64_t* full, uint64_t* q_full,
                                               uint32_t a_lo0, uint32_t b_lo0, const volatile int (*blk_slot)[4]) {
  constexpr int S = Cfg::kNumStages;
  if (c.new_block) {
    ptx::mbar_wait(q_full + (c.qi & 1), (c.qi >> 1) & 1);
    c.take_block(blk_slot);
  }
  const int stage = c.it % S;
  ptx::mbar_wait(full + stage, (c.it / S) & 1);
  // The tile's scales now, long before its epilogue releases the stage (tile_scales).
  tile_scales(scales0 + stage * Cfg::kScaleBytes, key_local, sc.x, sc.y);
  logits_tile_mma_issue_lo<Cfg>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4),
                                b_lo0 + (c.qi & 1) * (Cfg::kQTileBytes >> 4));
  c.advance();
}

// The math warpgroups of the ping-pong variant: warpgroup rg takes rows
// [4 rg, +4) of the 8-row block and every 64-key tile; while the tensor cores
// run tile i + 1 into one accumulator set, the warpgroup runs the epilogue of
// tile i from the other. The epilogue cursor trails the issue cursor by one
// tile, so the Q/weights buffer of its block has been waited for.
template <class Cfg>
__device__ __forceinline__ void logits_v2_pingpong_math(const Sm90LogitsParams& p, uint8_t* smem,
                                                        const WorkShare& share, uint64_t* full, uint64_t* empty,
                                                        uint64_t* q_full, uint64_t* q_empty, int wg,
                                                        const volatile int (*blk_slot)[4]) {
  constexpr int S = Cfg::kNumStages;
  const int tid = threadIdx.x;
  const int rg = __shfl_sync(0xffffffffu, wg, 0);
  const int lane = tid & 31;
  const int warp_in_wg = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int row_local0 = ((quad >> 1) & 1) * 2 + (quad & 1);
  const int key_local = warp_in_wg * 16 + (lane >> 2);
  const uint32_t a_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffK);
  const uint32_t b_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffQ + rg * Cfg::kN * Cfg::kHeadDim);

  TileCursor ci;
  ci.t = share.t0;
  ci.qi = 0;
  ci.it = 0;
  ci.left = share.count;
  ci.new_block = true;
  // The first block: wait for its Q buffer (and slot) here, outside the MMA pipeline.
  ptx::mbar_wait(q_full, 0);
  ci.take_block(blk_slot);
  TileCursor ce = ci;
  ce.new_block = true;  // the epilogue loads the first block's rows and weights

  int row_start = 0, row_end = 0;
  float* row_out = nullptr;
  float2 wreg[4][4];
  const float ninf = -__int_as_float(0x7f800000);

  auto epilogue = [&](float (&acc)[Cfg::kAcc], const float2 sc) {
    const int qb = ce.qi & 1;
    if (ce.new_block) {
      ce.take_block(blk_slot);
      const int row = ce.b * Cfg::kBlockRows + rg * 4 + row_local0;
      row_start = row < p.rows ? __ldg(p.starts + row) : 0;
      row_end = row < p.rows ? __ldg(p.ends + row) : 0;
      row_out = row < p.rows ? p.logits + static_cast<int64_t>(row) * p.ld : nullptr;
      const float2* w2 = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + rg * 64;
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) wreg[r][jj] = w2[r * 16 + jj * 4 + quad];
    }
    const int stage = ce.it % S;
    const float scale0 = sc.x, scale1 = sc.y;  // read at the MMA's issue
    release_stage(empty + stage, lane);
    float fin[2][1];
    logits_epilogue_reduce_w<4>(acc, wreg, quad, fin);
    if (ce.t + 1 == ce.nt) {  // the block's last tile: its Q buffer is free (its MMAs are done)
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    }
    const int ka = ce.lo + ce.t * Cfg::kBlockKeys + key_local, kb = ka + 8;
    if (row_out != nullptr) {
      float* o = row_out + ka;
      if (ka < p.keys) o[0] = (ka >= row_start && ka < row_end) ? fin[0][0] * scale0 : ninf;
      if (kb < p.keys) o[8] = (kb >= row_start && kb < row_end) ? fin[1][0] * scale1 : ninf;
    }
    ce.advance();
  };

  float acc0[Cfg::kAcc], acc1[Cfg::kAcc];
  float2 sc0, sc1;
  const uint8_t* scales0 = smem + Cfg::kOffScales;
  pingpong_issue<Cfg>(ci, acc0, sc0, key_local, scales0, full, q_full, a_lo0, b_lo0, blk_slot);
  // Each exit path waits for every MMA first, so ptxas sees no accumulator in
  // flight at a merge it cannot prove safe (else it injects waits: C7517).
  for (;;) {
    if (ci.left > 0) {
      pingpong_issue<Cfg>(ci, acc1, sc1, key_local, scales0, full, q_full, a_lo0, b_lo0, blk_slot);
      ptx::wgmma_wait<1>();
      ptx::fence_regs(acc0);
      epilogue(acc0, sc0);
    } else {
      ptx::wgmma_wait<0>();
      ptx::fence_regs(acc0);
      epilogue(acc0, sc0);
      break;
    }
    if (ci.left > 0) {
      pingpong_issue<Cfg>(ci, acc0, sc0, key_local, scales0, full, q_full, a_lo0, b_lo0, blk_slot);
      ptx::wgmma_wait<1>();
      ptx::fence_regs(acc1);
      epilogue(acc1, sc1);
    } else {
      ptx::wgmma_wait<0>();
      ptx::fence_regs(acc1);
      epilogue(acc1, sc1);
      break;
    }
  }
}

// ---- kLean2 (issue 10, session 17) ---------------------------------------------

// The permuted-Q tile epilogue (kQPerm; also the fused v3 kernel's): logits_epilogue_reduce_w<4>'s
// arithmetic where slot s of this lane (accumulators 16 s .. 16 s + 15,
// weights w[s]) holds row s ^ quad. The partial sums are the dense layout's
// FMA chains (same heads, weights and order), and the butterfly forms the same
// sums in the same order without selecting by the quad: after the xor-2 step
// slot 0 holds (v_q + v_q^2) of row q and slot 1 that of row q ^ 1, which the
// xor-1 partner (whose slot 1 is row q) adds. fin[h][0]: this lane's row, quad.
__device__ __forceinline__ void logits_reduce_perm(const float (&acc)[64], const float2 (&w)[4][4],
                                                   float (&fin)[2][1]) {
  float part[2][4];
  logits_head_partials<4>(acc, w, part);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float h0 = part[h][0] + __shfl_xor_sync(0xffffffffu, part[h][2], 2);
    const float h1 = part[h][1] + __shfl_xor_sync(0xffffffffu, part[h][3], 2);
    fin[h][0] = h0 + __shfl_xor_sync(0xffffffffu, h1, 1);
  }
}

// New low words (start addresses alo + 2 kk) into four held descriptor pairs;
// the high words are constant (also the fused v3 kernel's).
__device__ __forceinline__ void desc_pairs_set_lo(uint64_t (&d)[4], uint32_t alo) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t dhi;
    asm("{\n.reg .b32 lo;\nmov.b64 {lo, %0}, %1;\n}" : "=r"(dhi) : "l"(d[kk]));
    asm("mov.b64 %0, {%1, %2};" : "=l"(d[kk]) : "r"(alo + 2 * kk), "r"(dhi));
  }
}

// A tile's MMA chain (m64n128, 4 k32 steps) from held 64-bit descriptors (also the fused v3 kernel's).
__device__ __forceinline__ void logits_mma_issue_dab(float (&acc)[64], const uint64_t (&da)[4], const uint64_t (&db)[4]) {
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) ptx::wgmma_e4m3<128>(acc, da[kk], db[kk], kk);
  ptx::wgmma_commit();
  ptx::fence_regs(acc);
}

// One row block's span, computed by a warp (kLean2's producer): lane i < 8
// reads row 8 b + i, clamped to [0, keys] (block_span's arithmetic, so the
// tile counts match find_work_share_v2's); returns the tile count (0: every
// row empty) and lo, both warp-uniform; lane i < 8 gets its row's clamped
// start and length (0 for rows past the last or empty ones).
__device__ __forceinline__ int lean2_block_span(const Sm90LogitsParams& p, int b, int lane, int& lo, int& s,
                                                int& len) {
  int sr = 0, er = 0;
  const int r = b * 8 + (lane & 7);
  if (lane < 8 && r < p.rows) {
    sr = max(__ldg(p.starts + r), 0);
    er = min(__ldg(p.ends + r), p.keys);
  }
  s = sr;
  len = max(er - sr, 0);
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

// kLean2's producer: the producer warpgroup's warp 0 (all 32 lanes; lane 0
// issues the barriers and the K loads). For each block of the share it
// publishes {b, lo, first tile, end tile, last, permuted} and its rows' clamped
// starts and lengths in the Q buffer's slot (written by lane 0 before its
// arrival on the buffer's q_full, which releases them to the math warps' wait).
// (Issuing the next block's Q a few tiles before the current block's end,
// permuted only then, measured slower: dev variants 38 / 39, session 17.)
template <class Cfg>
__device__ __forceinline__ void logits_v2_lean2_producer(const Sm90LogitsParams& p, uint8_t* smem,
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
    if constexpr (Cfg::kQPermLong) ptx::prefetch_tensor_map(tm_q2);
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
      if (!perm) ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes, tm_q, q_full + qb, 0, b * 8 * 32);
    }
    __syncwarp();
    if (perm) {
      // Shared row n = 128 g + 32 s + 8 jj + 2 q + e of row group g holds Q row
      // (4 g + (s ^ q), head 8 jj + 2 q + e): 128 two-row boxes, 4 per lane.
      uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int n = 2 * (lane + 32 * i);
        const int sg = (n >> 5) & 3, q = (n >> 1) & 3;
        const int src = (n & 128) + 32 * (sg ^ q) + (n & 31);
        ptx::tma_load_2d(qdst + n * 128, Cfg::kQPermLong ? tm_q2 : tm_q, q_full + qb, 0, b * 8 * 32 + src);
      }
    }
    __syncwarp();
  };
  int b = share.b0, t = share.t0, lo = 0, s = 0, len = 0;
  int nt = lean2_block_span(p, b, lane, lo, s, len);
  long long left = share.count;
  uint32_t st = 0, ph = 0;
  int n_here = static_cast<int>(min(static_cast<long long>(nt - t), left));
  load_q(0, b, lo, t, n_here, left == n_here, Cfg::q_perm(n_here), s, len);
  for (int qi = 0;; ++qi) {
    left -= n_here;
    const bool has_next = left > 0;
    // The next block (found before this one's K loads: ptxas keeps the loop spill-free this way).
    int nb = b, nlo = lo, ns = 0, nlen = 0, nn = 0;
    if (has_next) {
      int nnt;
      do {
        ++nb;
        nnt = lean2_block_span(p, nb, lane, nlo, ns, nlen);
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
    load_q(qi + 1, nb, nlo, 0, nn, left == nn, Cfg::q_perm(nn), ns, nlen);
    b = nb, lo = nlo, t = 0, s = ns, len = nlen, n_here = nn;
  }
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

// kLean2's math warpgroups: per block (from the slot) a tight tile loop.
// Epi: see LogitsEpiNone (the fused staged kernel's histograms).
template <class Cfg, class Epi = LogitsEpiNone>
__device__ __forceinline__ void logits_v2_lean2_math(const Sm90LogitsParams& p, uint8_t* smem, uint64_t* full,
                                                     uint64_t* empty, uint64_t* q_full, uint64_t* q_empty, int wg,
                                                     const int (*slot)[Cfg::kSlotInts], const Epi& epi = Epi{}) {
  constexpr int S = Cfg::kNumStages;
  constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);  // stride byte offset 1024 B; 128-byte swizzle
  const int tid = threadIdx.x;
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
    // The block's tiles; kPerm: the Q rows permuted (slot r of this lane holds row r ^ quad).
    auto tiles = [&](auto perm_tag) {
      constexpr bool kPerm = decltype(perm_tag)::value;
      float2 w[4][4];
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
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(da[0]), "+l"(da[1]), "+l"(da[2]), "+l"(da[3]));
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(db[0]), "+l"(db[1]), "+l"(db[2]), "+l"(db[3]));
        // Held across the tile: ptxas would rematerialize them from S2R / the slot.
        asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;" : "+r"(sc_addr), "+r"(len), "+r"(limd));
        asm volatile("mov.b64 %0, %0;" : "+l"(rb));
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
        // The scales after the MMAs; the stage is released after the stores that use them
        // (a store issues only once its value, hence the scale, has arrived).
        float sc0, sc1;
        asm volatile("ld.shared.f32 %0, [%2];\n\tld.shared.f32 %1, [%2+32];"
                     : "=f"(sc0), "=f"(sc1)
                     : "r"(sc_addr + st * Cfg::kScaleBytes));
        sc0 *= 0.5f;
        sc1 *= 0.5f;
        float fin[2][1];
        if constexpr (kPerm)
          logits_reduce_perm(acc, w, fin);
        else
          logits_epilogue_reduce_w<4>(acc, w, quad, fin);
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
    if constexpr (Cfg::kQPermLong) {
      if (lds_uniform(sl + 5))
        tiles(std::true_type{});
      else
        tiles(std::false_type{});
    } else {
      tiles(std::integral_constant<bool, Cfg::kQPerm>{});
    }
    ep.block_end(b, lo, t0, t1, sl);
    mbar_arrive_elect(q_empty + qb);  // the block's last MMA has read its Q buffer
    if (last) break;
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fp8_mqa_logits_v2_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
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

  const WorkShare share = find_work_share_v2<Cfg>(p);
  __shared__ int blk_slot[2][4];  // kPingPong: {b, lo, tiles} of the block in each Q buffer
  __shared__ int lean2_slot[2][Cfg::kSlotInts];  // kLean2: the block in each Q buffer (logits_v2_lean2_producer)
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  // Range errors (range_check.cuh) are checked by threads with nothing else to
  // do: warps 1-3 of the producer warpgroup of every CTA (warp 0 holds the
  // TMA thread), so the check costs the pipeline nothing.
  constexpr int kCheckLo = Cfg::kMathThreads + 32;
  constexpr int kCheckers = 96;
  const int checker = range_checker_index(tid, kCheckLo, kCheckers);
  if (share.count <= 0)
    check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
  if (share.count <= 0) return;  // uniform across the CTA (and the cluster)

  // This CTA's rank in its cluster: its rows are rank * R.. of the cluster's kSpanRows.
  const int rank = Cfg::kCluster > 1 ? static_cast<int>(ptx::cluster_ctarank()) : 0;
  if constexpr (Cfg::kCluster > 1) {
    // A K stage is refilled (in both CTAs, by multicast) only after the math
    // warps of both CTAs released it: every math warp arrives on both CTAs' empty barrier.
    if (tid == 0) {
      for (int i = 0; i < S; ++i) {
        ptx::mbar_init(full + i, 1);
        ptx::mbar_init(empty + i, Cfg::kCluster * Cfg::kMathThreads / 32);
      }
      for (int i = 0; i < 2; ++i) {
        ptx::mbar_init(q_full + i, 1);
        ptx::mbar_init(q_empty + i, Cfg::kMathThreads / 32);
      }
      ptx::fence_barrier_init();
    }
    ptx::cluster_sync();  // the peer's barriers exist before any multicast or remote arrive
  } else {
    if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
    __syncthreads();
  }

  if (wg == Cfg::kMathWarpgroups) {
    // ---------------- producer: one thread issues every TMA ----------------
    if constexpr (Cfg::kMathRegs > 0) ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if constexpr (Cfg::kLean2 != 0) {  // warp 0 produces, warps 1-3 check the row ranges
      if (tid >= Cfg::kMathThreads + 32) {
        check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
        return;
      }
      logits_v2_lean2_producer<Cfg>(p, smem, share, full, empty, q_full, q_empty, lean2_slot, &tm_q, &tm_k,
                                    &tm_scales, &tm_weights, &tm_out);
      return;
    }
    if (tid != Cfg::kMathThreads) {
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelLogits, checker, gridDim.x * kCheckers);
      if constexpr (Cfg::kCluster > 1) ptx::cluster_sync();  // every thread of the cluster, once
      return;
    }
    ptx::prefetch_tensor_map(&tm_q);
    ptx::prefetch_tensor_map(&tm_k);
    ptx::prefetch_tensor_map(&tm_scales);
    ptx::prefetch_tensor_map(&tm_weights);
    int b = share.b0, t = share.t0, lo, hi;
    int nt = block_span<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
    int it = 0, qi = 0;
    bool new_block = true;
    for (long long left = share.count; left > 0; --left) {
      if (new_block) {
        const int qb = qi & 1;
        const int row0 = b * Cfg::kSpanRows + rank * Cfg::kBlockRows;
        ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
        if constexpr (Cfg::kPingPong) {  // the block for the math warps (read after q_full completes)
          blk_slot[qb][0] = b;
          blk_slot[qb][1] = lo;
          blk_slot[qb][2] = nt;
        }
        ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
        ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes, &tm_q, q_full + qb, 0, row0 * Cfg::kHeads);
        ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, &tm_weights, q_full + qb, 0, row0);
        new_block = false;
      }
      const int stage = it % S;
      ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
      // Both slices of the tile (this CTA's and the peer's multicast) land on this barrier.
      ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
      const int key0 = lo + t * Cfg::kBlockKeys;
      if constexpr (Cfg::kCluster > 1) {
        const int ks = rank * Cfg::kKSliceKeys;
        constexpr uint16_t kAll = (1u << Cfg::kCluster) - 1;
        ptx::tma_load_2d_multicast(smem + Cfg::kOffK + stage * Cfg::kKTileBytes + ks * Cfg::kHeadDim, &tm_k,
                                   full + stage, 0, key0 + ks, kAll);
        ptx::tma_load_2d_multicast(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes + ks * 4, &tm_scales,
                                   full + stage, key0 + ks, 0, kAll);
      } else {
        ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, full + stage, 0, key0);
        ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, full + stage, key0, 0);
      }
      ++it;
      if (++t == nt && left > 1) {
        nt = next_block<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
        t = 0;
        ++qi;
        new_block = true;
      }
    }
    if constexpr (Cfg::kCluster > 1) ptx::cluster_sync();
    return;
  }

  if constexpr (Cfg::kMathRegs > 0) ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  if constexpr (Cfg::kPingPong) {
    logits_v2_pingpong_math<Cfg>(p, smem, share, full, empty, q_full, q_empty, wg, blk_slot);
    return;
  }
  if constexpr (Cfg::kLean2 != 0) {
    logits_v2_lean2_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, lean2_slot);
    return;
  }

  // ---------------- math warpgroups ----------------
  constexpr int R = Cfg::kWgRows;  // rows of this warpgroup's MMA
  constexpr int RQ = R / 4;        // rows per lane after the reduce-scatter
  // The warpgroup index through a shuffle from lane 0, so the compiler knows it
  // is warp-uniform and keeps what derives from it (descriptors) in uniform registers.
  const int wg_u = Cfg::kLean ? __shfl_sync(0xffffffffu, wg, 0) : wg;
  const int rg = wg_u / Cfg::kKeyGroups, kg = wg_u % Cfg::kKeyGroups;  // row group, key group
  const int lane = tid & 31;
  const int warp_in_wg = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int hb = (quad >> 1) & 1, lb = quad & 1;
  const int row_local0 = hb * (R / 2) + lb * RQ;  // this lane's first row after the reduce-scatter
  const int key_local = warp_in_wg * 16 + (lane >> 2);  // and +8, within the warpgroup's 64 keys
  const bool elected = (tid & 127) == 0;
  float* out_buf = reinterpret_cast<float*>(smem + Cfg::kOffOut + wg * 2 * Cfg::kOutBytes);

  int b = share.b0, t = share.t0, lo, hi;
  int nt = block_span<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
  int it = 0, qi = 0;
  bool new_block = true;
  int row_start[RQ], row_end[RQ];
  float acc[Cfg::kAcc];
  float2 wreg[Cfg::kRegWeights ? R : 1][4];
  // Lean path: descriptor low words of this warpgroup's K slice (stage 0) and Q
  // rows (buffer 0); this lane's output row pointer (null past the last row).
  const uint32_t a_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffK + kg * 64 * Cfg::kHeadDim);
  const uint32_t b_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffQ + rg * Cfg::kN * Cfg::kHeadDim);
  float* row_out = nullptr;

  for (long long left = share.count; left > 0; --left) {
    const int qb = qi & 1;
    if (new_block) {
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const int row = b * Cfg::kSpanRows + rank * Cfg::kBlockRows + rg * R + row_local0 + i;
        row_start[i] = row < p.rows ? __ldg(p.starts + row) : 0;
        row_end[i] = row < p.rows ? __ldg(p.ends + row) : 0;
        if constexpr (Cfg::kLean) row_out = row < p.rows ? p.logits + static_cast<int64_t>(row) * p.ld : nullptr;
      }
      ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
      if constexpr (Cfg::kRegWeights) {
        const float2* w2 = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) +
                           rg * R * 16;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) wreg[r][jj] = w2[r * 16 + jj * 4 + quad];
      }
      new_block = false;
    }
    const int stage = it % S;
    ptx::mbar_wait(full + stage, (it / S) & 1);

    const uint8_t* k_tile = smem + Cfg::kOffK + stage * Cfg::kKTileBytes + kg * 64 * Cfg::kHeadDim;
    const uint8_t* q_tile = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes + rg * Cfg::kN * Cfg::kHeadDim;
    // The stage's release must follow the scale reads' completion
    // (tile_scales, sm90_fp8_mqa_logits.cuh). The lean path (the op's) reads
    // them after the MMAs (two more registers across them spill) and releases
    // the stage after the stores that use them: a store issues only once its
    // value, hence the scale, has arrived. The other paths read them before
    // the MMAs and release right after them.
    float scale0, scale1;
    if constexpr (Cfg::kLean) {
      logits_tile_mma_lo<Cfg>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), b_lo0 + qb * (Cfg::kQTileBytes >> 4));
      tile_scales(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, kg * 64 + key_local, scale0, scale1);
    } else {
      tile_scales(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, kg * 64 + key_local, scale0, scale1);
      logits_tile_mma<Cfg, Cfg::kProbe != 2>(acc, k_tile, q_tile);
      if constexpr (Cfg::kCluster > 1) {
        __syncwarp();
        if (lane < Cfg::kCluster) ptx::mbar_arrive_cluster(empty + stage, lane);  // lane c releases CTA c's stage
      } else {
        release_stage(empty + stage, lane);
      }
    }

    // Epilogue: 8 head-partials per (key half, row), then a reduce-scatter over the quad.
    float fin[2][RQ];
    if constexpr (Cfg::kProbe == 1) {
#pragma unroll
      for (int i = 0; i < RQ; ++i) fin[0][i] = acc[i], fin[1][i] = acc[Cfg::kAcc - 1 - i];
    } else if constexpr (Cfg::kRegWeights) {
      logits_epilogue_reduce_w<R>(acc, wreg, quad, fin);
    } else if constexpr (Cfg::kRowGroups > 1) {
      float2 w[R][4];
      const float2* w2 = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) +
                         rg * R * 16;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) w[r][jj] = w2[r * 16 + jj * 4 + quad];
      logits_epilogue_reduce_w<R>(acc, w, quad, fin);
    } else {
      logits_epilogue_reduce<Cfg>(acc, smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, quad, fin);
    }

    const bool last_of_block = (t + 1 == nt);
    if (last_of_block) {
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    }

    // Masked logits -> this warpgroup's shared output tile -> one TMA store.
    const int key_wg0 = lo + t * Cfg::kBlockKeys + kg * 64;
    const int out_row0 = b * Cfg::kSpanRows + rank * Cfg::kBlockRows + rg * R;
    if constexpr (Cfg::kLean) {
      static_assert(RQ == 1, "one row per lane");
      const float ninf = -__int_as_float(0x7f800000);
      const int ka = key_wg0 + key_local, kb = ka + 8;
      if (row_out != nullptr) {
        float* o = row_out + ka;
        if (ka < p.keys) o[0] = (ka >= row_start[0] && ka < row_end[0]) ? fin[0][0] * scale0 : ninf;
        if (kb < p.keys) o[8] = (kb >= row_start[0] && kb < row_end[0]) ? fin[1][0] * scale1 : ninf;
      }
      static_assert(Cfg::kCluster == 1, "the lean path releases its own stage only");
      release_stage(empty + stage, lane);  // after the stores (see above)
      ++it;
      if (++t == nt && left > 1) {
        nt = next_block<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
        t = 0;
        ++qi;
        new_block = true;
      }
      continue;
    } else if constexpr (Cfg::kDirectStore) {
      // The same values and the same region as the TMA store (columns < keys,
      // rows < rows): per warp and row, two 32-byte segments.
      const float ninf = -__int_as_float(0x7f800000);
      const int ka = key_wg0 + key_local, kb = ka + 8;
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const int row = out_row0 + row_local0 + i;
        if (row < p.rows) {
          float* o = p.logits + static_cast<int64_t>(row) * p.ld;
          if (ka < p.keys) o[ka] = (ka >= row_start[i] && ka < row_end[i]) ? fin[0][i] * scale0 : ninf;
          if (kb < p.keys) o[kb] = (kb >= row_start[i] && kb < row_end[i]) ? fin[1][i] * scale1 : ninf;
        }
      }
      ++it;
      if (++t == nt && left > 1) {
        nt = next_block<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
        t = 0;
        ++qi;
        new_block = true;
      }
      continue;
    }
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
      ptx::tma_store_2d(&tm_out, obuf, key_wg0, out_row0);
      ptx::bulk_commit_group();
    }

    ++it;
    if (++t == nt && left > 1) {
      nt = next_block<Cfg::kSpanRows, Cfg::kBlockKeys>(p, b, lo, hi);
      t = 0;
      ++qi;
      new_block = true;
    }
  }
  if (elected) ptx::bulk_wait_group<0>();
  // No CTA leaves while its peer may still arrive on its barriers.
  if constexpr (Cfg::kCluster > 1) ptx::cluster_sync();
}

// The op's configuration since session 17 (2026-12-04; dev variant 41 of
// tools/logitscheck): the lean structure with kLean2 (producer-published
// block slots, the tight per-block tile loop), the permuted Q for blocks of at
// least 32 tiles in a share (kQPermLong), and work shares that count every
// block as 2 extra tiles. docs/LOGITS.md has the measurements.
using Sm90LogitsV2Default = Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true, false, 2, 5 | (32 << 8)>;
// The op's configuration until session 17 (dev variant 23).
using Sm90LogitsV2Lean = Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true>;

// Launches the kernel: the arguments and error reporting of
// launch_sm90_fp8_mqa_logits (sm90_fp8_mqa_logits.cuh).
template <class Cfg = Sm90LogitsV2Default>
inline cudaError_t launch_sm90_fp8_mqa_logits_v2(const void* q, const void* k, const float* scales,
                                              const float* weights, const int* starts, const int* ends,
                                              float* logits, int64_t ld, int rows, int keys, int num_sms,
                                              cudaStream_t stream, int* map_error = nullptr,
                                              RangeErrorSink range_err = {}) {
  if (rows <= 0) return cudaSuccess;
  if (keys <= 0) return launch_row_range_check<kKernelLogits>(range_err, starts, ends, rows, 0, stream);
  CUtensorMap tm_q, tm_k, tm_s, tm_w, tm_o;
  if (const int e = make_logits_maps(tm_q, tm_k, tm_s, tm_w, tm_o, q, k, scales, weights, logits, ld, rows, keys,
                                     Cfg::kQBoxRows, Cfg::kKSliceKeys, Cfg::kBlockRows, Cfg::kWgRows)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  if constexpr (Cfg::kQPermLong) {  // the direct stores need no output map: its slot carries the 2-row-box Q map
    const int e = make_tensor_map_2d(&tm_o, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, static_cast<uint64_t>(rows) * 32, 128,
                                     128, 2, CU_TENSOR_MAP_SWIZZLE_128B);
    if (e) {
      const int res[1] = {e};
      if (map_error) *map_error = first_map_error(res, 1);  // (reported as the q map's)
      return cudaErrorInvalidValue;
    }
  }
  auto kernel = &sm90_fp8_mqa_logits_v2_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  Sm90LogitsParams p{starts, ends, logits, ld, rows, keys, range_err};
  if constexpr (Cfg::kCluster > 1) {
    // Clustered dev variants only: as many clusters as can be resident at once (the
    // persistent schedule assumes one wave), at most one CTA per SM.
    cudaLaunchConfig_t lc = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = Cfg::kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    lc.gridDim = dim3(num_sms / Cfg::kCluster * Cfg::kCluster);
    lc.blockDim = dim3(Cfg::kThreads);
    lc.dynamicSmemBytes = Cfg::kSmemBytes;
    lc.stream = stream;
    lc.attrs = attr;
    lc.numAttrs = 1;
    static int max_clusters = 0;  // per process and config (one device for the dev probes)
    if (max_clusters == 0) {
      err = cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &lc);
      if (err != cudaSuccess) return err;
      if (max_clusters <= 0) return cudaErrorInvalidConfiguration;
    }
    lc.gridDim = dim3(min(num_sms / Cfg::kCluster, max_clusters) * Cfg::kCluster);
    return cudaLaunchKernelEx(&lc, kernel, tm_q, tm_k, tm_s, tm_w, tm_o, p);
  } else {
    kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, tm_o, p);
    return cudaGetLastError();
  }
}

}  // namespace mqa_topk
