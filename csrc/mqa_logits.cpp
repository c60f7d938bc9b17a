// Launcher of the dense FP8 MQA-logits kernel: contract checks, then launch.
#include "mqa_logits.h"

#include "kernels/dense_kernels.h"
#include "range_errors.h"

using mqa_topk::check_aligned;
using mqa_topk::check_cuda_tensor;
using mqa_topk::sm_count;

void mqa_logits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales, const at::Tensor& weights,
                const at::Tensor& starts, const at::Tensor& ends, const at::Tensor& logits, int64_t row_base) {
  int64_t rows = 0, keys = 0;
  mqa_topk::check_mqa_inputs(q, k, scales, weights, starts, ends, &rows, &keys);
  const at::Device dev = q.device();
  // logits: [rows, pitch] float32 with unit column stride, pitch >= keys, pitch % 4 == 0, 16-byte aligned
  check_cuda_tensor(logits, "logits", dev);
  MQA_CHECK_ARG(logits.scalar_type() == at::kFloat, "logits", "expected dtype float32, got ", logits.scalar_type());
  MQA_CHECK_ARG(logits.dim() == 2 && logits.size(0) == rows && logits.size(1) >= keys && logits.stride(1) == 1 &&
                    logits.stride(0) >= keys,
                "logits", "expected [rows=", rows, ", >= keys=", keys, "] with unit column stride, got ",
                logits.sizes(), " strides ", logits.strides());
  MQA_CHECK_ARG(logits.stride(0) % 4 == 0, "logits", "row stride must be a multiple of 4 floats (16 bytes), got ",
                logits.stride(0));
  check_aligned(logits, "logits");
  if (rows == 0) return;

  const c10::cuda::CUDAGuard guard(dev);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index());
  const mqa_topk::KernelHeads kh = mqa_topk::kernel_heads(q, weights);  // (16 heads run as 32)
  int map_error = 0;
  // keys == 0: only the range check runs (every row must be empty).
  const cudaError_t err = logits_launch(
      kh.q.data_ptr(), keys ? k.data_ptr() : nullptr, keys ? scales.data_ptr<float>() : nullptr,
      kh.weights.data_ptr<float>(), starts.data_ptr<int>(), ends.data_ptr<int>(), logits.data_ptr<float>(),
      logits.stride(0), static_cast<int>(rows), static_cast<int>(keys), kh.heads, sm_count(dev.index()), stream,
      &map_error, mqa_topk::range_error_sink(dev.index(), row_base));
  static const char* const kMapNames[5] = {"q", "k", "scales", "weights", "logits"};
  TORCH_CHECK(map_error == 0, "mqa_logits: could not encode the TMA tensor map of ",
              kMapNames[map_error / 1000 % 5], " (CUresult ", map_error % 1000, ")");
  TORCH_CHECK(err == cudaSuccess, "mqa_logits: launch failed: ", cudaGetErrorString(err));
}

std::vector<mqa_topk::KernelInfo> mqa_logits_kernel_info() {
  cudaFuncAttributes a{};
  int smem = 0;
  const cudaError_t err = logits_attributes(&a, &smem);
  return {mqa_topk::kernel_info("sm90_fp8_mqa_logits<rows=8,math_wg=4,stages=8>", err, a, smem)};
}
