// sm90_fused_blocks: the fused FP8 MQA logits + exact per-row top-k on 8-row
// blocks, the whole and split kernels (two configurations of this kernel).
// Hopper (sm_90a), torch-free.
//
// Logits: the dense logits kernel's main loop (sm90_fp8_mqa_logits.cuh):
// 8-row blocks on four math warpgroups at wgmma N = 128 ("row groups":
// warpgroup wg = 2 rg + kg takes rows [4 rg, +4) x keys [64 kg, +64) of a
// 128-key tile), setmaxnreg 112 / 32, a producer warp feeding a K / scales
// ring by TMA (Sm90FusedBlocksConfig::kNumStages), the same per-element
// arithmetic and reduction order (logits_reduce_perm), so every logit is
// bitwise equal to the dense kernel's and the index sets are identical. Each
// tile's filter and appends (its "tail") run after the next tile's MMAs are
// issued, while they run.
// Selection per block: blocks_select.cuh (gate, compaction, block end).
// Key tiles of a block are visited in a scrambled order (a golden-ratio
// stride coprime to the tile count, last tile first), so scores rising with
// position neither bias the sample nor keep a running threshold low.
// Work: the whole configuration hands out 8-row blocks from a global counter
// (largest row index first: causal blocks are longest last) to a persistent
// grid of one CTA per SM; the split configuration gives every CTA an equal
// share of the call's tiles first (blocks_split.cuh) and the blocks
// past the shares' waves whole from the counter.
#pragma once

#include <type_traits>

#include "blocks_split.cuh"

// Development probes (dev/fused_bound.py; their sets are wrong):
// MQA_TOPK_FUSED_PROBE_NOTAIL=1 drops the gated tiles' filter and appends
// (every block end reports its rows done), =2 also the per-tile weight loads.
#if defined(MQA_TOPK_FUSED_PROBE_NOTAIL) && MQA_TOPK_FUSED_PROBE_NOTAIL == 2 && !defined(MQA_TOPK_FUSED_PROBE_WLOADS)
#define MQA_TOPK_FUSED_PROBE_WLOADS 0
#endif

namespace mqa_topk {

// A lane's weight pair at byte offset kOff from shared address a, as a
// volatile shared load with an immediate offset (the loads stay where they are
// issued, from addresses held for the block).
template <int kOff>
__device__ __forceinline__ float2 blocks_lds_f2(uint32_t a) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2+%3];" : "=f"(v.x), "=f"(v.y) : "r"(a), "n"(kOff));
  return v;
}
// Block b's Q tile with several head passes (64 heads), permuted as the
// 32-head tile within each pass's sub-tile: shared row n of pass ps holds Q
// row (4 (n >> 7) + (s ^ q), head 32 ps + (n & 31)), s = (n >> 5) & 3, q =
// (n >> 1) & 3; two-row boxes issued by one thread.
template <class Cfg>
__device__ __forceinline__ void blocks_load_q_passes(uint8_t* qdst, const CUtensorMap* tm_q, uint64_t* bar, int b) {
#pragma unroll 1
  for (int ps = 0; ps < Cfg::kHeadPasses; ++ps)
#pragma unroll 1
    for (int n = 0; n < 256; n += 2) {
      const int sl = (n >> 5) & 3, q = (n >> 1) & 3;
      const int row = b * 8 + 4 * (n >> 7) + (sl ^ q);
      ptx::tma_load_2d(qdst + ps * Cfg::kQPassBytes + n * 128, tm_q, bar, 0, row * Cfg::kHeads + 32 * ps + (n & 31));
    }
}

