// Launcher of the dense FP8 MQA-logits kernel: contract checks, then launch.
#include "mqa_logits.h"

#include "mqa_topk/sm90_fp8_mqa_logits.cuh"

namespace {

constexpr int64_t kHeads = 32;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kMaxKeys = int64_t(1) << 22;  // contract.MAX_KEYS

void check_cuda_tensor(const at::Tensor& t, const char* name, const at::Device& dev) {
  MQA_CHECK_ARG(t.is_cuda(), name, "must be a CUDA tensor");
  MQA_CHECK_ARG(t.device() == dev, name, "must be on the same device as q (", dev, "), got ", t.device());
}

void check_aligned(const at::Tensor& t, const char* name) {
  MQA_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, "data pointer must be 16-byte aligned");
}

int sm_count(int device) {
  static int cached[64] = {0};
  if (device >= 0 && device < 64 && cached[device]) return cached[device];
  int n = 0;
  MQA_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < 64) cached[device] = n;
  return n;
}

}  // namespace

void mqa_logits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales, const at::Tensor& weights,
                const at::Tensor& starts, const at::Tensor& ends, const at::Tensor& logits) {
  // q: [rows, 32, 128] float8_e4m3fn, contiguous, 16-byte aligned
  MQA_CHECK_ARG(q.is_cuda(), "q", "must be a CUDA tensor");
  const at::Device dev = q.device();
  MQA_CHECK_ARG(q.scalar_type() == at::kFloat8_e4m3fn, "q", "expected dtype float8_e4m3fn, got ", q.scalar_type());
  MQA_CHECK_ARG(q.dim() == 3 && q.size(1) == kHeads && q.size(2) == kHeadDim, "q",
                "expected shape [rows, 32, 128], got ", q.sizes());
  MQA_CHECK_ARG(q.is_contiguous(), "q", "must be contiguous");
  check_aligned(q, "q");
  const int64_t rows = q.size(0);
  // k: [keys, 128] float8_e4m3fn, contiguous, 16-byte aligned, keys <= 2^22
  check_cuda_tensor(k, "k", dev);
  MQA_CHECK_ARG(k.scalar_type() == at::kFloat8_e4m3fn, "k", "expected dtype float8_e4m3fn, got ", k.scalar_type());
  MQA_CHECK_ARG(k.dim() == 2 && k.size(1) == kHeadDim, "k", "expected shape [keys, 128], got ", k.sizes());
  MQA_CHECK_ARG(k.is_contiguous(), "k", "must be contiguous");
  check_aligned(k, "k");
  const int64_t keys = k.size(0);
  MQA_CHECK_ARG(keys <= kMaxKeys, "k", keys, " keys exceeds the limit of ", kMaxKeys);
  // scales: [keys] float32, contiguous, 16-byte aligned
  check_cuda_tensor(scales, "scales", dev);
  MQA_CHECK_ARG(scales.scalar_type() == at::kFloat, "scales", "expected dtype float32, got ", scales.scalar_type());
  MQA_CHECK_ARG(scales.dim() == 1 && scales.size(0) == keys, "scales", "expected shape [keys=", keys, "], got ",
                scales.sizes());
  MQA_CHECK_ARG(scales.is_contiguous(), "scales", "must be contiguous");
  check_aligned(scales, "scales");
  // weights: [rows, 32] float32, contiguous, 16-byte aligned
  check_cuda_tensor(weights, "weights", dev);
  MQA_CHECK_ARG(weights.scalar_type() == at::kFloat, "weights", "expected dtype float32, got ",
                weights.scalar_type());
  MQA_CHECK_ARG(weights.dim() == 2 && weights.size(0) == rows && weights.size(1) == kHeads, "weights",
                "expected shape [rows=", rows, ", 32], got ", weights.sizes());
  MQA_CHECK_ARG(weights.is_contiguous(), "weights", "must be contiguous");
  check_aligned(weights, "weights");
  // starts, ends: [rows] int32, contiguous (values in [0, keys] are checked in
  // Python; the kernel clamps them, so unchecked values cannot go out of bounds)
  check_cuda_tensor(starts, "starts", dev);
  check_cuda_tensor(ends, "ends", dev);
  for (auto* pr : {&starts, &ends}) {
    const char* name = pr == &starts ? "starts" : "ends";
    MQA_CHECK_ARG(pr->scalar_type() == at::kInt, name, "expected dtype int32, got ", pr->scalar_type());
    MQA_CHECK_ARG(pr->dim() == 1 && pr->size(0) == rows, name, "expected shape [rows=", rows, "], got ",
                  pr->sizes());
    MQA_CHECK_ARG(pr->is_contiguous(), name, "must be contiguous");
  }
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
  MQA_CHECK_ARG(rows <= (int64_t(1) << 31) / kHeads - 1, "q", "too many rows (", rows, ")");
  if (rows == 0 || keys == 0) return;

  const c10::cuda::CUDAGuard guard(dev);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index());
  int map_error = 0;
  const cudaError_t err = mqa_topk::launch_sm90_fp8_mqa_logits(
      q.data_ptr(), k.data_ptr(), scales.data_ptr<float>(), weights.data_ptr<float>(), starts.data_ptr<int>(),
      ends.data_ptr<int>(), logits.data_ptr<float>(), logits.stride(0), static_cast<int>(rows),
      static_cast<int>(keys), sm_count(dev.index()), stream, &map_error);
  static const char* const kMapNames[5] = {"q", "k", "scales", "weights", "logits"};
  TORCH_CHECK(map_error == 0, "mqa_logits: could not encode the TMA tensor map of ",
              kMapNames[map_error / 1000 % 5], " (CUresult ", map_error % 1000, ")");
  TORCH_CHECK(err == cudaSuccess, "mqa_logits: launch failed: ", cudaGetErrorString(err));
}

std::vector<mqa_topk::KernelInfo> mqa_logits_kernel_info() {
  using Cfg = mqa_topk::Sm90LogitsDefault;
  return {mqa_topk::kernel_info("sm90_fp8_mqa_logits<rows=8,wg=2,stages=8>",
                                &mqa_topk::sm90_fp8_mqa_logits_kernel<Cfg>, Cfg::kSmemBytes)};
}
