// The split fused kernel's dispatch by topk and its workspace size
// (fused_mqa_topk_split.h). Torch-free.
#include "fused_mqa_topk_split.h"

#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"

size_t fused_v3_split_workspace_bytes(int topk, int num_sms) {
  switch (topk) {
    case 512: return fused_v3_split_large_workspace_bytes_t<512>(num_sms);
    case 1024: return fused_v3_split_large_workspace_bytes_t<1024>(num_sms);
    case 2048: return fused_v3_split_large_workspace_bytes_t<2048>(num_sms);
    default: return 0;
  }
}

cudaError_t fused_v3_split_launch(const void* q, const void* k, const float* scales, const float* weights,
                                  const int* starts, const int* ends, int* out, void* workspace, int rows, int keys,
                                  int topk, int num_sms, cudaStream_t stream, int* map_error, int probe,
                                  mqa_topk::RangeErrorSink range_err, int target, bool /*large*/, int share_rule) {
  switch (topk) {
    case 512:
      return fused_v3_split_large_launch_t<512>(q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
                                                num_sms, stream, map_error, probe, range_err, target, share_rule);
    case 1024:
      return fused_v3_split_large_launch_t<1024>(q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
                                                 num_sms, stream, map_error, probe, range_err, target, share_rule);
    case 2048:
      return fused_v3_split_large_launch_t<2048>(q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
                                                 num_sms, stream, map_error, probe, range_err, target, share_rule);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t fused_v3_split_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90FusedV3SplitLarge<2048>;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_mqa_topk_v3_kernel<Cfg>));
}
