// sm90_fused_hybrid_topk: the fused MQA-logits + top-k for calls just past a
// whole wave of row blocks, in one launch. Hopper (sm_90a), torch-free.
//
// Why. At B = SMs + r row blocks (1064 rows: 133 blocks on 132 SMs) whole
// blocks leave a last wave of r blocks, and the split kernel cuts every block
// in two (0.66-0.71 ms at 64K keys where 132 whole blocks alone take ~0.60).
// Cutting only the r extra blocks into many small split pieces costs more
// than it saves (the split protocol's shared gate and merge grow with the
// pieces). Here the r extra blocks go the staged kernel's way instead
// (sm90_fused_staged.cuh): pieces that only compute logits and publish
// first-digit histograms, and one owner per row.
//
// Design. Grid r m + G CTAs (m = 16 pieces per extra block, G = SMs):
//   - CTAs [0, r m) (the lowest indices, so the first dispatched) are the
//     staged kernel's pieces of the last r row blocks: each computes its
//     slice of the block's logits into a logits buffer with the dense tile
//     loop (bitwise the dense kernel's logits), its first digit's histograms
//     from the epilogue (EpiHist), publishes them and counts itself in the
//     block's counter, and leaves (~30-40 us at 64K keys and m = 16);
//   - CTAs [r m, r m + G) run the whole kernel's body (blocks_body<CfgB>,
//     unchanged) on the first B - r blocks from its block counter; the last
//     r m of them start when the pieces leave. After its blocks, a CTA takes
//     an owner ticket (an atomic counter, so the first to finish own): ticket
//     t < the extra rows owns extra row t with the staged kernel's owner
//     (owner_row), after the pieces of its block have counted themselves
//     (they started before any whole-block CTA finished its first block, and
//     no CTA waits on a CTA that has not started: no deadlock).
// Exact as both halves are: (value desc, index asc), reruns bitwise identical
// (the whole blocks' sets and order are the whole kernel's, the extra rows'
// the staged kernel's, neither depends on timing). Range errors: the pieces'
// checker warps check every row of the call (the sink's own row numbers).
#pragma once

#include "heuristics.h"
#include "sm90_fused_blocks.cuh"
#include "sm90_fused_staged.cuh"

namespace mqa_topk {

struct HybridParams {
  int pieces;              // r m: CTAs [0, pieces) are the extra blocks' pieces
  uint32_t* owner_ticket;  // zero at launch
  const int* starts;       // the call's rows (range checks)
  const int* ends;
  int rows;
  int keys;
  RangeErrorSink err;
};

namespace hybrid_detail {

// A piece of an extra block: the staged kernel's piece c = b m + rank (its
// tile loop with the epilogue's histograms), then its histograms published
// and the block's counter (staged_select's first step). Inlined: as a call
// its tile loop spilled (18 local loads and stores per tile). The owner is a
// call (its parameters by value): inlined, it cost the whole body's tile
// loops a local load, and its own spills (612 bytes) stay off the tile loops.
template <class Cfg>
__device__ __forceinline__ void piece(const CUtensorMap* tm_q, const CUtensorMap* tm_k, const CUtensorMap* tm_s,
                                      const CUtensorMap* tm_w, const CUtensorMap* tm_q2, const StagedTopkParams& P,
                                      const HybridParams& h, uint8_t* smem) {
  using namespace staged_topk;
  constexpr int S = Cfg::kNumStages;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* full = bars;
  uint64_t* empty = bars + S;
  uint64_t* q_full = bars + 2 * S;
  uint64_t* q_empty = bars + 2 * S + 2;
  __shared__ int block_slot[2][Cfg::kSlotInts];
  const Sm90LogitsParams& p = P.lg;
  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  const int c = static_cast<int>(blockIdx.x);
  const PieceSpan ps = piece_span(p, P.m, c, lane);
  const WorkShare share{ps.b, ps.t0, ps.t1 - ps.t0};
  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  __syncthreads();
  if (wg == Cfg::kMathWarpgroups) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid >= Cfg::kMathThreads + 32) {  // warps 1-3 check every row of the call, then exit
      constexpr int kCheckers = 96;
      check_row_ranges(h.err, h.starts, h.ends, h.rows, h.keys, kKernelFused,
                       range_checker_index(tid, Cfg::kMathThreads + 32, kCheckers), h.pieces * kCheckers);
      return;
    }
    if (share.count > 0)
      logits_producer<Cfg>(p, smem, share, full, empty, q_full, q_empty, block_slot, tm_q, tm_k, tm_s, tm_w,
                                    tm_q2);
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  constexpr int kHistOff = Cfg::kOffQ + Cfg::kQTileBytes;  // (the second Q buffer: a piece holds one block)
  static_assert(kRows * kEpiBins * 4 <= Cfg::kQTileBytes, "the histograms in a Q buffer");
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + kHistOff);
  __shared__ uint32_t rowbase[kRows];
  for (int i = tid; i < kRows * kEpiBins / 4; i += Cfg::kMathThreads)
    reinterpret_cast<uint4*>(hist)[i] = make_uint4(0u, 0u, 0u, 0u);
  if (tid < kRows) rowbase[tid] = ptx::smem_addr(hist + tid * kEpiBins);
  bar_math();
  if (share.count > 0)
    logits_math<Cfg>(p, smem, full, empty, q_full, q_empty, wg, block_slot, EpiHist{rowbase});
  bar_math();  // every math warp's tile loop is done
  // The piece's histograms less the logits outside each row, published.
  piece_unpad(hist, ps, tid);
  bar_math();
  piece_publish(P, hist, c, ps.b, tid);
}

