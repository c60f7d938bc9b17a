// Exact, deterministic per-row top-k over fp32 logits (the dense path's
// second half), for sm_90a. Torch-free: device code + a host launch helper.
//
// What it computes
//   For row r with [start, end) clamped to [0, width] and n = end - start:
//   out[r, :] holds the indices (relative to start) of the min(k, n) largest
//   logits of the row, the rest -1. The chosen set is EXACTLY the top-k by
//   (value desc, index asc): ties at the k-th value go to the lowest indices.
//   -0.0 and +0.0 are the SAME value (both map to one key), so among zeros the
//   lowest indices win. -inf, +-3e38, denormals are ordinary values. NaN is
//   not valid input: its ordering is unspecified (a NaN gets a key above +inf
//   or below -inf by its sign bit), but it never causes an out-of-bounds
//   access or an unwritten output entry.
//
// Algorithm (one CTA per row; radix select on an order-preserving uint32 key)
//   key(x) = sign ? -bits(x) : bits(x) | 0x80000000 (u32), so -0.0 == +0.0.
//   Levels: bits 31..21 (2048 bins), 20..10 (2048), 9..0 (1024). A "class" is
//   (key >> shift) == cls; r = how many of the class still belong to the top-k.
//   1. n <= k: write 0..n-1, pad -1. Done, no selection.
//   2. Pass 1 streams the row from HBM through a per-thread cp.async ring in
//      shared memory (16-byte copies, several batches in flight per thread,
//      independent of register pressure) into a level-0 histogram. The
//      histogram has kCopies interleaved copies (word = bin * kCopies +
//      lane % kCopies), and the 4
//      keys of one float4 are run-length merged before the atomics, so rows
//      where all values are equal cost ~1 atomic per 4 keys with a
//      (32 / kCopies)-way same-address conflict, not 32-way.
//      A block suffix scan finds the threshold bin b (count above < r <= count
//      above + hist[b]).
//   3. If the threshold class is small (<= kCap), pass 2 re-reads the row (in
//      reverse order, so the most recently loaded, still L2-resident lines are
//      hit first; evict-first since it is the last read) and (a) marks every
//      definite winner (class above the threshold) in a shared-memory bitmap
//      A over the row's indices, (b) stages the class's (key, index) pairs in
//      shared memory (warp-aggregated slot allocation; slot order does not
//      matter, see determinism). Further levels refine over the staged pairs
//      only, until the class is exactly what is needed (hist[b] == r) or the
//      full key is resolved (level 2). Staged pairs above the final class go
//      to bitmap A, those equal to it to bitmap B.
//      If the class is larger than kCap, another histogram level is built by
//      a full pass over the row (filtered to the class; through the same
//      cp.async ring) -- exact, just one more read -- until the class fits,
//      or is exactly what is needed, or the key is fully resolved; in the
//      last two cases the final pass marks A/B straight from the row. Such a
//      pass also finds the class's min and max key: if equal (all values
//      equal, all zeros) the class is one key and is resolved at once.
//   4. Emission: a block scan over the bitmaps' popcounts writes the A
//      indices (exactly k - r of them) in ascending index order to out[0,
//      k - r) and the first r B indices (the lowest-index ties) in ascending
//      order to out[k - r, k). Rows longer than the bitmap (kSegment indices)
//      do the final pass segment by segment, ascending, with running offsets;
//      they always take the "mark from the row" route (one extra read).
//   No overflow failure mode: every path is exact; a huge tie class (all
//   values equal, all zeros) just costs one extra histogram pass (two if the
//   class holds more than one value).
//
// Determinism: histogram counts are order-independent; bitmaps are built with
//   atomicOr (the final bit pattern is order-independent); staged slots are
//   only used for histograms and for setting bits. Output positions come from
//   ordered scans of the bitmaps, so the output (values AND order) is a pure
//   function of the row: bitwise identical run to run and independent of
//   which rows share the launch.
//
// Bounds: start/end are clamped to [0, width] (start <= end) in the kernel
//   (range_check.cuh: clamp_row_range; thread 0 records a bad row in the
//   error word, if one is given);
//   loads stay in [start, end) of the row; every shared-memory staging write
//   is guarded by kCap, every output write by its range [0, k); if a
//   histogram search ever failed (impossible for consistent input) the row is
//   written as all -1.
//
// Shared memory (dynamic; see TopkConfig::kSmemBytes): histogram 2048 x
//   kCopies u32; bitmaps A and B of kSegment bits each; staging kCap x (u32
//   key + i32 index); 2 x 32 scan words, 8 control words, 32 dummy words.
//   Pass 1's cp.async ring (kRingStages x kRingUnroll x 16 B per thread)
//   aliases bitmaps + staging, which are only used after pass 1.
//   TopkConfig: 512 threads, 2 CTAs/SM (<= 64 registers; one CTA's scan /
//   refine / emit phases overlap the other's streaming), 4 copies, 128K-bit
//   bitmaps, cap 6144 -> 115,104 B per CTA (ring 64 KB).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mqa_topk/common/range_check.cuh"

