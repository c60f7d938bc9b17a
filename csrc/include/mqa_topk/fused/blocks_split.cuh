// The split protocol of the block kernel's split configuration
// (sm90_fused_blocks.cuh, kSplit): blocks cut into pieces on several CTAs,
// each piece a CTA's visits. Hopper (sm_90a), torch-free.
//
// The producer turns the CTA's share (fused_split_share: equal contiguous
// shares of the call's tiles) into visits (slot words of a Q buffer: b, the
// piece's first key, its tiles np, the walk stride, its sample tiles, active
// rows, kind, the walk positions [t_begin, t_end) of this visit, the region,
// and for a split block its first CTA c0, that CTA's slot slot0 and its
// pieces). A split piece is visited twice: kVisitSample (its first ns walk
// positions into the tails of region slot's segments, no threshold; its
// sample counts, tile maxima and sample histograms published), then, after
// the CTA's other split piece has sampled too, kVisitRest (the shared gate
// ranked from every piece's published sample histograms, the sample entries
// at or above it copied to the segments' heads, the rest of the walk, the
// final counts and histograms published, and the merge when it is the
// block's last piece: one gather pass over the pieces' summed bins). Whole
// blocks are kVisitWhole in region 2, as the whole configuration runs them.
// Every piece's samples are published at the start of its CTA's work, so a
// rest visit waits only for visits that never wait: no deadlock with the grid
// resident (one CTA per SM, grid <= SMs).
#pragma once

#include "blocks_select.cuh"

namespace mqa_topk {

// The producer turns the CTA's share (fused_split_share: equal contiguous
// shares of the call's tiles) into visits (slot words of a Q buffer: b, the
// piece's first key, its tiles np, the walk stride, its sample tiles, active
// rows, kind, the walk positions [t_begin, t_end) of this visit, the region,
// and for a split block its first CTA c0, that CTA's slot slot0 and its
// pieces S). A split piece is visited twice: kVisitSample (its first ns walk
// positions into the tails of region slot's segments, no threshold), then,
// after the CTA's other split piece has sampled too, kVisitRest (the shared
// gate, the sample entries at or above it copied to the segments' heads, the
// rest of the walk, the publication, and the merge when it is the block's last
// piece). Whole blocks are kVisitWhole in region 2, as the unshared kernel.
// Every piece's samples are published at the start of its CTA's work, so a
// rest visit waits only for visits that never wait: no deadlock with the grid
// resident (one CTA per SM, grid <= SMs).
__device__ __forceinline__ int* blocks_ctr(const Sm90FusedParams& p, int c, int slot) {
  return reinterpret_cast<int*>(p.ws) + c * kShareCtrWords + slot * 4;
}
__device__ __forceinline__ uint32_t* blocks_rec(const Sm90FusedParams& p, int c, int slot) {
  return p.ws + size_t(gridDim.x) * kShareCtrWords + size_t(c * 3 + slot) * 256;
}

// The split protocol's fences. A piece publishes by: every thread stores,
// the row group's barrier, then one thread fences (fence.acq_rel.gpu) and
// counts (the barrier orders the others' stores before its fence, as
// cooperative groups' grid sync does); a reader polls the count, fences, then
// loads. (A fence.sc.gpu by every writer, __threadfence, is not needed and
// showed as membar stalls.)
template <class Cfg>
__device__ __forceinline__ void blocks_fence() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
// A warp waits until counter word `w` of the split block (c0, slot0) reaches
// n, then fences (its reads after it see what the count publishes). Every
// warp waits for itself, on a warp-uniform condition: a loop the compiler
// cannot prove uniform in these calls makes the tile loops' values
// non-uniform after it, and costs them their registers.
template <class Cfg>
__device__ __forceinline__ void blocks_wait_ctr(const Sm90FusedParams& p, int c0, int slot0, int w, int n) {
  const volatile int* ctr = blocks_ctr(p, c0, slot0) + w;
  while (__shfl_sync(0xffffffffu, *ctr, 0) < n) __nanosleep(64);
  blocks_fence<Cfg>();
}

// Row r's published bins (which: 0 the sample's, 1 the final candidates') of
// the piece in region (c, slot), after the candidate regions.
template <class Cfg>
__device__ __forceinline__ uint32_t* blocks_hist(const Sm90FusedParams& p, int c, int slot, int which, int r) {
  const size_t set_words = size_t(8) * Cfg::kSegs * 2 * size_t(p.cap);
  return p.ws + size_t(gridDim.x) * (kShareCtaWords + kShareRegions * set_words) +
         (size_t(c * kShareRegions + slot) * 2 + static_cast<size_t>(which)) * kShareHistWords + size_t(r) * 256;
}

// The largest of the pieces' published largest sample-tile maxima of row r
// (the union sample's largest key; 0: none). One warp, the same in every warp.
__device__ __forceinline__ uint32_t blocks_union_smax(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                        int lane) {
  uint32_t m = 0;
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform: see blocks_union_gate_call)
  for (int i0 = 0; i0 < np; i0 += 32) {
    const int i = i0 + lane;
    if (i < np) m = max(m, __ldcg(blocks_rec(p, c0 + i, i == 0 ? slot0 : 0) + r * 32 + kRecTileMax));
  }
  return __reduce_max_sync(0xffffffffu, m);
}

