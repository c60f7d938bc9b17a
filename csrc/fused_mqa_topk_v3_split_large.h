#pragma once
// The definition behind fused_v3_split_large_launch_t (fused_mqa_topk_split.h),
// included by one translation unit per topk (csrc/fused_mqa_topk_v3_split_t*.cu),
// each instantiating it for its topk. Torch-free.
#include "fused_mqa_topk_split.h"

#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"

template <int kTopk>
cudaError_t fused_v3_split_large_launch_t(const void* q, const void* k, const float* scales, const float* weights,
                                          const int* starts, const int* ends, int* out, void* workspace, int rows,
                                          int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                          int probe, mqa_topk::RangeErrorSink range_err, int target, int share_rule) {
  return mqa_topk::launch_sm90_fused_mqa_topk_v3<mqa_topk::Sm90FusedV3SplitLarge<kTopk>>(
      q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
      mqa_topk::fused_v3_split_grid(rows, num_sms), stream, map_error, probe, range_err, target, share_rule);
}

template <int kTopk>
size_t fused_v3_split_large_workspace_bytes_t(int num_sms) {
  return mqa_topk::fused_v3_workspace_bytes<mqa_topk::Sm90FusedV3SplitLarge<kTopk>>(kTopk, num_sms);
}
