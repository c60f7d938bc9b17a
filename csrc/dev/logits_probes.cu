// Development-only variants of the logits kernel, built when
// MQA_TOPK_DEV_PROBES=1: the same launch with the epilogue or the MMAs left
// out, and other stage counts, to place the time inside the kernel.
#include <ATen/ATen.h>

#include "../launch_common.h"
#include "mqa_topk/sm90_fp8_mqa_logits.cuh"

void mqa_logits_probe(int64_t variant, const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                      const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                      const at::Tensor& logits) {
  using namespace mqa_topk;
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index());
  int sms = 0;
  MQA_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, q.device().index()));
  auto go = [&](auto cfg) {
    using Cfg = decltype(cfg);
    return launch_sm90_fp8_mqa_logits<Cfg>(q.data_ptr(), k.data_ptr(), scales.data_ptr<float>(),
                                           weights.data_ptr<float>(), starts.data_ptr<int>(), ends.data_ptr<int>(),
                                           logits.data_ptr<float>(), logits.stride(0), q.size(0), k.size(0), sms,
                                           stream);
  };
  cudaError_t err;
  switch (variant) {
    case 0: err = go(Sm90LogitsConfig<8, 2, 8, 0>{}); break;
    case 1: err = go(Sm90LogitsConfig<8, 2, 8, 1>{}); break;
    case 2: err = go(Sm90LogitsConfig<8, 2, 8, 2>{}); break;
    case 3: err = go(Sm90LogitsConfig<8, 2, 6, 0>{}); break;
    case 4: err = go(Sm90LogitsConfig<8, 3, 5, 0, true>{}); break;
    case 5: err = go(Sm90LogitsConfig<8, 3, 5, 1, true>{}); break;
    default: TORCH_CHECK_VALUE(false, "variant: unknown ", variant);
  }
  TORCH_CHECK(err == cudaSuccess, "probe launch failed: ", cudaGetErrorString(err));
}
