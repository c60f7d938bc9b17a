// Launcher of the per-row top-k kernel: contract checks, then launch.
#include "topk_per_row.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "mqa_topk/sm90_topk_per_row.cuh"
#include "range_errors.h"

namespace {

constexpr int64_t kMaxKeys = int64_t(1) << 22;  // contract.MAX_KEYS

// MQA_TOPK_TOPK_THREADS=1024 selects the 1024-thread, one-CTA-per-SM variant
// (for measuring); anything else the default 512-thread, two-CTAs-per-SM one.
// Both give bitwise-identical output.
mqa_topk::topk::TopkVariant topk_variant() {
  const char* v = std::getenv("MQA_TOPK_TOPK_THREADS");
  return (v != nullptr && std::strcmp(v, "1024") == 0) ? mqa_topk::topk::TopkVariant::kThreads1024x1
                                                        : mqa_topk::topk::TopkVariant::kThreads512x2;
}

}  // namespace

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
  MQA_CHECK_ARG(width <= kMaxKeys, "logits", "width ", width, " exceeds the key limit ", kMaxKeys);
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
  const cudaError_t err = mqa_topk::topk::launch_topk_per_row(
      width > 0 ? logits.data_ptr<float>() : nullptr, ld, starts.data_ptr<int>(), ends.data_ptr<int>(),
      output.data_ptr<int>(), static_cast<int>(rows), static_cast<int>(width), static_cast<int>(topk), stream,
      topk_variant(), mqa_topk::range_error_sink(dev.index(), row_base));
  TORCH_CHECK(err == cudaSuccess, "topk_per_row: launch failed: ", cudaGetErrorString(err));
  MQA_CHECK_LAUNCH();
}

std::vector<mqa_topk::KernelInfo> topk_per_row_kernel_info() {
  using mqa_topk::topk::TopkConfig1024;
  using mqa_topk::topk::TopkConfig512;
  return {mqa_topk::kernel_info("sm90_topk_per_row<threads=512,ctas_per_sm=2>",
                                &mqa_topk::topk::topk_per_row_kernel<TopkConfig512>, TopkConfig512::kSmemBytes),
          mqa_topk::kernel_info("sm90_topk_per_row<threads=1024,ctas_per_sm=1>",
                                &mqa_topk::topk::topk_per_row_kernel<TopkConfig1024>, TopkConfig1024::kSmemBytes)};
}
