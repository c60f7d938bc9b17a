// Warp-level pieces of the block kernels' exact per-row selection
// (sm90_fused_blocks.cuh with fused/blocks_select.cuh and
// fused/blocks_split.cuh; the hybrid kernel runs them too): the scrambled tile
// walk, the order-preserving key and the composite order (key desc, index
// asc), the sample gate's rank rules, one warp's select over a row's candidate
// segments (warp_select_lean: the k-th largest composite at or above the
// row's running threshold; warp_emit: keep what is at or above a threshold,
// in a fixed order; warp_finish_row: both, into the output row), the
// selects by the pair of warps that hold a row (pair_gate_fast, pair_select,
// pair_finish_row_gated, pair_finish_row_prebinned; heavy ties cut by index
// with pair_index_cut, and the sample gate's cut by index under heavy ties,
// pair_tie_gate) and a row's compaction threshold by the 8 warps of its row
// group (group_compact_threshold). Free of torch, of the kernels and of
// inline PTX (but for the pair's and the group's barriers), so the same code
// also compiles as plain C++ under MQA_TOPK_HOST_EMULATION: tests/emu/ runs
// it on a CPU warp emulator (32 fibers in lockstep at every warp intrinsic,
// two warps for the pair selects, eight for the group) against sorting
// references.
#pragma once

#ifndef MQA_TOPK_HOST_EMULATION
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace mqa_topk {

namespace fused_detail {

// Stride of the scrambled tile walk: about 0.618 * nt, coprime to nt.
__device__ __forceinline__ int tile_stride(int nt) {
  if (nt <= 2) return 1;
  int s = max(1, static_cast<int>(nt * 0.6180339887f));
  for (;; ++s) {
    int a = nt, b = s;
    while (b) {
      const int r = a % b;
      a = b;
      b = r;
    }
    if (a == 1) return s;
  }
}
// The tile visited after tile tp: (tp + stride) mod nt (the walk starts at the
// last tile, nt - 1, and visits every tile once since stride is coprime to nt).
__device__ __forceinline__ int next_tile(int tp, int nt, int stride) {
  tp += stride;
  return tp >= nt ? tp - nt : tp;
}

// The order-preserving key of a float: a < b exactly when order_key(a) <
// order_key(b), and -0.0 and +0.0 share a key. Every key is >= 1 (the
// selects read key 0 as padding).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t m = 0u - (u >> 31);
  return ((u ^ m) - m) ^ (~m & 0x80000000u);
}
// The composite order of a candidate: key descending, then index ascending.
__host__ __device__ __forceinline__ uint64_t composite(uint32_t key, uint32_t idx) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(0xffffffffu - idx);
}

// Candidates in nseg (<= 2) runs of (keys, indices, count), traversed run by
// run. The block kernels pass one run: a warp's own segment of a row in the
// gate's drop (sm90_fused_blocks.cuh, warp_emit in place; global memory,
// 16-byte aligned, capacity a multiple of 4, so the vector pass may read
// whole uint4 groups past the count, masked), and a bin gathered into shared
// memory (finish_in_scratch: warp_hist_pass, scalar loads).
struct Segs {
  const uint32_t* key[2];
  const uint32_t* idx[2];
  int n[2];
  int nseg;
};

// A row's candidates in up to 8 segments (the block kernels keep one per math
// warp that holds the row), traversed with 4 lanes per segment: lane l reads
// segment l / 4. Each lane carries its own segment and the largest count (the
// warp-uniform loop bound), so a pass over 8 segments of ~n/8 entries has as
// many loads in flight as a pass over one segment of n. Global buffers,
// 16-byte aligned, capacity a multiple of 4 (the vector passes may read whole
// uint4 groups past a count, masked). The visiting order (batch, step, lane)
// is fixed, so everything derived from it is deterministic.
struct SegLanes {
  const uint32_t* key;  // this lane's segment: keys
  const uint32_t* idx;  // and indices
  int n;                // its count
  int nmax;             // the largest count of the warp's segments
};

// The SegLanes of segments seg0 + i * stride (i < nseg <= 8; indices at +cap
// words from the keys) with counts cnt[i]; lanes of absent segments get none.
__device__ __forceinline__ SegLanes make_seg_lanes(const uint32_t* seg0, uint32_t stride, uint32_t cap,
                                                   const uint32_t* cnt, int nseg, int lane) {
  const int sg = lane >> 2;
  const int n = sg < nseg ? static_cast<int>(cnt[sg]) : 0;
  const uint32_t* kp = seg0 + static_cast<size_t>(sg < nseg ? sg : 0) * stride;
  return SegLanes{kp, kp + cap, n, static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<uint32_t>(n)))};
}

// Radix pass by a warp over runs in shared memory (the gathered bin of
// finish_in_scratch and of warp_index_cut_lean; plain loads, 32 lanes per
// run): histogram of digit (v >> shift) & 255 over the entries whose masked
// bits match; v is the key, or the index when on_idx (then only entries with
// key == key_eq count). hist: this warp's 256 bins, zero on entry.
__device__ __forceinline__ void warp_hist_pass(const Segs& s, bool on_idx, uint32_t key_eq, uint32_t mask,
                                               uint32_t prefix, int shift, uint32_t* hist, int lane) {
#pragma unroll 1
  for (int g = 0; g < s.nseg; ++g) {
    const uint32_t* kp = s.key[g];
    const uint32_t* ip = s.idx[g];
    const int n = s.n[g];
#pragma unroll 1
    for (int j0 = 0; j0 < n; j0 += 32 * 8) {
      uint32_t v[8];
      bool ok[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int j = j0 + u * 32 + lane;
        ok[u] = j < n;
        v[u] = 0;
        if (ok[u]) {
          const uint32_t kv = kp[j];
          if (on_idx) {
            ok[u] = kv == key_eq;
            v[u] = ip[j];
          } else {
            v[u] = kv;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (ok[u] && (v[u] & mask) == prefix) atomicAdd(hist + ((v[u] >> shift) & 255u), 1u);
    }
  }
  __syncwarp();
}

// Inclusive prefix sum over the lanes of a warp.
template <class T>
__device__ __forceinline__ T warp_inclusive_sum(T v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

// Finds the digit holding the need-th entry (1-based) counted from the top
// digit down (descending) or from digit 0 up; returns the digit, sets *before
// (entries in digits strictly before it in that order) and *in_bin; clears hist.
// kClear = false (the pair selects, whose two warps share hist): hist is left
// as it is.
template <bool kClear>
__device__ __forceinline__ uint32_t warp_find_digit_t(uint32_t* hist, uint32_t need, bool descending, uint32_t* before,
                                                      uint32_t* in_bin, int lane) {
  uint32_t c[8];
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int d = descending ? 255 - (8 * lane + j) : 8 * lane + j;
    c[j] = hist[d];
    sum += c[j];
  }
  const uint32_t incl = warp_inclusive_sum(sum, lane);
  const uint32_t excl = incl - sum;
  const uint32_t hit = __ballot_sync(0xffffffffu, excl < need && need <= incl);
  const int src = hit ? __ffs(hit) - 1 : 31;
  uint32_t digit = 0, bef = 0, inb = 0;
  if (lane == src) {
    uint32_t acc = excl;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (acc + c[j] >= need) {
        digit = descending ? 255 - (8 * lane + j) : 8 * lane + j;
        bef = acc;
        inb = c[j];
        break;
      }
      acc += c[j];
    }
  }
  if constexpr (kClear) {
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 8; ++j) hist[8 * lane + j] = 0;
    __syncwarp();
  }
  digit = __shfl_sync(0xffffffffu, digit, src);
  *before = __shfl_sync(0xffffffffu, bef, src);
  *in_bin = __shfl_sync(0xffffffffu, inb, src);
  return digit;
}
__device__ __forceinline__ uint32_t warp_find_digit(uint32_t* hist, uint32_t need, bool descending, uint32_t* before,
                                                    uint32_t* in_bin, int lane) {
  return warp_find_digit_t<true>(hist, need, descending, before, in_bin, lane);
}

// The need-th smallest index among the entries whose key is key_eq (heavy
// ties), by three 8-bit radix passes over the indices (< 2^24: keys <= 2^22
// by contract), over runs in shared memory (at most kScratch entries).
__device__ __forceinline__ uint64_t warp_index_cut(const Segs& s, uint32_t key_eq, uint32_t need, uint32_t* hist,
                                                   int lane) {
  uint32_t iprefix = 0, imask = 0, before = 0, nb = 0;
#pragma unroll 1
  for (int sh = 16; sh >= 0; sh -= 8) {
    warp_hist_pass(s, true, key_eq, imask, iprefix, sh, hist, lane);
    const uint32_t d = warp_find_digit(hist, need, false, &before, &nb, lane);
    need -= before;
    iprefix |= d << sh;
    imask |= 255u << sh;
  }
  return composite(key_eq, iprefix);
}

// The need-th largest composite (key desc, index asc) of the runs' entries
// (requires total >= need), by 8-bit radix passes over the keys, then up to 3
// over the indices of the entries tied at that key (indices < 2^24: keys <=
// 2^22 by contract). key_hi_common: the key bits above bit `top` are equal in
// every entry (their value), so the passes start at the digit holding bit
// `top`.
__device__ __forceinline__ uint64_t warp_kth_radix(const Segs& s, uint32_t need, uint32_t* hist, int lane, int top,
                                                   uint32_t key_hi_common) {
  const int first = top >= 7 ? top - 7 : 0;
  uint32_t mask = first + 8 >= 32 ? 0u : ~0u << (first + 8);
  uint32_t prefix = key_hi_common & mask, before, in_bin = 0;
#pragma unroll 1
  for (int shift = first;; shift = shift >= 8 ? shift - 8 : 0) {
    warp_hist_pass(s, false, 0, mask, prefix, shift, hist, lane);
    const uint32_t d = warp_find_digit(hist, need, true, &before, &in_bin, lane);
    need -= before;
    prefix |= d << shift;
    mask |= 255u << shift;
    if (shift == 0) break;
  }
  if (in_bin == need) return composite(prefix, 0xffffffffu);  // every entry with this key is in
  return warp_index_cut(s, prefix, need, hist, lane);
}

// The need-th largest composite of the n entries gathered into shared memory
// (sk, si: at most kScratch; this lane's min / max key gmin, gmax), by radix
// passes over the key bits that still differ. Leaves hist zero.
__device__ __forceinline__ uint64_t finish_in_scratch(uint32_t* sk, uint32_t* si, uint32_t n, uint32_t gmin,
                                                      uint32_t gmax, uint32_t need, uint32_t* hist, int lane) {
  __syncwarp();
  gmin = __reduce_min_sync(0xffffffffu, gmin);
  gmax = __reduce_max_sync(0xffffffffu, gmax);
  const int top = gmin == gmax ? 0 : 31 - __clz(gmin ^ gmax);
  const Segs bin{{sk, nullptr}, {si, nullptr}, {static_cast<int>(n), 0}, 1};
  const uint64_t t = warp_kth_radix(bin, need, hist, lane, top, gmin);
  __syncwarp();
  return t;
}

// Calls f(key, valid) for every entry of the per-lane segments, four per
// lane (uint4 loads, L2 only), eight groups in flight per lane; kWithIdx:
// also loads the indices (four key and four index groups in flight) and
// calls f(key, idx, valid). kLanes: lanes per segment (4: one warp over 8
// segments; 8: a pair warp over its 4; 1: the split merge's rounds of 32
// segments). The visiting order (batch, group u, entry e, lane) is fixed.
template <bool kWithIdx = false, int kLanes = 4, int kGroups = (kWithIdx ? 4 : 8), class F>
__device__ __forceinline__ void for_each_key4(const SegLanes& s, int lane, F&& f) {
  constexpr int G = kGroups;
  const int sub = lane & (kLanes - 1);
#pragma unroll 1
  for (int j0 = 0; j0 < s.nmax; j0 += kLanes * 4 * G) {
    uint4 v[G], w[G];
#pragma unroll
    for (int u = 0; u < G; ++u) {
      const int j = j0 + (u * kLanes + sub) * 4;
      v[u] = j < s.n ? __ldcg(reinterpret_cast<const uint4*>(s.key + j)) : make_uint4(0, 0, 0, 0);
      if constexpr (kWithIdx)
        w[u] = j < s.n ? __ldcg(reinterpret_cast<const uint4*>(s.idx + j)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < G; ++u) {
      const int j = j0 + (u * kLanes + sub) * 4;
      const uint32_t kv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      if constexpr (kWithIdx) {
        const uint32_t iv[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) f(kv[e], iv[e], j + e < s.n);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(kv[e], j + e < s.n);
      }
    }
  }
}

// Scratch in shared memory for the entries of one histogram bin.
constexpr int kScratch = 256;

// Bin of key in 256 equal slices of the order-key range [lo, lo + range]
// (monotone in the key; mult = floor(2^40 / (range + 1)), or 0 for range < 256,
// where the bin is the offset itself).
__device__ __forceinline__ uint32_t range_bin(uint32_t key, uint32_t lo, uint32_t mult) {
  const uint32_t d = key - lo;
  return mult ? __umulhi(d, mult) : d;
}
__device__ __forceinline__ uint32_t range_mult(uint32_t range) {
  return range < 256u ? 0u : static_cast<uint32_t>((1ull << 40) / (static_cast<unsigned long long>(range) + 1ull));
}
// The smallest offset d with range_bin(lo + d, lo, mult) >= t: floor(d mult /
// 2^32) >= t iff d >= ceil(t 2^32 / mult) (mult 0: d itself). Up to 2^32.
__device__ __forceinline__ uint64_t range_bin_start(uint32_t t, uint32_t mult) {
  if (mult == 0u) return t;
  return ((static_cast<uint64_t>(t) << 32) + mult - 1u) / mult;
}

// The entries above a range bin and in it, as unsigned key ranges (one
// subtract and one compare per entry): above iff key - khi < hspan (keys from
// khi = lo + the next bin's start up; hspan 0 when that is 2^32), in the bin
// iff key - klo < espan. sliced: the bin is slice `sel` of 256 over
// [lo, lo + span] (range_bin with mult); otherwise the whole range is the bin.
// Keys above lo + span count as above (the fast path's top bin). Needs lo >= 1.
struct BinBounds {
  uint32_t khi, hspan, klo, espan;
};
__device__ __forceinline__ BinBounds bin_bounds(uint32_t lo, uint32_t span, uint32_t mult, uint32_t sel, bool sliced) {
  const uint64_t s1 = static_cast<uint64_t>(span) + 1u;
  uint64_t dlo = 0, dhi = s1;
  if (sliced) {
    dlo = range_bin_start(sel, mult);
    dhi = min(range_bin_start(sel + 1u, mult), s1);
  }
  const uint64_t khi64 = static_cast<uint64_t>(lo) + dhi;
  BinBounds b;
  b.khi = static_cast<uint32_t>(khi64);
  b.hspan = khi64 <= 0xffffffffull ? 0u - b.khi : 0u;
  b.klo = lo + static_cast<uint32_t>(dlo < dhi ? dlo : 0u);
  b.espan = dlo < dhi ? static_cast<uint32_t>(dhi - dlo) : 0u;
  return b;
}

// ---- one warp's select -------------------------------------------------------
// Its passes are branch-free: padding past a segment's count reads as key 0
// (every real key is >= 1, and eligibility is key >= max(threshold key, 1)),
// so there is no per-entry validity flag; range tests are one unsigned
// compare; the first pass has no slice test at all.

// Calls f(key) (kWithIdx: f(key, idx)) for every slot of the segments rounded
// up to 4, padding slots as key 0 (the same loads as for_each_key4).
template <bool kWithIdx = false, class SS, class F>
__device__ __forceinline__ void for_each_key4_lean(const SS& s, int lane, F&& f) {
  if constexpr (kWithIdx) {
    for_each_key4<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) { f(valid ? key : 0u, idx); });
  } else {
    for_each_key4(s, lane, [&](uint32_t key, bool valid) { f(valid ? key : 0u); });
  }
}

