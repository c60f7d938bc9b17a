// The split kernel for topk = 2048, 32 heads (kernels/fused_entries.cuh), in its own
// translation unit. Torch-free.
#include "kernels/fused_entries.cuh"

template cudaError_t fused_split_launch<2048, 32>(const FusedCall&, void*, int*);

cudaError_t fused_split_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::FusedSplitConfig<2048>;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_blocks_kernel<Cfg>));
}
