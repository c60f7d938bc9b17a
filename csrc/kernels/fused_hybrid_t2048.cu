// The hybrid kernel for topk = 2048 (fused_kernels.h), in its own translation unit. Torch-free.
#include "kernels/fused_kernels.h"
#include "mqa_topk/fused/sm90_fused_hybrid.cuh"

template <>
cudaError_t fused_hybrid_launch<2048>(const FusedCall& c, void* workspace, void* buffer, int* map_error) {
  return mqa_topk::launch_sm90_fused_hybrid_topk<mqa_topk::FusedWholeConfig<2048>>(
      c.q, c.k, c.scales, c.weights, c.starts, c.ends, c.out, workspace, buffer, c.rows, c.keys, c.topk, c.num_sms,
      c.stream, map_error, c.range_err);
}

cudaError_t fused_hybrid_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using CfgB = mqa_topk::FusedWholeConfig<2048>;
  using CfgSt = mqa_topk::Sm90LogitsConfig;
  *dynamic_smem = mqa_topk::hybrid_smem_bytes<CfgB, CfgSt>();
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_hybrid_topk_kernel<CfgB, CfgSt>));
}
