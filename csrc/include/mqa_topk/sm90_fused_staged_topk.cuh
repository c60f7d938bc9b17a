// sm90_fused_staged_topk: the fused MQA-logits + top-k for at most one wave
// of row blocks (issue 12, session 22), one launch. Torch-free.
//
// Why. The split kernels (sm90_fused_mqa_topk_v3.cuh, 86 / 87) cut a block's
// keys into pieces that each sample, agree on a shared gate, filter and merge
// through L2 counters and polling: at 64 rows their ~112 us are ~45 us of tile
// loops and ~65 us of cross-CTA phases, each a chain of round trips on cold
// code (docs/FUSED.md, session 20). Native dense takes 74 us there (37 us of
// logits, 37 of top-k). A cluster version of the select (dev variant 95,
// sm90_fused_cluster_topk.cuh, exact; retired in session 23) showed that clusters of this kernel's
// shape are not resident enough on the H200 (7 of 16, 15 of 8, 30 of 4 CTAs
// at once), so this kernel synchronizes through global memory once per block.
//
// Design. B = ceil(rows / 8) row blocks, m pieces each (B m <= SMs, m <= 16,
// fused_staged_pieces): CTA c = b m + j computes tiles [nt j / m, nt (j + 1) /
// m) of block b's span with the dense logits kernel's own tile loop
// (sm90_fp8_mqa_logits_v2.cuh, the op's configuration: the same producer, the
// same math, bitwise the same logits) and stores them into a logits workspace
// (rows x keys x 4 bytes: 16 MB at 64 x 64K, L2-resident). Then:
//   1. each CTA's tile loops histogram its piece of each of the 8 rows on the
//      top 10 bits of the order-preserving key (in the epilogue, shared
//      memory: EpiHist); the CTA publishes the histograms to the workspace
//      and counts itself in the block's counter (one release); CTAs that own
//      no row exit;
//   2. the owner of row r (CTA r mod m of the block) waits for the m pieces,
//      sums their histograms (L2), finds the digit holding the k-th largest,
//      and then finishes the row alone: one pass over the row's logits marks
//      the definite winners in a bitmap over the row and stages the threshold
//      class's (key, index) pairs in shared memory; the remaining two digits
//      (bits 21..11, 10..0) are resolved on the staged pairs (or, when the
//      class does not fit, by filtered passes over the row); the final class is
//      all taken or one exact key whose lowest indices win (ties);
//   3. the owner writes the winners in ascending index order (a block scan of
//      the bitmap's popcounts), then the first ties.
// One cross-CTA step per block (no gate, no merge of candidate lists, no
// polling besides the owner's one wait). Exact: (value desc, index asc) like
// the native top-k kernel; the output is a pure function of the logits
// (histograms are order-independent, bitmaps are set with atomicOr, positions
// come from ordered scans): reruns are bitwise identical, and the sets do not
// depend on the other rows of the launch. Output as every top-k path: indices
// relative to the row's start, min(topk, n) of them, the rest -1.
//
// Variants (kMode; MQA_TOPK_FUSED_STAGED_VARIANT in the op): 109 (kMode 27:
// bits 0, 1, 3, 4, the owner's pass owner_row_v2 on the epilogue's first
// digit with the deep, lean pass), 113 (91: 109 with the class staged in each
// thread's own slots, bit 6), 117 (219: 113 with the pass's loads a round
// ahead, bit 7; the op's default), 119 / 121 (95 / 223: 113's / 117's pass on
// shares of every SM, bit 2). (The retired variants 97-107, 111 and 115,
// sessions 22-25, and what they measured: docs/FUSED.md.)
//
// Limits (fused_staged_pieces): at most SMs row blocks (one wave; every CTA of
// a block must be resident at once, as for the split kernels: one CTA per SM
// and grid <= SMs); rows of at most kMaxRowKeys keys (the owner's bitmaps).
// The workspace: the logits [rows, ld] fp32, then the pieces' histograms
// (room for B m x 8 x 2048 u32; 1024 bins a row used) and the blocks'
// counters (B u32, zeroed by the launcher's memset before the launch).
#pragma once

#include "range_check.cuh"
#include "sm90_fp8_mqa_logits_v2.cuh"