// Row r's segments over the pieces of the split block (c0, slot0, np pieces):
// the sample tails (sample) or the scan heads with their final counts.
template <class Cfg>
__device__ __forceinline__ fused_detail::PieceSegs blocks_piece_segs(const Sm90FusedParams& p, int c0, int slot0,
                                                                      int np, int r, int half, bool sample) {
  static_assert(fused_detail::kPieceSlots == kShareRegions && Cfg::kSegs == 8, "PieceSegs' layout is kSplit'");
  const uint32_t cap = static_cast<uint32_t>(p.cap);
  fused_detail::PieceSegs s;
  s.base = p.ws + size_t(gridDim.x) * kShareCtaWords + size_t(r * Cfg::kSegs) * 2u * cap +
           (sample ? cap - static_cast<uint32_t>(Cfg::kTail) : 0u);
  s.cnt = blocks_rec(p, 0, 0) + r * 32 + (sample ? kRecSample : kRecFinal);
  s.cap = cap;
  s.c0 = c0;
  s.slot0 = slot0;
  s.np = np;
  s.half = half;
  return s;
}

// The C-th largest (with multiplicity) of the pieces' published sample tile
// maxima of row r (4 per piece, 0 padded): the C-th largest over every sampled
// tile of the block (each piece's 4 largest hold the union's 4 largest); 0
// when fewer than C are nonzero. One warp.
__device__ __forceinline__ uint32_t blocks_union_tile_cap(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                            uint32_t c, int lane) {
  auto at = [&](int i) {
    return __ldcg(blocks_rec(p, c0 + (i >> 2), (i >> 2) == 0 ? slot0 : 0) + r * 32 + kRecTileMax + (i & 3));
  };
  uint64_t bound = 1ull << 32;
  uint32_t acc = 0;
#pragma unroll 1
  for (uint32_t j = 0; j < c; ++j) {
    uint32_t mx = 0;
    for (int i0 = 0; i0 < 4 * np; i0 += 32) {  // (warp-uniform loops: see blocks_union_gate_call)
      const int i = i0 + lane;
      const uint32_t x = i < 4 * np ? at(i) : 0u;
      if (x < bound) mx = max(mx, x);
    }
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (mx == 0) return 0;
    uint32_t eq = 0;
    for (int i0 = 0; i0 < 4 * np; i0 += 32) {
      const int i = i0 + lane;
      eq += i < 4 * np && at(i) == mx ? 1u : 0u;
    }
    acc += __reduce_add_sync(0xffffffffu, eq);
    if (acc >= c) return mx;
    bound = mx;
  }
  return 0;
}

// blocks_union_tile_cap on maxima already in registers (t: lane i's piece
// i's 4 largest, 0 for lanes past the pieces; at most 32 pieces).
__device__ __forceinline__ uint32_t blocks_tile_cap_regs(const uint32_t (&t)[4], uint32_t c) {
  uint64_t bound = 1ull << 32;
  uint32_t acc = 0;
#pragma unroll 1
  for (uint32_t j = 0; j < c; ++j) {
    uint32_t mx = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (t[q] < bound) mx = max(mx, t[q]);
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (mx == 0) return 0;
    uint32_t eq = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) eq += t[q] == mx ? 1u : 0u;
    acc += __reduce_add_sync(0xffffffffu, eq);
    if (acc >= c) return mx;
    bound = mx;
  }
  return 0;
}

