// The fused hybrid kernel for topk = 512 (fused_mqa_topk_hybrid.h), in its own translation unit. Torch-free.
#include "fused_mqa_topk_hybrid_impl.h"

template cudaError_t fused_hybrid_launch_t<512>(const void*, const void*, const float*, const float*, const int*,
                                              const int*, int*, void*, void*, int, int, int, int, cudaStream_t, int*,
                                              mqa_topk::RangeErrorSink);