namespace mqa_topk {
namespace topk {

constexpr int kBins = 2048;         // histogram bins (11 bits)
constexpr int kMaxRowKeys = 1 << 22;  // contract.MAX_KEYS
constexpr uint32_t kFullMask = 0xffffffffu;
constexpr uint32_t kNoBin = 0xffffffffu;  // run-merge sentinel (not a bin)

// The kernel's configuration: kThreads per CTA; kMinBlocks CTAs per SM (launch
// bound); kUnroll float4 register loads in flight per thread on re-reads
// (mostly L2 hits); kRingStages x kRingUnroll 16-byte cp.async slots per
// thread for pass 1 (from HBM); kCopies histogram copies (power of two,
// 4..32); kSegment bitmap bits (indices per emission segment; multiple of
// 128); kCap staged (key, index) pairs. The output does not depend on these.
struct TopkConfig {
  static constexpr int kThreads = 512;
  static constexpr int kMinBlocks = 2;
  static constexpr int kUnroll = 4;
  static constexpr int kRingStages = 4;
  static constexpr int kRingUnroll = 2;
  static constexpr int kCopies = 4;
  static constexpr int kSegment = 131072;
  static constexpr int kCap = 6144;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kSegWords = kSegment / 32;

  static constexpr int kHistOff = 0;
  static constexpr int kHistBytes = kBins * kCopies * 4;
  static constexpr int kBitAOff = kHistOff + kHistBytes;
  static constexpr int kBitBOff = kBitAOff + kSegWords * 4;
  static constexpr int kKeyOff = kBitBOff + kSegWords * 4;
  static constexpr int kIdxOff = kKeyOff + kCap * 4;
  static constexpr int kScanOff = kIdxOff + kCap * 4;  // 64 words
  static constexpr int kCtrlOff = kScanOff + 64 * 4;   // 8 words: bin, above, count, staged, min, max
  static constexpr int kDummyOff = kCtrlOff + 8 * 4;   // 32 words: targets of no-op adds
  static constexpr int kSmemBytes = kDummyOff + 32 * 4;
  // Pass-1 cp.async ring (aliases bitmaps A, B and the staging arrays).
  static constexpr int kRingOff = kBitAOff;
  static constexpr int kRingBytes = kRingStages * kRingUnroll * kThreads * 16;

  static_assert(kThreads % 32 == 0 && kThreads >= 64 && kThreads <= 1024, "threads");
  static_assert(kBins % kThreads == 0, "each thread owns a whole number of bins in the search");
  static_assert(kCopies >= 4 && kCopies <= 32 && (kCopies & (kCopies - 1)) == 0, "copies");
  static_assert(kSegment % 128 == 0 && kSegment >= 1024, "segment");
  static_assert(kCap % 4 == 0 && kCap >= 256, "cap");
  static_assert(kUnroll >= 1 && kUnroll <= 16, "unroll");
  static_assert(kRingBytes <= kScanOff - kRingOff, "pass-1 ring must fit in bitmaps + staging");
  // Hopper: 228 KB of shared memory per SM, 227 KB per CTA, 1 KB reserved per CTA.
  static_assert(kSmemBytes <= 232448, "shared memory per CTA");
  static_assert(kMinBlocks * (kSmemBytes + 1024) <= 233472, "shared memory for kMinBlocks CTAs per SM");
  static_assert(kMinBlocks * kThreads <= 2048, "threads per SM");
};

// ---------------------------------------------------------------------------
// Keys and loads

// Order-preserving map float -> uint32 (larger float -> larger key):
//   bits >= 0 (sign clear): key = bits | 0x80000000
//   bits <  0 (sign set):   key = -bits (two's complement negate, mod 2^32)
// -0.0 (0x80000000) negates to 0x80000000 = key(+0.0): both zeros are one
// value. Negative values land in [1, 0x7fffffff], descending in magnitude.
// Integer-only on purpose: correct under -ftz / --use_fast_math too.
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t m = 0u - (u >> 31);  // all ones when the sign bit is set
  return ((u ^ m) - m) ^ (~m & 0x80000000u);
}

// Shared-memory reduction (no return value). Unconditional on purpose:
// callers route "no-op" adds (value 0) to a per-lane dummy word (bank = lane,
// conflict-free) instead of predicating, which ptxas would turn into a branch.
__device__ __forceinline__ void red_add_shared(uint32_t saddr, uint32_t v) {
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(saddr), "r"(v) : "memory");
}

