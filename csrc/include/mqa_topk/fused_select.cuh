// Warp-level pieces of the fused kernel's exact per-row selection (see
// sm90_fused_mqa_topk.cuh): the scrambled tile walk, the order-preserving key
// and composite order, `warp_select` (the k-th largest composite of a row's
// candidates at or above its running threshold) and `warp_emit` (keep what is
// at or above a threshold, stable). Free of torch, of the kernel and of inline
// PTX, so the same code also compiles as plain C++ under
// MQA_TOPK_HOST_EMULATION: tests/emu/ runs it on a CPU warp emulator (32
// fibers in lockstep at every warp intrinsic) against a sorting reference.
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

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t m = 0u - (u >> 31);
  return ((u ^ m) - m) ^ (~m & 0x80000000u);
}
__device__ __forceinline__ uint64_t composite(uint32_t key, uint32_t idx) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(0xffffffffu - idx);
}

// A row's candidates: up to two (keys, indices, count) segments. Global
// buffers are 16-byte aligned with capacity a multiple of 4, so the vector
// passes may read whole uint4 groups past the count (masked).
struct Segs {
  const uint32_t* key[2];
  const uint32_t* idx[2];
  int n[2];
  int nseg;
};

template <bool kGlobal>
__device__ __forceinline__ uint32_t ld_u32(const uint32_t* p) {
  if constexpr (kGlobal) return __ldcg(p);
  else return *p;
}

// Scalar radix pass by a warp (fallback paths and shared-memory scratch):
// histogram of digit (v >> shift) & 255 over the entries whose masked bits
// match; v is the key, or the index when on_idx (then only entries with key ==
// key_eq count). hist: this warp's 256 bins, zero on entry.
template <bool kGlobal>
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
          const uint32_t kv = ld_u32<kGlobal>(kp + j);
          if (on_idx) {
            ok[u] = kv == key_eq;
            v[u] = ld_u32<kGlobal>(ip + j);
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
__device__ __forceinline__ uint32_t warp_find_digit(uint32_t* hist, uint32_t need, bool descending, uint32_t* before,
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
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; ++j) hist[8 * lane + j] = 0;
  __syncwarp();
  digit = __shfl_sync(0xffffffffu, digit, src);
  *before = __shfl_sync(0xffffffffu, bef, src);
  *in_bin = __shfl_sync(0xffffffffu, inb, src);
  return digit;
}

// The need-th smallest index among the entries whose key is key_eq (heavy
// ties), by three 8-bit radix passes over the indices (< 2^24: keys <= 2^22
// by contract).
template <bool kGlobal>
__device__ __forceinline__ uint64_t warp_index_cut(const Segs& s, uint32_t key_eq, uint32_t need, uint32_t* hist,
                                                   int lane) {
  uint32_t iprefix = 0, imask = 0, before = 0, nb = 0;
#pragma unroll 1
  for (int sh = 16; sh >= 0; sh -= 8) {
    warp_hist_pass<kGlobal>(s, true, key_eq, imask, iprefix, sh, hist, lane);
    const uint32_t d = warp_find_digit(hist, need, false, &before, &nb, lane);
    need -= before;
    iprefix |= d << sh;
    imask |= 255u << sh;
  }
  return composite(key_eq, iprefix);
}

// The need-th largest composite (key desc, index asc) of the segments' entries
// (requires total >= need), by 8-bit radix passes: 4 over the keys, then up to
// 3 over the indices of the entries tied at that key (indices < 2^24: keys <=
// 2^22 by contract).
// key_hi_common: the key bits above bit `top` are equal in every entry (their
// value), so the passes start at the digit holding bit `top`.
template <bool kGlobal>
__device__ __forceinline__ uint64_t warp_kth_radix(const Segs& s, uint32_t need, uint32_t* hist, int lane,
                                                   int top = 31, uint32_t key_hi_common = 0) {
  const int first = top >= 7 ? top - 7 : 0;
  uint32_t mask = first + 8 >= 32 ? 0u : ~0u << (first + 8);
  uint32_t prefix = key_hi_common & mask, before, in_bin = 0;
#pragma unroll 1
  for (int shift = first;; shift = shift >= 8 ? shift - 8 : 0) {
    warp_hist_pass<kGlobal>(s, false, 0, mask, prefix, shift, hist, lane);
    const uint32_t d = warp_find_digit(hist, need, true, &before, &in_bin, lane);
    need -= before;
    prefix |= d << shift;
    mask |= 255u << shift;
    if (shift == 0) break;
  }
  if (in_bin == need) return composite(prefix, 0xffffffffu);  // every entry with this key is in
  return warp_index_cut<kGlobal>(s, prefix, need, hist, lane);
}

