// The whole kernel for topk = 512 (fused_kernels.h), in its own translation unit. Torch-free.
#include "kernels/fused_kernels.h"
#include "mqa_topk/fused/sm90_fused_blocks.cuh"

template <>
cudaError_t fused_whole_launch<512>(const FusedCall& c, void* workspace, int* map_error) {
  return mqa_topk::launch_sm90_fused_blocks<mqa_topk::FusedWholeConfig<512>>(
      c.q, c.k, c.scales, c.weights, c.starts, c.ends, c.out, workspace, c.rows, c.keys, c.topk, c.num_sms, c.stream,
      map_error, c.range_err);
}
