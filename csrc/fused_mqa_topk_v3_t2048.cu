// The op's whole-block v3 kernel for topk = 2048 (Sm90FusedV3Whole<2048>; see
// fused_mqa_topk_split.h), in its own translation unit. Torch-free.
#include "fused_mqa_topk_v3_whole.h"

template cudaError_t fused_v3_whole_launch_t<2048>(const void*, const void*, const float*, const float*, const int*,
                                                 const int*, int*, void*, int, int, int, int, cudaStream_t, int*, int,
                                                 mqa_topk::RangeErrorSink, int);

cudaError_t fused_v3_whole_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90FusedV3Whole<2048>;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_mqa_topk_v3_kernel<Cfg>));
}
