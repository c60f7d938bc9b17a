// The split v3 kernel on the lean loop for topk = 512 where the split grid is every SM
// (opt-in: MQA_TOPK_FUSED_SPLIT_LARGE=1)
// (Sm90FusedV3SplitLarge<512>; see fused_mqa_topk_split.h), in its own
// translation unit. Torch-free.
#include "fused_mqa_topk_v3_split_large.h"

template cudaError_t fused_v3_split_large_launch_t<512>(const void*, const void*, const float*, const float*,
                                                        const int*, const int*, int*, void*, int, int, int, int,
                                                        cudaStream_t, int*, int, mqa_topk::RangeErrorSink, int, int);
template size_t fused_v3_split_large_workspace_bytes_t<512>(int);
