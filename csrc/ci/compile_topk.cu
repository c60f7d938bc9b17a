// CI compile check (torch-free): instantiates every variant of the per-row
// top-k kernel and its host launch helper, so nvcc/ptxas see all of them.
#include "mqa_topk/sm90_topk_per_row.cuh"

namespace mqa_topk {
namespace topk {
template __global__ void topk_per_row_kernel<TopkConfig512>(const float*, int64_t, const int*, const int*, int*, int,
                                                            int, const RangeErrorSink);
template __global__ void topk_per_row_kernel<TopkConfig1024>(const float*, int64_t, const int*, const int*, int*,
                                                             int, int, const RangeErrorSink);
}  // namespace topk
}  // namespace mqa_topk

// Host entry points referencing both launch paths (never called in CI).
cudaError_t mqa_topk_ci_launch_topk(const float* logits, int64_t ld, const int* starts, const int* ends, int* out,
                                    int rows, int width, int topk, cudaStream_t stream, int variant) {
  return mqa_topk::topk::launch_topk_per_row(logits, ld, starts, ends, out, rows, width, topk, stream,
                                             static_cast<mqa_topk::topk::TopkVariant>(variant));
}
