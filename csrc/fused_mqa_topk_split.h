// Torch-free entry points of the split fused kernel (fused_mqa_topk_split.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "mqa_topk/range_check.cuh"

// Workspace bytes of the split kernel (more than the unsplit one's: the pieces'
// partial top-k and the region counters).
size_t fused_split_workspace_bytes(int topk, int num_sms);

// Same arguments as launch_sm90_fused_mqa_topk.
cudaError_t fused_split_launch(const void* q, const void* k, const float* scales, const float* weights,
                               const int* starts, const int* ends, int* out, void* workspace, int rows, int keys,
                               int topk, int num_sms, cudaStream_t stream, int* map_error, int probe, int cap,
                               mqa_topk::RangeErrorSink range_err, int target);

// Whether rows split across CTAs beat whole 8-row blocks (host rule, no GPU
// read): the unsplit persistent schedule runs ceil(blocks / sms) waves of
// blocks, the split one spreads the same tiles evenly at about 15% overhead
// (piece selects and merges). Measured on the H200 (BENCHMARKS.md, issue 12).
inline bool fused_use_split(int rows, int num_sms) {
  const long long blocks = (rows + 7) / 8;
  const long long waves = (blocks + num_sms - 1) / num_sms;
  return waves * num_sms * 100 > 115 * blocks;
}

// The v3 kernel on shares (Sm90FusedV3Split = Sm90FusedV3SplitFence, issue
// 12): blocks of the partial last wave (and one full wave before it) split
// across CTAs in equal tile shares, the rest whole. Same arguments as
// launch_sm90_fused_mqa_topk_v3. Its workspace (3 candidate regions per CTA:
// two for the share's split pieces, one for whole blocks) is the op's
// largest: 198 MiB at top-2048 on 132 SMs (with the kSplitHist histograms).
size_t fused_v3_split_workspace_bytes(int topk, int num_sms);
cudaError_t fused_v3_split_launch(const void* q, const void* k, const float* scales, const float* weights,
                                  const int* starts, const int* ends, int* out, void* workspace, int rows, int keys,
                                  int topk, int num_sms, cudaStream_t stream, int* map_error, int probe,
                                  mqa_topk::RangeErrorSink range_err, int target, bool large = false,
                                  int share_rule = 0);
// Its kernel's attributes and the dynamic shared memory it requests (for `mqa-topk build`'s table).
cudaError_t fused_v3_split_attributes(cudaFuncAttributes* attr, int* dynamic_smem);

// With `large` (the op's default; MQA_TOPK_FUSED_SPLIT_LARGE=0 turns it off)
// and where the split grid is every SM (more than SMs / 4 row blocks:
// mqa_topk::fused_v3_split_large), fused_v3_split_launch runs the split
// kernel on the lean loop instead (exact, faster at 1064-2120 rows; its
// reruns' order differed in session 19 until the merge's race was fixed in
// session 20), one configuration per topk
// (Sm90FusedV3SplitLarge<kTopk>, dev variant 87: 72, the lean loop with kPipeTail, with the lean fences), each in its own
// translation unit (csrc/fused_mqa_topk_v3_split_t{512,1024,2048}.cu). Same
// arguments; topk must be kTopk. Its workspace layout is the split kernel's
// (fused_v3_split_workspace_bytes covers both).
template <int kTopk>
cudaError_t fused_v3_split_large_launch_t(const void* q, const void* k, const float* scales, const float* weights,
                                          const int* starts, const int* ends, int* out, void* workspace, int rows,
                                          int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                          int probe, mqa_topk::RangeErrorSink range_err, int target, int share_rule);
template <int kTopk>
size_t fused_v3_split_large_workspace_bytes_t(int num_sms);
extern template cudaError_t fused_v3_split_large_launch_t<512>(const void*, const void*, const float*, const float*,
                                                              const int*, const int*, int*, void*, int, int, int, int,
                                                              cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int, int);
extern template size_t fused_v3_split_large_workspace_bytes_t<512>(int);
extern template cudaError_t fused_v3_split_large_launch_t<1024>(const void*, const void*, const float*, const float*,
                                                              const int*, const int*, int*, void*, int, int, int, int,
                                                              cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int, int);
extern template size_t fused_v3_split_large_workspace_bytes_t<1024>(int);
extern template cudaError_t fused_v3_split_large_launch_t<2048>(const void*, const void*, const float*, const float*,
                                                              const int*, const int*, int*, void*, int, int, int, int,
                                                              cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int, int);
extern template size_t fused_v3_split_large_workspace_bytes_t<2048>(int);
// The topk-2048 configuration's attributes (for `mqa-topk build`'s table).
cudaError_t fused_v3_split_large_attributes(cudaFuncAttributes* attr, int* dynamic_smem);

// The op's whole-block v3 kernel, one configuration per topk
// (Sm90FusedV3Whole<kTopk> = dev variant 56: its appends' index store at an
// immediate offset from the key store), each in its own translation unit
// (csrc/fused_mqa_topk_v3_t{512,1024,2048}.cu) so the JIT build compiles them
// in parallel. Same arguments as launch_sm90_fused_mqa_topk_v3; topk must be
// kTopk (else cudaErrorInvalidValue). fused_v3_whole_launch picks by topk.
template <int kTopk>
cudaError_t fused_v3_whole_launch_t(const void* q, const void* k, const float* scales, const float* weights,
                                    const int* starts, const int* ends, int* out, void* workspace, int rows, int keys,
                                    int topk, int num_sms, cudaStream_t stream, int* map_error, int probe,
                                    mqa_topk::RangeErrorSink range_err, int target);
extern template cudaError_t fused_v3_whole_launch_t<512>(const void*, const void*, const float*, const float*,
                                                         const int*, const int*, int*, void*, int, int, int, int,
                                                         cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int);
extern template cudaError_t fused_v3_whole_launch_t<1024>(const void*, const void*, const float*, const float*,
                                                          const int*, const int*, int*, void*, int, int, int, int,
                                                          cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int);
extern template cudaError_t fused_v3_whole_launch_t<2048>(const void*, const void*, const float*, const float*,
                                                          const int*, const int*, int*, void*, int, int, int, int,
                                                          cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int);
inline cudaError_t fused_v3_whole_launch(const void* q, const void* k, const float* scales, const float* weights,
                                         const int* starts, const int* ends, int* out, void* workspace, int rows,
                                         int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                         int probe, mqa_topk::RangeErrorSink range_err, int target) {
  switch (topk) {
    case 512:
      return fused_v3_whole_launch_t<512>(q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
                                          num_sms, stream, map_error, probe, range_err, target);
    case 1024:
      return fused_v3_whole_launch_t<1024>(q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
                                           num_sms, stream, map_error, probe, range_err, target);
    case 2048:
      return fused_v3_whole_launch_t<2048>(q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
                                           num_sms, stream, map_error, probe, range_err, target);
    default:
      return cudaErrorInvalidValue;
  }
}
// The top-2048 kernel's attributes and dynamic shared memory (the three differ
// only in constants; for `mqa-topk build`'s table).
cudaError_t fused_v3_whole_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