enum LoadPolicy : int {
  kLoadNormal = 1,  // re-read that will be read again
  kLoadLast = 2,    // last read of the row: L2 evict-first
};

template <int kPolicy>
__device__ __forceinline__ float4 load_vec(const float4* p, uint64_t policy) {
  float4 v;
  if constexpr (kPolicy == kLoadLast) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(policy));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
  }
  return v;
}

__device__ __forceinline__ uint64_t make_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Elements of a row before its first 16-byte boundary (0..3, at most count).
__device__ __forceinline__ int unaligned_head(const float* ptr, int count) {
  const int head =
      static_cast<int>(((16u - (static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ptr)) & 15u)) & 15u) >> 2);
  return head < count ? head : count;
}

// The unaligned head (< 4 elements before the first 16-byte boundary, thread 0)
// and the tail (< 4 after the last whole float4, thread 1) of a row, as one
// masked float4 each; every other thread calls op with an empty mask.
template <class Op>
__device__ __forceinline__ void edge_elements(const float* ptr, int count, int head, int nv, int t, Op& op) {
  const int tail = count - head - 4 * nv;  // 0..3
  float e[4] = {0.f, 0.f, 0.f, 0.f};
  uint32_t m = 0;
  int idx0 = 0;
  if (t == 0 && head > 0) {
#pragma unroll
    for (int j = 0; j < 3; ++j)
      if (j < head) e[j] = __ldg(ptr + j);
    m = (1u << head) - 1u;
  } else if (t == 1 && tail > 0) {
    idx0 = head + 4 * nv;
#pragma unroll
    for (int j = 0; j < 3; ++j)
      if (j < tail) e[j] = __ldg(ptr + idx0 + j);
    m = (1u << tail) - 1u;
  }
  op(idx0, make_float4(e[0], e[1], e[2], e[3]), m);
}

// Calls op(idx0, float4 v, mask) for the `count` floats at ptr, grouped in
// fours: element j of v is index idx0 + j (relative to ptr) and is valid iff
// bit j of mask is set. The 16-byte-aligned body is read with vector loads,
// kUnroll per thread in flight, in batches of kThreads * kUnroll vectors
// (batch order reversed when `reverse`); the unaligned head (thread 0) and
// tail (thread 1) are one extra call. Every thread makes the same number of
// calls (invalid ones with mask 0), so op may use full-warp collectives.
template <int kThreads, int kUnroll, int kPolicy, class Op>
__device__ __forceinline__ void for_each_vec(const float* ptr, int count, bool reverse, uint64_t policy,
                                             Op& op) {
  const int t = threadIdx.x;
  const int head = unaligned_head(ptr, count);
  const int nv = (count - head) >> 2;
  const float4* body = reinterpret_cast<const float4*>(ptr + head);
  constexpr int kBatch = kThreads * kUnroll;
  const int nb = (nv + kBatch - 1) / kBatch;
  for (int i = 0; i < nb; ++i) {
    const int v0 = (reverse ? nb - 1 - i : i) * kBatch + t;
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int vi = v0 + u * kThreads;
      v[u] = vi < nv ? load_vec<kPolicy>(body + vi, policy) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int vi = v0 + u * kThreads;
      op(head + 4 * vi, v[u], vi < nv ? 0xfu : 0u);
    }
  }
  edge_elements(ptr, count, head, nv, t, op);
}

__device__ __forceinline__ void cp_async_16(uint32_t dst_saddr, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst_saddr), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ float4 lds_vec(uint32_t saddr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(saddr)
               : "memory");
  return v;
}

