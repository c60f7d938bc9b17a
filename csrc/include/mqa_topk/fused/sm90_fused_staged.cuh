// sm90_fused_staged_topk: the fused MQA-logits + top-k in one launch, for at
// most one wave of row blocks. Torch-free.
//
// Work. B = ceil(rows / 8) row blocks of 8 rows, m pieces each (B m <= SMs,
// m <= 16: fused_staged_pieces). CTA c = b m + j is piece j of block b: it
// runs the dense logits kernel's tile loop (logits/sm90_fp8_mqa_logits.cuh, the
// op's lean configuration: the same producer and math, so bitwise the dense
// kernel's logits) over tiles [nt j / m, nt (j + 1) / m) of the block's nt
// key tiles and stores the logits into a workspace (rows x ld fp32: 16 MB at
// 64 rows x 64K keys, L2-resident). Then:
//   1. Histograms. The tile loop's epilogue counts each logit in its row's
//      histogram of the order key's top 10 bits (EpiHist, in shared memory:
//      no pass over the logits). After the loop the piece publishes its 8
//      histograms to the workspace and counts itself in the block's counter
//      (one release). CTAs that own no row then exit.
//   2. Owners. Row r of block b belongs to piece r mod m (staged_select),
//      which waits for the block's m pieces, sums their histograms (L2) and
//      finishes the row alone (owner_row): the first digit's class (the
//      10-bit prefix holding the k-th largest key); one pass over the row's
//      logits that marks the keys above the class in a bitmap and stages the
//      class's (key, index) pairs in shared memory; the remaining digits
//      (bits 21..11, 10..0) resolved on the staged pairs, or by filtered
//      passes over the row when the class does not fit; the final class is
//      either taken whole or is one exact key whose lowest indices win.
//   3. Output. The owner writes the winners in ascending index order (a block
//      scan of the bitmap's popcounts), then the first ties.
// The one cross-CTA step is the owner's wait on its block's counter: no gate,
// no merge of candidate lists. Every CTA of the grid is resident at once (one
// CTA per SM, grid <= SMs), so the pieces an owner waits for are running.
//
// Exact: (value desc, index asc) like the native top-k kernel. The output is a
// pure function of the logits (histograms are integer sums, bitmaps are set
// with atomicOr, positions come from ordered scans): reruns are bitwise
// identical and a row's set does not depend on the other rows of the launch.
// Output as every top-k path: indices relative to the row's start, min(topk, n)
// of them, the rest -1.
//
// Limits (fused_staged_pieces): at most SMs row blocks; rows of at most
// kMaxRowKeys keys (the owner's bitmaps in shared memory). Workspace: the
// logits [rows, ld] fp32, then the pieces' histograms (B m x 8 x kEpiBins u32)
// and the blocks' counters (B u32, zeroed by the launcher's memset).
#pragma once

#include "heuristics.h"
#include "mqa_topk/common/range_check.cuh"
#include "mqa_topk/logits/sm90_fp8_mqa_logits.cuh"