template <class Cfg>
__device__ __forceinline__ void blocks_body(const CUtensorMap& tm_q, const CUtensorMap& tm_k,
                                              const CUtensorMap& tm_scales, const CUtensorMap& tm_weights,
                                              const Sm90FusedParams& p) {
  using L = typename Cfg::Logits;
  using namespace fused_detail;
  constexpr int S = Cfg::kNumStages;
  constexpr int R = 8;
  constexpr int NS = Cfg::kSegs;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* full = bars;
  uint64_t* empty = bars + S;
  uint64_t* q_full = bars + 2 * S;
  uint64_t* q_empty = bars + 2 * S + 2;
  uint32_t* hist_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist);
  uint32_t* segcnt_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSegCnt);
  unsigned long long* thr_all = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  volatile int* slot = reinterpret_cast<volatile int*>(smem + Cfg::kOffSlot);  // [2][kSlotInts]
  constexpr int SI = Cfg::kSlotInts;
  uint32_t* redo_rg = reinterpret_cast<uint32_t*>(smem + Cfg::kOffRedo);       // [rg]: rows found unsafe
  BlocksCtl* ctl = reinterpret_cast<BlocksCtl*>(smem + Cfg::kOffCtl);
  volatile BlocksCtl* ctl_v = ctl;

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid & 31;
  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  for (int i = tid; i < 8 * 256; i += Cfg::kThreads) hist_all[i] = 0;
  for (int i = tid; i < 8; i += Cfg::kThreads) thr_all[i] = 0;
  if (tid < 4) redo_rg[tid] = 0;
  if (tid < 8) reinterpret_cast<uint32_t*>(smem + Cfg::kOffSmax)[tid] = 0;
  for (int i = tid; i < static_cast<int>(sizeof(BlocksCtl) / 4); i += Cfg::kThreads)
    reinterpret_cast<uint32_t*>(ctl)[i] = 0;
  __syncthreads();

  const int nblocks = (p.rows + R - 1) / R;
  const int k = p.topk;
  const size_t set_words = size_t(8) * NS * 2 * size_t(p.cap);
  if constexpr (Cfg::kSplit) {  // this CTA's share of the call's tiles (every thread; synchronises the CTA)
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    fused_split_share<Cfg::kThreads>(lp, reinterpret_cast<SplitShare*>(smem + Cfg::kOffShr),
                                     blocks_share_blocks(nblocks, gridDim.x), gridDim.x, kShareMinTiles);
  }

  if (wg == Cfg::kMathWarpgroups) {
    // ---------------- producer warpgroup ----------------
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid != Cfg::kMathThreads) {
      // The producer warpgroup's other threads check the row ranges (range_check.cuh) and leave.
      constexpr int kCheckLo = Cfg::kMathThreads + 32;
      constexpr int kCheckers = Cfg::kThreads - kCheckLo;
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelFused,
                       range_checker_index(tid, kCheckLo, kCheckers), gridDim.x * kCheckers);
      return;
    }
    ptx::prefetch_tensor_map(&tm_q);
    ptx::prefetch_tensor_map(&tm_k);
    ptx::prefetch_tensor_map(&tm_scales);
    ptx::prefetch_tensor_map(&tm_weights);
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    // The Q tile of block b into Q buffer qb, in the permuted layout: smem row
    // 32 s + 8 jj + 2 q + e of row group g holds its Q row (s ^ q, head 8 jj +
    // 2 q + e): 64 boxes of two rows per row group (the 128B swizzle is a
    // function of the shared address, so each box lands where a whole-tile
    // load would put those bytes).
    // (64 heads: the same per head pass, pass ps's heads 32 ps + ... into its sub-tile)
    auto load_q = [&](int b, int qb) {
      uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
      if constexpr (Cfg::kHeadPasses == 1) {
#pragma unroll 1
        for (int n = 0; n < 256; n += 2) {
          const int sl = (n >> 5) & 3, q = (n >> 1) & 3;
          const int src = (n & 128) + 32 * (sl ^ q) + (n & 31);  // (n & 31) = 8 jj + 2 q
          ptx::tma_load_2d(qdst + n * 128, &tm_q, q_full + qb, 0, b * R * 32 + src);
        }
      } else {
        blocks_load_q_passes<Cfg>(qdst, &tm_q, q_full + qb, b);
      }
    };
    if constexpr (Cfg::kSplit) {
      // ---- split blocks: the visits of this CTA's share (see "Split blocks") ----
      const SplitShare* shr = reinterpret_cast<const SplitShare*>(smem + Cfg::kOffShr);
      int it = 0, qi = 0, issued = 0, head = 0;
      // The block whose Q and weights each buffer holds (-1: none). A visit of
      // the block a buffer still holds (a split piece's rest visit after its
      // sample visit two visits earlier) skips the 128 two-row box loads: only
      // the TMA writes these buffers.
      int qheld[2] = {-1, -1};
      // The walk positions [tb, te) of the piece [t0, t0 + np) of block b's tiles.
      auto visit = [&](int b, int t0, int np, int ns, uint32_t active, int kind, int tb, int te, int reg, int c0,
                       int slot0, int npieces) {
        const int qb = qi & 1;
        ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
        ++qi;
        int lo, hi;
        block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
        const int plo = lo + t0 * Cfg::kBlockKeys;
        const int stride = tile_stride(np);
        volatile int* sl = slot + SI * qb;
        sl[0] = b;
        sl[1] = plo;
        sl[2] = np;
        sl[3] = stride;
        sl[4] = ns;
        sl[5] = static_cast<int>(active);
        sl[6] = kind;
        sl[7] = tb;
        sl[8] = te;
        sl[9] = reg;
        sl[10] = c0;
        sl[11] = slot0;
        sl[12] = npieces;
        if (te <= tb) {  // no tile: the consumers only run the visit's bookkeeping
          ptx::mbar_arrive(q_full + qb);
          return;
        }
        if (qheld[qb] == b) {
          ptx::mbar_arrive(q_full + qb);  // (the buffer still holds block b's Q and weights)
        } else {
          ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
          uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
          if constexpr (Cfg::kHeadPasses == 1) {
#pragma unroll 1
            for (int n = 0; n < 256; n += 2) {
              const int sl2 = (n >> 5) & 3, q = (n >> 1) & 3;
              ptx::tma_load_2d(qdst + n * 128, &tm_q, q_full + qb, 0, b * R * 32 + (n & 128) + 32 * (sl2 ^ q) + (n & 31));
            }
          } else {
            blocks_load_q_passes<Cfg>(qdst, &tm_q, q_full + qb, b);
          }
          qheld[qb] = b;
          ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, &tm_weights, q_full + qb, 0, b * R);
        }
        for (int t = 0, tp = np - 1; t < te; ++t, tp = next_tile(tp, np, stride)) {
          if (t < tb) continue;
          const int stage = it % S;
          ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
          const int key0 = plo + tp * Cfg::kBlockKeys;
          ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
          ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, full + stage, 0, key0);
          ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, full + stage, key0, 0);
          ++it;
        }
      };
      // A whole block (or a redo of its rows `active`: no gate) in region 2,
      // as the whole-block kernel runs it.
      auto whole = [&](int b, int n, uint32_t active, bool redo) {
        visit(b, 0, n, redo ? 0 : fused_sample_tiles(n, k), active, kVisitWhole, 0, n, 2, 0, 0, 1);
        ++issued;
      };
      const long long total = shr->sh_total, g0 = shr->sh_g0, count = shr->sh_count;
      const int gp = shr->sh_gp;
      if (shr->sh_b0 >= 0 && count > 0) {
        // Split pieces: the block's first CTA c0 (owner of its first tile G),
        // the slot it keeps the block in (0: the block opens c0's share), its
        // pieces; sample tiles in proportion to the piece (at least one, at
        // most kSplitSampleTiles).
        auto c0_of = [&](long long G) { return split_owner(G, total, gp); };
        auto slot0_of = [&](long long G) { return total * c0_of(G) / gp == G ? 0 : 1; };
        auto pieces_of = [&](long long G, int ntb) { return split_owner(G + ntb - 1, total, gp) - c0_of(G) + 1; };
        auto ns_of = [&](int ntb, int np) {
          const int nsb = fused_sample_tiles(ntb, k);
          int v = (nsb * np + ntb - 1) / ntb;
          v = v < 1 ? 1 : v;
          v = v > Cfg::kSplitSampleTiles ? Cfg::kSplitSampleTiles : v;
          return v < np ? v : np;
        };
        int lo, hi;
        const int bf = shr->sh_b0, tf = shr->sh_t0;
        const int ntf = block_span<R, Cfg::kBlockKeys>(lp, bf, lo, hi);
        const int npf = static_cast<int>(min(static_cast<long long>(ntf - tf), count));
        const bool split_f = tf > 0 || tf + npf < ntf;
        int bl = -1, npl = 0, ntl = 0;  // the share's last block, if not bf
        long long left = count - npf;
        for (int b = bf + 1; left > 0 && b < nblocks; ++b) {
          const int n = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
          if (n == 0) continue;
          if (left <= n) {
            bl = b;
            npl = static_cast<int>(left);
            ntl = n;
            break;
          }
          left -= n;
        }
        const bool split_l = bl >= 0 && npl < ntl;
        const long long gf = g0 - tf, gl = g0 + count - npl;
        const int nsf = split_f ? ns_of(ntf, npf) : 0, nsl = split_l ? ns_of(ntl, npl) : 0;
        if (split_f) visit(bf, tf, npf, nsf, 0xffu, kVisitSample, 0, nsf, 0, c0_of(gf), slot0_of(gf), pieces_of(gf, ntf));
        if (split_l) visit(bl, 0, npl, nsl, 0xffu, kVisitSample, 0, nsl, 1, c0_of(gl), slot0_of(gl), pieces_of(gl, ntl));
        if (split_f) {
          visit(bf, tf, npf, nsf, 0xffu, kVisitRest, nsf, npf, 0, c0_of(gf), slot0_of(gf), pieces_of(gf, ntf));
          ++issued;
        } else {
          whole(bf, ntf, 0xffu, false);
        }
        for (int b = bf + 1; b < bl; ++b) {
          const int n = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
          if (n > 0) whole(b, n, 0xffu, false);
        }
        if (split_l) {
          visit(bl, 0, npl, nsl, 0xffu, kVisitRest, nsl, npl, 1, c0_of(gl), slot0_of(gl), pieces_of(gl, ntl));
          ++issued;
        } else if (bl >= 0) {
          whole(bl, ntl, 0xffu, false);
        }
      }
      // The blocks past the shares, whole, from the block counter (largest
      // first; a block is claimed only once its Q buffer is free).
      const int nshare = blocks_share_blocks(nblocks, gridDim.x);
      for (;;) {
        ptx::mbar_wait(q_empty + (qi & 1), ((qi >> 1) & 1) ^ 1);
        const int w = atomicAdd(p.counter, 1);
        if (w >= nblocks - nshare) break;
        const int b = nblocks - 1 - w;
        int lo, hi;
        const int n = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
        visit(b, 0, n, fused_sample_tiles(n, k), 0xffu, kVisitWhole, 0, n, 2, 0, 0, 1);
        ++issued;
      }
      // Blocks with no tile (every row empty) among the shares' blocks: block b by CTA b mod grid.
      for (int b = blockIdx.x; b < nshare; b += gridDim.x) {
        int lo, hi;
        if (block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi) == 0) whole(b, 0, 0xffu, false);
      }
      // Redos (whole blocks, no gate) until every half this CTA issued has
      // reported (a half's redo is queued before it counts itself).
      for (;;) {
        int b = -1;
        uint32_t mask = 0;
        bool got = redo_queue_pop(ctl_v, head, b, mask, [](volatile BlocksCtl*, int) {});
        if (!got) {
          if (ctl_v->halves_done < 2 * issued) {
            __nanosleep(256);
            continue;
          }
          got = redo_queue_pop(ctl_v, head, b, mask, [](volatile BlocksCtl*, int) {});
          if (!got) break;
        }
        int lo, hi;
        whole(b, block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi), mask, true);
      }
      const int qb = qi & 1;
      ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
      slot[SI * qb] = -1;
      ptx::mbar_arrive(q_full + qb);
      return;
    }
    // ---- whole blocks from the block counter ----
    const int nb = (p.rows + R - 1) / R;
    int it = 0, issued = 0, head = 0;
    for (int qi = 0;; ++qi) {
      const int qb = qi & 1;
      ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
      // Claim the next block only once its Q buffer is free (one block ahead).
      int b = -1;
      uint32_t active = 0xffu;
      // A redo is a rescan with no gate (a gated redo of a block whose rows all
      // failed would fail again, forever).
      bool redo = redo_queue_pop(ctl_v, head, b, active, [](volatile BlocksCtl*, int) {});
      bool have = redo;
      if (!have) {
        const int w = atomicAdd(p.counter, 1);
        if (w < nb) {
          b = nb - 1 - w;
          have = true;
        } else {
          // No new block: a block still in flight may yet need a redo (each
          // row group reports its half of a block).
          while (ctl_v->halves_done < 2 * issued) __nanosleep(256);
          redo = have = redo_queue_pop(ctl_v, head, b, active, [](volatile BlocksCtl*, int) {});
        }
      }
      if (!have) {
        slot[SI * qb] = -1;
        ptx::mbar_arrive(q_full + qb);
        return;
      }
      ++issued;
      int lo, hi;
      const int nt = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
      const int stride = tile_stride(nt);
      slot[SI * qb + 0] = b;
      slot[SI * qb + 1] = lo;
      slot[SI * qb + 2] = nt;
      slot[SI * qb + 3] = stride;
      slot[SI * qb + 4] = !redo ? fused_sample_tiles(nt, k) : 0;
      slot[SI * qb + 5] = static_cast<int>(active);
      if (nt == 0) {  // every row empty: the consumers only write -1
        ptx::mbar_arrive(q_full + qb);
        continue;
      }
      ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
      load_q(b, qb);
      ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, &tm_weights, q_full + qb, 0, b * R);
      for (int t = 0, tp = nt - 1; t < nt; ++t, ++it, tp = next_tile(tp, nt, stride)) {
        const int stage = it % S;
        ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
        const int key0 = lo + tp * Cfg::kBlockKeys;
        ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
        ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, full + stage, 0, key0);
        ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, full + stage, key0, 0);
      }
    }
  }

  // ---------------- math warpgroups ----------------
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  const long long diag_t0 = fused_diag_clock();
  // The warpgroup index through a shuffle from lane 0: warp-uniform, so the
  // descriptor words derived from it stay in uniform registers.
  const int wg_u = __shfl_sync(0xffffffffu, wg, 0);
  const int rg = wg_u >> 1, kg = wg_u & 1;  // row group, key group
  const int warp_in_wg = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int my_row = 4 * rg + quad;          // the block row this lane holds after the reduce-scatter
  const int seg = kg * 4 + warp_in_wg;       // this warp's segment of each of its rows
  const bool selector = kg == 0;             // warp warp_in_wg of the first warpgroup reports row 4 rg + warp_in_wg
  const int sel_row = 4 * rg + warp_in_wg;
  const int bar_rg = 5 + rg;                 // named barrier of the row group (8 warps)
  const uint32_t a_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffK + kg * 64 * 128);
  const uint32_t b_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffQ + rg * L::kN * 128);
  // words from one segment of a row to the next (a constant: one topk per configuration)
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(Cfg::cap(Cfg::kTopk));
  const int key_in_tile = kg * 64 + warp_in_wg * 16 + (lane >> 2);  // this lane's first key of a tile (and + 8)

  int it = 0;
  int st_i = 0;        // the next tile's stage in the ring, and its phase
  uint32_t st_ph = 0;
  for (int qi = 0;; ++qi) {
    if constexpr (Cfg::kSplit) {
      // (warp-uniform by construction; said so, so that the stage and Q buffer
      // indices, hence the MMA descriptors, stay in uniform registers)
      qi = __shfl_sync(0xffffffffu, qi, 0);
      it = __shfl_sync(0xffffffffu, it, 0);
    }
    const int qb = qi & 1;
    const int qs = qb;
    ptx::mbar_wait(q_full + qs, (qi >> 1) & 1);
    const int b = slot[SI * qs];
    if (b < 0) break;
    const int nt = Cfg::kSplit ? __shfl_sync(0xffffffffu, slot[SI * qs + 2], 0) : slot[SI * qs + 2];
    const int stride = Cfg::kSplit ? __shfl_sync(0xffffffffu, slot[SI * qs + 3], 0) : slot[SI * qs + 3];
    // Split blocks: the visit's kind, its walk positions [t_begin, t_end) of
    // the piece's nt tiles, its candidate region and its split block (c0,
    // slot0, pieces); a rest visit has no sample tiles (its gate is the
    // pieces'). (The fields the tile loops do not need are kept in this warp's
    // vis slot, registers being at their cap in the loops; the producer may
    // rewrite the Q buffer's slot once the visit's last MMA has released it.)
    // (a function, not a pointer held across the tile loops)
    auto vis_of = [&]() -> volatile int* {
      return reinterpret_cast<SplitShare*>(smem + Cfg::kOffShr)->vis[rg][qb];
    };
    // A vis field as a warp-uniform value (a shuffle from lane 0): branches on
    // it stay uniform, so the loop counters (and the MMA descriptors derived
    // from them) stay in uniform registers.
    auto vis_u = [&](int i) { return __shfl_sync(0xffffffffu, vis_of()[i], 0); };
    const int kind0 = Cfg::kSplit ? __shfl_sync(0xffffffffu, slot[SI * qs + 6], 0) : kVisitWhole;
    const int t_begin = Cfg::kSplit ? __shfl_sync(0xffffffffu, slot[SI * qs + 7], 0) : 0;
    const int reg0 = Cfg::kSplit ? slot[SI * qs + 9] : 0;
    if constexpr (Cfg::kSplit) {
      // kind, t_begin, t_end, reg, c0, slot0, pieces, the piece's tiles, active rows
      if (lane < 9) vis_of()[lane] = slot[SI * qs + (lane < 7 ? 6 + lane : lane == 7 ? 2 : 5)];
      __syncwarp();
    }
    const int ns = kind0 == kVisitRest ? 0 : Cfg::kSplit ? __shfl_sync(0xffffffffu, slot[SI * qs + 4], 0) : slot[SI * qs + 4];
    // A rest visit starts with the pieces' shared gate and this piece's sample
    // entries at or above it: the previous visit's end ran it
    // (blocks_prestart; every split visit is preceded by one, the first of a
    // CTA is never a rest visit), before this visit's loop state exists (a call
    // between the loops costs the tile loops their registers).
    uint32_t rest_cnt = 0;
    if constexpr (Cfg::kSplit)
      if (kind0 == kVisitRest) rest_cnt = reinterpret_cast<const volatile SplitShare*>(smem + Cfg::kOffShr)->rest_cnt[tid >> 5][quad];
    // (The loops keep the whole block's bounds: a rest visit covers the walk
    // positions [t_begin, nt); a split sample's ns tiles end before nt (its Q
    // buffer is released after the loop unless ns == nt) and its compaction
    // check, if any, finds its tails far under the trigger.)
    const uint32_t active = static_cast<uint32_t>(slot[SI * qs + 5]);
    // Row r's segment s: keys at word (r * NS + s) * seg_stride of the set,
    // indices + cap; this lane's own segment as a 32-bit word offset from p.ws
    // (registers are at their cap in the tile loop).
    const uint32_t set_off = Cfg::kSplit ? static_cast<uint32_t>(blocks_set_off<Cfg>(p, reg0))
                                          : blockIdx.x * static_cast<uint32_t>(set_words);
    // (a split sample appends to the segment's tail)
    const uint32_t my_off = set_off + static_cast<uint32_t>(my_row * NS + seg) * seg_stride +
                            (Cfg::kSplit && kind0 == kVisitSample ? static_cast<uint32_t>(p.cap - Cfg::kTail) : 0u);
    int pub = 0;  // segment-count publications of this block (compaction checks, gate, block end)
    auto segcnt_of = [&](int pb) { return segcnt_all + (pb & 1) * 8 * NS; };  // [row][seg]
    unsigned long long* thr_s = thr_all;    // [row]

    // This lane's row: the keys [rs, rs + len) (relative test: ka - rs < len, unsigned).
    const int row_g = blocks_row<Cfg>(b, my_row);
    int rs = 0, re = 0;
    if (row_g < p.rows && ((active >> my_row) & 1u)) {
      rs = __ldg(p.starts + row_g);
      re = __ldg(p.ends + row_g);
      clamp_row_range(rs, re, p.keys);
    }
    const uint32_t len = static_cast<uint32_t>(re - rs);
    // ka of tile tp = key_base + tp * 128 (this lane's first key; the second is + 8).
    const int key_base = slot[SI * qs + 1] + kg * 64 + warp_in_wg * 16 + (lane >> 2);
    bool row_gated = false;  // selector warps: row sel_row has a gate in this block
    uint32_t cnt = rest_cnt;  // entries of this lane's row in this warp's segment
    uint64_t thr = Cfg::kSplit && kind0 == kVisitRest ? thr_all[my_row] : 0;  // this lane's row threshold: candidates have composite > thr

    // Loop invariants held in registers for the block (each with an opaque
    // move per tile, so that ptxas keeps them instead of rematerializing them):
    // the quad's lane mask and the lanes-below mask; this lane's four weight
    // rows' shared addresses (slot s holds row s ^ quad), read at immediate
    // offsets; and (kHeldDescs) the block's four Q (B operand) descriptors and
    // the four A descriptors' pairs as 64-bit values (each tile writes the A
    // descriptors' low words only).
    uint32_t qmask_k = 0x11111111u << quad, lt_k = ptx::lanemask_lt();
    uint64_t db_k[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
      asm("mov.b64 %0, {%1, %2};" : "=l"(db_k[kk]) : "r"(b_lo0 + qb * (Cfg::kQTileBytes >> 4) + 2 * kk), "r"(kDescHi));
    }
    uint64_t da_k[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
      asm("mov.b64 %0, {%1, %2};" : "=l"(da_k[kk]) : "r"(a_lo0 + 2 * kk), "r"(kDescHi));
    }
    uint32_t wa_k[4];
#pragma unroll
    for (int s4 = 0; s4 < 4; ++s4)
      wa_k[s4] = ptx::smem_addr(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) +
                 (Cfg::kHeadPasses == 1 ? (rg * 64 + (s4 ^ quad) * 16 + quad) * 8
                                        : ((rg * 4 + (s4 ^ quad)) * Cfg::kHeads + 2 * quad) * 4);
    // The filter and appends of one tile (its "tail"): this lane's order keys
    // k0 / k1 of keys ka / ka + 8 of walk position t. kSample: also the
    // tile's largest key per row (the gate's position cap). The pass flags
    // without short-circuits; the appends as predicated stores at 32-bit word
    // offsets, the index store at an immediate offset from the key store.
    auto tile_tail = [&](auto sample_tag, uint32_t k0, uint32_t k1, int ka, int t) {
      constexpr bool kSample = decltype(sample_tag)::value;
#if defined(MQA_TOPK_FUSED_PROBE_NOTAIL)
      if constexpr (!kSample) {  // (the logits still computed)
        cnt += (k0 ^ k1) == 0x5a5a5a5au;
        return;
      }
#endif
      const int kb = ka + 8;
      const bool in0 = static_cast<uint32_t>(ka - rs) < len, in1 = static_cast<uint32_t>(kb - rs) < len;
      const bool pass0 = in0 & (composite(k0, static_cast<uint32_t>(ka)) > thr);
      const bool pass1 = in1 & (composite(k1, static_cast<uint32_t>(kb)) > thr);
      if constexpr (kSample) {
        uint32_t mx = max(in0 ? k0 : 0u, in1 ? k1 : 0u);
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        if (lane < 4 && mx) atomicMax(&ctl->tile_max[4 * rg + lane][t], mx);
      }
      asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;" : "+r"(qmask_k), "+r"(lt_k));
      const uint32_t qmask = qmask_k;
      const uint32_t m0 = __ballot_sync(0xffffffffu, pass0) & qmask;
      const uint32_t m1 = __ballot_sync(0xffffffffu, pass1) & qmask;
      const uint32_t lt = lt_k;
      const uint32_t n0 = __popc(m0);
      const uint32_t o = my_off + cnt;  // this lane's next slot: a word offset from p.ws
      constexpr int kCapW = Cfg::cap(Cfg::kTopk);
      const uint32_t at0 = o + __popc(m0 & lt), at1 = o + n0 + __popc(m1 & lt);
      ptx::st_cg_pair_if_off<kCapW>(pass0, p.ws + at0, k0, static_cast<uint32_t>(ka));
      ptx::st_cg_pair_if_off<kCapW>(pass1, p.ws + at1, k1, static_cast<uint32_t>(kb));
      cnt += n0 + __popc(m1);
    };
    // The tile whose tail is pending (its order keys and first key; its walk
    // position is the current tile's minus one): each tile's tail runs after
    // the next tile's MMAs are issued, while they run. (kAlwaysTail: the
    // pending tail runs unconditionally, no flag: with nothing pending its
    // first key is rs - 16, so both keys are out of the row's range.)
    uint32_t pend_k0 = 0, pend_k1 = 0;
    int pend_ka = Cfg::kAlwaysTail ? rs - 16 : 0;
    bool pend_ok = false;
    bool rel_next = false;  // kLazyCheck: the next stage release orders the published counts
    // kLazyCheck: the count slot of check j for row `row`, segment `sg`.
    auto ckc_at = [&](int j, int row, int sg) -> uint32_t& {
      return reinterpret_cast<uint32_t*>(smem + Cfg::kOffCkc)[((j & 1) * 8 + row) * NS + sg];
    };
    auto flush = [&](auto sample_tag, int t_next) {
      if (Cfg::kAlwaysTail || pend_ok) tile_tail(sample_tag, pend_k0, pend_k1, pend_ka, t_next - 1);
      pend_ok = false;
      if constexpr (Cfg::kAlwaysTail) pend_ka = rs - 16;
    };

    // One key tile: MMA, epilogue, filter, appends to this warp's segments.
    // kSample: also the tile's largest key per row (the gate's position cap).
    auto tile = [&](auto sample_tag, int t, int tp) {
      const int stage = st_i;
      ptx::mbar_wait(full + stage, st_ph);
      if (++st_i == S) {  // (the next tile's)
        st_i = 0;
        st_ph ^= 1u;
      }
      float acc[L::kAcc];
      // The scales before the MMAs, the release after their use (tile_scales).
      float scale0, scale1;
      tile_scales(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, key_in_tile, scale0, scale1);
      float2 w[4][4];
      if constexpr (Cfg::kHeldDescs) {
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(db_k[0]), "+l"(db_k[1]), "+l"(db_k[2]), "+l"(db_k[3]));
        desc_pairs_set_lo(da_k, a_lo0 + stage * (Cfg::kKTileBytes >> 4));  // the A descriptors: new low words
        logits_mma_issue_dab(acc, da_k, db_k);
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(da_k[0]), "+l"(da_k[1]), "+l"(da_k[2]), "+l"(da_k[3]));
      } else {
        logits_tile_mma_issue_lo<L>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), b_lo0 + qb * (Cfg::kQTileBytes >> 4));
      }
      if (Cfg::kAlwaysTail || pend_ok) tile_tail(sample_tag, pend_k0, pend_k1, pend_ka, t - 1);  // while the MMAs run
      ptx::wgmma_wait<0>();
      ptx::fence_regs(acc);
      float fin[2][1];
      // The block's weights from the TMA-loaded buffer at the held row addresses.
      asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;\n\tmov.b32 %3, %3;"
                   : "+r"(wa_k[0]), "+r"(wa_k[1]), "+r"(wa_k[2]), "+r"(wa_k[3]));