namespace mqa_topk {

struct StagedTopkParams {
  Sm90LogitsParams lg;  // starts, ends, the logits workspace (pitch ld), rows, keys, range errors
  int* out;             // [rows, topk] int32
  uint32_t* hist;       // the pieces' histograms: [B m][8][kEpiBins] (shares: [B][8][kShareBins]); room: B m x 8 x 2048
  uint32_t* counters;   // [B] pieces of the block done (zero before the launch)
  int topk;
  int m;                // pieces per block
  uint32_t* marks;      // (dev) thread 0's globaltimer marks: 16 words per CTA
};

namespace staged_topk {

constexpr int kRows = 8;
constexpr int kMath = 512;             // math threads (four warpgroups): they run the select
constexpr int kBins = 2048;
constexpr int kMaxRowKeys = 1 << 19;   // the owner's bitmaps: 64 KB each
constexpr int kWords = kMaxRowKeys / 32;
// Shared memory after the tile loops (the K ring and Q buffers are free then):
// the owner's, up to kSmemSelect.
constexpr int kOffHist = 0;           // owner: u32 [2048]
constexpr int kOffBitsA = kBins * 4;  // owner: u32 [nw] winners, u32 [nw] ties at the exact k-th key, the staging

// (owner_row_v2, session 22: the owner's staging sized by the row's bitmaps)
constexpr int kSmemSelect = 196608;
constexpr int kMinCap = (kSmemSelect - kOffBitsA - 2 * (kWords + 1) * 4) / 8 / 4 * 4;  // staged pairs at the longest rows
static_assert(kMinCap >= 4096, "owner_row_v2's staging at the longest rows");

struct Ctl {
  int scan[kMath / 32];
  int found[4];  // digit, need, class count, found
  int fill;      // (the retired shared-counter staging's pairs: zeroed, no longer read)
  int pad[3];    // (pad[0]: the retired ring's chunk count; the layout kept)
};

__device__ __forceinline__ uint32_t okey(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t msk = 0u - (u >> 31);
  return ((u ^ msk) - msk) ^ (~msk & 0x80000000u);
}
// (kMode bit 1, session 23) The first digit's histograms
// formed in the tile loops' epilogue: every math lane adds its two logits of
// each tile to its row's u32 [kEpiBins] in shared memory (the second Q buffer:
// a CTA of this kernel takes one row block, so the tile loop uses only the
// first). 10 bits (sign, exponent, one mantissa bit) so 8 rows of u32
// counters fit the buffer's 32 KB: no counter can wrap, whatever the piece's
// length. The select then needs no pass over the piece's logits.
constexpr int kEpiBits = 10;
constexpr int kEpiBins = 1 << kEpiBits;
// A lane's two logits of a tile into its row's histogram of 2^kBits bins at
// shared address h (the order key's top kBits bits). Every logit of the tile
// is counted, the row's keys and the others (-inf from the tile loop: bin
// epi_pad_bin), with no branch; the select takes the others back out.
template <int kBits>
__device__ __forceinline__ void epi_count2(uint32_t& h, float v0, float v1) {
  asm volatile("mov.b32 %0, %0;" : "+r"(h));  // (held across the tile loop, not rematerialized)
  asm volatile("red.shared.add.u32 [%0], 1;\n\tred.shared.add.u32 [%1], 1;" ::"r"(h + ((okey(v0) >> (32 - kBits)) << 2)),
               "r"(h + ((okey(v1) >> (32 - kBits)) << 2))
               : "memory");
}
// The bin of the tile loop's -inf (a logit outside the row).
template <int kBits>
constexpr uint32_t epi_pad_bin() { return 0x00800000u >> (32 - kBits); }
struct EpiHist {
  // Shared: the rows' histograms' shared addresses (u32 [kRows][kEpiBins]).
  // (A row's address is loaded from shared memory, not computed: ptxas then
  // holds it across the tile loop instead of recomputing it from the thread
  // index every tile, which an asm mov does not prevent.)
  const volatile uint32_t* rowbase;
  struct Row {
    uint32_t h;  // this lane's row's histogram
    __device__ __forceinline__ void operator()(int, uint32_t, float v0, float v1) { epi_count2<kEpiBits>(h, v0, v1); }
    __device__ __forceinline__ void block_end(int, int, int, int, const volatile int*) {}
  };
  __device__ __forceinline__ Row row(int rr) const { return Row{rowbase[rr]}; }
};
constexpr uint32_t kEpiPadBin = epi_pad_bin<kEpiBits>();
__device__ __forceinline__ void bar_math();
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v);

// (kMode bit 2, session 23; 119 / 121) Shares: the grid is every SM and
// each CTA computes the dense kernel's share of the call's tiles (any number
// of row blocks, a share may span several), so the select no longer needs a
// wave of whole blocks. The first digit's histograms (9 bits: u32 [8][512],
// 16 KB past the tile loop's shared memory; both Q buffers are in use) are
// formed by the epilogue as in EpiHist and flushed at each block's end into
// the block's global histograms (red.add of the non-zero bins; integer sums,
// so the order of the pieces does not matter), whose counter then gains the
// tiles done (one release); the block is complete when it holds the block's
// tile count. Rows are then owned in contiguous runs of rows / grid.
constexpr int kShareBits = 9;
constexpr int kShareBins = 1 << kShareBits;
constexpr int kShareHistBytes = kRows * kShareBins * 4;
constexpr uint32_t kSharePadBin = epi_pad_bin<kShareBits>();
struct EpiShares {
  uint32_t* hs;        // shared u32 [kRows][kShareBins]
  const volatile uint32_t* rowbase;  // shared: the rows' histograms' shared addresses (as EpiHist's)
  uint32_t* ghist;     // global u32 [B][kRows][kShareBins] (zero before the launch)
  uint32_t* counters;  // global u32 [B] tiles done (zero before the launch)
  struct Row {
    uint32_t h;  // shared address of this lane's row's histogram
    uint32_t* hs;
    uint32_t* ghist;
    uint32_t* counters;
    __device__ __forceinline__ void operator()(int, uint32_t, float v0, float v1) { epi_count2<kShareBits>(h, v0, v1); }
    // Every math thread: after the block's tiles [t0, t1) (keys from lo + 128 t0), the piece's
    // histograms less the -inf of keys outside the rows go to the block's, then the counter.
    __device__ __forceinline__ void block_end(int b, int lo, int t0, int t1, const volatile int* sl) {
      const int tid = threadIdx.x;
      bar_math();  // every math warp's adds of the block are done
      uint32_t* g = ghist + static_cast<size_t>(b) * (kRows * kShareBins);
      for (int i = tid; i < kRows * kShareBins; i += kMath) {
        const uint32_t raw = hs[i];
        uint32_t v = raw;
        if ((i & (kShareBins - 1)) == kSharePadBin) {  // (thread kSharePadBin, every row)
          const int r = i >> kShareBits;
          const long long rs = sl[8 + r], re = rs + sl[16 + r];
          const long long a = max(rs, lo + static_cast<long long>(t0) * 128);
          const long long e = min(re, lo + static_cast<long long>(t1) * 128);
          v -= static_cast<uint32_t>(static_cast<long long>(t1 - t0) * 128 - max(e - a, 0ll));
        }
        if (v) atomicAdd(g + i, v);
        if (raw) hs[i] = 0;
      }
      __threadfence();
      bar_math();  // (also: no add of the next block before every bin is flushed and cleared)
      if (tid == 0) red_release_add(counters + b, static_cast<uint32_t>(t1 - t0));
    }
  };
  __device__ __forceinline__ Row row(int rr) const { return Row{rowbase[rr], hs, ghist, counters}; }
};

__device__ __forceinline__ void bar_math() { asm volatile("bar.sync 15, 512;" ::: "memory"); }
__device__ __forceinline__ void mark(const StagedTopkParams& P, int id) {
  if (P.marks != nullptr && threadIdx.x == 0) {
    uint32_t t;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
    P.marks[blockIdx.x * 16 + id] = t | 1u;
  }
}
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Piece c of its row block's m pieces: the block b = c / m, its key span
// (lean2_block_span: the block's first key lo, this lane's row's start s and
// length len) and the piece's tiles [t0, t1) of the block's nt.
struct PieceSpan {
  int b, lo, s, len, t0, t1;
};
__device__ __forceinline__ PieceSpan piece_span(const Sm90LogitsParams& p, int m, int c, int lane) {
  PieceSpan ps{c / m, 0, 0, 0, 0, 0};
  const int rank = c % m;
  const int nt = lean2_block_span(p, ps.b, lane, ps.lo, ps.s, ps.len);
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

// The owner's work for row `row` of block b (every math thread): session
// 22's owner_row_v2 (the staging sized by the row's bitmaps) with session
// 24's deep, lean pass (kMode bits 3 and 4, in every kept variant):
// - deep: the row is prefetched into L2 first (bulk prefetches, overlapping
//   the first digit's histogram sums), and the pass keeps 8 float4 loads per
//   thread in flight: the pass was latency-bound (session 24: ~30 us per
//   64K-key row with 2 loads per thread, 16 KB in flight per SM);
// - lean: one compare per key, and each warp stages its class keys into its
//   own 1/16 of the staging area by ballots (a register offset per warp: no
//   scan, no shared counter; the scan-and-atomic staging was ~150 SASS
//   instructions per float4 group, ~10 us of issue per 64K-key row). A warp
//   that overflows its part sends the row to the unstaged passes.
// kThr (kMode bit 6) stages each thread's class keys into its own slots
// instead, kPipe (kMode bit 7) issues the pass's loads a round ahead.
// (The retired variants' other passes, sessions 22-25: docs/FUSED.md.)
// The row's float4 groups [sr0, sr + n) of workspace row `rowp` into L2, 8 KB per bulk prefetch (16-byte
// aligned: ld is a multiple of 4), every math thread.
__device__ __forceinline__ void prefetch_row_l2(const float* rowp, int sr0, int sr, int n) {
  const char* a = reinterpret_cast<const char*>(rowp + sr0);
  const uint32_t bytes = static_cast<uint32_t>(((sr + n + 3) >> 2) - (sr0 >> 2)) * 16u;
  for (uint32_t c = static_cast<uint32_t>(threadIdx.x) * 8192u; c < bytes; c += kMath * 8192u)
    ptx::prefetch_l2_bulk(a + c, min(8192u, bytes - c));
}

// Thread tid's bins of row r's first digit (block b), summed over the m pieces' histograms (L2): kPer1
// bins per thread, into hv[0, kPer1).
template <int kPer1, int kBins1>
__device__ __forceinline__ void first_digit_bins(const StagedTopkParams& P, int b, int r, int tid, uint32_t (&hv)[4]) {
  const uint32_t* hb = P.hist + (static_cast<size_t>(b) * P.m * kRows + r) * kBins1 + kPer1 * tid;
  static_assert(kPer1 == 2 || kPer1 == 1, "two bins per thread (10 bits) or one (9)");
  if constexpr (kPer1 == 2) {  // (109: the m <= 16 pieces' loads all in flight at once)
    uint2 hx[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)
      hx[j] = j < P.m ? __ldcg(reinterpret_cast<const uint2*>(hb + static_cast<size_t>(j) * kRows * kBins1))
                      : make_uint2(0u, 0u);
#pragma unroll
    for (int j = 0; j < 16; ++j) hv[0] += hx[j].x, hv[1] += hx[j].y;
  } else
#pragma unroll 4
  for (int j = 0; j < P.m; ++j) {
    const uint32_t* hj = hb + static_cast<size_t>(j) * kRows * kBins1;
    hv[0] += __ldcg(hj);  // (the shares' 9 bits: one bin per thread)
  }
}

// kNext (kMode bit 8, dev variant 123, session 27): the owner's next row
// (r_next of the block, -1 for none) is prefetched into L2 right after this
// row's pass, so that its bytes come from HBM while this row's digits and
// output run; `pre`: this row was prefetched so by the row before it.
// kNextHist (kMode bit 9, 125, with bit 8): the next row's first-digit bins
// are summed there too (hvn: this thread's two, kept in registers).
// Measured (H200): no gain (512 rows ~0.5-1% slower): the pass is ~8 us per
// 64K-key row with or without the prefetch, so it is not HBM-bound there.
// Exact, kept as development variants; 117 (the op's) has neither.
template <int kS0, bool kThr = false, bool kPipe = false, bool kNext = false, bool kNextHist = false>
__device__ __forceinline__ bool owner_row_v2(const StagedTopkParams& P, uint8_t* smem, Ctl* ctl, int b, int r,
                                             int r_next = -1, bool pre = false, uint32_t* hvn = nullptr) {
  // The first digit: bits 31..kS0 (10 from the tile loops' epilogue
  // histograms, 9 from the shares' epilogue), in 2^(32 - kS0) bins; the rest
  // in digits of at most 11 bits.
  static_assert(kS0 == 22 || kS0 == 23, "first digits of 10 or 9 bits");
  constexpr int kBins1 = 1 << (32 - kS0), kPer1 = kBins1 / kMath;
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x;
  const int row = b * kRows + r;
  const int topk = P.topk;
  const int sr = max(__ldg(p.starts + row), 0);
  const int n = max(min(__ldg(p.ends + row), p.keys) - sr, 0);
  int* orow = P.out + static_cast<int64_t>(row) * topk;
  if (n <= topk) {  // every key, then -1
    for (int i = tid; i < topk; i += kMath) orow[i] = i < n ? i : -1;
    return false;
  }
  // Bit j of the bitmaps is key sr0 + j (sr0 = sr rounded down to 4: a float4 group's keys share a word).
  const int sr0 = sr & ~3;
  const int nw = (n + (sr - sr0) + 31) >> 5;
  const int cap = (kSmemSelect - kOffBitsA - 2 * nw * 4) / 8 / 4 * 4;
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + kOffHist);
  uint32_t* bitsA = reinterpret_cast<uint32_t*>(smem + kOffBitsA);
  uint32_t* bitsB = bitsA + nw;
  uint32_t* skey = bitsB + nw;
  uint32_t* sidx = skey + cap;
  const float* rowp = p.logits + static_cast<int64_t>(row) * p.ld;
  if (!kNext || !pre) prefetch_row_l2(rowp, sr0, sr, n);
  bool prefetched = false;  // (kNext: the next row's prefetch issued)
  // The first digit from the m pieces' histograms (L2): 4 bins per thread.
  uint32_t hv[4] = {0, 0, 0, 0};
  if (kNextHist && pre) {  // (the row before summed this row's bins)
    hv[0] = hvn[0], hv[1] = hvn[1];
  } else {
    first_digit_bins<kPer1, kBins1>(P, b, r, tid, hv);
  }
  for (int i = tid; i < nw; i += kMath) bitsA[i] = 0, bitsB[i] = 0;
  // (Ctl::fill is read by no kept pass since the shared-counter staging was
  // retired; the store stays so that the kept kernels' SASS is unchanged.)
  if (tid == 0) ctl->fill = 0;
  find_digit(ctl, hv, kPer1, static_cast<uint32_t>(topk));
  mark(P, 6);
  if (!ctl->found[3]) {  // (inconsistent histograms: impossible for the kernel's own logits)
    for (int i = tid; i < topk; i += kMath) orow[i] = -1;
    bar_math();
    return false;
  }
  uint32_t Pc = static_cast<uint32_t>(ctl->found[0]);
  int s = kS0;
  uint32_t need = static_cast<uint32_t>(ctl->found[1]);
  uint32_t ccount = static_cast<uint32_t>(ctl->found[2]);
  bool stage = ccount <= static_cast<uint32_t>(cap);
  constexpr int kWarps = kMath / 32;
  const int capw = cap / kWarps / 4 * 4;  // (the lean pass: each warp's part of the staging area)
  __shared__ int warp_fill[kWarps];
  // (kThr: thread t's staged pairs at tpair[j * kMath], j < capt: no
  // coordination between threads; bank-conflict free, kMath * 2 words apart)
  const int toff = (kOffBitsA + 2 * nw * 4 + 7) & ~7;
  const int capt = (kSmemSelect - toff) / 8 / kMath;
  uint2* tpair = reinterpret_cast<uint2*>(smem + toff) + tid;
  int tcnt = 0;  // (kThr: this thread's class keys, counted past capt too)
  static_assert(!kPipe || kThr, "the pipelined loads are the threads' staging's");
  // The pass over the row (every thread the same number of rounds, so each
  // warp reserves its staging slots at once): winners above the class into A
  // (the class too where it is all taken), the class staged.
  {
    const bool take_class = ccount == need;
    const uint32_t lo_c = Pc << kS0;  // the class: lo_c <= u < lo_c + 2^kS0
    const int lane = tid & 31;
    const float4* p4 = reinterpret_cast<const float4*>(rowp);
    const int v0 = sr >> 2, v1 = (sr + n + 3) >> 2, e = sr + n;
    int wfill = 0;  // (the ballots' staging: this warp's staged keys, the same in every lane)
    const uint32_t lt_mask = (1u << lane) - 1u;
    uint32_t* wkey = skey + (tid >> 5) * capw;
    uint32_t* widx = sidx + (tid >> 5) * capw;
    constexpr int kU = 8;  // float4 loads per thread in flight (the deep pass)
    int tp = 0;  // (kThr: this thread's next slot, tpair[tp]; tp < tend while it fits)
    const int tend = capt * kMath;
    {  // (kMode bit 4, every kept variant)
      // The lean pass (session 24): one unsigned compare per key for the
      // winners (above the class: u > hi_m1, never overflowing), one for the
      // class; no key range checks in the rounds wholly inside [sr, e); the
      // class staged by four ballots per group into the warp's part.
      const uint32_t hi_m1 = lo_c + ((1u << kS0) - 1u);
      const bool stg = stage && !take_class;  // (a class all taken is winners, not staged)
      auto group = [&](const float4& xx, int v, uint32_t vmask) {
        const int k = 4 * v;
        const uint32_t u[4] = {okey(xx.x), okey(xx.y), okey(xx.z), okey(xx.w)};
        uint32_t wa = 0, cm = 0;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool cls = u[c] - lo_c < (1u << kS0);
          wa |= (u[c] > hi_m1 || (take_class && cls)) ? (1u << c) : 0u;
          cm |= cls ? (1u << c) : 0u;
        }
        wa &= vmask, cm &= vmask;
        const int lk = k - sr0;
        if (wa) atomicOr(bitsA + (lk >> 5), wa << (lk & 31));
        if (stg) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const uint32_t bal = __ballot_sync(0xffffffffu, (cm >> c) & 1u);
            if ((cm >> c) & 1u) {
              const int pos = wfill + __popc(bal & lt_mask);
              if (pos < capw) wkey[pos] = u[c], widx[pos] = static_cast<uint32_t>(lk + c);
            }
            wfill += __popc(bal);
          }
        }
      };
      // (kThr, 113 / 117 / 119 / 121: the same classes from the key's first digit
      // d = u >> kS0 (< 2^11, so signed compares hold): winners d > Pc, or
      // d >= Pc where the class is all taken; each class key staged by its
      // thread at tpair[tp], kMath pairs apart: one predicated store, no ballots.)
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
      auto grp = [&](const float4& xx, int v, uint32_t vmask) {
        if constexpr (kThr) group_t(xx, v, vmask);
        else group(xx, v, vmask);
      };
      if constexpr (kPipe) {
        // (kPipe, 117: rounds of 4 float4 groups per thread, the next round's
        // loads issued before this round's keys are classified: 4 to 8 loads
        // per thread always in flight, where 109's 8 drain before each round.)
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
      } else
      for (int base = v0; base < v1; base += kU * kMath) {
        float4 x[kU];
#pragma unroll
        for (int i = 0; i < kU; ++i) {
          const int v = base + i * kMath + tid;
          x[i] = v < v1 ? __ldcg(p4 + v) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        // (the same for every thread: the round's keys all inside [sr, e))
        if (4 * base >= sr && 4 * (base + kU * kMath) <= e) {
#pragma unroll
          for (int i = 0; i < kU; ++i) grp(x[i], base + i * kMath + tid, 0xfu);
        } else {
#pragma unroll
          for (int i = 0; i < kU; ++i) {
            const int v = base + i * kMath + tid, k = 4 * v;
            uint32_t vm = 0;
#pragma unroll
            for (int c = 0; c < 4; ++c) vm |= (v < v1 && k + c >= sr && k + c < e) ? (1u << c) : 0u;
            grp(x[i], v, vm);
          }
        }
      }
    }
    if constexpr (kNext) {  // (this thread's loads of the pass are done: the next row's bytes to L2)
      if (r_next >= 0) {
        const int rn = b * kRows + r_next;
        const int srn = max(__ldg(p.starts + rn), 0);
        const int nn = max(min(__ldg(p.ends + rn), p.keys) - srn, 0);
        if (nn > topk) prefetch_row_l2(p.logits + static_cast<int64_t>(rn) * p.ld, srn & ~3, srn, nn);
        if constexpr (kNextHist) {
          uint32_t h4[4] = {0, 0, 0, 0};
          first_digit_bins<kPer1, kBins1>(P, b, r_next, tid, h4);
          hvn[0] = h4[0], hvn[1] = h4[1];
        }
        prefetched = true;
      }
    }
    if constexpr (kThr) {
      tcnt = tp / kMath;
      const int wmax = __reduce_max_sync(0xffffffffu, tcnt);  // (checked against capt below)
      if (lane == 0) warp_fill[tid >> 5] = wmax;
    } else {
      if (lane == 0) warp_fill[tid >> 5] = wfill;
    }
    bar_math();
    if (take_class) need = 0;
    if (stage) {
      int over = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) over |= warp_fill[w] > (kThr ? capt : capw);
      stage = over == 0;  // (a warp's part overflowed: the unstaged passes)
    }
  }
  mark(P, 7);
  if (P.marks != nullptr && tid == 0) P.marks[blockIdx.x * 16 + 10] = (ccount << 1) | 1u;  // (a count, not a time)
  // The remaining digits: bits s - 1 .. s - 11 while s > 11, then the rest,
  // on the staged pairs or by filtered passes over the row.
  for (int L = 1; L < 4 && need != 0; ++L) {
    const int bits = min(s, 11), sh = s - bits;
    const uint32_t mask = (1u << bits) - 1;
    for (int i = tid; i < kBins; i += kMath) hist[i] = 0;
    bar_math();
    if (stage && kThr) {  // (thread t's own pairs)
      for (int j = 0; j < tcnt; ++j) {
        const uint32_t u = tpair[j * kMath].x;
        if ((u >> s) == Pc) atomicAdd(hist + ((u >> sh) & mask), 1u);
      }
    } else if (stage) {  // (warp w's own part)
      const int wn = warp_fill[tid >> 5];
      const uint32_t* wk = skey + (tid >> 5) * capw;
      for (int i = tid & 31; i < wn; i += 32) {
        const uint32_t u = wk[i];
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
      return prefetched;
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
      if (stage && kThr) {
        for (int j = 0; j < tcnt; ++j) {
          const uint2 pr = tpair[j * kMath];
          markf(pr.x, static_cast<int>(pr.y));
        }
      } else if (stage) {
        const int wn = warp_fill[tid >> 5];
        const uint32_t* wk = skey + (tid >> 5) * capw;
        const uint32_t* wi = sidx + (tid >> 5) * capw;
        for (int i = tid & 31; i < wn; i += 32) markf(wk[i], static_cast<int>(wi[i]));
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
  mark(P, 8);
  emit_row(bitsA, bitsB, nw, need, topk, orow, sr0 - sr);
  return prefetched;
}

// The select after the tile loops (every math thread): the piece's histograms,
// published; then the owned rows. A call boundary, so the tile loop keeps the
// dense kernel's registers: the block, the piece and the rows are found again here.
// kMode (the kept variants 109 / 113 / 117: 27 / 91 / 219): bits 0, 1, 3, 4
// always (owner_row_v2 on the first digit's histograms from the tile loops'
// epilogue, EpiHist at shared offset kEpiOff, with the deep, lean pass); bit 6
// the class staged by each thread into its own slots (kThr, 113 / 117: no
// ballots, no branches around the stores), bit 7 (with bit 6) the pass's loads
// pipelined a round ahead (kPipe, 117). (The retired variants 97-107, 111
// and 115, modes 0-15, 59 and 123: docs/FUSED.md.)
template <int kMode, int kEpiOff>
__device__ __noinline__ void staged_select(const StagedTopkParams P) {
  static_assert((kMode & 27) == 27 && (kMode & 36) == 0 && kMode < 1024 &&
                    ((kMode & 256) == 0 || (kMode & 192) == 192) && ((kMode & 512) == 0 || (kMode & 256) != 0),
                "a kept staged mode: bits 0, 1, 3, 4 set, no shares (bit 2), no ring (bit 5); bit 8 on 117's pass, "
                "bit 9 with bit 8");
  constexpr bool kThr = (kMode & 64) != 0, kPipe = (kMode & 128) != 0, kNext = (kMode & 256) != 0;
  constexpr bool kNextHist = (kMode & 512) != 0;
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
  mark(P, 1);
  // 1. The piece's histograms are the tile loops' (shared memory at kEpiOff,
  // all 8 rows), less the logits outside each row; published.
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + kEpiOff);
  piece_unpad(hist, ps, tid);
  bar_math();
  mark(P, 2);
  piece_publish(P, hist, blockIdx.x, b, tid);
  mark(P, 3);
  // 2. The owned rows: r = rank, rank + m, ... (< 8, < rows).
  if (rank >= kRows || b * kRows + rank >= p.rows) return;
  if (tid == 0) {
    while (ld_acquire(P.counters + b) < static_cast<uint32_t>(m)) __nanosleep(64);
  }
  bar_math();
  mark(P, 4);
  bool pre = false;               // (kNext: this row prefetched by the row before it)
  uint32_t hvn[2] = {0u, 0u};     // (kNextHist: its first-digit bins)
  for (int r = rank; r < kRows && b * kRows + r < p.rows; r += m) {
    const int rn = r + m < kRows && b * kRows + r + m < p.rows ? r + m : -1;
    pre = owner_row_v2<32 - kEpiBits, kThr, kPipe, kNext, kNextHist>(P, smem, ctl, b, r, rn, pre, hvn);
  }
  mark(P, 5);
}

// The select of the shares (kMode bit 2, after the tile loops; every math
// thread): rows [rows c / G, rows (c + 1) / G) of CTA c of G, each once its
// block's counter holds the block's tile count. A call boundary, as staged_select.
template <int kMode>
__device__ __noinline__ void shares_select(const StagedTopkParams P) {
  static_assert((kMode & 31) == 31 && (kMode & 32) == 0 && kMode < 256,
                "a kept shares mode (119 / 121): bits 0-4 set, no ring (bit 5)");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ Ctl ctl_sh;
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x, lane = tid & 31;
  bar_math();  // every math warp's tile loop is done: the K ring and Q buffers are free
  mark(P, 1);
  const long long c = blockIdx.x, g = gridDim.x;
  const int r0 = static_cast<int>(p.rows * c / g), r1 = static_cast<int>(p.rows * (c + 1) / g);
  for (int row = r0; row < r1; ++row) {
    const int b = row / kRows;
    if (tid < 32) {  // warp 0: the block's tile count; lane 0 waits for it
      int lo = 0, s_l = 0, len_l = 0;
      const int nt = lean2_block_span(p, b, lane, lo, s_l, len_l);
      if (lane == 0)
        while (ld_acquire(P.counters + b) < static_cast<uint32_t>(nt)) __nanosleep(64);
      __syncwarp();
    }
    bar_math();
    if (row == r0) mark(P, 4);
    owner_row_v2<32 - kShareBits, (kMode & 64) != 0, (kMode & 128) != 0>(P, smem, &ctl_sh, b, row - b * kRows);
  }
  mark(P, 5);
}

}  // namespace staged_topk

// The kernel: grid = B m CTAs (B = ceil(rows / 8), m = P.m); CTA b m + j takes
// piece j of row block b. Cfg: the dense logits configuration whose tile loop
// it runs (kLean2: the op's).
// The shares' histograms past the tile loop's shared memory, and the kernel's dynamic shared memory.
template <class Cfg>
__host__ __device__ constexpr int staged_share_hist_offset() { return (Cfg::kSmemBytes - 1024 + 127) / 128 * 128; }
template <class Cfg, int kMode>
__host__ __device__ constexpr int staged_smem_bytes() {
  return (kMode & 4) != 0 ? staged_share_hist_offset<Cfg>() + staged_topk::kShareHistBytes + 1024 : Cfg::kSmemBytes;
}

// kMode: a kept variant's (27 / 91 / 219 / 95 / 223: fused_mqa_topk_staged.cu's
// staged_mode); bit 2 (shares): grid G <= SMs CTAs, CTA c the dense kernel's
// share c of G of the call's tiles.
template <class Cfg, int kMode>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fused_staged_topk_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                  const __grid_constant__ CUtensorMap tm_scales,
                                  const __grid_constant__ CUtensorMap tm_weights,
                                  const __grid_constant__ CUtensorMap tm_q2, const StagedTopkParams P) {
  static_assert(Cfg::kLean2 != 0 && Cfg::kMathThreads == staged_topk::kMath && Cfg::kBlockRows == 8 &&
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
  staged_topk::mark(P, 15);
  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  constexpr bool kShares = (kMode & 4) != 0;
  static_assert((kMode & 27) == 27 && (kMode & 32) == 0 && kMode < 1024,
                "a kept staged mode: owner_row_v2 (bit 0) on the epilogue's histograms (bit 1) with the deep, lean "
                "pass (bits 3, 4), no ring (bit 5); bits 8, 9 the next row's prefetch and bins");
  // This CTA's tiles: the dense kernel's share c of G of the call's tiles
  // (shares), or piece `rank` of its row block's m pieces.
  WorkShare share;
  if constexpr (kShares) {
    share = find_work_share_v2<Cfg>(p);  // (every thread: it synchronizes the CTA)
  } else {
    const staged_topk::PieceSpan ps = staged_topk::piece_span(p, P.m, static_cast<int>(blockIdx.x), lane);
    share = WorkShare{ps.b, ps.t0, ps.t1 - ps.t0};
  }
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
      logits_v2_lean2_producer<Cfg>(p, smem, share, full, empty, q_full, q_empty, lean2_slot, &tm_q, &tm_k,
                                    &tm_scales, &tm_weights, &tm_q2);
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  {  // (kMode bit 1, every kept variant)
    // The first digit's histograms from the tile loops: shares past the tile
    // loop's shared memory (9 bits, flushed per block), pieces in the second
    // Q buffer (10 bits). Zeroed, and the rows' addresses tabled, first.
    constexpr int kBins1 = kShares ? staged_topk::kShareBins : staged_topk::kEpiBins;
    constexpr int kHistOff = kShares ? staged_share_hist_offset<Cfg>() : Cfg::kOffQ + Cfg::kQTileBytes;
    static_assert(kShares || staged_topk::kRows * staged_topk::kEpiBins * 4 <= Cfg::kQTileBytes,
                  "the histograms in a Q buffer");
    uint32_t* h = reinterpret_cast<uint32_t*>(smem + kHistOff);
    __shared__ uint32_t rowbase[staged_topk::kRows];
    for (int i = tid; i < staged_topk::kRows * kBins1 / 4; i += Cfg::kMathThreads)
      reinterpret_cast<uint4*>(h)[i] = make_uint4(0u, 0u, 0u, 0u);
    if (tid < staged_topk::kRows) rowbase[tid] = ptx::smem_addr(h + tid * kBins1);
    staged_topk::bar_math();
    if constexpr (kShares) {
      if (share.count > 0)
        logits_v2_lean2_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, lean2_slot,
                                  staged_topk::EpiShares{h, rowbase, P.hist, P.counters});
      staged_topk::shares_select<kMode>(P);
    } else {
      if (share.count > 0)
        logits_v2_lean2_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, lean2_slot,
                                  staged_topk::EpiHist{rowbase});
      staged_topk::staged_select<kMode, kHistOff>(P);
    }
  }
}