// kVisitSample's end (all math warps; cnt: the lane's count in its segment's
// tail): publishes the row group's sample counts, each row's 4 largest sample
// tile maxima and its sample tiles, clears the maxima, counts the row group's
// publication on the block's counter.
template <class Cfg>
__device__ __forceinline__ bool blocks_union_gate_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                         int np);
template <class Cfg>
__device__ __noinline__ void blocks_split_sample_end(const Sm90FusedParams* pp, int reg, int c0, int slot0, int ns,
                                                       uint32_t cnt) {
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  BlocksCtl* ctl = reinterpret_cast<BlocksCtl*>(smem + Cfg::kOffCtl);
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, warp_in_wg = (tid >> 5) & 3;
  uint32_t* rec = blocks_rec(p, blockIdx.x, reg);
  if (lane < 4) __stcg(rec + (4 * rg + lane) * 32 + kRecSample + kg * 4 + warp_in_wg, cnt);
  ptx::named_barrier_sync(5 + rg, 256);  // the row group's tile maxima are complete
  {  // the row's sample bins below the piece's largest sample key, published
    const int r = 4 * rg + warp_in_wg;
    uint32_t* hist = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist) + r * 256;
    fused_detail::PairCtx pc{reinterpret_cast<uint32_t*>(smem + Cfg::kOffPairX) + r * 16, 8 + r, kg, 0};
    const uint32_t smax = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
    const fused_detail::PieceSegs ps = blocks_piece_segs<Cfg>(p, blockIdx.x, reg, 1, r, kg, true);
    fused_detail::pair_for_each(ps, lane, [&](uint32_t key, bool valid) {
      const uint32_t d = smax - key;
      if (valid && key >= 1u && key <= smax && d < (256u << 16)) atomicAdd(hist + (d >> 16), 1u);
    });
    __syncwarp();
    fused_detail::pair_sync(pc.bar);  // both warps' counts are in (and both have read the tile maxima)
    uint4* hv = reinterpret_cast<uint4*>(hist + kg * 128 + lane * 4);
    __stcg(reinterpret_cast<uint4*>(blocks_hist<Cfg>(p, blockIdx.x, reg, 0, r) + kg * 128 + lane * 4), *hv);
    *hv = make_uint4(0u, 0u, 0u, 0u);
  }
  if (kg == 0) {
    const int r = 4 * rg + warp_in_wg;
    uint32_t v = ctl->tile_max[r][lane];
#pragma unroll 1
    for (int j = 0; j < 4; ++j) {
      const uint32_t mx = __reduce_max_sync(0xffffffffu, v);
      const uint32_t at = __ballot_sync(0xffffffffu, v == mx && mx != 0);
      if (at && lane == __ffs(static_cast<int>(at)) - 1) v = 0;
      if (lane == 0) __stcg(rec + r * 32 + kRecTileMax + j, mx);
    }
    if (lane == 0) __stcg(rec + r * 32 + kRecTiles, static_cast<uint32_t>(ns));
    ctl->tile_max[r][lane] = 0;
  }
  ptx::named_barrier_sync(5 + rg, 256);
  if (slot0 < 2 && (tid & 255) == 0) {  // (a whole block, slot 2, has no other piece to tell)
    blocks_fence<Cfg>();
    atomicAdd(blocks_ctr(p, c0, slot0) + rg, 1);
  }
}