// Same contract as for_each_vec, for the reads of a row that come before
// the bitmaps and staging arrays are in use (pass 1 from HBM, and the
// full-row histogram refinements):
// each thread streams its own vectors through a private ring of kStages x
// kUnroll 16-byte slots in shared memory with cp.async (kStages - 1 batches
// in flight while one is processed). No registers hold data in flight, so
// the memory-level parallelism does not depend on ptxas' scheduling; a
// thread only reads back the slots it wrote itself, so the ring needs no
// barriers. ring_saddr: kStages * kUnroll * kThreads * 16 bytes, 16-aligned.
template <int kThreads, int kUnroll, int kStages, class Op>
__device__ __forceinline__ void for_each_vec_async(const float* ptr, int count, bool reverse, uint32_t ring_saddr,
                                                   Op& op) {
  static_assert((kStages & (kStages - 1)) == 0 && kStages >= 2, "stages: power of two >= 2");
  const int t = threadIdx.x;
  const int head = unaligned_head(ptr, count);
  const int nv = (count - head) >> 2;
  const float4* body = reinterpret_cast<const float4*>(ptr + head);
  constexpr int kBatch = kThreads * kUnroll;
  const int nb = (nv + kBatch - 1) / kBatch;
  const uint32_t my_slot = ring_saddr + static_cast<uint32_t>(t) * 16u;
  auto issue = [&](int b) {  // b: position in processing order
    if (b < nb) {
      const int pb = reverse ? nb - 1 - b : b;  // batch in memory order
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int vi = pb * kBatch + u * kThreads + t;
        if (vi < nv)
          cp_async_16(my_slot + static_cast<uint32_t>(((b & (kStages - 1)) * kUnroll + u) * kThreads * 16), body + vi);
      }
    }
    cp_async_commit();  // possibly empty: keeps the group count uniform
  };
#pragma unroll
  for (int b = 0; b < kStages - 1; ++b) issue(b);
  for (int i = 0; i < nb; ++i) {
    issue(i + kStages - 1);  // refills the slot processed in iteration i - 1
    cp_async_wait<kStages - 1>();  // batch i has landed
    const int pi = reverse ? nb - 1 - i : i;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int vi = pi * kBatch + u * kThreads + t;
      const bool in = vi < nv;
      const float4 v = in ? lds_vec(my_slot + static_cast<uint32_t>(((i & (kStages - 1)) * kUnroll + u) * kThreads * 16))
                          : make_float4(0.f, 0.f, 0.f, 0.f);
      op(head + 4 * vi, v, in ? 0xfu : 0u);
    }
  }
  cp_async_wait<0>();
  edge_elements(ptr, count, head, nv, t, op);
}

// Sets bits idx0 + j (j < 4, bit j of bits4) of a bitmap.
__device__ __forceinline__ void set_bits4(uint32_t* bitmap, int idx0, uint32_t bits4) {
  const uint32_t w = static_cast<uint32_t>(idx0) >> 5;
  const uint64_t m = static_cast<uint64_t>(bits4) << (idx0 & 31);
  const uint32_t lo = static_cast<uint32_t>(m), hi = static_cast<uint32_t>(m >> 32);
  if (lo) atomicOr(bitmap + w, lo);
  if (hi) atomicOr(bitmap + w + 1, hi);
}

// ---------------------------------------------------------------------------
// Per-vector operations

// Histogram of (key >> bin_shift) & bin_mask over the valid keys (of class
// (key >> cls_shift) == cls when kFilter). Equal neighbouring bins of the
// float4 are merged into one atomic.
template <int kCopies, bool kFilter>
struct HistOp {
  uint32_t copy_saddr;   // shared-space address of the histogram + 4 * (lane % kCopies)
  uint32_t dummy_saddr;  // this lane's dummy word
  uint32_t cls;
  int cls_shift;
  int bin_shift;
  uint32_t bin_mask;

  // bin may be kNoBin when !pred: its (wrapped) address is never used.
  __device__ __forceinline__ void add_if(uint32_t bin, uint32_t c, bool pred) const {
    red_add_shared(pred ? copy_saddr + bin * (kCopies * 4u) : dummy_saddr, pred ? c : 0u);
  }
  // kFilter passes also track the smallest and largest key of the class: if
  // they are equal the class is one value and needs no further levels.
  uint32_t kmin = 0xffffffffu, kmax = 0u;

  __device__ __forceinline__ void operator()(int, float4 v, uint32_t mask) {
    const float f[4] = {v.x, v.y, v.z, v.w};
    uint32_t b[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t key = order_key(f[j]);
      bool ok = (mask >> j) & 1u;
      if constexpr (kFilter) {
        ok = ok && (key >> cls_shift) == cls;
        kmin = ok && key < kmin ? key : kmin;
        kmax = ok && key > kmax ? key : kmax;
      }
      b[j] = ok ? ((key >> bin_shift) & bin_mask) : kNoBin;
    }
    // One add per run of equal bins: a run ending at j (j == 3 or
    // b[j] != b[j+1]) adds its length; runs of invalid keys add nothing.
    const bool e0 = b[0] != b[1], e1 = b[1] != b[2], e2 = b[2] != b[3];
    const uint32_t c1 = e0 ? 1u : 2u;
    const uint32_t c2 = e1 ? 1u : c1 + 1u;
    const uint32_t c3 = e2 ? 1u : c2 + 1u;
    add_if(b[0], 1u, e0 && b[0] != kNoBin);
    add_if(b[1], c1, e1 && b[1] != kNoBin);
    add_if(b[2], c2, e2 && b[2] != kNoBin);
    add_if(b[3], c3, b[3] != kNoBin);
  }
};

