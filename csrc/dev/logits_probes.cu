// Development-only variants of the logits kernel, built when
// MQA_TOPK_DEV_PROBES=1: the same launch with the epilogue or the MMAs left
// out, and other stage counts, to place the time inside the kernel; 6 and up
// are the issue-10 structures of sm90_fp8_mqa_logits_v2.cuh (docs/LOGITS.md).
#include <ATen/ATen.h>

#include "../launch_common.h"
#include "mqa_topk/sm90_fp8_mqa_logits.cuh"
#include "mqa_topk/sm90_fp8_mqa_logits_v2.cuh"

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
  auto go_dev = [&](auto cfg) {
    using Cfg = decltype(cfg);
    return launch_sm90_fp8_mqa_logits_v2<Cfg>(q.data_ptr(), k.data_ptr(), scales.data_ptr<float>(),
                                               weights.data_ptr<float>(), starts.data_ptr<int>(),
                                               ends.data_ptr<int>(), logits.data_ptr<float>(), logits.stride(0),
                                               q.size(0), k.size(0), sms, stream);
  };
  // Sm90LogitsV2Config<rows, math warpgroups, stages, probe, math registers (0: no setmaxnreg), cluster, direct store,
  //                     row groups, weights in registers>
  cudaError_t err;
  switch (variant) {
    case 0: err = go(Sm90LogitsConfig<8, 2, 8, 0>{}); break;
    case 1: err = go(Sm90LogitsConfig<8, 2, 8, 1>{}); break;
    case 2: err = go(Sm90LogitsConfig<8, 2, 8, 2>{}); break;
    case 3: err = go(Sm90LogitsConfig<8, 2, 6, 0>{}); break;
    case 4: err = go(Sm90LogitsConfig<8, 3, 5, 0, true>{}); break;
    case 5: err = go(Sm90LogitsConfig<8, 3, 5, 1, true>{}); break;
    case 6: err = go_dev(Sm90LogitsV2Config<4, 4, 3, 0, 112>{}); break;
    case 7: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 112>{}); break;
    case 8: err = go_dev(Sm90LogitsV2Config<4, 4, 5, 0, 112>{}); break;
    case 9: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 112, 1, true>{}); break;
    case 10: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 1, 112>{}); break;
    case 11: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 112, 2>{}); break;
    case 12: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 1, 112, 2>{}); break;
    case 13: err = go_dev(Sm90LogitsV2Config<8, 2, 8, 0, 0, 2>{}); break;
    case 14: err = go_dev(Sm90LogitsV2Config<8, 2, 8, 0, 0, 1, true>{}); break;
    case 15: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 112, 2, true>{}); break;
    case 16: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 0>{}); break;
    // 8-row blocks on four math warpgroups at N = 128 (row groups), 128-key tiles.
    case 17: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, false, 2, false>{}); break;
    case 18: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, false, 2, true>{}); break;
    case 19: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true>{}); break;
    case 20: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 112, 1, true, 1, true>{}); break;
    case 21: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 1, 112, 1, false, 2, false>{}); break;
    case 22: err = go_dev(Sm90LogitsV2Config<8, 4, 6, 0, 112, 1, false, 2, true>{}); break;
    // The lean tile path (32-bit uniform descriptors, row pointer per block) on 19 / 4 rows / 9 stages.
    case 23: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true>{}); break;
    case 24: err = go_dev(Sm90LogitsV2Config<4, 4, 4, 0, 112, 1, true, 1, true, true>{}); break;
    case 25: err = go_dev(Sm90LogitsV2Config<8, 4, 9, 0, 112, 1, true, 2, true, true>{}); break;
    // Ping-pong: two math warpgroups (4 rows x 64-key tiles each), two accumulator sets, setmaxnreg 232.
    case 26: err = go_dev(Sm90LogitsV2Config<8, 2, 12, 0, 232, 1, true, 2, true, true, true>{}); break;
    case 27: err = go_dev(Sm90LogitsV2Config<8, 2, 16, 0, 232, 1, true, 2, true, true, true>{}); break;
    // Diagnostic: 26 without setmaxnreg (168 registers, some spills): does the hang follow setmaxnreg?
    case 28: err = go_dev(Sm90LogitsV2Config<8, 2, 12, 0, 0, 1, true, 2, true, true, true>{}); break;
    // The op's kernel (23) with work shares that count each block as 2 / 4 extra tiles.
    case 29: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true, false, 2>{}); break;
    case 30: err = go_dev(Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true, false, 4>{}); break;
    default: TORCH_CHECK_VALUE(false, "variant: unknown ", variant);
  }
  TORCH_CHECK(err == cudaSuccess, "probe launch failed: ", cudaGetErrorString(err));
}