// The shared gate of row r from the pieces' published sample bins (both warps
// of the row's pair; hist zero on entry and on exit): piece i's bin j (keys in
// (smax_i - (j + 1) 2^16, smax_i - j 2^16]) counts in bin j + ceil((M -
// smax_i) / 2^16) below the union's largest key M, the lower of the two it may
// fall in, so every entry counted in bins 0 .. J is at or above M - (J + 1)
// 2^16 + 1. Returns the lowest key of the bin that holds the rho-th (at least
// rho entries at or above it; never above the exact rho-th), or 0 when fewer
// than rho entries fall in the 256 bins.
// kRegs (np <= 32): t0, lane i's piece i's largest sample tile maximum,
// already loaded (blocks_union_gate_call): no record loads here, and 8
// pieces' bins in flight instead of 4.
template <class Cfg, bool kRegs = false>
__device__ __forceinline__ uint32_t blocks_union_gate_fast(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                             int kg, uint32_t rho, fused_detail::PairCtx& pc,
                                                             uint32_t* hist, int lane, uint32_t t0 = 0) {
  const uint32_t M = kRegs ? __reduce_max_sync(0xffffffffu, t0) : blocks_union_smax(p, c0, slot0, np, r, lane);
  const uint32_t j_lane = static_cast<uint32_t>(kg * 128 + lane * 4);
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
  constexpr int B = kRegs ? 8 : 4;
#pragma unroll 1
  for (int i0 = 0; i0 < np; i0 += B) {  // (B pieces' loads in flight)
    uint32_t sm[B];
    uint4 h[B];
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = i0 + u;
      const int c = c0 + (i < np ? i : 0), sl = i == 0 ? slot0 : 0;
      if constexpr (kRegs) {
        const uint32_t x = __shfl_sync(0xffffffffu, t0, i & 31);
        sm[u] = i < np ? x : 0u;
      } else {
        sm[u] = i < np ? __ldcg(blocks_rec(p, c, sl) + r * 32 + kRecTileMax) : 0u;
      }
      h[u] = i < np ? __ldcg(reinterpret_cast<const uint4*>(blocks_hist<Cfg>(p, c, sl, 0, r) + j_lane))
                    : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const uint32_t e = M - sm[u];  // (sm <= M; a piece without a sample has no counts)
      const uint32_t j = j_lane + (e >> 16) + ((e & 0xffffu) != 0u ? 1u : 0u);
      if (h[u].x && j < 256u) atomicAdd(hist + j, h[u].x);
      if (h[u].y && j + 1u < 256u) atomicAdd(hist + j + 1u, h[u].y);
      if (h[u].z && j + 2u < 256u) atomicAdd(hist + j + 2u, h[u].z);
      if (h[u].w && j + 3u < 256u) atomicAdd(hist + j + 3u, h[u].w);
    }
  }
  __syncwarp();
  fused_detail::pair_sync(pc.bar);  // both warps' counts are in
  uint32_t tot = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) tot += hist[j * 32 + lane];
  tot = __reduce_add_sync(0xffffffffu, tot);
  uint32_t before = 0, in_bin = 0, bin = 0;
  if (tot >= rho) bin = fused_detail::warp_find_digit_t<false>(hist, rho, false, &before, &in_bin, lane);
  fused_detail::pair_sync(pc.bar);  // both warps have read the histogram
#pragma unroll
  for (int j = 0; j < 4; ++j) hist[kg * 128 + lane * 4 + j] = 0;
  fused_detail::pair_sync(pc.bar);  // cleared before either warp counts into it again
  if (M == 0u || tot < rho) return 0u;
  const uint32_t below = (bin + 1u) << 16;
  return M >= below ? M - below + 1u : 1u;
}

// kVisitRest's gate (all math warps): waits for every piece's sample, then
// row 4 rg + warp_in_wg's pair ranks the shared gate over them
// (blocks_gate_rho_mn's rule on the union; the cap is the C-th largest of all
// the pieces' sample tile maxima, C = min(4, sample tiles)); the first warp
// sets thr_s and gkey. Returns whether the row is gated (the first warp's).
template <class Cfg>
__device__ __forceinline__ bool blocks_union_gate_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                         int np) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const BlocksPairRow<Cfg> rw(p, reg, 0, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2;
  // (Every warp waits for itself, on a warp-uniform condition: a loop the
  // compiler cannot prove uniform in this call makes the tile loops' values
  // non-uniform after it, and costs them their registers.)
  if (np > 1) blocks_wait_ctr<Cfg>(p, c0, slot0, rg, np);
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(rw.smem + Cfg::kOffThr);
  SplitShare* shr = reinterpret_cast<SplitShare*>(rw.smem + Cfg::kOffShr);
  uint32_t m = 0, tiles = 0;
  uint32_t tmx[4] = {0u, 0u, 0u, 0u};  // (np <= 32) lane i's piece i's 4 largest tile maxima
  for (int i0 = 0; i0 < np; i0 += 32) {
    const int i = i0 + lane;
    if (i < np) {
      const uint32_t* rec = blocks_rec(p, c0 + i, i == 0 ? slot0 : 0) + r * 32;
#pragma unroll
      for (int sg = 0; sg < 8; ++sg) m += __ldcg(rec + kRecSample + sg);
      tiles += __ldcg(rec + kRecTiles);
      if (np <= 32) {
#pragma unroll
        for (int q = 0; q < 4; ++q) tmx[q] = __ldcg(rec + kRecTileMax + q);
      }
    }
  }
  m = __reduce_add_sync(0xffffffffu, m);
  tiles = __reduce_add_sync(0xffffffffu, tiles);
  int start_unused;
  const uint32_t n = rw.row < p.rows ? static_cast<uint32_t>(row_length(p, rw.row, &start_unused)) : 0u;
  const uint32_t rho = np > 0 ? blocks_gate_rho_mn<Cfg>(p, m, n, r, 0xffu) : 0u;  // (np 0: a redo, no gate)
  uint32_t gk = 0;
  if (rho) {
    PairCtx pc = rw.ctx();
    uint64_t th = 0;
    uint32_t c_unused = 0;
    const uint32_t fast = np <= 32 ? blocks_union_gate_fast<Cfg, true>(p, c0, slot0, np, r, kg, rho, pc, rw.hist,
                                                                          lane, tmx[0])
                                   : blocks_union_gate_fast<Cfg>(p, c0, slot0, np, r, kg, rho, pc, rw.hist, lane);
    th = static_cast<uint64_t>(fast) << 32;
    if (fast == 0) {
      const PieceSegs ps = blocks_piece_segs<Cfg>(p, c0, slot0, np, r, kg, true);
      // (heavy ties at the rank: the tied key's gate, kTieGate; a one-warp
      // select over the pieces here would cost the tile loops their registers)
      pair_select<true>(ps, pc, 0, rho, rw.hist, rw.sk, rw.si, lane, &th, &c_unused);
    }
    if (kg == 0) {
      const uint32_t c = tiles < static_cast<uint32_t>(kMinGateTiles) ? tiles : static_cast<uint32_t>(kMinGateTiles);
      const uint32_t tc = np <= 32 ? blocks_tile_cap_regs(tmx, c) : blocks_union_tile_cap(p, c0, slot0, np, r, c, lane);
      gk = min(static_cast<uint32_t>(th >> 32), tc);
    }
  }
  if (kg == 0 && lane == 0) {
    shr->gkey[r] = gk;
    thr_s[r] = gk ? gate_threshold(gk) : 0ull;
  }
  return gk != 0;
}