// Stages the class (key >> shift) == cls as (key, index) pairs; when `mark`,
// also sets bitmap A for the keys above the class (definite winners).
struct StageOp {
  uint32_t cls;
  int shift;
  bool mark;
  uint32_t* bit_a;
  uint32_t* skey;
  int* sidx;
  uint32_t* staged;  // shared counter
  uint32_t cap;
  uint32_t lane;

  __device__ __forceinline__ void operator()(int idx0, float4 v, uint32_t mask) const {
    const float f[4] = {v.x, v.y, v.z, v.w};
    uint32_t key[4];
    uint32_t win = 0, tie = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      key[j] = order_key(f[j]);
      const uint32_t c = key[j] >> shift;
      const uint32_t valid = (mask >> j) & 1u;
      win |= (valid & (c > cls ? 1u : 0u)) << j;
      tie |= (valid & (c == cls ? 1u : 0u)) << j;
    }
    if (mark && win) set_bits4(bit_a, idx0, win);
    uint32_t bal[4];
    uint32_t total = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      bal[j] = __ballot_sync(kFullMask, (tie >> j) & 1u);
      total += __popc(bal[j]);
    }
    if (total == 0) return;  // warp-uniform
    uint32_t base = 0;
    if (lane == 0) base = atomicAdd(staged, total);
    base = __shfl_sync(kFullMask, base, 0);
    const uint32_t lt = (1u << lane) - 1u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((tie >> j) & 1u) {
        const uint32_t slot = base + __popc(bal[j] & lt);
        if (slot < cap) {
          skey[slot] = key[j];
          sidx[slot] = idx0 + j;
        }
      }
      base += __popc(bal[j]);
    }
  }
};

// Final classification straight from the row: class above -> A, class equal -> B.
struct MarkOp {
  uint32_t cls;
  int shift;
  uint32_t* bit_a;
  uint32_t* bit_b;

  __device__ __forceinline__ void operator()(int idx0, float4 v, uint32_t mask) const {
    const float f[4] = {v.x, v.y, v.z, v.w};
    uint32_t win = 0, tie = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t c = order_key(f[j]) >> shift;
      const uint32_t valid = (mask >> j) & 1u;
      win |= (valid & (c > cls ? 1u : 0u)) << j;
      tie |= (valid & (c == cls ? 1u : 0u)) << j;
    }
    if (win) set_bits4(bit_a, idx0, win);
    if (tie) set_bits4(bit_b, idx0, tie);
  }
};

// ---------------------------------------------------------------------------
// Block-wide helpers (every thread of the CTA must call them)

template <int kThreads>
__device__ __forceinline__ void zero_words(uint32_t* p, int nwords) {
  // p is 16-byte aligned; nwords is rounded up to a multiple of 4 (callers
  // guarantee the rounded range is inside the buffer).
  uint4* q = reinterpret_cast<uint4*>(p);
  const int n4 = (nwords + 3) >> 2;
  for (int i = threadIdx.x; i < n4; i += kThreads) q[i] = make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ uint32_t warp_incl_scan(uint32_t x, uint32_t lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(kFullMask, x, o);
    if (lane >= static_cast<uint32_t>(o)) x += y;
  }
  return x;
}

// Exclusive prefix sums over threads of (a, b); totals in ta, tb. Uses
// scratch[0, 64); ends with a barrier, so scratch may be reused at once.
template <int kThreads>
__device__ __forceinline__ void block_excl_scan2(uint32_t a, uint32_t b, uint32_t* scratch, uint32_t& pa,
                                                 uint32_t& pb, uint32_t& ta, uint32_t& tb) {
  constexpr int kWarps = kThreads / 32;
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const uint32_t xa = warp_incl_scan(a, lane), xb = warp_incl_scan(b, lane);
  if (lane == 31) {
    scratch[warp] = xa;
    scratch[32 + warp] = xb;
  }
  __syncthreads();
  uint32_t wa = lane < kWarps ? scratch[lane] : 0u;
  uint32_t wb = lane < kWarps ? scratch[32 + lane] : 0u;
  wa = warp_incl_scan(wa, lane);
  wb = warp_incl_scan(wb, lane);
  const uint32_t src = (warp + 31u) & 31u;
  const uint32_t qa = __shfl_sync(kFullMask, wa, src), qb = __shfl_sync(kFullMask, wb, src);
  ta = __shfl_sync(kFullMask, wa, 31);
  tb = __shfl_sync(kFullMask, wb, 31);
  pa = (warp ? qa : 0u) + xa - a;
  pb = (warp ? qb : 0u) + xb - b;
  __syncthreads();
}

