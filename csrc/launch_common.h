// Host-side helpers shared by the launchers (torch-dependent; never included
// by the device headers under include/, which stay torch-free).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace mqa_topk {

// One kernel's resources, read with cudaFuncGetAttributes (mqa-topk build).
struct KernelInfo {
  std::string name;
  int registers;
  int shared_static_bytes;
  int shared_dynamic_bytes;  // what the launcher requests
  int local_bytes;           // stack frame + spills
  int max_threads;
};

// From attributes already queried (err: the query's result), e.g. by a
// torch-free translation unit that holds the kernel's only instantiation.
inline KernelInfo kernel_info(const char* name, cudaError_t err, const cudaFuncAttributes& a, int dynamic_smem) {
  TORCH_CHECK(err == cudaSuccess, "cudaFuncGetAttributes(", name, "): ", cudaGetErrorString(err));
  return KernelInfo{name, a.numRegs, static_cast<int>(a.sharedSizeBytes), dynamic_smem,
                    static_cast<int>(a.localSizeBytes), a.maxThreadsPerBlock};
}

template <typename Kernel>
KernelInfo kernel_info(const char* name, Kernel kernel, int dynamic_smem) {
  cudaFuncAttributes a{};
  const cudaError_t err = cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel));
  return kernel_info(name, err, a, dynamic_smem);
}

}  // namespace mqa_topk

// Contract checks: a ValueError in Python whose message starts with the argument.
#define MQA_CHECK_ARG(cond, arg, ...) TORCH_CHECK_VALUE(cond, arg, ": ", __VA_ARGS__)

#define MQA_CHECK_CUDA(expr)                                                          \
  do {                                                                               \
    cudaError_t err__ = (expr);                                                      \
    TORCH_CHECK(err__ == cudaSuccess, #expr " failed: ", cudaGetErrorString(err__)); \
  } while (0)

// After every launch: a launch error (bad config, too much shared memory) is
// reported here instead of surfacing at a later, unrelated sync.
#define MQA_CHECK_LAUNCH() MQA_CHECK_CUDA(cudaGetLastError())

namespace mqa_topk {

inline void check_cuda_tensor(const at::Tensor& t, const char* name, const at::Device& dev) {
  MQA_CHECK_ARG(t.is_cuda(), name, "must be a CUDA tensor");
  MQA_CHECK_ARG(t.device() == dev, name, "must be on the same device as q (", dev, "), got ", t.device());
}

inline void check_aligned(const at::Tensor& t, const char* name) {
  MQA_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, "data pointer must be 16-byte aligned");
}

inline int sm_count(int device) {
  static int cached[64] = {0};
  if (device >= 0 && device < 64 && cached[device]) return cached[device];
  int n = 0;
  MQA_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < 64) cached[device] = n;
  return n;
}

constexpr int64_t kHeads = 32;  // the default (GLM-5's indexer); calls take 16, 32 or 64
constexpr int64_t kHeadDim = 128;
inline bool valid_heads(int64_t h) { return h == 16 || h == 32 || h == 64; }
constexpr int64_t kMaxKeys = int64_t(1) << 22;  // contract.MAX_KEYS

// The inputs every MQA op shares (SPEC §3): dtypes, shapes, contiguity,
// alignment, device, key limit. Sets *rows and *keys.
inline void check_mqa_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                             const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                             int64_t* rows_out, int64_t* keys_out) {
  // q: [rows, 32, 128] float8_e4m3fn, contiguous, 16-byte aligned
  MQA_CHECK_ARG(q.is_cuda(), "q", "must be a CUDA tensor");
  const at::Device dev = q.device();
  MQA_CHECK_ARG(q.scalar_type() == at::kFloat8_e4m3fn, "q", "expected dtype float8_e4m3fn, got ", q.scalar_type());
  MQA_CHECK_ARG(q.dim() == 3 && valid_heads(q.size(1)) && q.size(2) == kHeadDim, "q",
                "expected shape [rows, heads, 128] with heads 16, 32 or 64, got ", q.sizes());
  const int64_t heads = q.size(1);
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
  // weights: [rows, heads] float32, contiguous, 16-byte aligned
  check_cuda_tensor(weights, "weights", dev);
  MQA_CHECK_ARG(weights.scalar_type() == at::kFloat, "weights", "expected dtype float32, got ",
                weights.scalar_type());
  MQA_CHECK_ARG(weights.dim() == 2 && weights.size(0) == rows && weights.size(1) == heads, "weights",
                "expected shape [rows=", rows, ", heads=", heads, "], got ", weights.sizes());
  MQA_CHECK_ARG(weights.is_contiguous(), "weights", "must be contiguous");
  check_aligned(weights, "weights");
  // starts, ends: [rows] int32, contiguous (values 0 <= start <= end <= keys
  // are checked on the device: the kernels clamp them, so no value goes out of
  // bounds, and record the first bad row, include/mqa_topk/common/range_check.cuh)
  check_cuda_tensor(starts, "starts", dev);
  check_cuda_tensor(ends, "ends", dev);
  for (auto* pr : {&starts, &ends}) {
    const char* name = pr == &starts ? "starts" : "ends";
    MQA_CHECK_ARG(pr->scalar_type() == at::kInt, name, "expected dtype int32, got ", pr->scalar_type());
    MQA_CHECK_ARG(pr->dim() == 1 && pr->size(0) == rows, name, "expected shape [rows=", rows, "], got ",
                  pr->sizes());
    MQA_CHECK_ARG(pr->is_contiguous(), name, "must be contiguous");
  }
  // The kernels index rows x (their heads) head rows with int32; 16 heads run as 32 (kernel_heads).
  const int64_t kernel_h = heads < 32 ? 32 : heads;
  MQA_CHECK_ARG(rows <= (int64_t(1) << 31) / kernel_h - 1, "q", "too many rows (", rows, ") for ", heads, " heads");
  *rows_out = rows;
  *keys_out = keys;
}

// The q and weights the kernels run (checked inputs): 32 and 64 heads as
// given; 16 heads as 32, with 16 zero heads appended to every row (q zero,
// weight zero). Exact: a zero head's term is relu(0) x 0 = +0, and adding +0
// leaves every partial sum's value unchanged, so the logits and the sets are
// those of the 16 heads; the MMA does the 32-head work (a 16-head MMA shape
// is not built).
struct KernelHeads {
  at::Tensor q, weights;
  int heads;
};
inline KernelHeads kernel_heads(const at::Tensor& q, const at::Tensor& weights) {
  if (q.size(1) != 16) return {q, weights, static_cast<int>(q.size(1))};
  const at::Tensor qb = q.view(at::kByte);
  at::Tensor q32 = at::cat({qb, at::zeros_like(qb)}, 1).view(q.scalar_type());
  at::Tensor w32 = at::cat({weights, at::zeros_like(weights)}, 1);
  return {q32, w32, 32};
}

}  // namespace mqa_topk
