// Pieces every fused kernel shares: the kernel parameters, the workspace
// header, a row's clamped range, the split schedule (equal tile shares over
// the CTAs) and the redo queue. Hopper (sm_90a), torch-free.
#pragma once

#include "select.cuh"
#include "mqa_topk/logits/sm90_fp8_mqa_logits.cuh"

namespace mqa_topk {

struct Sm90FusedParams {
  const int* starts;
  const int* ends;
  int* out;          // [rows, topk]
  uint32_t* ws;      // past the header: the candidate segments (fused_blocks_workspace_bytes)
  int* counter;      // the workspace header: block counter (word 0), rows redone (word 1); zero at launch
  int rows;
  int keys;
  int topk;
  int cap;           // candidates per (row, warp) segment
  RangeErrorSink err;  // bad rows are recorded here (range_check.cuh; null: not recorded)
};

// Workspace header (zeroed before each launch): word 0 the block counter,
// word 1 the rows found unsafe and redone (a diagnostic: the tests read it).
// Built with MQA_TOPK_FUSED_DIAGNOSTICS (dev/adversarial_probe.py builds such
// an extension; the shipped one is built without, since the counts' atomics
// change the block kernels' register allocation), the block kernels also
// count their rare paths: word 2 the row compactions, word 3 the block-end
// selects that fell back to one warp (a compacted row with at most k
// eligible), word 4 the gates that took the exact select (no answer from
// pair_gate_fast), word 5 those of them cut by index (pair_tie_gate).
constexpr int kFusedHeaderBytes = 128;
constexpr int kFusedRedoWord = 1;
constexpr int kFusedCompactWord = 2;
constexpr int kFusedOneWarpEndWord = 3;
constexpr int kFusedExactGateWord = 4;
constexpr int kFusedTieCutGateWord = 5;

// Diagnostics' cycle sums, 64-bit at header words 8-15 (a no-op unless built
// with MQA_TOPK_FUSED_DIAGNOSTICS): lane 0 of every math warp adds the cycles
// it spends in the compaction checks (slot 0: barrier waits included, so a
// warp waiting for another's compaction counts it), the gate (1), the block
// end (2), and in its whole math part (3, the denominator).
constexpr int kFusedCyclesWord = 8;
enum FusedDiagSlot : int { kDiagCheck = 0, kDiagGate = 1, kDiagEnd = 2, kDiagMath = 3 };
__device__ __forceinline__ long long fused_diag_clock() {
#ifdef MQA_TOPK_FUSED_DIAGNOSTICS
  return clock64();
#else
  return 0;
#endif
}
__device__ __forceinline__ void fused_diag_cycles(int* counter, int slot, long long t0) {
#ifdef MQA_TOPK_FUSED_DIAGNOSTICS
  if ((threadIdx.x & 31) == 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(counter + kFusedCyclesWord) + slot,
              static_cast<unsigned long long>(clock64() - t0));
#else
  (void)counter;
  (void)slot;
  (void)t0;
#endif
}

// Counts one rare-path event in header word `w` (one thread; a no-op unless
// built with MQA_TOPK_FUSED_DIAGNOSTICS).
__device__ __forceinline__ void fused_diag_count(int* counter, int w) {
#ifdef MQA_TOPK_FUSED_DIAGNOSTICS
  atomicAdd(counter + w, 1);
#else
  (void)counter;
  (void)w;
#endif
}

// Visible keys of a row, clamped to [0, keys] (range_check.cuh: clamp_row_range);
// *start is the clamped start, which the output indices are relative to.
__device__ __forceinline__ int row_length(const Sm90FusedParams& p, int row, int* start) {
  const int s = min(max(__ldg(p.starts + row), 0), p.keys);
  const int e = min(max(__ldg(p.ends + row), s), p.keys);
  *start = s;
  return e - s;
}

// ---- Split schedule ---------------------------------------------------------
// The call's key tiles (blocks in order, each block's tiles in order; blocks
// with no tile left out) are numbered 0..total-1 and CTA c < gp = min(grid,
// total) takes the contiguous share [total c / gp, total (c + 1) / gp), as the
// dense kernel does: every CTA gets the same number of tiles, whatever the
// row count. A block whose tiles fall in the shares of CTAs c0..c1 (c0 < c1)
// is split into c1 - c0 + 1 pieces, one per CTA.

// The CTA owning global tile t.
__device__ __forceinline__ int split_owner(long long t, long long total, int gp) {
  return static_cast<int>(((t + 1) * gp - 1) / total);
}

// This CTA's share, into ctl (every thread calls it: it synchronises the CTA):
// of the tiles of blocks [0, nblocks) over at most max_cta CTAs, each share at
// least min_tiles tiles (when there are that many). Ctl: a struct with the
// sh_* fields (SplitShare).
template <int kThreads, class Ctl>
__device__ __forceinline__ void fused_split_share(const Sm90LogitsParams& lp, Ctl* ctl, int nblocks,
                                                  long long max_cta, int min_tiles = 1) {
  __shared__ long long s_warp[kThreads / 32];
  __shared__ int s_min[kThreads / 32], s_max[kThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (nblocks + kThreads - 1) / kThreads;
  const int b_beg = min(tid * per, nblocks), b_end = min(b_beg + per, nblocks);
  long long mine = 0;
  int tmin = 0x7fffffff, tmax = 0;
  for (int b = b_beg; b < b_end; ++b) {
    int lo, hi;
    const int n = block_span<8, 128>(lp, b, lo, hi);
    mine += n;
    tmin = min(tmin, n);
    tmax = max(tmax, n);
  }
  long long incl = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const long long v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) s_warp[warp] = incl;
  if (tid == 0) ctl->sh_b0 = -1;
  __syncthreads();
  long long before = 0, total = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    before += w < warp ? s_warp[w] : 0;
    total += s_warp[w];
  }
  long long gp =
      min(min(static_cast<long long>(gridDim.x), max_cta), min(total, max(1ll, total / max(1, min_tiles))));
  const long long c = blockIdx.x;
  const long long g0 = c < gp ? total * c / gp : total, g1 = c < gp ? total * (c + 1) / gp : total;
  const long long excl = before + incl - mine;
  if (g1 > g0 && mine > 0 && excl <= g0 && g0 < excl + mine) {
    long long acc = excl;
    for (int b = b_beg; b < b_end; ++b) {
      int lo, hi;
      const int n = block_span<8, 128>(lp, b, lo, hi);
      if (g0 < acc + n) {
        ctl->sh_b0 = b;
        ctl->sh_t0 = static_cast<int>(g0 - acc);
        break;
      }
      acc += n;
    }
  }
  if (tid == 0) {
    ctl->sh_g0 = g0;
    ctl->sh_count = g1 - g0;
    ctl->sh_total = total;
    ctl->sh_gp = static_cast<int>(gp);
  }
  __syncthreads();
}

