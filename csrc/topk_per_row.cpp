// Launcher of the per-row top-k kernel: contract checks, then launch.
#include "topk_per_row.h"

#include <algorithm>
#include <climits>

#include "kernels/dense_kernels.h"
#include "range_errors.h"

void topk_per_row(const at::Tensor& logits, const at::Tensor& starts, const at::Tensor& ends,
                  const at::Tensor& output, int64_t row_base) {
  // logits: [rows, width] float32 on a CUDA device, unit column stride, row
  // stride >= width (any value; rows need not be 16-byte aligned), width <= 2^22
  MQA_CHECK_ARG(logits.is_cuda(), "logits", "must be a CUDA tensor, got ", logits.device());
  const at::Device dev = logits.device();
  MQA_CHECK_ARG(logits.scalar_type() == at::kFloat, "logits", "expected dtype float32, got ", logits.scalar_type());
  MQA_CHECK_ARG(logits.dim() == 2, "logits", "expected shape [rows, width], got ", logits.sizes());
  const int64_t rows = logits.size(0);
  const int64_t width = logits.size(1);
  MQA_CHECK_ARG(width <= mqa_topk::kMaxKeys, "logits", "width ", width, " exceeds the key limit ", mqa_topk::kMaxKeys);
  MQA_CHECK_ARG(rows <= INT_MAX, "logits", "too many rows (", rows, ")");
  MQA_CHECK_ARG(width <= 1 || logits.stride(1) == 1, "logits", "column stride must be 1, got strides ",
                logits.strides());
  const int64_t ld = rows > 1 ? logits.stride(0) : std::max<int64_t>(width, 1);
  MQA_CHECK_ARG(ld >= width, "logits", "row stride ", ld, " must be >= width ", width);
  // starts, ends: [rows] int32, contiguous, same device (values 0 <= start <=
  // end <= width: the kernel clamps them and records a bad row in the
  // device's error word, range_check.cuh)
  for (const at::Tensor* t : {&starts, &ends}) {
    const char* name = t == &starts ? "starts" : "ends";
    MQA_CHECK_ARG(t->is_cuda() && t->device() == dev, name, "must be on the same device as logits (", dev,
                  "), got ", t->device());
    MQA_CHECK_ARG(t->scalar_type() == at::kInt, name, "expected dtype int32, got ", t->scalar_type());
    MQA_CHECK_ARG(t->dim() == 1 && t->size(0) == rows, name, "expected shape [rows=", rows, "], got ", t->sizes());
    MQA_CHECK_ARG(t->is_contiguous(), name, "must be contiguous");
  }
  // output: [rows, topk] int32, contiguous, same device, topk in {512, 1024, 2048}
  MQA_CHECK_ARG(output.is_cuda() && output.device() == dev, "output", "must be on the same device as logits (", dev,
                "), got ", output.device());
  MQA_CHECK_ARG(output.scalar_type() == at::kInt, "output", "expected dtype int32, got ", output.scalar_type());
  MQA_CHECK_ARG(output.dim() == 2 && output.size(0) == rows, "output", "expected shape [rows=", rows,
                ", topk], got ", output.sizes());
  const int64_t topk = output.size(1);
  MQA_CHECK_ARG(topk == 512 || topk == 1024 || topk == 2048, "output", "topk (dim 1) must be one of 512, 1024, 2048, got ",
                topk);
  MQA_CHECK_ARG(output.is_contiguous(), "output", "must be contiguous");
  if (rows == 0) return;

  const c10::cuda::CUDAGuard guard(dev);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index());
  const cudaError_t err = topk_launch(width > 0 ? logits.data_ptr<float>() : nullptr, ld, starts.data_ptr<int>(),
                                      ends.data_ptr<int>(), output.data_ptr<int>(), static_cast<int>(rows),
                                      static_cast<int>(width), static_cast<int>(topk), stream,
                                      mqa_topk::range_error_sink(dev.index(), row_base));
  TORCH_CHECK(err == cudaSuccess, "topk_per_row: launch failed: ", cudaGetErrorString(err));
  MQA_CHECK_LAUNCH();
}

std::vector<mqa_topk::KernelInfo> topk_per_row_kernel_info() {
  cudaFuncAttributes a{};
  int smem = 0;
  const cudaError_t err = topk_attributes(&a, &smem);
  return {mqa_topk::kernel_info("sm90_topk_per_row<threads=512,ctas_per_sm=2>", err, a, smem)};
}