// Pieces per row block for rows x keys on num_sms SMs (0: the kernel does not
// apply): m = min(16, num_sms / B) for B = ceil(rows / 8) <= num_sms, rows of at
// most kMaxRowKeys keys.
constexpr int fused_staged_pieces(int rows, int keys, int num_sms) {
  const long long nb = (static_cast<long long>(rows) + 7) / 8;
  if (rows <= 0 || keys <= 0 || keys > staged_topk::kMaxRowKeys || nb > num_sms) return 0;
  return static_cast<int>(num_sms / nb < 16 ? num_sms / nb : 16);
}

// Workspace bytes beyond the logits: the pieces' histograms and the blocks' counters.
inline size_t fused_staged_aux_bytes(int rows, int m) {
  const size_t nb = (static_cast<size_t>(rows) + 7) / 8;
  return nb * m * staged_topk::kRows * staged_topk::kBins * 4 + (nb * 4 + 255) / 256 * 256;
}

// Launches it: q, k, scales, weights, starts, ends as the logits launcher;
// logits: [rows, ld] fp32 (ld >= keys, a multiple of 4, 16-byte aligned);
// aux: fused_staged_aux_bytes(rows, m) bytes, 16-byte aligned (its counters
// are zeroed here by a memset on the stream); out [rows, topk] int32; m from
// fused_staged_pieces, or with kMode bit 2 (shares) the grid (at most the
// SMs: every CTA resident at once) and aux fused_staged_aux_bytes(rows, 1)
// bytes (the blocks' histograms are zeroed here too). cudaErrorInvalidValue
// for a bad m or a tensor map that cannot be encoded (*map_error as the
// logits launcher's).
// The staged pieces' tensor maps over rows x keys (q, weights: the pieces'
// first row; logits: their workspace, pitch ld): the logits launcher's maps
// and, with kQPermLong, the 2-row-box Q map (the permuted Q of pieces of >= 32
// tiles) in tm_o. False (and *map_error as the logits launcher's) when a map
// cannot be encoded. (The staged launcher's and the hybrid kernel's.)
template <class Cfg>
inline bool make_staged_maps(CUtensorMap& tm_q, CUtensorMap& tm_k, CUtensorMap& tm_s, CUtensorMap& tm_w,
                             CUtensorMap& tm_o, const void* q, const void* k, const float* scales, const float* weights,
                             float* logits, int64_t ld, int rows, int keys, int* map_error) {
  if (const int e = make_logits_maps(tm_q, tm_k, tm_s, tm_w, tm_o, q, k, scales, weights, logits, ld, rows, keys,
                                     Cfg::kQBoxRows, Cfg::kKSliceKeys, Cfg::kBlockRows, Cfg::kWgRows)) {
    if (map_error) *map_error = e;
    return false;
  }
  if constexpr (Cfg::kQPermLong) {
    const int e = make_tensor_map_2d(&tm_o, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, static_cast<uint64_t>(rows) * 32, 128,
                                     128, 2, CU_TENSOR_MAP_SWIZZLE_128B);
    if (e) {
      const int res[1] = {e};
      if (map_error) *map_error = first_map_error(res, 1);
      return false;
    }
  }
  return true;
}