// The need-th smallest index among the entries of the per-lane segments
// whose key is key_eq, when more than kScratch of them tie there (SS:
// SegLanes or PieceSegs with half -1; requires need <= their count). Tied
// rows (relu-saturated rows, all-zero weights, exact ties) reach it with
// thousands of entries spread over the row, so it bins by index range, as
// warp_select_lean bins by key range: a pass for the tied entries' index
// range, 256 equal slices of it (balanced bins for indices spread over the
// row; digit bins of the high index bits would put every entry in one bin
// and serialise the shared-memory atomics), narrowed to the slice holding
// the need-th until at most kScratch remain (a slice of fewer than 256
// indices is a single index: done), then those gathered into shared memory
// and cut there (warp_index_cut over the gathered run). Every pass loads
// keys and indices as uint4 groups (for_each_key4_lean). Leaves hist zero.
template <class SS>
__device__ __forceinline__ uint64_t warp_index_cut_lean(const SS& s, uint32_t key_eq, uint32_t need, uint32_t* hist,
                                                        uint32_t* sk, uint32_t* si, int lane) {
  uint32_t imin = 0xffffffffu, imax = 0;
  for_each_key4_lean<true>(s, lane, [&](uint32_t key, uint32_t idx) {
    const bool t = key == key_eq;
    imin = min(imin, t ? idx : 0xffffffffu);
    imax = max(imax, t ? idx : 0u);
  });
  uint32_t lo = __reduce_min_sync(0xffffffffu, imin);
  uint32_t span = __reduce_max_sync(0xffffffffu, imax) - lo;  // the tied indices are in [lo, lo + span]
  uint32_t c = 0;
#pragma unroll 1
  while (true) {
    const uint32_t l0 = lo, s0 = span, mult = range_mult(span);
    for_each_key4_lean<true>(s, lane, [&](uint32_t key, uint32_t idx) {
      if (key == key_eq && idx - l0 <= s0) atomicAdd(hist + range_bin(idx, l0, mult), 1u);
    });
    __syncwarp();
    uint32_t before = 0;
    const uint32_t sel = warp_find_digit(hist, need, false, &before, &c, lane);
    need -= before;
    if (mult == 0u) return composite(key_eq, l0 + sel);  // a bin per index: the need-th is index l0 + sel
    const uint64_t a = range_bin_start(sel, mult);
    const uint64_t b = min(range_bin_start(sel + 1u, mult), static_cast<uint64_t>(s0) + 1u);
    lo = l0 + static_cast<uint32_t>(a);
    span = static_cast<uint32_t>(b - a - 1u);  // slice sel: offsets [a, b) of [l0, l0 + s0]
    if (c <= static_cast<uint32_t>(kScratch)) break;
  }
  const uint32_t l0 = lo, s0 = span;
  uint32_t base = 0;
  for_each_key4_lean<true>(s, lane, [&](uint32_t key, uint32_t idx) {
    const bool in = key == key_eq && idx - l0 <= s0;
    const uint32_t m = __ballot_sync(0xffffffffu, in);
    if (in) {
      const uint32_t at = base + __popc(m & ((1u << lane) - 1u));
      sk[at] = key;
      si[at] = idx;
    }
    base += __popc(m);
  });
  __syncwarp();
  const Segs bin{{sk, nullptr}, {si, nullptr}, {static_cast<int>(c), 0}, 1};
  const uint64_t t = warp_index_cut(bin, key_eq, need, hist, lane);
  __syncwarp();
  return t;
}

// The threshold that keeps a row's top k among its candidates (SS: SegLanes,
// or PieceSegs with half -1): entries with a key at or above thr's (and >= 1)
// are eligible; returns the k-th largest eligible composite, or thr itself
// when at most k are eligible (then every eligible entry is kept). Eligible
// by key includes the few entries with thr's key and an index past thr's
// (below it): they rank below every truly eligible entry, so whenever at
// least k entries are at or above thr the k-th is the same, and otherwise
// the result only keeps a few stale entries (a running threshold never goes
// down); and the counting passes load no index.
// Passes over the candidates (L2, uint4 loads): the eligible key range and
// count; a 256-bin histogram over equal slices of that range (candidate
// values crowd near the threshold, and bit-digit bins would put them all in
// one bin: serialised atomics and more passes); the gather of the k-th's bin
// (usually a few dozen entries) into shared memory, finished there by radix
// passes over the bits that still differ (finish_in_scratch). A bin with more
// than kScratch entries is narrowed to its own key range and binned again;
// heavy ties (more than kScratch at the k-th key) go to passes binning the
// tied entries' indices (warp_index_cut_lean). Leaves hist zero. count_out (optional): how many
// entries are eligible. Callers: the compaction of fused/blocks_select.cuh,
// the sample gate's heavy-tie fallback, warp_finish_row.
template <class SS>
__device__ __forceinline__ uint64_t warp_select_lean(const SS& s, uint64_t thr, uint32_t k, uint32_t* hist,
                                                     uint32_t* sk, uint32_t* si, int lane,
                                                     uint32_t* count_out = nullptr) {
  const uint32_t tk1 = max(static_cast<uint32_t>(thr >> 32), 1u);
  // Pass 1: range and count of the eligible keys (key >= tk1).
  uint32_t kmin = 0xffffffffu, kmax = 0, c = 0;
  for_each_key4_lean(s, lane, [&](uint32_t key) {
    const bool el = key >= tk1;
    kmin = min(kmin, el ? key : 0xffffffffu);
    kmax = max(kmax, el ? key : 0u);
    c += el ? 1u : 0u;
  });
  c = __reduce_add_sync(0xffffffffu, c);
  kmax = __reduce_max_sync(0xffffffffu, kmax);
  if (count_out) *count_out = c;
  if (c <= k) return thr;
  uint32_t lo = __reduce_min_sync(0xffffffffu, kmin);
  uint32_t span = kmax - lo;  // current bin: keys in [lo, lo + span]
  uint32_t plo = 0, pmult = 0, sel = 0, need = k;
  bool sliced = false;  // when set, the bin is slice `sel` of [plo, ...] within [lo, lo + span]
#pragma unroll 1
  while (c > static_cast<uint32_t>(kScratch) && span != 0) {
    if (sliced) {  // narrow [lo, lo + span] to the slice's actual key range
      const uint32_t l0 = lo, s0 = span, pl = plo, pm = pmult, sl = sel;
      kmin = 0xffffffffu;
      kmax = 0;
      for_each_key4_lean(s, lane, [&](uint32_t key) {
        const bool in = key - l0 <= s0 && range_bin(key, pl, pm) == sl;
        kmin = min(kmin, in ? key : 0xffffffffu);
        kmax = max(kmax, in ? key : 0u);
      });
      lo = __reduce_min_sync(0xffffffffu, kmin);
      span = __reduce_max_sync(0xffffffffu, kmax) - lo;
      sliced = false;
      if (span == 0) break;
    }
    const uint32_t l0 = lo, s0 = span, mult = range_mult(span);
    for_each_key4_lean(s, lane, [&](uint32_t key) {
      if (key - l0 <= s0) atomicAdd(hist + range_bin(key, l0, mult), 1u);
    });
    __syncwarp();
    uint32_t before = 0;
    sel = warp_find_digit(hist, need, true, &before, &c, lane);
    need -= before;
    plo = lo;
    pmult = mult;
    sliced = true;
  }
  if (c <= static_cast<uint32_t>(kScratch)) {
    const uint32_t l0 = lo, s0 = span, pl = plo, pm = pmult, sl = sel;
    const bool sl_on = sliced;
    uint32_t base = 0, gmin = 0xffffffffu, gmax = 0;
    for_each_key4_lean<true>(s, lane, [&](uint32_t key, uint32_t idx) {
      const bool in = key - l0 <= s0 && (!sl_on || range_bin(key, pl, pm) == sl);
      const uint32_t m = __ballot_sync(0xffffffffu, in);
      if (in) {
        const uint32_t at = base + __popc(m & ((1u << lane) - 1u));
        sk[at] = key;
        si[at] = idx;
      }
      gmin = min(gmin, in ? key : 0xffffffffu);
      gmax = max(gmax, in ? key : 0u);
      base += __popc(m);
    });
    return finish_in_scratch(sk, si, c, gmin, gmax, need, hist, lane);
  }
  // Heavy ties: more than kScratch entries share the k-th key `lo`.
  if (c == need) return composite(lo, 0xffffffffu);
  return warp_index_cut_lean(s, lo, need, hist, sk, si, lane);
}