// The redo queue of a control block Ctl (members rq_b, rq_mask, rq_valid [16],
// rq_reserve; BlocksCtl): a ring of 16 entries, pushed by the
// threads that find unsafe rows, popped in order by the producer.
// Push (one thread): block b, rows mask; extra(v, at) stores any further fields
// of entry `at` before it is published.
template <class Ctl, class Extra>
__device__ __forceinline__ void redo_queue_push(Ctl* ctl, int b, uint32_t mask, Extra&& extra) {
  volatile Ctl* v = ctl;
  const int at = atomicAdd(&ctl->rq_reserve, 1) & 15;
  v->rq_b[at] = b;
  v->rq_mask[at] = mask;
  extra(v, at);
  __threadfence_block();
  v->rq_valid[at] = 1;
}
// Pop (the producer; `head` its position): false when the next entry is not
// published yet; extra(v, at) reads any further fields before the slot is freed.
template <class Ctl, class Extra>
__device__ __forceinline__ bool redo_queue_pop(volatile Ctl* v, int& head, int& b, uint32_t& mask, Extra&& extra) {
  const int at = head & 15;
  if (!v->rq_valid[at]) return false;
  __threadfence_block();
  b = v->rq_b[at];
  mask = v->rq_mask[at];
  extra(v, at);
  v->rq_valid[at] = 0;
  ++head;
  return true;
}

}  // namespace mqa_topk