namespace mqa_topk {

struct StagedTopkParams {
  Sm90LogitsParams lg;  // starts, ends, the logits workspace (pitch ld), rows, keys, range errors
  int* out;             // [rows, topk] int32
  uint32_t* hist;       // the pieces' histograms: [B m][8][kEpiBins]
  uint32_t* counters;   // [B] pieces of the block done (zero before the launch)
  int topk;
  int m;                // pieces per block
};

namespace staged_topk {

constexpr int kRows = 8;
constexpr int kMath = 512;             // math threads (four warpgroups): they run the select
constexpr int kBins = 2048;            // the owner's histogram of an 11-bit digit
constexpr int kMaxRowKeys = kStagedMaxRowKeys;  // the owner's bitmaps: 64 KB each (heuristics.h)
constexpr int kWords = kMaxRowKeys / 32;

// The first digit: the order key's top kEpiBits bits (sign, exponent, one
// mantissa bit), counted by the tile loops' epilogue. 8 rows of u32 [kEpiBins]
// fill one 32 KB Q buffer, and u32 counters cannot wrap at any piece length.
// kS0: the bits below the first digit.
constexpr int kEpiBits = 10;
constexpr int kEpiBins = 1 << kEpiBits;
constexpr int kS0 = 32 - kEpiBits;
constexpr int kPer1 = kEpiBins / kMath;  // first-digit bins per math thread

// The owner's shared memory, inside the tile loop's K ring and Q buffers
// (free once the loop is done; the epilogue's histograms in the second Q
// buffer are published before): u32 hist[kBins] at kOffHist, then at
// kOffBitsA the row's bitmaps (winners A, ties B: u32 [nw] each), then the
// staged class pairs up to kSmemSelect.
constexpr int kOffHist = 0;
constexpr int kOffBitsA = kBins * 4;
constexpr int kSmemSelect = 196608;
constexpr int kMinCap = (kSmemSelect - kOffBitsA - 2 * (kWords + 1) * 4) / 8 / 4 * 4;  // staged pairs at the longest rows
static_assert(kMinCap >= 4096, "the owner's staging at the longest rows");

struct Ctl {
  int scan[kMath / 32];
  int found[4];  // digit, need, class count, found
  // fill and pad are not read; removing them (or owner_row's store to fill)
  // changes the shared layout and the compiled code.
  int fill;
  int pad[3];
};

// Named barrier 15 over the 512 math threads (the producer warpgroup takes no part).
__device__ __forceinline__ void bar_math() { asm volatile("bar.sync 15, 512;" ::: "memory"); }
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The order-preserving key: unsigned order of okey(x) is float order of x.
__device__ __forceinline__ uint32_t okey(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t msk = 0u - (u >> 31);
  return ((u ^ msk) - msk) ^ (~msk & 0x80000000u);
}

// The epilogue's histograms (the Epi of logits_math): every math
// lane adds its two logits of each tile to its row's u32 [kEpiBins] in shared
// memory. Every logit of the tile is counted, the row's keys and the others
// (-inf from the tile loop: bin kEpiPadBin), with no branch; piece_unpad
// takes the others back out.
__device__ __forceinline__ void epi_count2(uint32_t& h, float v0, float v1) {
  asm volatile("mov.b32 %0, %0;" : "+r"(h));  // (held across the tile loop, not rematerialized)
  asm volatile("red.shared.add.u32 [%0], 1;\n\tred.shared.add.u32 [%1], 1;" ::"r"(h + ((okey(v0) >> kS0) << 2)),
               "r"(h + ((okey(v1) >> kS0) << 2))
               : "memory");
}
// The bin of the tile loop's -inf (a logit outside the row).
constexpr uint32_t kEpiPadBin = 0x00800000u >> kS0;
struct EpiHist {
  // Shared: the rows' histograms' shared addresses (u32 [kRows][kEpiBins]).
  // (A row's address is loaded from shared memory, not computed: ptxas then
  // holds it across the tile loop instead of recomputing it from the thread
  // index every tile, which an asm mov does not prevent.)
  const volatile uint32_t* rowbase;
  struct Row {
    uint32_t h;  // this lane's row's histogram
    __device__ __forceinline__ void operator()(int, uint32_t, float v0, float v1) { epi_count2(h, v0, v1); }
    __device__ __forceinline__ void block_end(int, int, int, int, const volatile int*) {}
  };
  __device__ __forceinline__ Row row(int rr) const { return Row{rowbase[rr]}; }
};

// Piece c of its row block's m pieces: the block b = c / m, its key span
// (slot_block_span: the block's first key lo, this lane's row's start s and
// length len) and the piece's tiles [t0, t1) of the block's nt.
struct PieceSpan {
  int b, lo, s, len, t0, t1;
};
__device__ __forceinline__ PieceSpan piece_span(const Sm90LogitsParams& p, int m, int c, int lane) {
  PieceSpan ps{c / m, 0, 0, 0, 0, 0};
  const int rank = c % m;
  const int nt = slot_block_span(p, ps.b, lane, ps.lo, ps.s, ps.len);
  ps.t0 = static_cast<int>(static_cast<long long>(nt) * rank / m);
  ps.t1 = static_cast<int>(static_cast<long long>(nt) * (rank + 1) / m);
  return ps;
}
// The piece's epilogue histograms (hist: u32 [kRows][kEpiBins], shared) less
// the logits outside each row (128 per row and tile, all -inf: kEpiPadBin);
// threads 0-7 (lane = row), after the tile loops.
__device__ __forceinline__ void piece_unpad(uint32_t* hist, const PieceSpan& ps, int tid) {
  if (tid < kRows && ps.t1 > ps.t0) {
    const long long a = max(static_cast<long long>(ps.s), ps.lo + static_cast<long long>(ps.t0) * 128);
    const long long e = min(static_cast<long long>(ps.s) + ps.len, ps.lo + static_cast<long long>(ps.t1) * 128);
    const long long pad = static_cast<long long>(ps.t1 - ps.t0) * 128 - max(e - a, 0ll);
    hist[tid * kEpiBins + kEpiPadBin] -= static_cast<uint32_t>(pad);
  }
}
// Piece c publishes its histograms (every math thread) and counts itself in
// block b's counter (one release, after every thread's stores and fence).
// (C: the index's type as the caller has it, int or blockIdx.x's unsigned.)
template <class C>
__device__ __forceinline__ void piece_publish(const StagedTopkParams& P, const uint32_t* hist, C c, int b, int tid) {
  {
    uint4* dst = reinterpret_cast<uint4*>(P.hist + static_cast<size_t>(c) * kRows * kEpiBins);
    const uint4* src = reinterpret_cast<const uint4*>(hist);
    for (int i = tid; i < kRows * kEpiBins / 4; i += kMath) __stcg(dst + i, src[i]);
  }
  __threadfence();
  bar_math();
  if (tid == 0) red_release_add(P.counters + b, 1u);
}

__device__ __forceinline__ bool in_class(uint32_t u, uint32_t P, int s) { return s >= 32 || (u >> s) == P; }

// Keys [a, e) of the workspace row `rowp` in float4 groups: op(first key of
// the group, its 4 keys, the mask of those in [a, e)), threads `sub` of `nth`
// striding, four groups in flight.
template <class Op>
__device__ __forceinline__ void for_each_group(const float* rowp, int a, int e, int sub, int nth, Op&& op) {
  if (a >= e) return;
  const int v0 = a >> 2, v1 = (e + 3) >> 2;
  const float4* p4 = reinterpret_cast<const float4*>(rowp);
  int v = v0 + sub;
  auto one = [&](int vv, float4 x) {
    const int k = 4 * vv;
    uint32_t valid = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) valid |= (k + c >= a && k + c < e) ? (1u << c) : 0u;
    const uint32_t u[4] = {okey(x.x), okey(x.y), okey(x.z), okey(x.w)};
    op(k, u, valid);
  };
  for (; v + 3 * nth < v1; v += 4 * nth) {
    float4 x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = __ldcg(p4 + v + i * nth);
#pragma unroll
    for (int i = 0; i < 4; ++i) one(v + i * nth, x[i]);
  }
  for (; v < v1; v += nth) one(v, __ldcg(p4 + v));
}

// Adds a group's keys (valid, in the class (P, s)) to histogram h by the
// `mask` bits at shift sh; equal neighbouring bins merged (runs of equal values
// cost one atomic).
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

// The digit of h[0, nb) (4 or fewer bins per thread, given in hv) holding the
// need-th largest: every math thread calls it; returns found (digit, the need
// within it, its count) in ctl->found.
__device__ __forceinline__ void find_digit(Ctl* ctl, const uint32_t (&hv)[4], int per, uint32_t need) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t tsum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) tsum += i < per ? hv[i] : 0u;
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
#pragma unroll
  for (int i = 3; i >= 0; --i) {
    if (i < per) {
      if (above < need && above + hv[i] >= need) {
        ctl->found[0] = tid * per + i;
        ctl->found[1] = static_cast<int>(need - above);
        ctl->found[2] = static_cast<int>(hv[i]);
        ctl->found[3] = 1;
      }
      above += hv[i];
    }
  }
  bar_math();
}

