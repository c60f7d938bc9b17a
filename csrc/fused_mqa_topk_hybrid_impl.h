#pragma once
// The definition behind fused_hybrid_launch_t (fused_mqa_topk_hybrid.h), included by one translation unit
// per topk (csrc/fused_mqa_topk_hybrid_t*.cu). Torch-free.
#include "fused_mqa_topk_hybrid.h"

#include "mqa_topk/sm90_fused_hybrid_topk.cuh"

template <int kTopk>
cudaError_t fused_hybrid_launch_t(const void* q, const void* k, const float* scales, const float* weights,
                                  const int* starts, const int* ends, int* out, void* workspace, void* aux, int rows,
                                  int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                  mqa_topk::RangeErrorSink range_err) {
  return mqa_topk::launch_sm90_fused_hybrid_topk<mqa_topk::Sm90FusedV3Whole<kTopk>>(
      q, k, scales, weights, starts, ends, out, workspace, aux, rows, keys, topk, num_sms, stream, map_error,
      range_err);
}
