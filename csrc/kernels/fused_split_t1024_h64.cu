// The split kernel for topk = 1024, 64 heads (kernels/fused_entries.cuh), in its own
// translation unit. Torch-free.
#include "kernels/fused_entries.cuh"

template cudaError_t fused_split_launch<1024, 64>(const FusedCall&, void*, int*);
