// The hybrid kernel for topk = 1024, 32 heads (kernels/fused_entries.cuh), in its own
// translation unit. Torch-free.
#include "kernels/fused_entries.cuh"

template cudaError_t fused_hybrid_launch<1024, 32>(const FusedCall&, void*, void*, int*);