// After a whole-block CTA's blocks (its math threads): an owner ticket, and
// for ticket t < the extra rows, extra row t's top-k.
__device__ __noinline__ inline void owner(const StagedTopkParams P, uint32_t* owner_ticket) {
  using namespace staged_topk;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ int s_ticket;
  __shared__ Ctl ctl_s;
  const int tid = threadIdx.x;
  bar_math();  // every math thread is past the whole body: its shared memory is free
  if (tid == 0) s_ticket = static_cast<int>(atomicAdd(owner_ticket, 1u));
  bar_math();
  const int t = s_ticket;
  if (t >= P.lg.rows) return;
  const int b = t / kRows, r = t % kRows;
  if (tid == 0) {
    while (ld_acquire(P.counters + b) < static_cast<uint32_t>(P.m)) __nanosleep(64);
  }
  bar_math();
  owner_row(P, smem, &ctl_s, b, r);
}

}  // namespace hybrid_detail

// The kernel: CTAs [0, h.pieces) the extra blocks' pieces (CfgSt: the op's
// lean logits loop), the rest the whole kernel's body (CfgB), then owners.
template <class CfgB, class CfgSt>
__global__ void __launch_bounds__(CfgB::kThreads, 1)
    sm90_fused_hybrid_topk_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                  const __grid_constant__ CUtensorMap tm_scales,
                                  const __grid_constant__ CUtensorMap tm_weights,
                                  const __grid_constant__ CUtensorMap sq, const __grid_constant__ CUtensorMap sk,
                                  const __grid_constant__ CUtensorMap ss, const __grid_constant__ CUtensorMap sw,
                                  const __grid_constant__ CUtensorMap sq2, const __grid_constant__ Sm90FusedParams p,
                                  const __grid_constant__ StagedTopkParams P, const __grid_constant__ HybridParams h) {
  static_assert(CfgB::kThreads == CfgSt::kThreads && CfgSt::kMathThreads == staged_topk::kMath &&
                    CfgB::kMathThreads == staged_topk::kMath && CfgSt::kBlockRows == 8 &&
                    CfgSt::kBlockKeys == 128 && !CfgB::kSplit,
                "both bodies: four math warpgroups and a producer warpgroup; the whole configuration");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  if (static_cast<int>(blockIdx.x) < h.pieces) {
    hybrid_detail::piece<CfgSt>(&sq, &sk, &ss, &sw, &sq2, P, h, smem);
    return;
  }
  blocks_body<CfgB>(tm_q, tm_k, tm_scales, tm_weights, p);
  if (threadIdx.x >= CfgB::kMathThreads) return;  // (the producer warpgroup's threads)
  hybrid_detail::owner(P, h.owner_ticket);
}

template <class CfgB, class CfgSt>
constexpr int hybrid_smem_bytes() {
  return CfgB::kSmemBytes > CfgSt::kSmemBytes ? CfgB::kSmemBytes : CfgSt::kSmemBytes;
}

constexpr int kHybridPieces = 16;  // pieces per extra block (owner_row sums at most 16 histograms)

// Buffer of the staged part (beside the op's workspace, which the whole part uses):
// the extra rows' logits [8 r, ld] fp32, their pieces' histograms, the blocks'
// counters and the owner ticket.
inline size_t fused_hybrid_aux_bytes(int keys, int r) {
  return staged_logits_bytes(8 * r, keys) +
         static_cast<size_t>(r) * kHybridPieces * staged_topk::kRows * staged_topk::kEpiBins * 4 + 256;
}
// The whole part's workspace (its regions per CTA index: the grid's CTAs).
template <class CfgB>
inline size_t fused_hybrid_blocks_workspace_bytes(int topk, int r, int num_sms) {
  return fused_blocks_workspace_bytes<CfgB>(topk, r * kHybridPieces + num_sms);
}