// Keeps the entries with composite >= t in run order (stable): writes kept
// entry number `pos` through emit(pos, key, idx); returns the count. Reads
// 4-entry groups (keys and indices as uint4, four per lane in flight) and
// ranks with a warp scan; emit may write in place (positions never pass the
// read point): the gate's drop in sm90_fused_blocks.cuh, over one run.
template <int kGroups = 4, class Emit>
__device__ __forceinline__ int warp_emit(const Segs& s, uint64_t t, int lane, Emit&& emit) {
  int pos = 0;
#pragma unroll 1
  for (int g = 0; g < s.nseg; ++g) {
    const uint32_t* kp = s.key[g];
    const uint32_t* ip = s.idx[g];
    const int n = s.n[g];
#pragma unroll 1
    for (int j0 = 0; j0 < n; j0 += 32 * 4 * kGroups) {
      uint4 kv[kGroups], iv[kGroups];
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        const int j = j0 + (u * 32 + lane) * 4;
        kv[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(kp + j)) : make_uint4(0, 0, 0, 0);
        iv[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(ip + j)) : make_uint4(0, 0, 0, 0);
      }
      __syncwarp();  // every read of this step precedes any write below
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        const int j = j0 + (u * 32 + lane) * 4;
        const uint32_t ks[4] = {kv[u].x, kv[u].y, kv[u].z, kv[u].w};
        const uint32_t is[4] = {iv[u].x, iv[u].y, iv[u].z, iv[u].w};
        bool keep[4];
        int mine = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          keep[e] = j + e < n && composite(ks[e], is[e]) >= t;
          mine += keep[e];
        }
        const int incl = warp_inclusive_sum(mine, lane);
        int at = pos + incl - mine;
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (keep[e]) emit(at++, ks[e], is[e]);
        pos += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
  }
  __syncwarp();
  return pos;
}

// warp_emit over per-lane segments: the kept entries in the traversal order
// (batch, step, lane, entry), numbered from 0 through emit(pos, key, idx).
// Batch j0 reads slots [j0, j0 + 64) of every segment before it writes, and
// its kept entries are numbered below 8 (j0 + 64): emit may write entry p to
// slot p / 8 of any of 8 segments (already read), as the compaction of
// fused/blocks_select.cuh does (round-robin, in place). Returns the count.
template <class Emit>
__device__ __forceinline__ int warp_emit(const SegLanes& s, uint64_t t, int lane, Emit&& emit) {
  int pos = 0;
  const int sub = lane & 3;
#pragma unroll 1
  for (int j0 = 0; j0 < s.nmax; j0 += 4 * 4 * 4) {
    uint4 kv[4], iv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = j0 + (u * 4 + sub) * 4;
      kv[u] = j < s.n ? __ldcg(reinterpret_cast<const uint4*>(s.key + j)) : make_uint4(0, 0, 0, 0);
      iv[u] = j < s.n ? __ldcg(reinterpret_cast<const uint4*>(s.idx + j)) : make_uint4(0, 0, 0, 0);
    }
    __syncwarp();  // every read of this step precedes any write below (the compaction writes in place)
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = j0 + (u * 4 + sub) * 4;
      const uint32_t ks[4] = {kv[u].x, kv[u].y, kv[u].z, kv[u].w};
      const uint32_t is[4] = {iv[u].x, iv[u].y, iv[u].z, iv[u].w};
      bool keep[4];
      int mine = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        keep[e] = j + e < s.n && composite(ks[e], is[e]) >= t;
        mine += keep[e];
      }
      const int incl = warp_inclusive_sum(mine, lane);
      int at = pos + incl - mine;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (keep[e]) emit(at++, ks[e], is[e]);
      pos += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncwarp();
  return pos;
}

// ---- the sample gate ------------------------------------------------------------
// Each 8-row block of the block kernels first scans a pseudo-random sample of
// its key tiles (the first fused_sample_tiles tiles of the scrambled walk)
// with no threshold. A row's gate is the key of sample rank rho =
// gate_rank(m, n, fused_gate_target(k)) among its m sample entries (of its n
// keys; a split block's over every piece's sample), so that about
// fused_gate_target(k) of the row's logits are expected at or above it, the
// rank raised to gate_rank_floor's margin where the sample is small against
// the row (fused/blocks_select.cuh, blocks_gate_rho_mn). The pair of warps
// that holds the row finds that key (pair_gate_fast: the lowest key of the
// 2^16-key bin holding it, never above it; else pair_select), and the gate is
// capped at the C-th largest of the sample tiles' maxima (C =
// min(kMinGateTiles, sample tiles); warp_rank_key), so that at least C
// sampled tiles, spread over the row, reach it: scores correlated with
// position (rising, a staircase, hot regions) make the keys of one tile
// alike, the sample is then a sample of ns tiles, not of ns x 128 keys, and a
// gate inside the top sampled tile would keep too few. The rest of the block
// is scanned with the gate as the row's threshold (candidates: key >= gate).
// Exactness does not depend on the gate: a row whose candidates end up fewer
// than min(k, n) is rescanned with no gate (a redo).
// Probability model: the number of sample entries at or above the row's
// (target)-th largest logit is about Poisson(rho) (sampling without
// replacement of m of n keys), so the candidates a gate keeps are about target *
// (1 +- 1/sqrt(rho)); with rho ~ 128 and target = 1.5k + 256 a row falls under
// k only beyond 4 standard deviations (k = 2048), 7 (k = 512).
constexpr int kGateRank = 128;       // sample entries wanted above the gate
constexpr int kMinGateRank = 16;     // never gate on fewer (long rows, small samples)
constexpr int kMaxSampleTiles = 24;  // sample tiles per block, at most (buffer room)
constexpr int kMinGateTiles = 4;     // sampled tiles that must reach the gate
static_assert(kMaxSampleTiles <= 32, "tile maxima: one warp-wide slot each");

// Candidates a gated row is expected to keep.
__host__ __device__ constexpr int fused_gate_target(int k) { return k + k / 2 + 256; }

// Sample tiles of a block of nt key tiles for top-k: enough for a gate of
// sample rank kGateRank, at most kMaxSampleTiles and nt.
__host__ __device__ inline int fused_sample_tiles(int nt, int k) {
  if (nt <= 0) return 0;
  const int t = fused_gate_target(k);
  int ns = (kGateRank * nt + t - 1) / t;
  ns = ns < 1 ? 1 : ns;
  ns = ns > kMaxSampleTiles ? kMaxSampleTiles : ns;
  return ns < nt ? ns : nt;
}

// warp_rank_regs: the rank-th largest (1-based) of the J x 32 keys the warp
// holds in registers (x[j] of every lane), by 32 bit steps; 0 when fewer than
// rank keys are nonzero (padding is 0). warp_rank_key: the same over the 32
// keys at v (lane l reads v[l]: a row's sample tile maxima, 0-padded).
template <int J>
__device__ __forceinline__ uint32_t warp_rank_regs(const uint32_t (&x)[J], uint32_t rank) {
  uint32_t prefix = 0, need = rank;
#pragma unroll 1
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t hi = bit == 31 ? 0u : (~0u << (bit + 1));
    uint32_t c = 0;
#pragma unroll
    for (int j = 0; j < J; ++j) c += ((x[j] & hi) == prefix && ((x[j] >> bit) & 1u)) ? 1u : 0u;
    c = __reduce_add_sync(0xffffffffu, c);
    if (c >= need) prefix |= 1u << bit;
    else need -= c;
  }
  return prefix;
}
__device__ __forceinline__ uint32_t warp_rank_key(const uint32_t* v, uint32_t rank, int lane) {
  uint32_t x[1];
  x[0] = v[lane];
  return warp_rank_regs(x, rank);
}

// The sample rank of a row's gate: m sample entries of the row's n keys
// (a split block: over every piece), about `target` candidates wanted; 0 for
// no gate (no sample, a row of at most target keys, or a rank that reaches the
// sample's size or exceeds cap; the block kernels pass no cap).
__host__ __device__ inline uint32_t gate_rank(uint32_t m, uint32_t n, uint32_t target, uint32_t cap = 0xffffffffu) {
  if (m == 0 || n <= target) return 0;
  uint64_t rho = (static_cast<uint64_t>(target) * m + n - 1) / n;
  if (rho < static_cast<uint64_t>(kMinGateRank)) rho = kMinGateRank;
  if (rho >= m || rho > cap) return 0;
  return static_cast<uint32_t>(rho);
}

