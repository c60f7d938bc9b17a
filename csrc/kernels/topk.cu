// The per-row top-k kernel's instantiation (dense_kernels.h). Torch-free.
#include "kernels/dense_kernels.h"
#include "mqa_topk/topk/sm90_topk_per_row.cuh"

cudaError_t topk_launch(const float* logits, int64_t ld, const int* starts, const int* ends, int* out, int rows,
                        int width, int topk, cudaStream_t stream, mqa_topk::RangeErrorSink range_err) {
  return mqa_topk::topk::launch_topk_per_row(logits, ld, starts, ends, out, rows, width, topk, stream, range_err);
}

cudaError_t topk_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::topk::TopkConfig;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::topk::topk_per_row_kernel<Cfg>));
}