// A row's output (every math thread): the winners of bitmap A in ascending
// index order at [0, popc(A)), then the first `need` of bitmap B (the ties at
// the k-th key) after them; bit j of the bitmaps is the row's key j + off.
__device__ __forceinline__ void emit_row(const uint32_t* bitsA, const uint32_t* bitsB, int nw, uint32_t need,
                                         int topk, int* orow, int off) {
  const int tid = threadIdx.x;
  const int per = (nw + kMath - 1) / kMath;
  const int w0 = min(tid * per, nw), w1 = min(w0 + per, nw);
  int ca = 0, cb = 0;
  for (int w = w0; w < w1; ++w) ca += __popc(bitsA[w]), cb += __popc(bitsB[w]);
  const int lane = tid & 31, warp = tid >> 5;
  int ia = ca, ib = cb;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int va = __shfl_up_sync(0xffffffffu, ia, d), vb = __shfl_up_sync(0xffffffffu, ib, d);
    if (lane >= d) ia += va, ib += vb;
  }
  __shared__ int wsum[2][kMath / 32];
  if (lane == 31) wsum[0][warp] = ia, wsum[1][warp] = ib;
  bar_math();
  int pa = ia - ca, pb = ib - cb, all_a = 0;
  for (int w = 0; w < kMath / 32; ++w) {
    if (w < warp) pa += wsum[0][w], pb += wsum[1][w];
    all_a += wsum[0][w];
  }
  const int need_ties = static_cast<int>(need);
  for (int w = w0; w < w1; ++w) {
    uint32_t x = bitsA[w];
    while (x) {
      const int bit = __ffs(x) - 1;
      x &= x - 1;
      if (pa < topk) orow[pa] = w * 32 + bit + off;
      ++pa;
    }
    uint32_t y = bitsB[w];
    while (y && pb < need_ties) {
      const int bit = __ffs(y) - 1;
      y &= y - 1;
      if (all_a + pb < topk) orow[all_a + pb] = w * 32 + bit + off;
      ++pb;
    }
  }
  bar_math();  // (the buffers are reused by the next row)
}