#if defined(MQA_TOPK_FUSED_PROBE_WLOADS)
      // Development probe (dev/fused_bound.py; its logits are wrong): the
      // per-tile weight loads cut to one per row (1) or none (0: weights 1).
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        w[r][0] = MQA_TOPK_FUSED_PROBE_WLOADS ? blocks_lds_f2<0>(wa_k[r]) : make_float2(1.f, 1.f);
        w[r][1] = w[r][2] = w[r][3] = w[r][0];
      }
#else
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        w[r][0] = blocks_lds_f2<0>(wa_k[r]);
        w[r][1] = blocks_lds_f2<32>(wa_k[r]);
        w[r][2] = blocks_lds_f2<64>(wa_k[r]);
        w[r][3] = blocks_lds_f2<96>(wa_k[r]);
      }
#endif
      if constexpr (Cfg::kHeadPasses == 1) {
        logits_reduce_perm(acc, w, fin);
      } else {
        // The second head pass (64 heads): its MMA on the Q sub-tile of heads
        // 32-63, the partials' chains continued (the dense kernel's order).
        float part[2][4];
        logits_head_partials(acc, w, part);
        if constexpr (Cfg::kHeldDescs) {
          uint64_t db1[4];
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) db1[kk] = db_k[kk] + (Cfg::kQPassBytes >> 4);
          logits_mma_issue_dab(acc, da_k, db1);
        } else {
          logits_tile_mma_issue_lo<L>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4),
                                      b_lo0 + qb * (Cfg::kQTileBytes >> 4) + (Cfg::kQPassBytes >> 4));
        }
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          w[r][0] = blocks_lds_f2<128>(wa_k[r]);
          w[r][1] = blocks_lds_f2<160>(wa_k[r]);
          w[r][2] = blocks_lds_f2<192>(wa_k[r]);
          w[r][3] = blocks_lds_f2<224>(wa_k[r]);
        }
        logits_head_partials<true>(acc, w, part);
        logits_reduce_perm_part(part, fin);
      }
      if (t + 1 == nt) {  // the block's last MMA has read Q
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(q_empty + qs);
      }
      const int ka = key_base + tp * Cfg::kBlockKeys;
      const uint32_t k0 = order_key(fin[0][0] * scale0), k1 = order_key(fin[1][0] * scale1);
      // The stage's release after the scales' use (their loads are complete):
      // a release arrival, which also carries whatever a lazy check published.
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(empty + stage);
      pend_k0 = k0;
      pend_k1 = k1;
      pend_ka = ka;
      pend_ok = true;
      ++it;
    };

    auto check = [&]() {
      const uint4 r = blocks_check_call<Cfg>(&p, Cfg::kSplit ? qb : 0, pub & 1, cnt, static_cast<uint32_t>(thr),
                                               static_cast<uint32_t>(thr >> 32));
      ++pub;
      cnt = r.x;
      thr = (static_cast<uint64_t>(r.z) << 32) | r.y;
    };
    int t = 0, tp = nt - 1;
    if constexpr (Cfg::kSplit)
      for (; t < t_begin; ++t) tp = next_tile(tp, nt, stride);
    // Tiles left until the next check ((t + 1) % kCheckTiles == 0 as a
    // countdown; split visits count from their first walk position t_begin).
    int chk_left = Cfg::kCheckTiles - (Cfg::kSplit ? t_begin % Cfg::kCheckTiles : 0);
    auto check_due = [&](int tt) {
      if (--chk_left != 0) return false;
      chk_left = Cfg::kCheckTiles;
      return tt + 1 < nt;
    };