// A floor on a gate's sample rank with a safety margin (kGateRankFloorZ of
// fused/blocks_select.cuh): of m sample entries of a row of n keys, the
// number at or above the row's k-th largest logit is hypergeometric with mean
// mu = k m / n and at most that variance, whatever the values (no ties), and
// a gate of sample rank rho keeps fewer than k candidates (the row is redone)
// only when more than rho of them are. rho >= mu + z sqrt(mu) bounds that by about z standard
// deviations (z = 5: ~3e-7 normal, ~3e-6 for the Poisson tail at mu = 12).
// This matters where the sample is capped (kMaxSampleTiles): at 262144 keys
// the target's rank alone is only about 2.5 (k = 512) to 3 (k = 2048)
// deviations above mu, and a redone block is a whole ungated rescan on one
// SM. 0 when z <= 0, m == 0 or n == 0.
__host__ __device__ inline uint32_t gate_rank_floor(uint32_t m, uint32_t n, uint32_t k, int z) {
  if (z <= 0 || m == 0 || n == 0) return 0;
  const float mu = static_cast<float>(k) * static_cast<float>(m) / static_cast<float>(n);
  return static_cast<uint32_t>(ceilf(mu + static_cast<float>(z) * sqrtf(mu)));
}

// A gate as a running threshold: every key >= gate passes (composite > thr).
__host__ __device__ constexpr uint64_t gate_threshold(uint32_t gate_key) {
  return static_cast<uint64_t>(gate_key) << 32;
}

// The block-end step of one row by one warp (the pair selects' fallback:
// heavy ties at the k-th key, or a compacted row with at most k eligible;
// fused/blocks_select.cuh over SegLanes, fused/blocks_split.cuh over
// PieceSegs): the exact top min(k, n) of its candidates (entries with key >=
// thr's; need = min(k, n)) as indices relative to start in candidate
// (traversal) order, -1 padded to k, through out(at, relative index, key)
// (key 0 for the padding). A gated row with fewer than `need` candidates is
// unsafe (its top-k may hold keys below the gate): nothing is written and
// false returned (the caller rescans the row). *cands: the candidates counted.
template <class SS, class Out>
__device__ __forceinline__ bool warp_finish_row(const SS& s, uint64_t thr, uint32_t k, uint32_t need, bool gated,
                                                int start, uint32_t* hist, uint32_t* sk, uint32_t* si, int lane,
                                                uint32_t* cands, Out&& out) {
  uint32_t c = 0;
  const uint64_t th = warp_select_lean(s, thr, k, hist, sk, si, lane, &c);
  *cands = c;
  if (gated && c < need) return false;
  const int pos = warp_emit(s, th, lane, [&](int at, uint32_t key, uint32_t idx) {
    if (at < static_cast<int>(k)) out(at, static_cast<int>(idx) - start, key);
  });
  for (int j = min(pos, static_cast<int>(k)) + lane; j < static_cast<int>(k); j += 32) out(j, -1, 0u);
  return true;
}

// ---- row selects by a pair of warps ----------------------------------------------
// The two warps that hold a row in the block kernels (warp w of the row
// group's two warpgroups) select it together: the sample gate
// (pair_gate_fast, pair_select), the block end (pair_finish_row_gated) and a
// split block's merge (pair_finish_row_prebinned). Each traverses its own 4
// of the row's 8 segments (8 lanes per segment: as many loads in flight per
// lane as one warp over 8 segments, on half the entries); the histogram and the scratch
// are the row's, shared; the warp-uniform values (counts, key range, the
// bin's threshold) go through a few words of shared memory at a 64-thread
// named barrier, so both warps take every decision from the same values and
// their control flow matches. The gather of the k-th's bin and the output of
// every entry above it are one pass (the single-warp select reads the
// candidates four times; this reads them three times, each warp half of them).
// Inline PTX of this file: the pair's barrier (and the group's, below).
#ifdef MQA_TOPK_HOST_EMULATION
__device__ __forceinline__ void pair_sync(int) { warp_emu::pair_barrier(); }
#else
__device__ __forceinline__ void pair_sync(int id) { asm volatile("bar.sync %0, 64;" ::"r"(id) : "memory"); }
#endif

// This warp's 4 segments of a row as SegLanes with 8 lanes per segment (lane
// l reads segment l / 8): segments seg0 + i * stride (i < 4; indices at +cap
// words; counts cnt[i]).
__device__ __forceinline__ SegLanes make_pair_segs(const uint32_t* seg0, uint32_t stride, uint32_t cap,
                                                   const uint32_t* cnt, int lane) {
  const int sg = lane >> 3;
  const int n = static_cast<int>(cnt[sg]);
  const uint32_t* kp = seg0 + static_cast<size_t>(sg) * stride;
  return SegLanes{kp, kp + cap, n, static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<uint32_t>(n)))};
}

// for_each_key4 over a pair warp's segments (8 lanes per segment). The
// visiting order (batch, group u, entry e, lane) is the same in every
// warp-wide call, so positions ranked by ballots inside f are deterministic.
template <bool kWithIdx = false, class F>
__device__ __forceinline__ void pair_for_each(const SegLanes& s, int lane, F&& f) {
  for_each_key4<kWithIdx, 8>(s, lane, f);
}

// A row's candidates over the pieces of a split block (fused/blocks_split.cuh,
// blocks_piece_segs): piece i (i < np) lives at CTA c = c0 + i in its slot
// sl = (i == 0 ? slot0 : 0), in the split workspace layout: per CTA
// kPieceSlots regions of 8 rows x 8
// segments x (keys, indices) x cap words, so the row's segment s of (c, sl)
// starts at base + (c * kPieceSlots + sl) * 128 cap + s * 2 cap (base: the
// row's segment 0 of CTA 0, slot 0, plus the entries' offset in a segment;
// indices at + cap words), and its count is at cnt + (c * kPieceSlots + sl) *
// 256 + s (global memory written by other CTAs: read with __ldcg). half: a
// pair warp's half (its 4 segments, 8 lanes each: pair_for_each), or -1 for
// one warp over all 8 (4 lanes each: for_each_key4, warp_hist_pass and
// warp_emit, i.e. warp_select_lean and warp_finish_row). Pieces are visited
// in order, so everything ranked by ballots is deterministic and the same in
// every CTA that traverses the row. (Few fields: it lives in registers
// through a whole select.)
constexpr int kPieceSlots = 3;
struct PieceSegs {
  const uint32_t* base;
  const uint32_t* cnt;
  uint32_t cap;
  int c0, slot0, np, half;
};

// Piece i's segments as this lane's SegLanes.
__device__ __forceinline__ SegLanes piece_lanes(const PieceSegs& s, int i, int lane) {
  const uint32_t sl = static_cast<uint32_t>(s.c0 + i) * kPieceSlots + (i == 0 ? static_cast<uint32_t>(s.slot0) : 0u);
  const uint32_t sg = s.half >= 0 ? 4u * static_cast<uint32_t>(s.half) + (lane >> 3) : static_cast<uint32_t>(lane >> 2);
  const uint32_t* kp = s.base + (size_t(sl) * 64u + sg) * (2u * s.cap);
  const int n = static_cast<int>(__ldcg(s.cnt + size_t(sl) * 256u + sg));
  return SegLanes{kp, kp + s.cap, n, static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<uint32_t>(n)))};
}

// The pieces' segments kL lanes each, 32 / kL of them per round (segment q:
// piece q / per_piece, its segment q % per_piece of this warp's), rounds in
// order: with many small pieces all lanes load at once. Warp-uniform bounds.
template <bool kWithIdx, int kL, class F>
__device__ __forceinline__ void piece_rounds(const PieceSegs& s, int lane, F&& f) {
  const int per_piece = s.half >= 0 ? 4 : 8;
  const int total = __shfl_sync(0xffffffffu, s.np * per_piece, 0);  // (said warp-uniform)
#pragma unroll 1
  for (int q0 = 0; q0 < total; q0 += 32 / kL) {
    const int q = q0 + lane / kL;
    const int pc = q < total ? q / per_piece : 0;
    const uint32_t sl = static_cast<uint32_t>(s.c0 + pc) * kPieceSlots + (pc == 0 ? static_cast<uint32_t>(s.slot0) : 0u);
    const uint32_t sg = static_cast<uint32_t>(s.half >= 0 ? 4 * s.half : 0) + static_cast<uint32_t>(q % per_piece);
    const uint32_t* kp = s.base + (size_t(sl) * 64u + sg) * (2u * s.cap);
    const int n = q < total ? static_cast<int>(__ldcg(s.cnt + size_t(sl) * 256u + sg)) : 0;
    const SegLanes g{kp, kp + s.cap, n, static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<uint32_t>(n)))};
    for_each_key4<kWithIdx, kL>(g, lane, f);
  }
}

// The pieces' segments as one flat run of uint4 groups (a segment of n
// entries holds ceil(n / 4) groups, the last one masked), 32 segments per
// round: lane l takes groups j0 + 32 u + l of the round's run, so a warp's
// loads are consecutive 16-byte groups (a few lines per instruction, where
// one lane per segment touches 32) and no lane idles past a short segment.
// A group's segment is found by a binary search over the round's inclusive
// group counts (5 shuffles). Calls f(key, idx, valid) for each entry (keys
// and indices: four groups in flight per lane). Visits (round, step, u, lane,
// entry) in a fixed order: ballot ranks inside f are deterministic.
// Warp-uniform bounds.
template <class F>
__device__ __forceinline__ void piece_flat(const PieceSegs& s, int lane, F&& f) {
  constexpr int kG = 4;
  const int per_piece = s.half >= 0 ? 4 : 8;
  const int total = __shfl_sync(0xffffffffu, s.np * per_piece, 0);  // (said warp-uniform)
  const uint32_t sg0 = static_cast<uint32_t>(s.half >= 0 ? 4 * s.half : 0);
#pragma unroll 1
  for (int q0 = 0; q0 < total; q0 += 32) {
    const int q = q0 + lane;
    const int pc = q < total ? q / per_piece : 0;
    const uint32_t sl = static_cast<uint32_t>(s.c0 + pc) * kPieceSlots + (pc == 0 ? static_cast<uint32_t>(s.slot0) : 0u);
    const uint32_t sg = sg0 + static_cast<uint32_t>(q % per_piece);
    const uint32_t off = (sl * 64u + sg) * (2u * s.cap);  // (words from base: < 2^32 for the op's workspace)
    const int n = q < total ? static_cast<int>(__ldcg(s.cnt + size_t(sl) * 256u + sg)) : 0;
    const int g = (n + 3) >> 2;
    const int incl = warp_inclusive_sum(g, lane);
    const int excl = incl - g;
    const int T = __shfl_sync(0xffffffffu, incl, 31);
#pragma unroll 1
    for (int j0 = 0; j0 < T; j0 += 32 * kG) {
      uint4 v[kG], w[kG];
      int rem[kG];
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        const int j = j0 + u * 32 + lane;
        int L = 0;  // the segment of group j: the number of segments whose groups end at or before it
#pragma unroll
        for (int b = 16; b; b >>= 1)
          if (__shfl_sync(0xffffffffu, incl, L + b - 1) <= j) L += b;
        const uint32_t o = __shfl_sync(0xffffffffu, off, L & 31);
        const int e0 = (j - __shfl_sync(0xffffffffu, excl, L & 31)) * 4;
        const int nL = __shfl_sync(0xffffffffu, n, L & 31);  // (every lane: not under the condition)
        rem[u] = j < T ? nL - e0 : 0;
        const uint32_t* kp = s.base + o + e0;
        v[u] = rem[u] > 0 ? __ldcg(reinterpret_cast<const uint4*>(kp)) : make_uint4(0, 0, 0, 0);
        w[u] = rem[u] > 0 ? __ldcg(reinterpret_cast<const uint4*>(kp + s.cap)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        const uint32_t kv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        const uint32_t iv[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) f(kv[e], iv[e], e < rem[u]);
      }
    }
  }
}