// The row's float4 groups [sr0, sr + n) of workspace row `rowp` into L2, 8 KB per bulk prefetch (16-byte
// aligned: ld is a multiple of 4), every math thread.
__device__ __forceinline__ void prefetch_row_l2(const float* rowp, int sr0, int sr, int n) {
  const char* a = reinterpret_cast<const char*>(rowp + sr0);
  const uint32_t bytes = static_cast<uint32_t>(((sr + n + 3) >> 2) - (sr0 >> 2)) * 16u;
  for (uint32_t c = static_cast<uint32_t>(threadIdx.x) * 8192u; c < bytes; c += kMath * 8192u)
    ptx::prefetch_l2_bulk(a + c, min(8192u, bytes - c));
}

// Thread tid's kPer1 = 2 bins of row r's first digit (block b), summed over the
// m <= 16 pieces' histograms (L2; all 16 loads in flight at once), into hv[0, 2).
__device__ __forceinline__ void first_digit_bins(const StagedTopkParams& P, int b, int r, int tid, uint32_t (&hv)[4]) {
  const uint32_t* hb = P.hist + (static_cast<size_t>(b) * P.m * kRows + r) * kEpiBins + kPer1 * tid;
  static_assert(kPer1 == 2, "two first-digit bins per thread");
  uint2 hx[16];
#pragma unroll
  for (int j = 0; j < 16; ++j)
    hx[j] = j < P.m ? __ldcg(reinterpret_cast<const uint2*>(hb + static_cast<size_t>(j) * kRows * kEpiBins))
                    : make_uint2(0u, 0u);
#pragma unroll
  for (int j = 0; j < 16; ++j) hv[0] += hx[j].x, hv[1] += hx[j].y;
}

