// The whole kernel for topk = 512, 32 heads (kernels/fused_entries.cuh), in its own
// translation unit. Torch-free.
#include "kernels/fused_entries.cuh"

template cudaError_t fused_whole_launch<512, 32>(const FusedCall&, void*, int*);