// kVisitRest after the gate (all math warps; the row group's thr_s is set):
// each warp copies its sample entries at or above its rows' gates from its
// segments' tails to their heads (the tails stay as published: other pieces
// may still be ranking them). Returns the lane's row's count in its segment.
template <class Cfg>
__device__ __forceinline__ uint32_t blocks_split_copy(const Sm90FusedParams* pp, int reg, int np) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const unsigned long long* thr_s = reinterpret_cast<const unsigned long long*>(smem + Cfg::kOffThr);
  const int tid = threadIdx.x, lane = tid & 31, quad = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, seg = kg * 4 + ((tid >> 5) & 3);
  const uint32_t cap = static_cast<uint32_t>(p.cap), seg_stride = 2u * cap;
  uint32_t* ws_set = p.ws + blocks_set_off<Cfg>(p, reg);
  const uint32_t* rec = blocks_rec(p, blockIdx.x, reg);
  uint32_t mine = 0;
#pragma unroll 1
  for (int i = 0; i < (np > 0 ? 4 : 0); ++i) {  // (np 0: a redo, nothing sampled)
    const int r = 4 * rg + i;
    const uint64_t th = thr_s[r];
    // (warp-uniform bounds, said so: a loop the compiler cannot prove uniform
    // here makes every value after the call non-uniform in the tile loops)
    const int c = __shfl_sync(0xffffffffu, static_cast<int>(__ldcg(rec + r * 32 + kRecSample + seg)), 0);
    uint32_t* head = ws_set + size_t(r * Cfg::kSegs + seg) * seg_stride;
    const uint32_t* tail = head + (cap - static_cast<uint32_t>(Cfg::kTail));
    // (in order, one entry per lane and step, positions by ballot)
    const uint32_t gk = static_cast<uint32_t>(th >> 32);
    uint32_t kept = 0;
    // (every load of the row's tail in flight at once: kTail / 32 per lane;
    // th = gk << 32, so composite >= th is key >= gk)
    constexpr int G = Cfg::kTail / 32;
    static_assert(Cfg::kTail % 32 == 0, "whole lane groups");
    uint32_t kk[G], ii[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int j = g * 32 + lane;
      kk[g] = j < c ? __ldcg(tail + j) : 0u;
      ii[g] = j < c ? __ldcg(tail + cap + j) : 0u;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int j = g * 32 + lane;
      const bool keep = j < c && kk[g] >= gk;
      const uint32_t m = __ballot_sync(0xffffffffu, keep);
      if (keep) {
        const uint32_t at = kept + __popc(m & ((1u << lane) - 1u));
        __stcg(head + at, kk[g]);
        __stcg(head + cap + at, ii[g]);
      }
      kept += __popc(m);
    }
    if (quad == i) mine = kept;
  }
  __syncwarp();
  return mine;
}