// The owner's top-k of row r of block b (every math thread; the block's
// pieces have all published their histograms).
// - The row is prefetched into L2 (bulk prefetches, overlapping the sums of
//   the first digit's histograms), and the first digit's class found: the
//   prefix Pc of bits 31..kS0 holding the topk-th largest key.
// - One pass over the row: each thread takes rounds of 4 float4 groups,
//   issuing the next round's loads before it classifies this round's keys (4
//   to 8 loads per thread in flight). Per key one compare of its first digit
//   d = u >> kS0: d > Pc (or d >= Pc when the class is taken whole) is a
//   winner, set in bitmap A; d == Pc is staged by its own thread as a (key,
//   index) pair in its slots (kMath pairs apart: no coordination between
//   threads, no bank conflicts).
// - The remaining digits (11 bits at most each) are histogrammed from the
//   staged pairs, or, when the class exceeds the staging (or one thread's
//   slots), by filtered passes over the row. The final class's keys are
//   marked winners (A) or, when it is one exact key not taken whole, ties (B).
// - emit_row writes A in index order, then the first ties of B.
__device__ __forceinline__ void owner_row(const StagedTopkParams& P, uint8_t* smem, Ctl* ctl, int b, int r) {
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x;
  const int row = b * kRows + r;
  const int topk = P.topk;
  // The clamped range (range_check.cuh): end - start cannot overflow for any int32 pair.
  int sr = __ldg(p.starts + row), er = __ldg(p.ends + row);
  clamp_row_range(sr, er, p.keys);
  const int n = er - sr;
  int* orow = P.out + static_cast<int64_t>(row) * topk;
  if (n <= topk) {  // every key, then -1
    for (int i = tid; i < topk; i += kMath) orow[i] = i < n ? i : -1;
    return;
  }
  // Bit j of the bitmaps is key sr0 + j (sr0 = sr rounded down to 4: a float4 group's keys share a word).
  const int sr0 = sr & ~3;
  const int nw = (n + (sr - sr0) + 31) >> 5;
  const int cap = (kSmemSelect - kOffBitsA - 2 * nw * 4) / 8 / 4 * 4;  // the staging's pairs
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + kOffHist);
  uint32_t* bitsA = reinterpret_cast<uint32_t*>(smem + kOffBitsA);
  uint32_t* bitsB = bitsA + nw;
  const float* rowp = p.logits + static_cast<int64_t>(row) * p.ld;
  prefetch_row_l2(rowp, sr0, sr, n);
  // The first digit from the m pieces' histograms (L2).
  uint32_t hv[4] = {0, 0, 0, 0};
  first_digit_bins(P, b, r, tid, hv);
  for (int i = tid; i < nw; i += kMath) bitsA[i] = 0, bitsB[i] = 0;
  if (tid == 0) ctl->fill = 0;  // (see Ctl)
  find_digit(ctl, hv, kPer1, static_cast<uint32_t>(topk));
  if (!ctl->found[3]) {  // (inconsistent histograms: impossible for the kernel's own logits)
    for (int i = tid; i < topk; i += kMath) orow[i] = -1;
    bar_math();
    return;
  }
  uint32_t Pc = static_cast<uint32_t>(ctl->found[0]);
  int s = kS0;
  uint32_t need = static_cast<uint32_t>(ctl->found[1]);
  uint32_t ccount = static_cast<uint32_t>(ctl->found[2]);
  bool stage = ccount <= static_cast<uint32_t>(cap);
  constexpr int kWarps = kMath / 32;
  __shared__ int warp_fill[kWarps];  // per warp: the most class keys one of its threads met
  // The staging: thread t's pairs at tpair[j * kMath], j < capt.
  const int toff = (kOffBitsA + 2 * nw * 4 + 7) & ~7;
  const int capt = (kSmemSelect - toff) / 8 / kMath;
  uint2* tpair = reinterpret_cast<uint2*>(smem + toff) + tid;
  int tcnt = 0;  // this thread's class keys (counted past capt too)
  // The pass: winners above the class into A (the class too where it is taken
  // whole), the class staged.
  {
    const bool take_class = ccount == need;
    const int lane = tid & 31;
    const float4* p4 = reinterpret_cast<const float4*>(rowp);
    const int v0 = sr >> 2, v1 = (sr + n + 3) >> 2, e = sr + n;
    int tp = 0;  // this thread's next slot, tpair[tp]; stored while tp < tend
    const int tend = capt * kMath;
    const bool stg = stage && !take_class;  // (a class taken whole is winners, not staged)
    // The classes from the key's first digit d = u >> kS0 (< 2^10, so signed
    // compares hold): winners d > pthr.
    const int pthr = static_cast<int>(Pc) - (take_class ? 1 : 0);
    auto group_t = [&](const float4& xx, int v, uint32_t vmask) {
      const int lk = 4 * v - sr0;
      const uint32_t u[4] = {okey(xx.x), okey(xx.y), okey(xx.z), okey(xx.w)};
      uint32_t wa = 0;
#pragma unroll
      for (int c = 0; c < 4; ++c) wa |= static_cast<int>(u[c] >> kS0) > pthr ? (1u << c) : 0u;
      wa &= vmask;
      if (wa) atomicOr(bitsA + (lk >> 5), wa << (lk & 31));
      if (stg) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool in = (u[c] >> kS0) == Pc && ((vmask >> c) & 1u);
          if (in && tp < tend) tpair[tp] = make_uint2(u[c], static_cast<uint32_t>(lk + c));
          tp += in ? kMath : 0;
        }
      }
    };
    // Rounds of kP float4 groups per thread, the next round's loads issued
    // before this round's keys are classified. No key range checks in the
    // rounds wholly inside [sr, e) (the same test for every thread).
    constexpr int kP = 4;
    auto ld = [&](float4 (&x)[kP], int base) {
#pragma unroll
      for (int i = 0; i < kP; ++i) {
        const int v = base + i * kMath + tid;
        x[i] = v < v1 ? __ldcg(p4 + v) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    };
    float4 x[kP];
    ld(x, v0);
    for (int base = v0; base < v1; base += kP * kMath) {
      float4 y[kP];
      ld(y, base + kP * kMath);
      if (4 * base >= sr && 4 * (base + kP * kMath) <= e) {
#pragma unroll
        for (int i = 0; i < kP; ++i) group_t(x[i], base + i * kMath + tid, 0xfu);
      } else {
#pragma unroll
        for (int i = 0; i < kP; ++i) {
          const int v = base + i * kMath + tid, k = 4 * v;
          uint32_t vm = 0;
#pragma unroll
          for (int c = 0; c < 4; ++c) vm |= (v < v1 && k + c >= sr && k + c < e) ? (1u << c) : 0u;
          group_t(x[i], v, vm);
        }
      }
#pragma unroll
      for (int i = 0; i < kP; ++i) x[i] = y[i];
    }
    tcnt = tp / kMath;
    const int wmax = __reduce_max_sync(0xffffffffu, tcnt);
    if (lane == 0) warp_fill[tid >> 5] = wmax;
    bar_math();
    if (take_class) need = 0;
    if (stage) {
      int over = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) over |= warp_fill[w] > capt;
      stage = over == 0;  // (a thread's slots overflowed: the unstaged passes)
    }
  }
  // The remaining digits: bits s - 1 .. s - 11 while s > 11, then the rest,
  // on the staged pairs or by filtered passes over the row.
  for (int L = 1; L < 4 && need != 0; ++L) {
    const int bits = min(s, 11), sh = s - bits;
    const uint32_t mask = (1u << bits) - 1;
    for (int i = tid; i < kBins; i += kMath) hist[i] = 0;
    bar_math();
    if (stage) {  // (thread t's own pairs)
      for (int j = 0; j < tcnt; ++j) {
        const uint32_t u = tpair[j * kMath].x;
        if ((u >> s) == Pc) atomicAdd(hist + ((u >> sh) & mask), 1u);
      }
    } else {
      for_each_group(rowp, sr, sr + n, tid, kMath, [&](int, const uint32_t(&u)[4], uint32_t valid) {
        hist4(hist, u, valid, Pc, s, sh, mask);
      });
    }
    bar_math();
    const int per = max((1 << bits) / kMath, 1);  // (fewer bins than threads: the rest read zeros)
    uint32_t hv2[4] = {0, 0, 0, 0};
    for (int i = 0; i < per; ++i) hv2[i] = hist[tid * per + i];
    find_digit(ctl, hv2, per, need);
    if (!ctl->found[3]) {
      for (int i = tid; i < topk; i += kMath) orow[i] = -1;
      bar_math();
      return;
    }
    Pc = (Pc << bits) | static_cast<uint32_t>(ctl->found[0]);
    s = sh;
    need = static_cast<uint32_t>(ctl->found[1]);
    ccount = static_cast<uint32_t>(ctl->found[2]);
    // The final class's marks: members of the first digit's class against (Pc, s).
    const bool take_class = ccount == need;
    if (take_class || s == 0) {
      const uint64_t hiA = (static_cast<uint64_t>(Pc) + 1) << s;
      const uint32_t P0 = Pc >> (kS0 - s);
      auto markf = [&](uint32_t u, int lk) {
        if (static_cast<uint64_t>(u) >= hiA || (take_class && (u >> s) == Pc))
          atomicOr(bitsA + (lk >> 5), 1u << (lk & 31));
        else if ((u >> s) == Pc)
          atomicOr(bitsB + (lk >> 5), 1u << (lk & 31));
      };
      if (stage) {
        for (int j = 0; j < tcnt; ++j) {
          const uint2 pr = tpair[j * kMath];
          markf(pr.x, static_cast<int>(pr.y));
        }
      } else {
        for_each_group(rowp, sr, sr + n, tid, kMath, [&](int k, const uint32_t(&u)[4], uint32_t valid) {
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (((valid >> c) & 1) && (u[c] >> kS0) == P0) markf(u[c], k + c - sr0);
        });
      }
      if (take_class) need = 0;
      bar_math();
      break;
    }
  }
  emit_row(bitsA, bitsB, nw, need, topk, orow, sr0 - sr);
}

