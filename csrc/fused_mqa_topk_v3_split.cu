// The v3 fused kernel on shares (Sm90FusedV3Split: dev variant 86 since session 20, 66 since session 18,
// 63 since session 16, 43 before; issue 12; where the split grid is every SM, Sm90FusedV3SplitLarge<topk>
// (87 since session 20; opt-in 72 in session 19),
// from csrc/fused_mqa_topk_v3_split_t*.cu), in its own translation unit so the JIT build compiles it beside the
// whole-block kernel. fused_mqa_topk (fused_mqa_topk.cu) launches it when the
// row blocks would leave the last wave of whole blocks poorly filled
// (fused_use_split) and the workspace holds its candidate regions; see
// include/mqa_topk/sm90_fused_mqa_topk_v3.cuh, kShares / kHybrid. Torch-free.
#include "fused_mqa_topk_split.h"

#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"

size_t fused_v3_split_workspace_bytes(int topk, int num_sms) {
  // (the larger of the two split kernels' for this topk: the same layout, so equal)
  const size_t a = mqa_topk::fused_v3_workspace_bytes<mqa_topk::Sm90FusedV3Split>(topk, num_sms);
  const size_t b = topk == 512    ? fused_v3_split_large_workspace_bytes_t<512>(num_sms)
                   : topk == 1024 ? fused_v3_split_large_workspace_bytes_t<1024>(num_sms)
                   : topk == 2048 ? fused_v3_split_large_workspace_bytes_t<2048>(num_sms)
                                  : 0;
  return a > b ? a : b;
}

cudaError_t fused_v3_split_launch(const void* q, const void* k, const float* scales, const float* weights,
                                  const int* starts, const int* ends, int* out, void* workspace, int rows, int keys,
                                  int topk, int num_sms, cudaStream_t stream, int* map_error, int probe,
                                  mqa_topk::RangeErrorSink range_err, int target, bool large,
                                  int share_rule) {
  if (large && mqa_topk::fused_v3_split_large(rows, num_sms)) {  // every SM: the lean loop (one configuration per topk)
    switch (topk) {
      case 512:
        return fused_v3_split_large_launch_t<512>(q, k, scales, weights, starts, ends, out, workspace, rows, keys,
                                                  topk, num_sms, stream, map_error, probe, range_err, target, share_rule);
      case 1024:
        return fused_v3_split_large_launch_t<1024>(q, k, scales, weights, starts, ends, out, workspace, rows, keys,
                                                   topk, num_sms, stream, map_error, probe, range_err, target, share_rule);
      case 2048:
        return fused_v3_split_large_launch_t<2048>(q, k, scales, weights, starts, ends, out, workspace, rows, keys,
                                                   topk, num_sms, stream, map_error, probe, range_err, target, share_rule);
      default:
        break;  // (the general kernel checks topk)
    }
  }
  // (fewer CTAs than SMs for few row blocks: every block the same whole number of pieces)
  return mqa_topk::launch_sm90_fused_mqa_topk_v3<mqa_topk::Sm90FusedV3Split>(
      q, k, scales, weights, starts, ends, out, workspace, rows, keys, topk,
      mqa_topk::fused_v3_split_grid(rows, num_sms), stream, map_error, probe, range_err, target, share_rule);
}

cudaError_t fused_v3_split_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  *dynamic_smem = mqa_topk::Sm90FusedV3Split::kSmemBytes;
  return cudaFuncGetAttributes(attr,
                               reinterpret_cast<const void*>(&mqa_topk::sm90_fused_mqa_topk_v3_kernel<mqa_topk::Sm90FusedV3Split>));
}
