// The hybrid kernel for topk = 2048, 32 heads (kernels/fused_entries.cuh), in its own
// translation unit. Torch-free.
#include "kernels/fused_entries.cuh"

template cudaError_t fused_hybrid_launch<2048, 32>(const FusedCall&, void*, void*, int*);

cudaError_t fused_hybrid_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using CfgB = mqa_topk::FusedWholeConfig<2048>;
  using CfgSt = mqa_topk::Sm90LogitsConfig;
  *dynamic_smem = mqa_topk::hybrid_smem_bytes<CfgB, CfgSt>();
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_hybrid_topk_kernel<CfgB, CfgSt>));
}
