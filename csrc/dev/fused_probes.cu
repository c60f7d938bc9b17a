// Development-only variants of the fused kernel, built when
// MQA_TOPK_DEV_PROBES=1 (scripts/fused_probe.py times them against the
// default): variant 0 the default kernel (v2: sample gate, select on the
// selector warps), 1 v2 with the block-end select on the math warps (one
// candidate-buffer set), 2 v1 (running threshold and compactions only, the
// previous default). Same contract checks and knobs as fused_mqa_topk; every
// variant fits the default's workspace.
#include <ATen/ATen.h>

#include "../fused_mqa_topk.h"
#include "mqa_topk/sm90_fused_mqa_topk.cuh"

namespace {
using mqa_topk::fused_workspace_bytes;
constexpr bool fits(int topk) {
  return mqa_topk::Sm90FusedGated::kSets * mqa_topk::Sm90FusedGated::cap(topk) <=
             mqa_topk::Sm90FusedDefault::kSets * mqa_topk::Sm90FusedDefault::cap(topk) &&
         mqa_topk::Sm90FusedV1::kSets * mqa_topk::Sm90FusedV1::cap(topk) <=
             mqa_topk::Sm90FusedDefault::kSets * mqa_topk::Sm90FusedDefault::cap(topk);
}
static_assert(fits(512) && fits(1024) && fits(2048), "a development variant needs more workspace than the default");
}  // namespace

void fused_mqa_topk_probe(int64_t variant, const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                          const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                          const at::Tensor& output, const at::Tensor& workspace) {
  using namespace mqa_topk;
  TORCH_CHECK_VALUE(variant >= 0 && variant <= 2, "variant: must be 0 (default), 1 (v2, select on the math ",
                    "warps) or 2 (v1), got ", variant);
  const FusedLaunchArgs a = fused_mqa_topk_check(q, k, scales, weights, starts, ends, output, workspace);
  if (a.rows == 0) return;
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index());
  int map_error = 0;
  auto go = [&](auto cfg) {
    using Cfg = decltype(cfg);
    return launch_sm90_fused_mqa_topk<Cfg>(q.data_ptr(), a.keys ? k.data_ptr() : nullptr,
                                           a.keys ? scales.data_ptr<float>() : nullptr, weights.data_ptr<float>(),
                                           starts.data_ptr<int>(), ends.data_ptr<int>(), output.data_ptr<int>(),
                                           workspace.data_ptr(), a.rows, a.keys, a.topk, a.num_sms, stream,
                                           &map_error, a.probe, a.cap);
  };
  const cudaError_t err = variant == 0   ? go(Sm90FusedDefault{})
                          : variant == 1 ? go(Sm90FusedGated{})
                                         : go(Sm90FusedV1{});
  fused_mqa_topk_report(err, map_error);
}