// kVisitRest's start (all math warps, Q buffer qb of block b): the shared
// gate (blocks_union_gate_call), then this warp's sample entries at or above
// it copied to its segments' heads (blocks_split_copy). Returns the lane's
// count; the rows' thresholds are in thr_s.
template <class Cfg>
__device__ __noinline__ uint32_t blocks_split_rest_start(const Sm90FusedParams* pp, int qb, int b) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int rg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 256, 0);
  const volatile int* vis = reinterpret_cast<const SplitShare*>(smem + Cfg::kOffShr)->vis[rg][qb];
  const int reg = __shfl_sync(0xffffffffu, vis[3], 0), c0 = __shfl_sync(0xffffffffu, vis[4], 0);
  const int slot0 = __shfl_sync(0xffffffffu, vis[5], 0), np = __shfl_sync(0xffffffffu, vis[6], 0);
  blocks_union_gate_call<Cfg>(pp, reg, b, c0, slot0, np);
  ptx::named_barrier_sync(5 + rg, 256);  // the row group's gates are in thr_s
  return blocks_split_copy<Cfg>(pp, reg, np);
}

// kSplit, at the end of visit qi (all math warps; after its tile loops: a
// call before them costs the tile loops their registers): waits for visit
// qi + 1's description, writes its vis fields, and when it is a rest visit
// runs its start (blocks_split_rest_start), leaving each warp's row counts
// in rest_cnt. Returns nothing; the next visit reads them back.
template <class Cfg>
__device__ __noinline__ void blocks_prestart(const Sm90FusedParams* pp, int qi) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  constexpr int SI = Cfg::kSlotInts;
  const int tid = threadIdx.x, lane = tid & 31;
  const int rg = __shfl_sync(0xffffffffu, tid / 256, 0);
  const int qb = qi & 1;
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars) + 2 * Cfg::kNumStages;
  ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
  const volatile int* slot = reinterpret_cast<const volatile int*>(smem + Cfg::kOffSlot) + SI * qb;
  SplitShare* shr = reinterpret_cast<SplitShare*>(smem + Cfg::kOffShr);
  const int b = __shfl_sync(0xffffffffu, slot[0], 0);
  if (b < 0 || __shfl_sync(0xffffffffu, slot[6], 0) != kVisitRest) return;
  if (lane < 9) shr->vis[rg][qb][lane] = slot[lane < 7 ? 6 + lane : lane == 7 ? 2 : 5];
  __syncwarp();
  const uint32_t c = blocks_split_rest_start<Cfg>(pp, qb, b);
  if (lane < 4) shr->rest_cnt[tid >> 5][lane] = c;  // (lane l holds row 4 rg + l, as every lane of quad l)
  __syncwarp();
}

// At a rest visit's end (all math warps, after the final
// counts are published): row 4 rg + warp_in_wg's pair counts this piece's
// candidates of the row in the fast bins of [gate, M], M the union sample's
// largest key, and publishes them (blocks_hist, which 1). Returns M, or 0
// where the row has no such bins (not gated, or M not above the gate). The
// same answer in every piece of the block (the same published records).
// Not inlined: its registers stay out of the tile loops'.
template <class Cfg>
__device__ __noinline__ uint32_t blocks_publish_final_bins(const Sm90FusedParams* pp, int reg, int c0, int slot0,
                                                             int np) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const BlocksPairRow<Cfg> rw(p, reg, 0, 0);
  const int r = rw.r, lane = rw.lane, kg = rw.kg;
  const uint32_t gk = reinterpret_cast<const SplitShare*>(rw.smem + Cfg::kOffShr)->gkey[r];
  const uint32_t M = gk ? blocks_union_smax(p, c0, slot0, np, r, lane) : 0u;
  if (gk < 1u || M <= gk) return 0u;
  PairCtx pc = rw.ctx();
  pair_count_gate_bins(blocks_piece_segs<Cfg>(p, blockIdx.x, reg, 1, r, kg, false), pc, gk, M, rw.hist, lane);
  uint4* hv = reinterpret_cast<uint4*>(rw.hist + kg * 128 + lane * 4);
  __stcg(reinterpret_cast<uint4*>(blocks_hist<Cfg>(p, blockIdx.x, reg, 1, r) + kg * 128 + lane * 4), *hv);
  *hv = make_uint4(0u, 0u, 0u, 0u);
  return M;
}

