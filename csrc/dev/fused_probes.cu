// Development-only variants of the fused kernel, built when
// MQA_TOPK_DEV_PROBES=1 (scripts/fused_probe.py times them against the
// default): variant 0 the default kernel, 1 the lean selection
// (warp_select_lean: same results, branch-free passes), 2 the lean selection
// with window-histogram compactions (one pass each; 7 ring stages to make room
// for the histograms). Same contract checks and knobs as fused_mqa_topk.
#include <ATen/ATen.h>

#include "../fused_mqa_topk.h"
#include "mqa_topk/sm90_fused_mqa_topk.cuh"

void fused_mqa_topk_probe(int64_t variant, const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                          const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                          const at::Tensor& output, const at::Tensor& workspace) {
  using namespace mqa_topk;
  TORCH_CHECK_VALUE(variant >= 0 && variant <= 2, "variant: must be 0 (default), 1 (lean select) or 2 (window ",
                    "compactions), got ", variant);
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
  const cudaError_t err = variant == 0   ? go(Sm90FusedConfig<8, false>{})
                          : variant == 1 ? go(Sm90FusedConfig<8, true>{})
                                         : go(Sm90FusedConfig<7, true, true>{});
  fused_mqa_topk_report(err, map_error);
}
