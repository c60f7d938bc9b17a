// The fused hybrid kernel's dispatch by topk and its sizes (fused_mqa_topk_hybrid.h). Torch-free.
#include "fused_mqa_topk_hybrid.h"

#include "mqa_topk/sm90_fused_hybrid_topk.cuh"

int fused_hybrid_extra(int rows, int keys, int num_sms) {
  return mqa_topk::fused_hybrid_extra_blocks(rows, keys, num_sms);
}

size_t fused_hybrid_workspace_bytes(int topk, int rows, int keys, int num_sms) {
  const int r = fused_hybrid_extra(rows, keys, num_sms);
  if (r == 0) return 0;
  switch (topk) {
    case 512: return mqa_topk::fused_hybrid_v3_workspace_bytes<mqa_topk::Sm90FusedV3Whole<512>>(topk, r, num_sms);
    case 1024: return mqa_topk::fused_hybrid_v3_workspace_bytes<mqa_topk::Sm90FusedV3Whole<1024>>(topk, r, num_sms);
    case 2048: return mqa_topk::fused_hybrid_v3_workspace_bytes<mqa_topk::Sm90FusedV3Whole<2048>>(topk, r, num_sms);
    default: return 0;
  }
}

size_t fused_hybrid_aux_bytes(int rows, int keys, int num_sms) {
  const int r = fused_hybrid_extra(rows, keys, num_sms);
  return r == 0 ? 0 : mqa_topk::fused_hybrid_aux_bytes(keys, r);
}

cudaError_t fused_hybrid_launch(const void* q, const void* k, const float* scales, const float* weights,
                                const int* starts, const int* ends, int* out, void* workspace, void* aux, int rows,
                                int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                mqa_topk::RangeErrorSink range_err) {
  switch (topk) {
    case 512:
      return fused_hybrid_launch_t<512>(q, k, scales, weights, starts, ends, out, workspace, aux, rows, keys, topk,
                                        num_sms, stream, map_error, range_err);
    case 1024:
      return fused_hybrid_launch_t<1024>(q, k, scales, weights, starts, ends, out, workspace, aux, rows, keys, topk,
                                         num_sms, stream, map_error, range_err);
    case 2048:
      return fused_hybrid_launch_t<2048>(q, k, scales, weights, starts, ends, out, workspace, aux, rows, keys, topk,
                                         num_sms, stream, map_error, range_err);
    default:
      return cudaErrorInvalidValue;
  }
}
