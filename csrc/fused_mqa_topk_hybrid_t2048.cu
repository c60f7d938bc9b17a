// The fused hybrid kernel for topk = 2048 (fused_mqa_topk_hybrid.h), in its own translation unit. Torch-free.
#include "fused_mqa_topk_hybrid_impl.h"

template cudaError_t fused_hybrid_launch_t<2048>(const void*, const void*, const float*, const float*, const int*,
                                              const int*, int*, void*, void*, int, int, int, int, cudaStream_t, int*,
                                              mqa_topk::RangeErrorSink);

cudaError_t fused_hybrid_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90FusedV3Whole<2048>;
  *dynamic_smem = mqa_topk::hybrid_smem_bytes<Cfg, mqa_topk::Sm90LogitsV2Default>();
  return cudaFuncGetAttributes(
      attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_hybrid_topk_kernel<Cfg, mqa_topk::Sm90LogitsV2Default>));
}
