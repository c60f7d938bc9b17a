// The split v3 kernel on the lean loop for topk = 2048 where the split grid is every SM
// (opt-in: MQA_TOPK_FUSED_SPLIT_LARGE=1)
// (Sm90FusedV3SplitLarge<2048>; see fused_mqa_topk_split.h), in its own
// translation unit. Torch-free.
#include "fused_mqa_topk_v3_split_large.h"

template cudaError_t fused_v3_split_large_launch_t<2048>(const void*, const void*, const float*, const float*,
                                                        const int*, const int*, int*, void*, int, int, int, int,
                                                        cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int, int);
template size_t fused_v3_split_large_workspace_bytes_t<2048>(int);

cudaError_t fused_v3_split_large_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90FusedV3SplitLarge<2048>;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_mqa_topk_v3_kernel<Cfg>));
}