struct Select {
  int bin;         // threshold bin, -1 if not found (inconsistent input)
  uint32_t above;  // keys of the class in bins above it
  uint32_t count;  // keys in the threshold bin
};

// Finds bin b with above(b) < r <= above(b) + hist[b] (above = sum of higher
// bins), summing the kCopies copies. ctrl[0..2] is the broadcast slot.
template <int kThreads, int kCopies>
__device__ __forceinline__ Select search_bin(const uint32_t* hist, uint32_t r, uint32_t* scratch, uint32_t* ctrl) {
  constexpr int kPer = kBins / kThreads;
  const int t = threadIdx.x;
  if (t == 0) {
    ctrl[0] = kFullMask;
    ctrl[1] = 0u;
    ctrl[2] = 0u;
  }
  uint32_t c[kPer];
  uint32_t local = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int bin = kBins - 1 - (t * kPer + j);  // thread 0 owns the highest bins
    const uint4* h = reinterpret_cast<const uint4*>(hist + bin * kCopies);
    uint32_t s = 0;
#pragma unroll
    for (int q = 0; q < kCopies / 4; ++q) {
      const uint4 x = h[q];
      s += x.x + x.y + x.z + x.w;
    }
    c[j] = s;
    local += s;
  }
  uint32_t excl, dummy_p, total, dummy_t;
  block_excl_scan2<kThreads>(local, 0u, scratch, excl, dummy_p, total, dummy_t);
  if (excl < r && r <= excl + local) {
    uint32_t acc = excl;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (acc + c[j] >= r) {
        ctrl[0] = static_cast<uint32_t>(kBins - 1 - (t * kPer + j));
        ctrl[1] = acc;
        ctrl[2] = c[j];
        break;
      }
      acc += c[j];
    }
  }
  __syncthreads();
  Select s;
  s.bin = static_cast<int>(ctrl[0]);
  s.above = ctrl[1];
  s.count = ctrl[2];
  __syncthreads();
  return s;
}

// Writes the set bits of bitmaps A and B (words [0, words), indices seg0 +
// 32 w + bit) in ascending index order: A to out[base_a ...] below k - r, B
// (the ties) to out[k - r + rank] for tie ranks rank = base_b ... below r.
// Updates base_a / base_b by the segment's totals (uniform).
template <int kThreads>
__device__ __forceinline__ void emit_bitmaps(const uint32_t* bit_a, const uint32_t* bit_b, int words, int seg0,
                                             uint32_t k, uint32_t r, uint32_t& base_a, uint32_t& base_b, int* out,
                                             uint32_t* scratch) {
  const int per = (words + kThreads - 1) / kThreads;
  const int w0 = min(words, static_cast<int>(threadIdx.x) * per);
  const int w1 = min(words, w0 + per);
  uint32_t ca = 0, cb = 0;
  for (int w = w0; w < w1; ++w) {
    ca += __popc(bit_a[w]);
    cb += __popc(bit_b[w]);
  }
  uint32_t pa, pb, ta, tb;
  block_excl_scan2<kThreads>(ca, cb, scratch, pa, pb, ta, tb);
  const uint32_t lim_a = k - r;
  uint32_t pos = base_a + pa, rank = base_b + pb;
  for (int w = w0; w < w1; ++w) {
    uint32_t x = bit_a[w];
    while (x) {
      const int bit = __ffs(x) - 1;
      x &= x - 1u;
      if (pos < lim_a) out[pos] = seg0 + 32 * w + bit;
      ++pos;
    }
    uint32_t y = bit_b[w];
    while (y && rank < r) {
      const int bit = __ffs(y) - 1;
      y &= y - 1u;
      out[lim_a + rank] = seg0 + 32 * w + bit;
      ++rank;
    }
  }
  base_a += ta;
  base_b += tb;
}