// Lanes per segment for np pieces of per_piece segments: one once every lane
// has a segment, else 8 (piece by piece). (2 or 4 lanes would cost the split
// kernel's tile loops a register.)
__device__ __forceinline__ int piece_lanes_per_seg(int np, int per_piece) {
  return np * per_piece >= 32 ? 1 : 8;
}

// pair_for_each over a pair warp's half of the pieces (half >= 0). Many
// small pieces (a lane per segment or more): the flat run for the passes with
// indices (piece_flat: at 16 pieces the merge's gather pass takes about 2/3
// of the cycles of a lane per segment), a lane per segment for the key-only
// passes (the flat run's code there costs the tile loops); fewer pieces: 8
// lanes per segment, piece by piece (at 2 pieces about 10% faster than the
// flat run).
template <bool kWithIdx = false, class F>
__device__ __forceinline__ void pair_for_each(const PieceSegs& s, int lane, F&& f) {
  switch (__shfl_sync(0xffffffffu, piece_lanes_per_seg(s.np, s.half >= 0 ? 4 : 8), 0)) {
    case 1:
      if constexpr (kWithIdx) piece_flat(s, lane, f);
      else piece_rounds<false, 1>(s, lane, f);
      break;
    default: piece_rounds<kWithIdx, 8>(s, lane, f); break;
  }
}

// for_each_key4 over all 8 segments of the pieces by one warp (half -1: the
// heavy-tie fallback, rare), piece by piece.
template <bool kWithIdx = false, class F>
__device__ __forceinline__ void for_each_key4(const PieceSegs& s, int lane, F&& f) {
  const int np = __shfl_sync(0xffffffffu, s.np, 0);
#pragma unroll 1
  for (int i = 0; i < np; ++i) for_each_key4<kWithIdx, 4>(piece_lanes(s, i, lane), lane, f);
}

// warp_emit over the pieces (one warp), numbering the kept entries of piece i
// after those of pieces < i. Not in place: emit must write elsewhere.
template <class Emit>
__device__ __forceinline__ int warp_emit(const PieceSegs& s, uint64_t t, int lane, Emit&& emit) {
  int pos = 0;
#pragma unroll 1
  for (int i = 0; i < s.np; ++i) {
    const int off = pos;
    pos += warp_emit(piece_lanes(s, i, lane), t, lane,
                     [&](int at, uint32_t key, uint32_t idx) { emit(off + at, key, idx); });
  }
  return pos;
}

// The pair's shared state: xch, 16 words of shared memory ([parity][half][4]);
// bar, the named barrier (64 threads: both warps); half, this warp's (0: the
// first warp, which also holds the row's gate flag).
struct PairCtx {
  uint32_t* xch;
  int bar;
  int half;
  int ph;  // exchanges so far (alternating halves of xch)
};

// Publishes this warp's 4 words, waits for the other warp, returns its 4.
__device__ __forceinline__ uint4 pair_exchange(PairCtx& c, uint4 mine, int lane) {
  uint32_t* slot = c.xch + (c.ph & 1) * 8;
  if (lane == 0) {
    slot[c.half * 4 + 0] = mine.x;
    slot[c.half * 4 + 1] = mine.y;
    slot[c.half * 4 + 2] = mine.z;
    slot[c.half * 4 + 3] = mine.w;
  }
  pair_sync(c.bar);
  const volatile uint32_t* o = slot + (c.half ^ 1) * 4;
  const uint4 r = make_uint4(o[0], o[1], o[2], o[3]);
  ++c.ph;
  return r;
}

// The first pass of the cooperative selects (the pair's and the row
// group's): over a traversal each(f), calling f(key, valid) for every slot,
// this warp's count of the eligible keys (valid, key >= tk1) and their range,
// reduced over the warp: (count, min or 0xffffffff, max or 0, 0).
template <class Each>
__device__ __forceinline__ uint4 warp_eligible_range(Each&& each, uint32_t tk1) {
  uint32_t c = 0, kmin = 0xffffffffu, kmax = 0;
  each([&](uint32_t key, bool valid) {
    const bool el = valid && key >= tk1;
    kmin = min(kmin, el ? key : 0xffffffffu);
    kmax = max(kmax, el ? key : 0u);
    c += el ? 1u : 0u;
  });
  c = __reduce_add_sync(0xffffffffu, c);
  kmin = __reduce_min_sync(0xffffffffu, kmin);
  kmax = __reduce_max_sync(0xffffffffu, kmax);
  return make_uint4(c, kmin, kmax, 0u);
}

// Their heavy-tie cut's first pass: over each(f), calling f(key, idx, valid)
// for every slot, the smallest and largest index of this warp's entries
// whose key is key_eq, reduced over the warp: (min or 0xffffffff, max or 0).
template <class Each>
__device__ __forceinline__ uint4 warp_tied_index_range(Each&& each, uint32_t key_eq) {
  uint32_t imin = 0xffffffffu, imax = 0;
  each([&](uint32_t key, uint32_t idx, bool valid) {
    const bool t = valid && key == key_eq;
    imin = min(imin, t ? idx : 0xffffffffu);
    imax = max(imax, t ? idx : 0u);
  });
  imin = __reduce_min_sync(0xffffffffu, imin);
  imax = __reduce_max_sync(0xffffffffu, imax);
  return make_uint4(imin, imax, 0u, 0u);
}

// The need-th lowest index among both warps' entries whose key is key_eq
// (heavy ties: more than kScratch of them; need <= their count), as the
// composite threshold, the same in both warps: warp_index_cut_lean by the
// pair (each warp its half; the histogram and the scratch are the row's).
// Leaves hist zero.
template <class SS>
__device__ __forceinline__ uint64_t pair_index_cut(const SS& s, PairCtx& pc, uint32_t key_eq, uint32_t need,
                                                   uint32_t* hist, uint32_t* sk, uint32_t* si, int lane) {
  const uint4 mine = warp_tied_index_range([&](auto&& f) { pair_for_each<true>(s, lane, f); }, key_eq);
  const uint4 q = pair_exchange(pc, mine, lane);
  uint32_t lo = min(mine.x, q.x), span = max(mine.y, q.y) - lo;  // the tied indices are in [lo, lo + span]
  uint32_t c = 0;
#pragma unroll 1
  while (true) {
    const uint32_t l0 = lo, s0 = span, mult = range_mult(span);
    pair_for_each<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
      if (valid && key == key_eq && idx - l0 <= s0) atomicAdd(hist + range_bin(idx, l0, mult), 1u);
    });
    __syncwarp();
    pair_sync(pc.bar);  // both warps' counts are in
    uint32_t before = 0;
    const uint32_t sel = warp_find_digit_t<false>(hist, need, false, &before, &c, lane);
    pair_sync(pc.bar);  // both warps have read the histogram
#pragma unroll
    for (int j = 0; j < 4; ++j) hist[pc.half * 128 + lane * 4 + j] = 0;
    pair_sync(pc.bar);  // cleared before either warp counts into it again
    need -= before;
    if (mult == 0u) return composite(key_eq, l0 + sel);  // a bin per index: the need-th is index l0 + sel
    const uint64_t a = range_bin_start(sel, mult);
    const uint64_t b = min(range_bin_start(sel + 1u, mult), static_cast<uint64_t>(s0) + 1u);
    lo = l0 + static_cast<uint32_t>(a);
    span = static_cast<uint32_t>(b - a - 1u);  // slice sel: offsets [a, b) of [l0, l0 + s0]
    if (c <= static_cast<uint32_t>(kScratch)) break;
  }
  // The slice's tied entries into the scratch (the first warp ascending from
  // 0, the second descending from c - 1), cut there by the first warp.
  const uint32_t l0 = lo, s0 = span, lt = (1u << lane) - 1u;
  const uint32_t hs = pc.half == 0 ? 1u : 0xffffffffu;
  uint32_t gb = pc.half == 0 ? 0u : c - 1u;
  pair_for_each<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
    const bool in = valid && key == key_eq && idx - l0 <= s0;
    const uint32_t m = __ballot_sync(0xffffffffu, in);
    const uint32_t at = gb + hs * static_cast<uint32_t>(__popc(m & lt));
    if (in && at < c) {
      sk[at] = key;
      si[at] = idx;
    }
    gb += hs * static_cast<uint32_t>(__popc(m));
  });
  __syncwarp();
  pair_sync(pc.bar);  // the scratch is complete
  uint64_t t = 0;
  if (pc.half == 0) {
    const Segs bin{{sk, nullptr}, {si, nullptr}, {static_cast<int>(c), 0}, 1};
    t = warp_index_cut(bin, key_eq, need, hist, lane);
  }
  const uint4 tq = pair_exchange(pc, make_uint4(static_cast<uint32_t>(t), static_cast<uint32_t>(t >> 32), 0u, 0u), lane);
  return pc.half == 0 ? t : (static_cast<uint64_t>(tq.y) << 32) | tq.x;
}