template <class Cfg, int kMode>
inline cudaError_t launch_sm90_fused_staged_topk(const void* q, const void* k, const float* scales,
                                                 const float* weights, const int* starts, const int* ends,
                                                 float* logits, int64_t ld, void* aux, int* out, int rows, int keys,
                                                 int topk, int m, cudaStream_t stream, int* map_error = nullptr,
                                                 RangeErrorSink range_err = {}, uint32_t* marks = nullptr) {
  constexpr bool kShares = (kMode & 4) != 0;
  if (rows <= 0) return cudaSuccess;
  if (m < 1 || (!kShares && m > 16) || keys <= 0 || keys > staged_topk::kMaxRowKeys) return cudaErrorInvalidValue;
  CUtensorMap tm_q, tm_k, tm_s, tm_w, tm_o;
  if (!make_staged_maps<Cfg>(tm_q, tm_k, tm_s, tm_w, tm_o, q, k, scales, weights, logits, ld, rows, keys, map_error))
    return cudaErrorInvalidValue;
  auto kernel = &sm90_fused_staged_topk_kernel<Cfg, kMode>;
  constexpr int kSmem = staged_smem_bytes<Cfg, kMode>();
  static_assert(kSmem <= 227 * 1024, "shared memory per CTA");
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const int nb = (rows + 7) / 8;
  const int pieces = kShares ? 1 : m;  // (histogram sets per block)
  uint32_t* hist = static_cast<uint32_t*>(aux);
  uint32_t* counters = hist + static_cast<size_t>(nb) * pieces * staged_topk::kRows * staged_topk::kBins;
  if constexpr (kShares) {
    err = cudaMemsetAsync(hist, 0, static_cast<size_t>(nb) * staged_topk::kShareHistBytes, stream);
    if (err != cudaSuccess) return err;
  }
  err = cudaMemsetAsync(counters, 0, static_cast<size_t>(nb) * 4, stream);
  if (err != cudaSuccess) return err;
  const StagedTopkParams P{Sm90LogitsParams{starts, ends, logits, ld, rows, keys, range_err}, out, hist, counters,
                           topk, pieces, marks};
  kernel<<<kShares ? m : nb * m, Cfg::kThreads, kSmem, stream>>>(tm_q, tm_k, tm_s, tm_w, tm_o, P);
  return cudaGetLastError();
}

}  // namespace mqa_topk