// The select after the tile loops (every math thread): the piece's
// histograms (shared, at kEpiOff) less the logits outside the rows, published;
// then the owned rows r = rank, rank + m, ... of the block, once every piece
// has counted itself. A call boundary, so the tile loop keeps the dense
// kernel's registers: the block, the piece and the rows are found again here.
template <int kEpiOff>
__device__ __noinline__ void staged_select(const StagedTopkParams P) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ Ctl ctl_s;
  Ctl* ctl = &ctl_s;
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x, lane = tid & 31;
  const int m = P.m, rank = static_cast<int>(blockIdx.x) % m;
  const PieceSpan ps = piece_span(p, m, static_cast<int>(blockIdx.x), lane);
  const int b = ps.b;
  bar_math();  // every math warp's tile loop is done: the K ring and Q buffers are free
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + kEpiOff);
  piece_unpad(hist, ps, tid);
  bar_math();
  piece_publish(P, hist, blockIdx.x, b, tid);
  if (rank >= kRows || b * kRows + rank >= p.rows) return;
  if (tid == 0) {
    while (ld_acquire(P.counters + b) < static_cast<uint32_t>(m)) __nanosleep(64);
  }
  bar_math();
  for (int r = rank; r < kRows && b * kRows + r < p.rows; r += m) owner_row(P, smem, ctl, b, r);
}

}  // namespace staged_topk