// The pair selects' core. kEmit: the exact top min(k, n) of a row, by both
// warps of its pair (each calls it with its own half of the segments:
// make_pair_segs, or PieceSegs with its half): warp_finish_row's result (the
// same set; the order differs: the first warp's entries ascending from
// position 0, the second's descending from the last), through out(at,
// relative index, key). thr: the row's running threshold (eligible: key >=
// thr's, as in warp_select_lean); gated: the first warp's flag (the second's
// is ignored). Returns 1 when the row is written, 0 when a gated row has
// fewer than `need` candidates (nothing written; the caller redoes the row),
// -1 when the pair path does not apply (at most k eligible under a compacted
// row's threshold, where eligibility by key and composite >= thr differ):
// nothing written, the histogram is clear, and the caller runs
// warp_finish_row on one warp. Heavy ties at the k-th key (more than kScratch
// entries) are cut by index by the pair (pair_index_cut). Leaves hist zero.
// The gate's fast path (kEmit): a gated row whose threshold is still its gate
// (thr = gate key << 32; a compaction's threshold has a nonzero low word) and
// whose sample's largest key smax is above the gate skips the range pass: its
// first histogram is over [gate key, smax] with the keys above smax in the
// top bin (every entry of a higher bin still outranks every entry of a lower
// one), and the eligible count is the histogram's total. Both warps pass the
// same smax (0: no fast path). When the k-th falls in the top bin the row
// takes the general passes.
// kPreHist (kEmit only): the caller has already written the row's fast-path
// histogram to hist (both warps' halves, before the call: the counts of the
// eligible entries, key >= the gate key, in bins min(range_bin(key, gate key,
// range_mult(smax - gate key)), 255): the sum of the split pieces' published
// histograms), so the first pass is skipped. Where the fast path does not
// apply the histogram is cleared and the row takes the general passes. The
// passes that follow check the counts: when the entries disagree with them
// (never expected) the row is handed to one warp (-1; some positions may
// already be written, and warp_finish_row rewrites them all).
// kEmit = false (pair_select): only the threshold, *t_out (both warps), as
// warp_select_lean's (the k-th largest eligible composite, or thr when at most
// k are eligible); nothing is written. kTieGate (kEmit = false only): with
// heavy ties at the k-th key, answer that key's gate, composite(key, 0)
// (every entry of that key is then at or above it: a gate just below the
// exact rank, still safe), instead of the index cut.
template <bool kEmit, bool kTieGate, bool kPreHist, class SS, class Out>
__device__ __forceinline__ int pair_row_core(const SS& s, PairCtx& pc, uint64_t thr, uint32_t k, uint32_t need,
                                             bool gated, int start, uint32_t* hist, uint32_t* sk, uint32_t* si,
                                             int lane, uint32_t* cands, uint64_t* t_out, Out&& out, uint32_t smax) {
  const uint32_t lt = (1u << lane) - 1u;
  const uint32_t tk1 = max(static_cast<uint32_t>(thr >> 32), 1u);
  uint32_t c = 0, lo = 0, span = 0, need_k = k, above = 0;
  uint32_t mult = 0, sel = 0;
  bool sliced = false;  // the bin is slice `sel` of [lo, lo + span] (bins of mult)
  bool fast = false;
  if constexpr (kEmit) {
    const uint32_t gk = static_cast<uint32_t>(thr >> 32);
    fast = static_cast<uint32_t>(thr) == 0u && gk >= 1u && smax > gk;
    if constexpr (kPreHist) {
      if (!fast) {  // (counts the general passes do not use: cleared)
        pair_sync(pc.bar);
#pragma unroll
        for (int j = 0; j < 4; ++j) hist[pc.half * 128 + lane * 4 + j] = 0;
        pair_sync(pc.bar);
      }
    }
    if (fast) {
      const uint32_t l0 = gk, s0 = smax - gk, m0 = range_mult(s0);
      if constexpr (!kPreHist) {
        pair_for_each(s, lane, [&](uint32_t key, bool valid) {
          if (valid && key >= l0) atomicAdd(hist + min(range_bin(key, l0, m0), 255u), 1u);
        });
        __syncwarp();
      }
      pair_sync(pc.bar);  // both warps' counts are in
      uint32_t tot = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) tot += hist[j * 32 + lane];
      c = __reduce_add_sync(0xffffffffu, tot);
      uint32_t before = 0, in_bin = 0;
      if (c > k) sel = warp_find_digit_t<false>(hist, k, true, &before, &in_bin, lane);
      pair_sync(pc.bar);  // both warps have read the histogram
#pragma unroll
      for (int j = 0; j < 4; ++j) hist[pc.half * 128 + lane * 4 + j] = 0;
      *cands = c;
      if (c < need) return 0;  // gated
      if (c <= k) {  // every eligible entry is in: the first warp ascending from 0, the second descending from c - 1
        uint32_t pos = 0;
        pair_for_each<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
          const bool in = valid && key >= l0;
          const uint32_t m = __ballot_sync(0xffffffffu, in);
          const uint32_t r = pos + __popc(m & lt);
          const uint32_t at = pc.half == 0 ? r : c - 1u - r;
          if (in && at < c) out(static_cast<int>(at), static_cast<int>(idx) - start, key);
          pos += __popc(m);
        });
        if constexpr (kPreHist) {  // (the counts against the entries)
          const uint4 q = pair_exchange(pc, make_uint4(pos, 0u, 0u, 0u), lane);
          if (pos + q.x != c) return -1;
        }
        for (uint32_t j = c + static_cast<uint32_t>(pc.half * 32 + lane); j < k; j += 64) out(static_cast<int>(j), -1, 0u);
        return 1;
      }
      if (sel == 255u) {
        fast = false;  // the k-th is at or above smax: the general passes (the histogram is clear)
        pair_sync(pc.bar);
      } else {
        lo = l0;
        span = s0;
        mult = m0;
        need_k = k - before;
        above = before;
        c = in_bin;
        sliced = true;
      }
    }
  }
  if (!fast) {
  // Pass 1 (keys): this warp's eligible count and key range.
  const uint4 e = warp_eligible_range([&](auto&& f) { pair_for_each(s, lane, f); }, tk1);
  c = e.x;
  uint32_t kmin = e.y, kmax = e.z;
  const uint4 o = pair_exchange(pc, make_uint4(c, kmin, kmax, gated ? 1u : 0u), lane);
  const uint32_t mine = c;
  c += o.x;
  kmin = min(kmin, o.y);
  kmax = max(kmax, o.z);
  const bool g = pc.half == 0 ? gated : o.w != 0u;
  *cands = c;
  if constexpr (!kEmit) {
    if (c <= k) {
      *t_out = thr;
      return 1;
    }
  }
  if (g && c < need) return 0;
  if (kEmit && c <= k) {
    if (static_cast<uint32_t>(thr) != 0u) return -1;  // a compacted row's threshold (rare)
    // Every eligible entry is in (thr = key << 32: key >= tk1 is composite >= thr).
    uint32_t pos = pc.half == 0 ? 0u : c - mine;
    pair_for_each<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
      const bool in = valid && key >= tk1;
      const uint32_t m = __ballot_sync(0xffffffffu, in);
      const uint32_t at = pos + __popc(m & lt);
      if (in && at < k) out(static_cast<int>(at), static_cast<int>(idx) - start, key);
      pos += __popc(m);
    });
    for (uint32_t j = c + static_cast<uint32_t>(pc.half * 32 + lane); j < k; j += 64) out(static_cast<int>(j), -1, 0u);
    return 1;
  }
  lo = kmin;
  span = kmax - lo;
  }  // !fast
  // Range bins (as warp_select_lean), both warps counting into the row's histogram.
#pragma unroll 1
  while (c > static_cast<uint32_t>(kScratch) && span != 0) {
    if (sliced) {  // narrow to the slice's actual key range
      const uint32_t l0 = lo, s0 = span, m0 = mult, sl = sel;
      uint32_t nmin = 0xffffffffu, nmax = 0;
      pair_for_each(s, lane, [&](uint32_t key, bool valid) {
        const bool in = valid && key - l0 <= s0 && range_bin(key, l0, m0) == sl;
        nmin = min(nmin, in ? key : 0xffffffffu);
        nmax = max(nmax, in ? key : 0u);
      });
      nmin = __reduce_min_sync(0xffffffffu, nmin);
      nmax = __reduce_max_sync(0xffffffffu, nmax);
      const uint4 q = pair_exchange(pc, make_uint4(nmin, nmax, 0u, 0u), lane);
      lo = min(nmin, q.x);
      span = max(nmax, q.y) - lo;
      sliced = false;
      if (span == 0) break;
    }
    const uint32_t l0 = lo, s0 = span, m0 = range_mult(span);
    pair_for_each(s, lane, [&](uint32_t key, bool valid) {
      if (valid && key - l0 <= s0) atomicAdd(hist + range_bin(key, l0, m0), 1u);
    });
    __syncwarp();
    pair_sync(pc.bar);  // both warps' counts are in
    uint32_t before = 0;
    sel = warp_find_digit_t<false>(hist, need_k, true, &before, &c, lane);
    pair_sync(pc.bar);  // both warps have read the histogram
#pragma unroll
    for (int j = 0; j < 4; ++j) hist[pc.half * 128 + lane * 4 + j] = 0;
    need_k -= before;
    above += before;
    mult = m0;
    sliced = true;
  }
  uint64_t t_all = 0;  // heavy ties with every tied entry in: the threshold itself
  if (c > static_cast<uint32_t>(kScratch)) {  // more than kScratch share the k-th key lo
    if (c != need_k) {
      if constexpr (kTieGate && !kEmit) {
        pair_sync(pc.bar);
        *t_out = composite(lo, 0u);
        return 1;
      }
      // The need_k-th lowest index among them, by both warps; exactly k
      // entries are at or above the cut (the first warp's ascending from 0,
      // the second's descending from k - 1).
      const uint64_t t = pair_index_cut(s, pc, lo, need_k, hist, sk, si, lane);
      if constexpr (!kEmit) {
        *t_out = t;
        return 1;
      }
      uint32_t pos = pc.half == 0 ? 0u : k - 1u, mine = 0;
      pair_for_each<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
        const bool in = valid && composite(key, idx) >= t;
        const uint32_t m = __ballot_sync(0xffffffffu, in);
        const uint32_t r = static_cast<uint32_t>(__popc(m & lt));
        const uint32_t at = pc.half == 0 ? pos + r : pos - r;
        if (in && at < k) out(static_cast<int>(at), static_cast<int>(idx) - start, key);
        pos = pc.half == 0 ? pos + static_cast<uint32_t>(__popc(m)) : pos - static_cast<uint32_t>(__popc(m));
        mine += static_cast<uint32_t>(__popc(m));
      });
      if constexpr (kPreHist) {  // (the counts against the entries)
        const uint4 q = pair_exchange(pc, make_uint4(mine, 0u, 0u, 0u), lane);
        if (mine + q.x != k) return -1;
      }
      return 1;
    }
    t_all = composite(lo, 0xffffffffu);
    if constexpr (!kEmit) {
      *t_out = t_all;
      return 1;
    }
  }
  // One pass (keys and indices): every entry above the bin is out (the first
  // warp ascending from 0, the second descending from above - 1); the bin's
  // entries go to the scratch (ascending / descending from c - 1).
  // The bin's bounds as keys, once per row (range_bin is monotone in the key):
  // an entry is above the bin iff key >= khi = lo + dhi (none when that is
  // 2^32), in it iff klo = lo + dlo <= key < khi. Every key >= klo is
  // eligible (lo >= the threshold's key on every path), so per entry the pass
  // is one compare, one ballot and a store; the bin's few entries take a
  // warp-uniform branch (the pass is issue-bound at 16 warps per SM).
  const bool gather = t_all == 0;
  const BinBounds bb = bin_bounds(lo, span, mult, sel, sliced);
  const uint32_t khi = bb.khi, hspan = bb.hspan, klo = bb.klo, espan = bb.espan;
  // positions: the first warp at hb + popc, the second at hb - popc (hs = -1)
  const uint32_t hs = pc.half == 0 ? 1u : 0xffffffffu;
  uint32_t hb = pc.half == 0 ? 0u : above - 1u, gb = pc.half == 0 ? 0u : c - 1u;
  uint32_t gmin = 0xffffffffu, gmax = 0;
  pair_for_each<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
    const bool hi = valid && key - khi < hspan;
    const uint32_t mh = __ballot_sync(0xffffffffu, hi);
    if constexpr (kEmit) {
      const uint32_t at = hb + hs * static_cast<uint32_t>(__popc(mh & lt));
      if (hi && at < above) out(static_cast<int>(at), static_cast<int>(idx) - start, key);
    }
    hb += hs * static_cast<uint32_t>(__popc(mh));
    const bool eq = valid && key - klo < espan;
    if (__any_sync(0xffffffffu, eq)) {  // (warp-uniform: the bin's entries, a few dozen per row)
      const uint32_t me = __ballot_sync(0xffffffffu, eq);
      if (eq) {
        const uint32_t at = gb + hs * static_cast<uint32_t>(__popc(me & lt));
        if (!gather) {  // heavy ties, all in: straight after the entries above
          const uint32_t ot = above + at;
          if (at < c && ot < k) out(static_cast<int>(ot), static_cast<int>(idx) - start, key);
        } else if (at < c) {
          sk[at] = key;
          si[at] = idx;
        }
        gmin = min(gmin, key);
        gmax = max(gmax, key);
      }
      gb += hs * static_cast<uint32_t>(__popc(me));
    }
  });
  const uint32_t hpos = pc.half == 0 ? hb : above - 1u - hb, gpos = pc.half == 0 ? gb : c - 1u - gb;
  if constexpr (kPreHist) {  // (the counts against the entries)
    const uint4 q = pair_exchange(pc, make_uint4(hpos, gpos, 0u, 0u), lane);
    if (hpos + q.x != above || gpos + q.y != c) return -1;
  }
  if (!gather) return 1;
  gmin = __reduce_min_sync(0xffffffffu, gmin);
  gmax = __reduce_max_sync(0xffffffffu, gmax);
  const uint4 q = pair_exchange(pc, make_uint4(gmin, gmax, 0u, 0u), lane);  // also: the scratch is complete
  if constexpr (!kEmit) {
    uint64_t t = 0;
    if (pc.half == 0) t = finish_in_scratch(sk, si, c, min(gmin, q.x), max(gmax, q.y), need_k, hist, lane);
    const uint4 tq = pair_exchange(pc, make_uint4(static_cast<uint32_t>(t), static_cast<uint32_t>(t >> 32), 0u, 0u), lane);
    *t_out = pc.half == 0 ? t : (static_cast<uint64_t>(tq.y) << 32) | tq.x;
    return 1;
  }
  if (pc.half != 0) return 1;
  const uint64_t t = finish_in_scratch(sk, si, c, min(gmin, q.x), max(gmax, q.y), need_k, hist, lane);
  uint32_t pos = above;
  for (uint32_t j0 = 0; j0 < c; j0 += 32) {
    const uint32_t j = j0 + static_cast<uint32_t>(lane);
    const bool keep = j < c && composite(sk[j], si[j]) >= t;
    const uint32_t m = __ballot_sync(0xffffffffu, keep);
    const uint32_t at = pos + __popc(m & lt);
    if (keep && at < k) out(static_cast<int>(at), static_cast<int>(si[j]) - start, sk[j]);
    pos += __popc(m);
  }
  __syncwarp();
  return 1;
}

