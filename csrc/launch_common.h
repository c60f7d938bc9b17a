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

template <typename Kernel>
KernelInfo kernel_info(const char* name, Kernel kernel, int dynamic_smem) {
  cudaFuncAttributes a{};
  cudaError_t err = cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel));
  TORCH_CHECK(err == cudaSuccess, "cudaFuncGetAttributes(", name, "): ", cudaGetErrorString(err));
  return KernelInfo{name, a.numRegs, static_cast<int>(a.sharedSizeBytes), dynamic_smem,
                    static_cast<int>(a.localSizeBytes), a.maxThreadsPerBlock};
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