// The kernel: grid = B m CTAs (B = ceil(rows / 8), m = P.m <= 16); CTA b m + j
// is piece j of row block b. Cfg: the dense logits configuration whose tile
// loop it runs (the dense logits kernel's). The producer warpgroup's warp 0 loads the
// piece's tiles, its warps 1-3 check the call's row ranges; the four math
// warpgroups run the tile loop with the histogram epilogue, then
// staged_select.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fused_staged_topk_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                  const __grid_constant__ CUtensorMap tm_scales,
                                  const __grid_constant__ CUtensorMap tm_weights,
                                  const __grid_constant__ CUtensorMap tm_q2, const StagedTopkParams P) {
  static_assert(Cfg::kMathThreads == staged_topk::kMath && Cfg::kBlockRows == 8 &&
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
  __shared__ int block_slot[2][Cfg::kSlotInts];
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  // This CTA's tiles: piece `rank` of its row block's m pieces.
  const staged_topk::PieceSpan ps = staged_topk::piece_span(p, P.m, static_cast<int>(blockIdx.x), lane);
  const WorkShare share{ps.b, ps.t0, ps.t1 - ps.t0};
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
    if (share.count > 0)
      logits_producer<Cfg>(p, smem, share, full, empty, q_full, q_empty, block_slot, &tm_q, &tm_k,
                                    &tm_scales, &tm_weights, &tm_q2);
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  // The first digit's histograms: in the second Q buffer (a piece holds one
  // row block, so its tile loop uses only the first), zeroed and the rows'
  // addresses tabled before the loop.
  constexpr int kHistOff = Cfg::kOffQ + Cfg::kQTileBytes;
  static_assert(staged_topk::kRows * staged_topk::kEpiBins * 4 <= Cfg::kQTileBytes, "the histograms in a Q buffer");
  uint32_t* h = reinterpret_cast<uint32_t*>(smem + kHistOff);
  __shared__ uint32_t rowbase[staged_topk::kRows];
  for (int i = tid; i < staged_topk::kRows * staged_topk::kEpiBins / 4; i += Cfg::kMathThreads)
    reinterpret_cast<uint4*>(h)[i] = make_uint4(0u, 0u, 0u, 0u);
  if (tid < staged_topk::kRows) rowbase[tid] = ptx::smem_addr(h + tid * staged_topk::kEpiBins);
  staged_topk::bar_math();
  if (share.count > 0)
    logits_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, block_slot, staged_topk::EpiHist{rowbase});
  staged_topk::staged_select<kHistOff>(P);
}