// The block-end select of a row by its pair (fused/blocks_select.cuh:
// pair_row_core with kEmit, over each warp's make_pair_segs half). smax: the
// sample's largest key of the row, for the gate's fast path (0: none; the
// same value in both warps). A row that takes the fast path is gated by
// construction (only gated rows get an smax).
template <class Out>
__device__ __forceinline__ int pair_finish_row_gated(const SegLanes& s, PairCtx& pc, uint64_t thr, uint32_t smax,
                                                     uint32_t k, uint32_t need, bool gated, int start, uint32_t* hist,
                                                     uint32_t* sk, uint32_t* si, int lane, uint32_t* cands, Out&& out) {
  uint64_t t = 0;
  return pair_row_core<true, false, false>(s, pc, thr, k, need, gated, start, hist, sk, si, lane, cands, &t,
                                           static_cast<Out&&>(out), smax);
}

// A split block's merge of a row by its pair (fused/blocks_split.cuh): the
// block-end select over the pieces, their fast-path bins already summed in
// hist (kPreHist; see pair_count_gate_bins). Both warps pass the same smax
// (0: no fast path).
template <class Out>
__device__ __forceinline__ int pair_finish_row_prebinned(const PieceSegs& s, PairCtx& pc, uint64_t thr, uint32_t smax,
                                                         uint32_t k, uint32_t need, bool gated, int start,
                                                         uint32_t* hist, uint32_t* sk, uint32_t* si, int lane,
                                                         uint32_t* cands, Out&& out) {
  uint64_t t = 0;
  return pair_row_core<true, false, true>(s, pc, thr, k, need, gated, start, hist, sk, si, lane, cands, &t,
                                          static_cast<Out&&>(out), smax);
}

// The fast path's bins of a split piece's entries at or above the gate key gk
// (keys above smax in the top bin; smax > gk >= 1), for
// pair_finish_row_prebinned: counts both warps' halves into hist (zero on
// entry) and waits for both. The caller reads (and clears) them.
__device__ __forceinline__ void pair_count_gate_bins(const PieceSegs& s, PairCtx& pc, uint32_t gk, uint32_t smax,
                                                     uint32_t* hist, int lane) {
  const uint32_t m0 = range_mult(smax - gk);
  pair_for_each(s, lane, [&](uint32_t key, bool valid) {
    if (valid && key >= gk) atomicAdd(hist + min(range_bin(key, gk, m0), 255u), 1u);
  });
  __syncwarp();
  pair_sync(pc.bar);
}

// The k-th largest eligible composite (key >= thr's) over both warps' halves
// of a row, or thr when at most k are eligible: warp_select_lean's answer,
// *t_out in both warps (heavy ties at the k-th key cut by index by the pair);
// returns false when one warp's warp_select_lean must be run instead. *count:
// the eligible entries. Leaves hist zero. The sample gate's exact select
// (fused/blocks_select.cuh, over make_pair_segs halves). kTieGate: under heavy
// ties answer the tied key's gate instead (see pair_row_core; true: the split
// block's shared gate, over PieceSegs halves, fused/blocks_split.cuh).
template <bool kTieGate = false, class SS>
__device__ __forceinline__ bool pair_select(const SS& s, PairCtx& pc, uint64_t thr, uint32_t k, uint32_t* hist,
                                            uint32_t* sk, uint32_t* si, int lane, uint64_t* t_out, uint32_t* count) {
  return pair_row_core<false, kTieGate, false>(s, pc, thr, k, 0u, false, 0, hist, sk, si, lane, count, t_out,
                                               [](int, int, uint32_t) {}, 0u) > 0;
}

// The sample gate in one pass (fused/blocks_select.cuh), given smax, the
// largest eligible key of the row's sample: the keys within 2^24 below smax
// are counted in 256 bins of 2^16 keys (bin (smax - key) >> 16: bin 0 the
// highest), both warps into the row's histogram, and the gate is the lowest
// key of the bin that holds the rho-th largest key. So at least rho eligible
// entries (key >= 1) are at or above it: pair_select's rho-th, plus the
// entries of its bin below it (a 2^16 slice of order keys, about 2^-7 of a
// value). Returns 0 (no answer: the caller runs pair_select) when fewer than
// rho keys fall in the bins, or more than kScratch in the rho-th's bin (heavy
// ties there, whose gate pair_tie_gate cuts by index). The same answer in
// both warps. Leaves hist zero.
__device__ __forceinline__ uint32_t pair_gate_fast(const SegLanes& s, PairCtx& pc, uint32_t rho, uint32_t smax,
                                                   uint32_t* hist, int lane) {
  pair_for_each(s, lane, [&](uint32_t key, bool valid) {
    const uint32_t d = smax - key;
    if (valid && key >= 1u && key <= smax && d < (256u << 16)) atomicAdd(hist + (d >> 16), 1u);
  });
  __syncwarp();
  pair_sync(pc.bar);  // both warps' counts are in
  uint32_t tot = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) tot += hist[j * 32 + lane];
  tot = __reduce_add_sync(0xffffffffu, tot);
  uint32_t before = 0, in_bin = 0, bin = 0;
  if (rho >= 1u && tot >= rho) bin = warp_find_digit_t<false>(hist, rho, false, &before, &in_bin, lane);
  pair_sync(pc.bar);  // both warps have read the histogram
#pragma unroll
  for (int j = 0; j < 4; ++j) hist[pc.half * 128 + lane * 4 + j] = 0;
  pair_sync(pc.bar);  // cleared before either warp counts into it again
  if (rho < 1u || tot < rho) return 0u;
  if (in_bin > static_cast<uint32_t>(kScratch)) return 0u;  // a crowded bin (heavy ties?): the exact select and pair_tie_gate
  const uint32_t below = (bin + 1u) << 16;  // the bin's keys are (smax - below, smax - below + 2^16]
  return smax >= below ? smax - below + 1u : 1u;
}

// The sample gate under heavy ties at its rank. A gate of the tied key kt
// would let every tied key of the row through: thousands (relu-saturated
// rows, all-zero weights, exact ties), each row then compacted again and
// again. With more than kScratch of the sample's m entries tied at kt (the
// rank rho's key; `above` of them above it) the gate is cut by index: the
// tied keys up to index ic pass, with
// - ic_d = start + ceil((rho - above) n / tied) - 1: where the tied keys
//   spread evenly over the row's n keys, as many of the row's tied keys are
//   at or below it as the rank asks for (rho - above of the sample's, scaled
//   by n / m);
// - ic_s: the index of the sample's exact rho-th composite, moved up to the
//   last key before the next sampled tile (sample_gap_end). At least rho
//   sample entries are at or above the sample's cut, and with it every key
//   between the sampled tiles below it: right wherever the tied keys crowd
//   (the sample sees them there), within the walk's uneven tile spacing.
// ic = ic_d when at most m / 16 of the sample's entries are below kt (nearly
// every sampled key ties or ranks above: all-equal rows, all-zero weights,
// relu-saturated rows, where the ties spread over the whole row and ic_s,
// a whole gap of the walk past the rank, kept two to three times the
// target); otherwise the larger of the two. A row whose tied keys defeat
// the cut (crowded in the sampled tiles, sparse between them) has too few
// candidates and is redone, exact as ever.
// Returns the gate as a running threshold (composite > it passes: key > kt,
// or key kt and index <= ic), or kt's gate when the cut takes every tied key
// (ic at or past the row's last key) or at most kScratch tie.
__host__ __device__ inline uint64_t tie_gate_threshold(uint32_t kt, uint32_t ic_s, uint32_t rho, uint32_t above,
                                                       uint32_t tied, uint32_t n, uint32_t start, uint32_t m) {
  if (tied <= static_cast<uint32_t>(kScratch) || above >= rho || n == 0) return gate_threshold(kt);
  const uint64_t span = (static_cast<uint64_t>(rho - above) * n + tied - 1) / tied;
  const uint64_t ic_d = static_cast<uint64_t>(start) + span - 1;
  const uint64_t below = m > above + tied ? m - above - tied : 0u;
  const bool spread = 16u * below <= m;
  const uint64_t ic = spread || ic_d > ic_s ? ic_d : static_cast<uint64_t>(ic_s);
  if (ic >= static_cast<uint64_t>(start) + n - 1) return gate_threshold(kt);
  return composite(kt, static_cast<uint32_t>(ic)) - 1u;
}