#pragma unroll 1
    for (; t < ns; ++t, tp = next_tile(tp, nt, stride)) {
      tile(std::true_type{}, t, tp);
      if (check_due(t)) {
        flush(std::true_type{}, t + 1);
        check();
      }
    }
    flush(std::true_type{}, t);
    if (ns > 0 && (!Cfg::kSplit || vis_u(0) == kVisitWhole)) {  // (a whole block's gate)
      // ---- the gate of each row from its sample (every in-range key of the first ns tiles) ----
      uint32_t* segcnt = segcnt_of(pub++);
      if (lane < 4) segcnt[(4 * rg + lane) * NS + seg] = cnt;
      ptx::named_barrier_sync(bar_rg, 256);
      {
        const bool gd = blocks_gate_pair_call<Cfg>(&p, Cfg::kSplit ? 2 : 0, (pub - 1) & 1, b, active, ns);
        if (selector) row_gated = gd;
      }
      ptx::named_barrier_sync(bar_rg, 256);
      // Drop this warp's sample entries below the gate (its 4 rows' segments, in
      // place), unless the sample is small: entries below a key's gate are not
      // eligible at the block end or in a compaction (eligibility is key >= the
      // threshold's), so they may stay where the sample plus a generous share of
      // the expected candidates per segment stays under the compaction trigger.
      // A gate cut by index (pair_tie_gate; its low word is nonzero) is always
      // dropped to: its tied key's entries past the cut would count as eligible.
      thr = thr_s[my_row];
      uint32_t* ws_set = ws_cta_base(p, set_off);
      const int gate_target = fused_gate_target(k);
      const bool drop = 16 * ns + (5 * gate_target) / 32 > p.cap - (Cfg::kLazyCheck ? 32 : 16) * Cfg::kCheckTiles;
#pragma unroll 1
      for (int i = 0; i < 4; ++i) {
        const int r = 4 * rg + i;
        const uint64_t th = thr_s[r];
        const uint32_t c = __shfl_sync(0xffffffffu, cnt, i);  // lane i holds row 4 rg + i
        if (th != 0 && c != 0 && (drop || static_cast<uint32_t>(th) != 0u)) {
          uint32_t* kp = ws_set + size_t(r * NS + seg) * seg_stride;
          uint32_t* ip = kp + p.cap;
          const Segs sg{{kp, nullptr}, {ip, nullptr}, {static_cast<int>(c), 0}, 1};
          const int left = warp_emit(sg, th, lane, [&](int at, uint32_t key, uint32_t idx) {
            __stcg(kp + at, key);
            __stcg(ip + at, idx);
          });
          if (quad == i) cnt = static_cast<uint32_t>(left);
        }
      }
      if constexpr (Cfg::kLazyCheck) {
        // The counts after the drop, for the first check after the gate
        // (check j1, the first with j1 kCheckTiles - 1 >= ns), ordered by a
        // barrier (that check may come fewer than 8 tiles after the gate).
        const int j1 = (ns + Cfg::kCheckTiles) / Cfg::kCheckTiles;
        if (lane < 4) ckc_at(j1 - 1, 4 * rg + lane, seg) = cnt;
        ptx::named_barrier_sync(bar_rg, 256);
      }
    }
    if (Cfg::kSplit && vis_u(0) == kVisitSample) t = nt;  // (its rest is another visit)