// Workspace bytes beyond the logits: the pieces' histograms and the blocks' counters.
inline size_t fused_staged_aux_bytes(int rows, int m) {
  const size_t nb = (static_cast<size_t>(rows) + 7) / 8;
  return nb * m * staged_topk::kRows * staged_topk::kEpiBins * 4 + (nb * 4 + 255) / 256 * 256;
}

// Launches it: q, k, scales, weights, starts, ends as the logits launcher;
// logits: [rows, ld] fp32 (ld >= keys, a multiple of 4, 16-byte aligned);
// aux: fused_staged_aux_bytes(rows, m) bytes, 16-byte aligned (its counters
// are zeroed here by a memset on the stream); out [rows, topk] int32; m from
// fused_staged_pieces (1 to 16, grid B m at most the SMs: every CTA resident
// at once). cudaErrorInvalidValue for a bad m or keys, or a tensor map that
// cannot be encoded (*map_error as the logits launcher's).
template <class Cfg>
inline cudaError_t launch_sm90_fused_staged_topk(const void* q, const void* k, const float* scales,
                                                 const float* weights, const int* starts, const int* ends,
                                                 float* logits, int64_t ld, void* aux, int* out, int rows, int keys,
                                                 int topk, int m, cudaStream_t stream, int* map_error = nullptr,
                                                 RangeErrorSink range_err = {}) {
  if (rows <= 0) return cudaSuccess;
  if (m < 1 || m > 16 || keys <= 0 || keys > staged_topk::kMaxRowKeys) return cudaErrorInvalidValue;
  CUtensorMap tm_q, tm_k, tm_s, tm_w, tm_q2;
  if (const int e = make_logits_loop_maps<Cfg>(tm_q, tm_k, tm_s, tm_w, tm_q2, q, k, scales, weights, logits, ld, rows,
                                               keys)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fused_staged_topk_kernel<Cfg>;
  constexpr int kSmem = Cfg::kSmemBytes;
  static_assert(kSmem <= 227 * 1024, "shared memory per CTA");
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const int nb = (rows + 7) / 8;
  uint32_t* hist = static_cast<uint32_t*>(aux);
  uint32_t* counters = hist + static_cast<size_t>(nb) * m * staged_topk::kRows * staged_topk::kEpiBins;
  err = cudaMemsetAsync(counters, 0, static_cast<size_t>(nb) * 4, stream);
  if (err != cudaSuccess) return err;
  const StagedTopkParams P{Sm90LogitsParams{starts, ends, logits, ld, rows, keys, range_err}, out, hist, counters,
                           topk, m};
  kernel<<<nb * m, Cfg::kThreads, kSmem, stream>>>(tm_q, tm_k, tm_s, tm_w, tm_q2, P);
  return cudaGetLastError();
}

}  // namespace mqa_topk