// The np pieces' published final bins j_lane .. j_lane + 3 of row r summed
// (kB pieces' loads in flight). np warp-uniform.
template <class Cfg, int kB>
__device__ __forceinline__ uint4 blocks_sum_bins(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                   uint32_t j_lane) {
  uint4 a = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll 1
  for (int i0 = 0; i0 < np; i0 += kB) {
    uint4 h[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int i = i0 + u;
      h[u] = i < np ? __ldcg(reinterpret_cast<const uint4*>(blocks_hist<Cfg>(p, c0 + i, i == 0 ? slot0 : 0, 1, r) +
                                                             j_lane))
                    : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      a.x += h[u].x;
      a.y += h[u].y;
      a.z += h[u].z;
      a.w += h[u].w;
    }
  }
  return a;
}

// The block's last piece: row 4 rg + warp_in_wg's bins
// summed over the np pieces' published ones into the row's histogram (each
// warp of the pair its half), for pair_finish_row_prebinned. Not inlined, as
// above.
template <class Cfg>
__device__ __noinline__ void blocks_sum_final_bins(const Sm90FusedParams* pp, int c0, int slot0, int np) {
  const Sm90FusedParams& p = *pp;
  const BlocksPairRow<Cfg> rw(p, 0, 0, 0);
  const int r = rw.r, lane = rw.lane, kg = rw.kg;
  const uint32_t j_lane = static_cast<uint32_t>(kg * 128 + lane * 4);
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
  // (16 pieces' loads in flight; 4 until 2026-12-04: four round trips at 16 pieces)
  const uint4 a = blocks_sum_bins<Cfg, 16>(p, c0, slot0, np, r, j_lane);
  *reinterpret_cast<uint4*>(rw.hist + j_lane) = a;
}

// kVisitRest's end (all math warps; cnt: the lane's count): publishes the row
// group's final counts, counts the piece on the block's counter, and when it
// is the block's last piece, row 4 rg + warp_in_wg's pair selects the row
// over every piece's heads with the shared gate (exact: every key at or above
// it is in some piece; a gated row with fewer than min(k, n) such entries is
// unsafe and the caller queues the whole block's rescan). Returns whether the
// row is safe (the first warp's answer).
template <class Cfg>
__device__ __noinline__ bool blocks_split_end_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                     int np, uint32_t cnt, uint32_t active) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const BlocksPairRow<Cfg> rw(p, reg, 0, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2, row = rw.row;
  const int tid = threadIdx.x;
  SplitShare* shr = reinterpret_cast<SplitShare*>(rw.smem + Cfg::kOffShr);
  volatile int* last = shr->last;
  uint32_t* rec = blocks_rec(p, blockIdx.x, reg);
  if (lane < 4) __stcg(rec + (4 * rg + lane) * 32 + kRecFinal + kg * 4 + ((tid >> 5) & 3), cnt);
  ptx::named_barrier_sync(5 + rg, 256);
  // Every piece counts its own candidates of a gated row in the fast bins of
  // [gate, the union's largest sample key] and publishes them before it counts
  // itself done; hsmax, that key (0: no bins, the general select). The same in
  // every piece (the same published records).
  uint32_t hsmax = 0;
  if (np > 1) {
    hsmax = blocks_publish_final_bins<Cfg>(pp, reg, c0, slot0, np);
    // Every pair's bins are stored before the row group's thread 0 counts the
    // piece done below: without this barrier the block's last piece could sum
    // bins another piece had not yet stored, its pass would then disagree with
    // them and the row would go to one warp's select (the same set, in
    // another order).
    ptx::named_barrier_sync(5 + rg, 256);
  }
  if (np > 1) {  // (one piece, or a redo: this CTA has every candidate)
    if ((tid & 255) == 0) {
      blocks_fence<Cfg>();
      const int done = atomicAdd(blocks_ctr(p, c0, slot0) + 2 + rg, 1);
      last[rg] = done == np - 1;
      blocks_fence<Cfg>();
    }
    ptx::named_barrier_sync(5 + rg, 256);
    if (!last[rg]) return true;
  }
  if (row >= p.rows || !((active >> r) & 1u)) return true;
  const uint32_t gk = np > 0 ? shr->gkey[r] : 0u;
  np = np > 0 ? np : 1;
  const uint64_t thr = gk ? gate_threshold(gk) : 0ull;
  int start;
  const int n = row_length(p, row, &start);
  const uint32_t k = static_cast<uint32_t>(p.topk);
  const uint32_t need = min(k, static_cast<uint32_t>(n));
  int* orow = p.out + size_t(row) * k;
  uint32_t cands = 0;
  PairCtx pc = rw.ctx();
  const PieceSegs ps = blocks_piece_segs<Cfg>(p, c0, slot0, np, r, kg, false);
  auto out = [&](int at, int v, uint32_t) { orow[at] = v; };
  // The pieces' bins summed, then one pass (hsmax 0: the general select).
  if (hsmax != 0u) blocks_sum_final_bins<Cfg>(pp, c0, slot0, np);
  const int res = pair_finish_row_prebinned(ps, pc, thr, hsmax, k, need, gk != 0, start, rw.hist, rw.sk, rw.si, lane,
                                            &cands, out);
  bool ok = res > 0;
  if (res < 0 && kg == 0)  // heavy ties at the k-th key: one warp
    ok = warp_finish_row(blocks_piece_segs<Cfg>(p, c0, slot0, np, r, -1, false), thr, k, need, gk != 0, start,
                         rw.hist, rw.sk, rw.si, lane, &cands, [&](int at, int v, uint32_t) { orow[at] = v; });
  return ok;
}