#pragma unroll 1
    for (; t < nt; ++t, tp = next_tile(tp, nt, stride)) {
      tile(std::false_type{}, t, tp);
      if (check_due(t)) {
        flush(std::false_type{}, t + 1);
        if constexpr (Cfg::kLazyCheck) {
          const int j = (t + 1) / Cfg::kCheckTiles;
          if (lane < 4) ckc_at(j, 4 * rg + lane, seg) = cnt;
          const uint32_t c = ckc_at(j - 1, 4 * rg + (lane & 3), lane >> 2);
          const uint32_t lazy_trigger = static_cast<uint32_t>(p.cap - 32 * Cfg::kCheckTiles);
          if (__any_sync(0xffffffffu, c > lazy_trigger)) {  // the same answer in all 8 warps of the row group
            check();
            if (lane < 4) ckc_at(j, 4 * rg + lane, seg) = cnt;  // (after a compaction)
          }
          rel_next = true;
        } else {
          check();
        }
      }
    }
    flush(std::false_type{}, t);

    // ---- block end: both warps of each row select it over the row's 8 segments ----
    if (Cfg::kSplit ? vis_u(1) == vis_u(2) : nt == 0) {  // no tile released the (unloaded) Q buffer
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qs);
    }
    if constexpr (Cfg::kSplit) {
      // (one call for the whole visit end: every call site of the rest starts
      // in this loop costs the tile loops their registers)
      if (vis_u(0) != kVisitWhole) {
        blocks_visit_end<Cfg>(&p, qi, b, cnt);
        continue;
      }
    }
    uint32_t* segcnt = segcnt_of(pub);
    if (lane < 4) segcnt[(4 * rg + lane) * NS + seg] = cnt;
    ptx::named_barrier_sync(bar_rg, 256);  // every append and count of the row group visible
    {
      // Both warps of row sel_row (key groups 0 and 1) select it; the first
      // (the selector) holds the gate flag and reports the row.
      const int r = sel_row, row = blocks_row<Cfg>(b, r);
      bool ok = true;
      if (((active >> r) & 1u) && row < p.rows)
        ok = blocks_pair_end_call<Cfg>(&p, Cfg::kSplit ? 2 : 0, pub & 1, b, row_gated);
#if defined(MQA_TOPK_FUSED_PROBE_NOTAIL)
      ok = true;
#endif
      if (selector) {
        if (lane == 0) {
          thr_s[r] = 0;
          reinterpret_cast<uint32_t*>(smem + Cfg::kOffSmax)[r] = 0;
          if (!ok) atomicOr(&redo_rg[rg], 1u << r);
        }
        ptx::named_barrier_sync(1 + wg_u, 128);  // the row group's 4 rows are reported
        if ((tid & 127) == 0) {
          // Each row group reports its half of the block (its rows to redo, if
          // any); the producer ends once every half it issued has reported.
          volatile uint32_t* rr = redo_rg + rg;
          const uint32_t mask = *rr;
          *rr = 0;
          blocks_half_finished(ctl, b, mask, p.counter + kFusedRedoWord);
        }
      }
    }
    // One candidate set: the next block reuses these segments only after the selects.
    ptx::named_barrier_sync(bar_rg, 256);
    if constexpr (Cfg::kSplit) blocks_prestart<Cfg>(&p, qi + 1);  // (a whole block's end: the next visit's start)
  }
  fused_diag_cycles(p.counter, kDiagMath, diag_t0);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fused_blocks_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                  const __grid_constant__ CUtensorMap tm_scales,
                                  const __grid_constant__ CUtensorMap tm_weights, const __grid_constant__ Sm90FusedParams p) {
  blocks_body<Cfg>(tm_q, tm_k, tm_scales, tm_weights, p);
}
// The shipped configurations: whole blocks (one CTA per 8-row block from the
// block counter) and split blocks (equal tile shares over every CTA; the
// blocks of the partial last wave split into pieces), one per topk.
template <int kTopk, int kHeads = 32>
using FusedWholeConfig = Sm90FusedBlocksConfig<kTopk, false, kHeads>;
template <int kTopk, int kHeads = 32>
using FusedSplitConfig = Sm90FusedBlocksConfig<kTopk, true, kHeads>;