// The need-th largest composite of the n entries gathered into shared memory
// (sk, si; this lane's min/max key gmin, gmax), by radix passes over the key
// bits that still differ.
__device__ __forceinline__ uint64_t finish_in_scratch(uint32_t* sk, uint32_t* si, uint32_t n, uint32_t gmin,
                                                      uint32_t gmax, uint32_t need, uint32_t* hist, int lane) {
  __syncwarp();
  gmin = __reduce_min_sync(0xffffffffu, gmin);
  gmax = __reduce_max_sync(0xffffffffu, gmax);
  const int top = gmin == gmax ? 0 : 31 - __clz(gmin ^ gmax);
  const Segs bin{{sk, nullptr}, {si, nullptr}, {static_cast<int>(n), 0}, 1};
  const uint64_t t = warp_kth_radix<false>(bin, need, hist, lane, top, gmin);
  __syncwarp();
  return t;
}

// Calls f(key, valid) for every entry of the segments, four per lane, eight
// groups in flight (uint4 loads of the keys, L2 only). kWithIdx: also loads
// the indices (uint4) and calls f(key, idx, valid).
template <bool kWithIdx = false, class F>
__device__ __forceinline__ void for_each_key4(const Segs& s, int lane, F&& f) {
  constexpr int G = kWithIdx ? 4 : 8;
#pragma unroll 1
  for (int g = 0; g < s.nseg; ++g) {
    const uint32_t* kp = s.key[g];
    const uint32_t* ip = s.idx[g];
    const int n = s.n[g];
#pragma unroll 1
    for (int j0 = 0; j0 < n; j0 += 32 * 4 * G) {
      uint4 v[G], w[G];
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const int j = j0 + (u * 32 + lane) * 4;
        v[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(kp + j)) : make_uint4(0, 0, 0, 0);
        if constexpr (kWithIdx) w[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(ip + j)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const int j = j0 + (u * 32 + lane) * 4;
        const uint32_t kv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        if constexpr (kWithIdx) {
          const uint32_t iv[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
          for (int e = 0; e < 4; ++e) f(kv[e], iv[e], j + e < n);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) f(kv[e], j + e < n);
        }
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

// The threshold that keeps a row's top-k among its candidates: entries with
// composite >= thr (the row's running threshold) are eligible; returns the
// k-th largest eligible composite, or thr itself when at most k are eligible
// (then every eligible entry is kept).
// Passes over the candidates (L2, uint4 loads): the eligible key range and
// count; a 256-bin histogram over equal slices of that range (candidate
// values crowd near the threshold, and bit-digit bins would put them all in
// one bin: serialised atomics and more passes); the gather of the k-th's bin
// (usually a few dozen entries) into shared memory, finished there by radix
// passes over the bits that still differ. A bin with more than kScratch
// entries is refined (range + histogram again inside it); heavy ties (one key)
// go to radix passes over the indices.
__device__ __forceinline__ uint64_t warp_select(const Segs& s, uint64_t thr, uint32_t k, uint32_t* hist,
                                                uint32_t* sk, uint32_t* si, int lane) {
  // Eligible: key >= the threshold's key. This includes the few entries with
  // that key and an index past the threshold's (below it); they are smaller
  // than every truly eligible entry, so whenever at least k entries are at or
  // above the threshold the k-th is the same, and otherwise the result only
  // keeps a few stale entries (the shared threshold never goes down). No
  // index load per entry (a dependent load per key would serialise the pass).
  const uint32_t tk = static_cast<uint32_t>(thr >> 32);
  auto eligible = [&](uint32_t key) { return key >= tk; };
  // Current bin: keys in [lo, hi] (and, after a histogram, slice `sel` of
  // [plo, plo + prange]).
  uint32_t lo = 0, hi = 0xffffffffu, plo = 0, pmult = 0, sel = 0;
  bool has_slice = false;
  auto in_bin = [&](uint32_t key) {
    return key >= lo && key <= hi && (!has_slice || range_bin(key, plo, pmult) == sel);
  };
  uint32_t need = k, cnt = 0;
#pragma unroll 1
  for (int round = 0;; ++round) {
    uint32_t kmin = 0xffffffffu, kmax = 0, c = 0;
    for_each_key4(s, lane, [&](uint32_t key, bool valid) {
      if (valid && in_bin(key) && eligible(key)) {
        kmin = min(kmin, key);
        kmax = max(kmax, key);
        ++c;
      }
    });
    c = __reduce_add_sync(0xffffffffu, c);
    kmin = __reduce_min_sync(0xffffffffu, kmin);
    kmax = __reduce_max_sync(0xffffffffu, kmax);
    if (round == 0) {
      cnt = c;
      if (cnt <= k) return thr;
    }
    lo = kmin;
    hi = kmax;
    has_slice = false;
    if (c <= static_cast<uint32_t>(kScratch) || kmin == kmax) {
      cnt = c;
      break;
    }
    // Histogram over 256 equal slices of [kmin, kmax].
    const uint32_t mult = range_mult(kmax - kmin);
    for_each_key4(s, lane, [&](uint32_t key, bool valid) {
      if (valid && key >= kmin && key <= kmax && eligible(key))
        atomicAdd(hist + range_bin(key, kmin, mult), 1u);
    });
    __syncwarp();
    uint32_t before = 0, nb = 0;
    sel = warp_find_digit(hist, need, true, &before, &nb, lane);
    need -= before;
    plo = kmin;
    pmult = mult;
    has_slice = true;
    cnt = nb;
    if (nb <= static_cast<uint32_t>(kScratch)) break;
  }
  if (cnt <= static_cast<uint32_t>(kScratch)) {
    // Gather the bin (order irrelevant: only its need-th composite is wanted).
    uint32_t base = 0, gmin = 0xffffffffu, gmax = 0;
    for_each_key4<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) {
      const bool in = valid && in_bin(key) && eligible(key);
      const uint32_t m = __ballot_sync(0xffffffffu, in);
      if (in) {
        const uint32_t at = base + __popc(m & ((1u << lane) - 1u));
        sk[at] = key;
        si[at] = idx;
        gmin = min(gmin, key);
        gmax = max(gmax, key);
      }
      base += __popc(m);
    });
    return finish_in_scratch(sk, si, cnt, gmin, gmax, need, hist, lane);
  }
  // More than kScratch entries share the k-th key (heavy ties): the need-th
  // smallest index among them, by radix passes over the indices.
  const uint32_t key_eq = lo;
  if (cnt == need) return composite(key_eq, 0xffffffffu);
  return warp_index_cut<true>(s, key_eq, need, hist, lane);
}

// ---- lean variant (development: dev probe `fused_mqa_topk_probe` variant 1) ----
// The same result as warp_select with branch-free passes: padding past a
// segment's count reads as key 0 (every real key is >= 1, and eligibility is
// key >= max(threshold key, 1)), so no per-entry validity flag; range tests
// are one unsigned compare; the first pass has no slice test at all. Measured
// 23 SASS instructions with two convergence regions per candidate per pass
// in warp_select's range pass; this one aims at under ten, no branches.

// Calls f(key) (kWithIdx: f(key, idx)) for every slot of the segments rounded
// up to 4, padding slots as key 0 (the same loads as for_each_key4).
template <bool kWithIdx = false, class F>
__device__ __forceinline__ void for_each_key4_lean(const Segs& s, int lane, F&& f) {
  if constexpr (kWithIdx) {
    for_each_key4<true>(s, lane, [&](uint32_t key, uint32_t idx, bool valid) { f(valid ? key : 0u, idx); });
  } else {
    for_each_key4(s, lane, [&](uint32_t key, bool valid) { f(valid ? key : 0u); });
  }
}

// kmax_out (optional): the largest key at or above the threshold's (0 if none).
__device__ __forceinline__ uint64_t warp_select_lean(const Segs& s, uint64_t thr, uint32_t k, uint32_t* hist,
                                                     uint32_t* sk, uint32_t* si, int lane,
                                                     uint32_t* kmax_out = nullptr) {
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
  if (kmax_out) *kmax_out = kmax;
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
  return warp_index_cut<true>(s, lo, need, hist, lane);
}

// ---- window histograms (development: dev probe variant 2) ----------------------
// A row's candidates binned while they are appended, into 256 equal slices of a
// window [lo, lo + span] of order keys (keys above it in the last bin; no key
// below lo is ever appended: lo is at most the row's threshold key). A
// compaction then needs no selection passes: the slice holding the k-th
// largest key is read off the histogram, its lower edge is a safe threshold
// (at least k candidates are at or above it), and one pass keeps what is at
// or above it while binning the kept entries into the next window [edge,
// old top].
struct Window {
  uint32_t lo, span, mult;
};
__host__ __device__ __forceinline__ Window make_window(uint32_t lo, uint32_t hi) {
  const uint32_t span = hi > lo ? hi - lo : 0u;
  return Window{lo, span, span < 256u ? 0u : static_cast<uint32_t>((1ull << 40) / (span + 1ull))};
}
__device__ __forceinline__ uint32_t window_bin(const Window& w, uint32_t key) {
  const uint32_t d = key - w.lo;
  return d > w.span ? 255u : (w.mult ? __umulhi(d, w.mult) : d);
}
// The smallest key in bin b (b >= 1 when the span is below 256 is not needed:
// then bins are single keys).
__device__ __forceinline__ uint32_t window_edge(const Window& w, uint32_t b) {
  if (!w.mult) return w.lo + b;
  return w.lo + static_cast<uint32_t>(((static_cast<uint64_t>(b) << 32) + w.mult - 1) / w.mult);
}

// Keeps the entries with composite >= t in segment order (stable): writes
// kept entry number `pos` through emit(pos, key, idx); returns the count.
// Reads 4-entry groups (keys and indices as uint4, four per lane in flight) and ranks with a
// warp scan; emit may write in place (positions never pass the read point).
template <class Emit>
__device__ __forceinline__ int warp_emit(const Segs& s, uint64_t t, int lane, Emit&& emit) {
  int pos = 0;
#pragma unroll 1
  for (int g = 0; g < s.nseg; ++g) {
    const uint32_t* kp = s.key[g];
    const uint32_t* ip = s.idx[g];
    const int n = s.n[g];
#pragma unroll 1
    for (int j0 = 0; j0 < n; j0 += 32 * 4 * 4) {
      uint4 kv[4], iv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int j = j0 + (u * 32 + lane) * 4;
        kv[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(kp + j)) : make_uint4(0, 0, 0, 0);
        iv[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(ip + j)) : make_uint4(0, 0, 0, 0);
      }
      __syncwarp();  // every read of this step precedes any write below
#pragma unroll
      for (int u = 0; u < 4; ++u) {
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

// One compaction of a warpgroup-row buffer of n entries in window mode
// (dev probe variant 2). whist: the row's window histogram in window w, valid
// when `valid` (then it counts every entry of the buffer). Reads the k-th's
// slice off the histogram when that frees enough (at most `keep_max` entries
// at or above its lower edge), else selects exactly (warp_select_lean); then
// keeps the entries at or above the threshold, stable and in place, binning
// them into the next window. Returns the threshold (safe: the k-th largest
// composite of the buffer is at or above it); sets *kept, w, valid.
__device__ __forceinline__ uint64_t warp_compact_window(uint32_t* kp, uint32_t* ip, int n, uint64_t thr, uint32_t k,
                                                        uint32_t keep_max, uint32_t* whist, Window& w, bool& valid,
                                                        uint32_t* hist, uint32_t* sk, uint32_t* si, int lane,
                                                        int* kept) {
  const Segs s{{kp, nullptr}, {ip, nullptr}, {n, 0}, 1};
  uint64_t t = 0;
  Window nw{0, 0, 0};
  bool exact = true;
  if (valid) {
    uint32_t before = 0, in_bin = 0;
    const uint32_t b = warp_find_digit(whist, k, true, &before, &in_bin, lane);  // leaves whist zero
    if (before + in_bin <= keep_max) {
      const uint32_t edge = window_edge(w, b);
      t = max(composite(edge, 0xffffffffu), thr);
      nw = make_window(static_cast<uint32_t>(t >> 32), w.lo + w.span);
      exact = false;
    }
  }
  if (exact) {
    uint32_t kmax = 0;
    t = warp_select_lean(s, thr, k, hist, sk, si, lane, &kmax);
    nw = make_window(max(static_cast<uint32_t>(t >> 32), 1u), kmax);
  }
  *kept = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) {
    __stcg(kp + at, key);
    __stcg(ip + at, idx);
    atomicAdd(whist + window_bin(nw, key), 1u);
  });
  __syncwarp();
  w = nw;
  valid = true;
  return t;
}

}  // namespace fused_detail

}  // namespace mqa_topk