// kSplit: the end of visit qi of block b (all math warps; cnt: the lane's
// count): a sample's publication, or a rest visit's publication, merge (the
// block's last piece) and report; then the next visit's start
// (blocks_prestart).
template <class Cfg>
__device__ __noinline__ void blocks_visit_end(const Sm90FusedParams* pp, int qi, int b, uint32_t cnt) {
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, sel_row = 4 * rg + ((tid >> 5) & 3);
  const int qb = qi & 1;
  const volatile int* vis = reinterpret_cast<const SplitShare*>(smem + Cfg::kOffShr)->vis[rg][qb];
  auto vis_u = [&](int i) { return __shfl_sync(0xffffffffu, vis[i], 0); };
  uint64_t* q_empty = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars) + 2 * Cfg::kNumStages + 2;
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  uint32_t* redo_rg = reinterpret_cast<uint32_t*>(smem + Cfg::kOffRedo);
  BlocksCtl* ctl = reinterpret_cast<BlocksCtl*>(smem + Cfg::kOffCtl);
  if (vis_u(0) == kVisitSample) {  // publish the piece's sample; its rest visit comes later
    if (vis_u(2) != vis_u(7)) {  // its last MMA was not the piece's last tile: release the Q buffer now
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    }
    blocks_split_sample_end<Cfg>(pp, vis_u(3), vis_u(4), vis_u(5), vis_u(2), cnt);
  } else {  // a rest visit: publish; the block's last piece selects its rows
    const int reg = vis_u(3);
    const bool ok = blocks_split_end_call<Cfg>(pp, reg, b, vis_u(4), vis_u(5), vis_u(6), cnt,
                                                 static_cast<uint32_t>(vis_u(8)));
    if (kg == 0) {
      if (lane == 0) {
        thr_s[sel_row] = 0;
        if (!ok) atomicOr(&redo_rg[rg], 1u << sel_row);
      }
      ptx::named_barrier_sync(1 + wg, 128);
      if ((tid & 127) == 0) {  // the row group's half of the block (a whole-block rescan if any row is unsafe)
        volatile uint32_t* rr = redo_rg + rg;
        const uint32_t mask = *rr;
        *rr = 0;
        blocks_half_finished(ctl, b, mask, p.counter + kFusedRedoWord);
      }
    }
    ptx::named_barrier_sync(5 + rg, 256);
  }
  blocks_prestart<Cfg>(pp, qi + 1);
}

// How many blocks (the first ones: the shortest of a causal chunk) the shares
// cover, of nblocks on grid CTAs: every block when they are at most two
// waves, none when they fill whole waves, else the last partial wave and one
// full wave (so a split block has about two pieces, not grid / (nblocks mod
// grid) small ones). The rest run whole from the block counter.
__host__ __device__ constexpr int blocks_share_blocks(int nblocks, int grid) {
  return nblocks <= 2 * grid ? nblocks : nblocks % grid == 0 ? 0 : grid + nblocks % grid;
}

// The split kernel's grid: with B row blocks of at most a quarter of the SMs,
// every block gets the same whole number of pieces (B * floor(sms / B) CTAs)
// when that keeps at least 90% of the SMs busy: a CTA holding the ends of two
// blocks serialises their gates and merges (at 64 rows x 64K keys, 0.269 ms on
// 132 CTAs against 0.181 on 128).
__host__ __device__ constexpr int blocks_split_grid(int rows, int sms) {
  const int b = (rows + 7) / 8;
  return b <= 0 || 4 * b > sms ? sms : 10 * (b * (sms / b)) >= 9 * sms ? b * (sms / b) : sms;
}

}  // namespace mqa_topk