// Launches the kernel (Cfg: one of the two configurations, topk Cfg::kTopk):
// q [rows, 32, 128] and k [keys, 128] fp8, scales [keys], weights [rows, 32]
// fp32, starts / ends [rows], out [rows, topk] int32; workspace
// fused_blocks_workspace_bytes<Cfg>(topk, num_sms) bytes, 256-byte aligned
// (its header zeroed here); num_sms CTAs, one per SM (the split launch passes
// blocks_split_grid's count, at most the SMs). *map_error: the first tensor map
// that could not be encoded (1000 x its index + CUresult).
template <class Cfg>
inline cudaError_t launch_sm90_fused_blocks(const void* q, const void* k, const float* scales, const float* weights,
                                            const int* starts, const int* ends, int* out, void* workspace, int rows,
                                            int keys, int topk, int num_sms, cudaStream_t stream,
                                            int* map_error = nullptr, RangeErrorSink range_err = {}) {
  if (rows <= 0) return cudaSuccess;
  if (topk != Cfg::kTopk) return cudaErrorInvalidValue;  // (one topk per configuration)
  CUtensorMap tm_q, tm_k, tm_s, tm_w;
  const uint64_t q_rows = static_cast<uint64_t>(rows) * Cfg::kHeads;
  const int kk = keys > 0 ? keys : 1;  // keys == 0: maps stay valid, every row is empty
  const int res[4] = {
      make_tensor_map_2d(&tm_q, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, q_rows, 128, 128, Cfg::kQBoxRows,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_k, keys > 0 ? k : q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, kk, 128, 128, Cfg::kBlockKeys,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_s, keys > 0 ? static_cast<const void*>(scales) : weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                         kk, 1, (uint64_t(kk) * 4 + 15) / 16 * 16, Cfg::kBlockKeys, 1, CU_TENSOR_MAP_SWIZZLE_NONE),
      make_tensor_map_2d(&tm_w, weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, Cfg::kHeads, rows, Cfg::kHeads * 4,
                         Cfg::kHeads, Cfg::kRowsPerBlock, CU_TENSOR_MAP_SWIZZLE_NONE)};
  if (const int e = first_map_error(res, 4)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fused_blocks_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  int* counter = static_cast<int*>(workspace);
  // (kSplit: and the split blocks' counters after the header)
  err = cudaMemsetAsync(counter, 0, kFusedHeaderBytes + (Cfg::kSplit ? size_t(num_sms) * kShareCtrWords * 4 : 0), stream);
  if (err != cudaSuccess) return err;
  uint32_t* ws = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) + kFusedHeaderBytes);
  const Sm90FusedParams p{starts, ends, out, ws, counter, rows, keys, topk, Cfg::cap(topk), range_err};
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