// Launches it (rows with fused_hybrid_extra_blocks(rows, keys, num_sms) = r > 0):
// q, k, scales, weights, starts, ends, out as the fused op; workspace
// fused_hybrid_blocks_workspace_bytes bytes (the whole part), aux
// fused_hybrid_aux_bytes(keys, r) bytes (256-byte aligned); both overwritten.
template <class CfgB, class CfgSt = Sm90LogitsConfigH<CfgB::kHeads>>
inline cudaError_t launch_sm90_fused_hybrid_topk(const void* q, const void* k, const float* scales,
                                                 const float* weights, const int* starts, const int* ends, int* out,
                                                 void* workspace, void* aux, int rows, int keys, int topk, int num_sms,
                                                 cudaStream_t stream, int* map_error = nullptr,
                                                 RangeErrorSink range_err = {}) {
  const int r = fused_hybrid_extra_blocks(rows, keys, num_sms);
  if (r == 0 || topk != CfgB::kTopk) return cudaErrorInvalidValue;
  const int nb = (rows + 7) / 8, whole_rows = 8 * (nb - r), extra_rows = rows - whole_rows;
  const int m = kHybridPieces;
  // The whole part: rows [0, whole_rows), its maps as launch_sm90_fused_blocks's.
  CUtensorMap tm_q, tm_k, tm_s, tm_w;
  const int res[4] = {
      make_tensor_map_2d(&tm_q, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, static_cast<uint64_t>(whole_rows) * CfgB::kHeads, 128,
                         128, CfgB::kQBoxRows, CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_k, k, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, keys, 128, 128, CfgB::kBlockKeys,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_s, scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, keys, 1,
                         (static_cast<uint64_t>(keys) * 4 + 15) / 16 * 16, CfgB::kBlockKeys, 1,
                         CU_TENSOR_MAP_SWIZZLE_NONE),
      make_tensor_map_2d(&tm_w, weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CfgB::kHeads, whole_rows,
                         CfgB::kHeads * 4, CfgB::kHeads, CfgB::kRowsPerBlock, CU_TENSOR_MAP_SWIZZLE_NONE)};
  if (const int e = first_map_error(res, 4)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  // The staged part: rows [whole_rows, rows), offset views.
  const uint8_t* q_x = static_cast<const uint8_t*>(q) + static_cast<size_t>(whole_rows) * CfgB::kHeads * 128;
  const float* w_x = weights + static_cast<size_t>(whole_rows) * CfgB::kHeads;
  const int64_t ld = staged_logits_ld(keys);
  float* logits = static_cast<float*>(aux);
  uint32_t* hist = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(aux) + staged_logits_bytes(8 * r, keys));
  uint32_t* counters = hist + static_cast<size_t>(r) * m * staged_topk::kRows * staged_topk::kEpiBins;
  CUtensorMap sq, sk, ss, sw, sq2;
  if (const int e = make_logits_loop_maps<CfgSt>(sq, sk, ss, sw, sq2, q_x, k, scales, w_x, logits, ld, extra_rows,
                                                 keys)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fused_hybrid_topk_kernel<CfgB, CfgSt>;
  constexpr int kSmem = hybrid_smem_bytes<CfgB, CfgSt>();
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(workspace, 0, kFusedHeaderBytes, stream);  // (the whole part's header)
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(counters, 0, 256, stream);  // (the blocks' counters and the owner ticket)
  if (err != cudaSuccess) return err;
  uint32_t* ws = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) + kFusedHeaderBytes);
  const Sm90FusedParams p{starts, ends, out, ws, static_cast<int*>(workspace), whole_rows, keys, topk,
                          CfgB::cap(topk), range_err};
  RangeErrorSink err_x = range_err;
  err_x.row_base += whole_rows;
  const StagedTopkParams P{Sm90LogitsParams{starts + whole_rows, ends + whole_rows, logits, ld, extra_rows, keys, err_x},
                           out + static_cast<size_t>(whole_rows) * topk, hist, counters, topk, m};
  const HybridParams h{r * m, counters + 32, starts, ends, rows, keys, range_err};
  kernel<<<r * m + num_sms, CfgB::kThreads, kSmem, stream>>>(tm_q, tm_k, tm_s, tm_w, sq, sk, ss, sw, sq2, p, P, h);
  return cudaGetLastError();
}

}  // namespace mqa_topk