// A gate g capped at key tcap: g when its key is below tcap, or equal to it
// with a cut by index (low word nonzero: pair_tie_gate's cut, stricter than
// tcap's gate only among the tied key's entries); else tcap's gate.
__host__ __device__ constexpr uint64_t cap_gate(uint64_t g, uint32_t tcap) {
  return static_cast<uint32_t>(g >> 32) < tcap || (static_cast<uint32_t>(g >> 32) == tcap && static_cast<uint32_t>(g) != 0u)
             ? g
             : gate_threshold(tcap);
}

// The last key before the first sampled tile above key ic's tile (the block's
// nt tiles of 128 keys from key lo, the walk's first ns tiles sampled), or
// the block's last key; ic itself when it is past the block.
__device__ __forceinline__ uint32_t sample_gap_end(uint32_t ic, uint32_t lo, int nt, int ns) {
  if (ic < lo || ic - lo >= 128u * static_cast<uint32_t>(nt)) return ic;
  const int tq = static_cast<int>((ic - lo) >> 7), stride = tile_stride(nt);
  int nxt = nt;
  for (int j = 0, tp = nt - 1; j < ns; ++j, tp = next_tile(tp, nt, stride))
    if (tp > tq && tp < nxt) nxt = tp;
  return lo + 128u * static_cast<uint32_t>(nxt) - 1u;
}

// tie_gate_threshold by the row's pair: t, the sample's exact rho-th largest
// composite (pair_select, its heavy ties cut by index) among the row's m
// sample entries (the caller's sum of its segment counts); one pass counting
// the sample entries above and at t's key; the block's walk (lo, nt, ns) for
// sample_gap_end. The same value in both warps.
template <class SS>
__device__ __forceinline__ uint64_t pair_tie_gate(const SS& s, PairCtx& pc, uint64_t t, uint32_t rho, uint32_t m,
                                                  uint32_t n, uint32_t start, uint32_t lo, int nt, int ns, int lane) {
  const uint32_t kt = static_cast<uint32_t>(t >> 32);
  uint32_t above = 0, tied = 0;
  pair_for_each(s, lane, [&](uint32_t key, bool valid) {
    above += valid && key > kt ? 1u : 0u;
    tied += valid && key == kt ? 1u : 0u;
  });
  above = __reduce_add_sync(0xffffffffu, above);
  tied = __reduce_add_sync(0xffffffffu, tied);
  const uint4 o = pair_exchange(pc, make_uint4(above, tied, 0u, 0u), lane);
  const uint32_t ic_s = sample_gap_end(0xffffffffu - static_cast<uint32_t>(t), lo, nt, ns);
  return tie_gate_threshold(kt, ic_s, rho, above + o.x, tied + o.y, n, start, m);
}

// ---- a row's compaction by the 8 warps of its row group ---------------------
// The block kernels' compaction check (fused/blocks_select.cuh) stops the
// whole row group at a named barrier; rather than one warp selecting a row
// over all 8 of its segments while the other seven wait, every warp takes its
// own segment of the row (the one its own appends fill, at most cap entries:
// one batch of loads per pass), the histograms are the row's, shared, and the
// warp-uniform values go through shared words at the group's 256-thread
// barrier. A compaction needs no exact k-th: any threshold with at least k
// candidates at or above it is safe (it never exceeds the row's k-th), and
// one that keeps at most k - 1 + kScratch frees the segments as well. So the
// threshold is the lower end of the range bin that holds the k-th key once
// that bin holds at most kScratch entries (no gather, no finish in shared
// memory), or, when more than kScratch entries tie at the k-th key, the last
// index of the index slice that holds the need-th lowest tied index.

// The group's shared state: xch, 64 words of shared memory ([parity][warp][4]);
// bar, the named barrier of the group's 256 threads; warp, this warp's index
// in the group (0 .. 7; it clears hist words [32 warp, +32)).
constexpr int kGroupWarps = 8;
struct GroupCtx {
  uint32_t* xch;
  int bar;
  int warp;
  int ph;  // exchanges so far (alternating halves of xch)
};

#ifdef MQA_TOPK_HOST_EMULATION
__device__ __forceinline__ void group_sync(int) { warp_emu::group_barrier(); }
#else
__device__ __forceinline__ void group_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
#endif

// Publishes this warp's 4 words and returns, over the group's 8 warps, the
// sum of x, the minimum of y, the maximum of z and the sum of w.
__device__ __forceinline__ uint4 group_reduce(GroupCtx& g, uint4 mine, int lane) {
  uint32_t* slot = g.xch + (g.ph & 1) * 4 * kGroupWarps;
  if (lane == 0) {
    slot[g.warp * 4 + 0] = mine.x;
    slot[g.warp * 4 + 1] = mine.y;
    slot[g.warp * 4 + 2] = mine.z;
    slot[g.warp * 4 + 3] = mine.w;
  }
  group_sync(g.bar);
  const volatile uint32_t* o = slot;
  uint4 r = make_uint4(0u, 0xffffffffu, 0u, 0u);
#pragma unroll
  for (int w = 0; w < kGroupWarps; ++w) {
    r.x += o[4 * w + 0];
    r.y = min(r.y, static_cast<uint32_t>(o[4 * w + 1]));
    r.z = max(r.z, static_cast<uint32_t>(o[4 * w + 2]));
    r.w += o[4 * w + 3];
  }
  ++g.ph;
  return r;
}

// After a histogram pass by every warp of the group: the bin holding the
// need-th entry (descending or ascending), the same in every warp; then the
// histogram is cleared (each warp its 32 words) and the group synchronised,
// so the next pass may count into it.
__device__ __forceinline__ uint32_t group_find_digit(GroupCtx& g, uint32_t* hist, uint32_t need, bool descending,
                                                     uint32_t* before, uint32_t* in_bin, int lane) {
  __syncwarp();
  group_sync(g.bar);  // every warp's counts are in
  const uint32_t d = warp_find_digit_t<false>(hist, need, descending, before, in_bin, lane);
  group_sync(g.bar);  // every warp has read the histogram
  hist[g.warp * 32 + lane] = 0;
  group_sync(g.bar);  // cleared
  return d;
}

// The compaction threshold of a row whose candidates are spread over the
// group's 8 warps, one segment each (s: this warp's, read by all 32 lanes,
// for_each_key4 with 32 lanes per segment), called by every warp of the group
// with the same thr (the row's running threshold; eligible: key >= thr's, as
// in warp_select_lean). Returns thr when at most k are eligible; otherwise a
// threshold t with at least k eligible composites >= t and at most
// k - 1 + kScratch of them (the caller keeps max(t, thr)). The same value in
// every warp. hist: the row's 256 bins, zero on entry and on return.
__device__ __forceinline__ uint64_t group_compact_threshold(const SegLanes& s, GroupCtx& g, uint64_t thr, uint32_t k,
                                                            uint32_t* hist, int lane) {
  const uint32_t tk1 = max(static_cast<uint32_t>(thr >> 32), 1u);
  const uint4 q = group_reduce(
      g, warp_eligible_range([&](auto&& f) { for_each_key4<false, 32, 4>(s, lane, f); }, tk1), lane);
  uint32_t c = q.x;
  if (c <= k) return thr;
  // Range bins over the eligible keys (as warp_select_lean), narrowed to the
  // k-th's bin until it holds at most kScratch entries or a single key.
  uint32_t lo = q.y, span = q.z - q.y, need = k, mult = 0, sel = 0;
  bool sliced = false;
#pragma unroll 1
  while (c > static_cast<uint32_t>(kScratch) && span != 0) {
    if (sliced) {  // narrow to the slice's actual key range
      const uint32_t l0 = lo, s0 = span, m0 = mult, sl = sel;
      uint32_t nmin = 0xffffffffu, nmax = 0;
      for_each_key4<false, 32, 4>(s, lane, [&](uint32_t key, bool valid) {
        const bool in = valid && key - l0 <= s0 && range_bin(key, l0, m0) == sl;
        nmin = min(nmin, in ? key : 0xffffffffu);
        nmax = max(nmax, in ? key : 0u);
      });
      nmin = __reduce_min_sync(0xffffffffu, nmin);
      nmax = __reduce_max_sync(0xffffffffu, nmax);
      const uint4 r = group_reduce(g, make_uint4(0u, nmin, nmax, 0u), lane);
      lo = r.y;
      span = r.z - r.y;
      sliced = false;
      if (span == 0) break;
    }
    const uint32_t l0 = lo, s0 = span, m0 = range_mult(span);
    for_each_key4<false, 32, 4>(s, lane, [&](uint32_t key, bool valid) {
      if (valid && key - l0 <= s0) atomicAdd(hist + range_bin(key, l0, m0), 1u);
    });
    uint32_t before = 0;
    sel = group_find_digit(g, hist, need, true, &before, &c, lane);
    need -= before;
    mult = m0;
    sliced = true;
  }
  // (the loop ends sliced with at most kScratch in the bin, or unsliced on a single key lo)
  if (c <= static_cast<uint32_t>(kScratch))  // every key at or above the bin's lowest stays
    return gate_threshold(sliced ? bin_bounds(lo, span, mult, sel, true).klo : lo);
  // More than kScratch entries tie at the k-th key kt: the need-th lowest
  // index among them, by 256 equal slices of their index range, narrowed
  // while a slice holds more than kScratch of them.
  const uint32_t kt = lo;
  const uint4 ir = warp_tied_index_range([&](auto&& f) { for_each_key4<true, 32, 2>(s, lane, f); }, kt);
  const uint4 r = group_reduce(g, make_uint4(0u, ir.x, ir.y, 0u), lane);
  uint32_t ilo = r.y, ispan = r.z - r.y;
#pragma unroll 1
  while (true) {
    const uint32_t l0 = ilo, s0 = ispan, m0 = range_mult(ispan);
    for_each_key4<true, 32, 2>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
      if (valid && key == kt && idx - l0 <= s0) atomicAdd(hist + range_bin(idx, l0, m0), 1u);
    });
    uint32_t before = 0, in_slice = 0;
    const uint32_t sl = group_find_digit(g, hist, need, false, &before, &in_slice, lane);
    need -= before;
    const uint64_t a = range_bin_start(sl, m0);
    const uint64_t b = min(range_bin_start(sl + 1u, m0), static_cast<uint64_t>(s0) + 1u);
    // slice sl: indices [l0 + a, l0 + b); its last index keeps the need-th
    if (in_slice <= static_cast<uint32_t>(kScratch) || b - a <= 1u)
      return composite(kt, l0 + static_cast<uint32_t>(b - 1u));
    ilo = l0 + static_cast<uint32_t>(a);
    ispan = static_cast<uint32_t>(b - a - 1u);
  }
}

}  // namespace fused_detail

}  // namespace mqa_topk