// ---------------------------------------------------------------------------
// The kernel: one CTA per row (blockIdx.x).

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    topk_per_row_kernel(const float* __restrict__ logits, int64_t ld, const int* __restrict__ starts,
                        const int* __restrict__ ends, int* __restrict__ out, int width, int topk,
                        const RangeErrorSink err) {
  constexpr int T = Cfg::kThreads;
  constexpr int U2 = Cfg::kUnroll;  // re-reads (mostly from L2), register loads
  constexpr int C = Cfg::kCopies;
  constexpr int S = Cfg::kSegment;
  constexpr uint32_t kCap = static_cast<uint32_t>(Cfg::kCap);

  extern __shared__ __align__(16) unsigned char smem[];
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + Cfg::kHistOff);
  // this lane's histogram copy: word bin * C + lane % C
  const uint32_t copy_saddr = static_cast<uint32_t>(__cvta_generic_to_shared(hist)) + 4u * (threadIdx.x & (C - 1u));
  const uint32_t dummy_saddr = static_cast<uint32_t>(__cvta_generic_to_shared(smem + Cfg::kDummyOff)) + 4u * (threadIdx.x & 31u);
  // pass-1 / refinement cp.async ring: aliases bitmaps + staging (unused then)
  const uint32_t ring_saddr = static_cast<uint32_t>(__cvta_generic_to_shared(smem + Cfg::kRingOff));
  uint32_t* bit_a = reinterpret_cast<uint32_t*>(smem + Cfg::kBitAOff);
  uint32_t* bit_b = reinterpret_cast<uint32_t*>(smem + Cfg::kBitBOff);
  uint32_t* skey = reinterpret_cast<uint32_t*>(smem + Cfg::kKeyOff);
  int* sidx = reinterpret_cast<int*>(smem + Cfg::kIdxOff);
  uint32_t* scratch = reinterpret_cast<uint32_t*>(smem + Cfg::kScanOff);
  uint32_t* ctrl = reinterpret_cast<uint32_t*>(smem + Cfg::kCtrlOff);

  const int t = threadIdx.x;
  const uint32_t lane = t & 31;
  const int row = blockIdx.x;
  const int k = topk;
  int* o = out + static_cast<int64_t>(row) * k;

  int start = __ldg(starts + row);
  int end = __ldg(ends + row);
  width = max(width, 0);
  if (t == 0 && err.word != nullptr) check_row_range(err, static_cast<unsigned>(row), start, end, width, kKernelTopk);
  clamp_row_range(start, end, width);
  const int n = end - start;

  if (n <= k) {  // everything is selected
    for (int i = t; i < k; i += T) o[i] = i < n ? i : -1;
    return;
  }

  const float* ptr = logits + static_cast<int64_t>(row) * ld + start;
  const uint64_t policy = make_evict_first_policy();

  // ---- level 0 histogram (pass 1, from HBM) ----
  zero_words<T>(hist, kBins * C);
  __syncthreads();
  {
    HistOp<C, false> op{copy_saddr, dummy_saddr, 0u, 0, 21, 0x7ffu};
    for_each_vec_async<T, Cfg::kRingUnroll, Cfg::kRingStages>(ptr, n, false, ring_saddr, op);
  }
  __syncthreads();
  Select sel = search_bin<T, C>(hist, static_cast<uint32_t>(k), scratch, ctrl);
  bool ok = sel.bin >= 0;
  uint32_t r = static_cast<uint32_t>(k) - sel.above;  // needed from the class
  uint32_t cnt = sel.count;                           // size of the class
  uint32_t cls = static_cast<uint32_t>(sel.bin);
  int shift = 21;
  bool rev = true;  // direction of the next pass over the row

  // ---- class too big to stage: refine with full passes over the row ----
  while (ok && cnt != r && shift != 0 && cnt > kCap) {
    const int bits = shift == 10 ? 10 : 11;
    const int ns = shift - bits;
    zero_words<T>(hist, kBins * C);
    if (t == 0) {
      ctrl[4] = 0xffffffffu;  // min key of the class
      ctrl[5] = 0u;           // max key of the class
    }
    __syncthreads();
    {
      HistOp<C, true> op{copy_saddr, dummy_saddr, cls, shift, ns, (1u << bits) - 1u};
      for_each_vec_async<T, Cfg::kRingUnroll, Cfg::kRingStages>(ptr, n, rev, ring_saddr, op);
      const uint32_t wmin = __reduce_min_sync(kFullMask, op.kmin);
      const uint32_t wmax = __reduce_max_sync(kFullMask, op.kmax);
      if (lane == 0) {
        atomicMin(ctrl + 4, wmin);
        atomicMax(ctrl + 5, wmax);
      }
    }
    rev = !rev;
    __syncthreads();
    const uint32_t kmin = ctrl[4], kmax = ctrl[5];
    sel = search_bin<T, C>(hist, r, scratch, ctrl);
    ok = sel.bin >= 0;
    r -= sel.above;
    cnt = sel.count;
    cls = (cls << bits) | static_cast<uint32_t>(sel.bin);
    shift = ns;
    if (ok && kmin == kmax) {  // one value (e.g. all equal): the class is that key
      cls = kmin;
      shift = 0;
    }
  }

  if (ok && cnt <= kCap && cnt != r && shift != 0) {
    // ---- stage the class (pass 2); definite winners -> A when one segment ----
    const bool fits = n <= S;
    const int words = (n + 31) >> 5;
    if (t == 0) ctrl[3] = 0u;
    if (fits) {
      zero_words<T>(bit_a, words);
      zero_words<T>(bit_b, words);
    }
    __syncthreads();
    {
      StageOp op{cls, shift, fits, bit_a, skey, sidx, ctrl + 3, kCap, lane};
      if (fits)
        for_each_vec<T, U2, kLoadLast>(ptr, n, rev, policy, op);
      else
        for_each_vec<T, U2, kLoadNormal>(ptr, n, rev, policy, op);
    }
    rev = !rev;
    __syncthreads();
    const uint32_t staged = min(ctrl[3], kCap);

    // ---- refine over the staged pairs only ----
    while (ok && cnt != r && shift != 0) {
      const int bits = shift == 10 ? 10 : 11;
      const int ns = shift - bits;
      const uint32_t bmask = (1u << bits) - 1u;
      zero_words<T>(hist, kBins * C);
      __syncthreads();
      for (uint32_t i = t; i < staged; i += T) {
        const uint32_t key = skey[i];
        const bool in = (key >> shift) == cls;
        red_add_shared(in ? copy_saddr + ((key >> ns) & bmask) * (C * 4u) : dummy_saddr, in ? 1u : 0u);
      }
      __syncthreads();
      sel = search_bin<T, C>(hist, r, scratch, ctrl);
      ok = sel.bin >= 0;
      r -= sel.above;
      cnt = sel.count;
      cls = (cls << bits) | static_cast<uint32_t>(sel.bin);
      shift = ns;
    }

    if (ok && fits) {
      for (uint32_t i = t; i < staged; i += T) {
        const uint32_t c = skey[i] >> shift;
        const int idx = sidx[i];
        if (c > cls)
          atomicOr(bit_a + (idx >> 5), 1u << (idx & 31));
        else if (c == cls)
          atomicOr(bit_b + (idx >> 5), 1u << (idx & 31));
      }
      __syncthreads();
      uint32_t base_a = 0, base_b = 0;
      emit_bitmaps<T>(bit_a, bit_b, words, 0, static_cast<uint32_t>(k), r, base_a, base_b, o, scratch);
      return;
    }
  }

  if (!ok) {  // unreachable for consistent input: never leave the row unwritten
    for (int i = t; i < k; i += T) o[i] = -1;
    return;
  }

  // ---- final pass(es) from the row: class above -> A, class equal -> B ----
  uint32_t base_a = 0, base_b = 0;
  for (int seg0 = 0; seg0 < n; seg0 += S) {
    const int len = min(S, n - seg0);
    const int words = (len + 31) >> 5;
    zero_words<T>(bit_a, words);
    zero_words<T>(bit_b, words);
    __syncthreads();
    {
      MarkOp op{cls, shift, bit_a, bit_b};
      for_each_vec<T, U2, kLoadLast>(ptr + seg0, len, rev, policy, op);
    }
    __syncthreads();
    emit_bitmaps<T>(bit_a, bit_b, words, seg0, static_cast<uint32_t>(k), r, base_a, base_b, o, scratch);
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------
// Host launch helpers (torch-free).

// logits: fp32 rows of `ld` elements (row r at logits + r * ld), starts/ends:
// int32 [rows], out: int32 [rows, topk] contiguous. Any topk >= 1. Bad ranges
// are clamped and, with a non-null err.word, recorded (range_check.cuh).
inline cudaError_t launch_topk_per_row(const float* logits, int64_t ld, const int* starts, const int* ends, int* out,
                                       int rows, int width, int topk, cudaStream_t stream,
                                       RangeErrorSink range_err = {}) {
  using Cfg = TopkConfig;
  if (rows < 0 || topk < 1 || width < 0 || width > kMaxRowKeys) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (rows > 1 && ld < width) return cudaErrorInvalidValue;
  if (starts == nullptr || ends == nullptr || out == nullptr || (width > 0 && logits == nullptr))
    return cudaErrorInvalidValue;
  auto kernel = topk_per_row_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             static_cast<int>(cudaSharedmemCarveoutMaxShared));
  if (err != cudaSuccess) return err;
  kernel<<<rows, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(logits, ld, starts, ends, out, width, topk, range_err);
  return cudaGetLastError();
}

}  // namespace topk
}  // namespace mqa_topk
