// The op's whole-block v3 kernel for topk = 512 (Sm90FusedV3Whole<512>; see
// fused_mqa_topk_split.h), in its own translation unit. Torch-free.
#include "fused_mqa_topk_v3_whole.h"

template cudaError_t fused_v3_whole_launch_t<512>(const void*, const void*, const float*, const float*, const int*,
                                                 const int*, int*, void*, int, int, int, int, cudaStream_t, int*, int,
                                                 mqa_topk::RangeErrorSink, int);
