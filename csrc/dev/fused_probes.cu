// Development-only variants of the fused kernel, built when
// MQA_TOPK_DEV_PROBES=1 (scripts/fused_probe.py times them against the
// default): variant 0 the default kernel (v2: sample gate, lean appends, the
// block-end select by bins counted at the block end, on the math warps), 1 v2
// with the select on the producer warpgroup's selector warps (two candidate
// sets, 7 stages), 2 v1 (running threshold and compactions only), 3 v2 with 8
// ring stages and plain appends, 4 v2 with plain appends (no kLeanAppend), 5
// the bins counted by the appends instead (kBinned = 1), 6 lean appends with
// the general block-end select (kBinned = 0; the default until kBinned = 2),
// 7 the default with blocks split across CTAs (kSplit: equal tile shares,
// pieces merged by the CTA that finishes a block's last piece), 8 the same with
// one gate per split block shared by its pieces (kSplitGate), 9 that with only
// the blocks of the last partial wave split (kSplitThin; what the op runs).
// Same contract checks and knobs as fused_mqa_topk; the workspace must hold
// the variant's need (fused_mqa_topk_probe_workspace_bytes).
#include <ATen/ATen.h>

#include <algorithm>

#include "../fused_mqa_topk.h"
#include "mqa_topk/sm90_fused_mqa_topk.cuh"
#include "fused_v3_probes.h"

namespace {
// Variants 12-38, 42, 43: the v3 kernel (csrc/dev/fused_v3_probes.cu, its own
// translation unit so ninja builds it beside this one).
constexpr int kFirstV3 = 12, kLastV3 = 43;
// Variants 39-41 are tools/v3check's timing cuts of 32 (wrong sets by
// design), not dev variants of the extension.
void check_not_timing_cut(int64_t variant) {
  TORCH_CHECK_VALUE(variant < 39 || variant > 41, "variant: 39-41 are tools/v3check's timing cuts (wrong sets by ",
                    "design), not dev variants of the extension, got ", variant);
}
template <class F>
auto with_variant(int64_t variant, F&& f) {
  using namespace mqa_topk;
  TORCH_CHECK_VALUE(variant >= 0 && variant <= kLastV3, "variant: must be 0 (default), 1 (selector warps), 2 (v1), ",
                    "3 (plain appends, 8 stages), 4 (plain appends), 5 (binned select, bins counted by the appends), ",
                    "6 (lean appends, general select), 7 (blocks split across CTAs), 8 (split, shared gate), ",
                    "9 (split last wave, shared gate), 10 (split, shares that follow the blocks), 11 (lean MMA descriptors) ",
                    "or 12-38, 42, 43 (the v3 kernel: 12 smem weight copy, 13 + two sets, 14 + inline check, 15 register weights, ",
                    "16 weights from the TMA buffer (the op's v3), 17 copy + barrier, 18 15 inlined, 19 16 with two sets, ",
                    "20 19 with the selects on the producer warpgroup, 21 20 at 104 / 64 registers, 22 16 checking every 12 tiles, 23 22 with pair selects, 24 23 with the pair gate, 25 24 with small samples not dropped, 26 25 with select phase stats, 27 25 binning from the gate, 28 27 with 6 groups in the output pass, 29 27 with the gate target 1.25 k + 256, 30 29 with the gate rank floor, 31 30 with the floor where the sample is capped, 32 31 with the target 1.5 k + 256: the op's, 33 32 on equal shares with split blocks, 34 33 with whole blocks as one-piece splits, 35 / 36 33 / 34 with shares over the partial waves only, 37 / 38 35 / 32 with the weights loaded during the MMAs, 42 / 43 32 / 35 with the lean filter: 42 is the op's), got ",
                    variant);
  return variant == 0 ? f(Sm90FusedDefault{})
         : variant == 1 ? f(Sm90FusedSelectors{})
         : variant == 2 ? f(Sm90FusedV1{})
         : variant == 3 ? f(Sm90FusedGated8{})
         : variant == 4 ? f(Sm90FusedGated{})
         : variant == 5 ? f(Sm90FusedBinned{})
         : variant == 6 ? f(Sm90FusedLeanAppend{})
         : variant == 7 ? f(Sm90FusedSplit{})
         : variant == 8 ? f(Sm90FusedSplitGate{})
         : variant == 9 ? f(Sm90FusedSplitThin{})
         : variant == 10 ? f(Sm90FusedSplitAlign{})
                         : f(Sm90FusedLeanMma{});
}
}  // namespace

int64_t fused_mqa_topk_probe_workspace_bytes(int64_t variant, int64_t topk, int64_t device) {
  check_not_timing_cut(variant);
  const int sms = mqa_topk::sm_count(static_cast<int>(device));
  // At least the default's need too: the shared contract check asks for it.
  const int64_t dflt = static_cast<int64_t>(
      mqa_topk::fused_workspace_bytes<mqa_topk::Sm90FusedDefault>(static_cast<int>(topk), sms));
  if (variant >= kFirstV3 && variant <= kLastV3)
    return std::max(dflt, fused_v3_probe_workspace_bytes(variant, topk, sms));
  return std::max(dflt, with_variant(variant, [&](auto cfg) {
    return static_cast<int64_t>(mqa_topk::fused_workspace_bytes<decltype(cfg)>(static_cast<int>(topk), sms));
  }));
}

void fused_mqa_topk_probe(int64_t variant, const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                          const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                          const at::Tensor& output, const at::Tensor& workspace) {
  using namespace mqa_topk;
  check_not_timing_cut(variant);
  const FusedLaunchArgs a = fused_mqa_topk_check(q, k, scales, weights, starts, ends, output, workspace);
  const int64_t need = fused_mqa_topk_probe_workspace_bytes(variant, a.topk, q.device().index());
  MQA_CHECK_ARG(workspace.numel() >= need, "workspace", "variant ", variant, " needs ", need, " bytes, got ",
                workspace.numel());
  if (a.rows == 0) return;
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index());
  int map_error = 0;
  if (variant >= kFirstV3 && variant <= kLastV3) {
    const cudaError_t err = fused_v3_probe_launch(variant, q.data_ptr(), a.keys ? k.data_ptr() : nullptr,
                                                  a.keys ? scales.data_ptr<float>() : nullptr, weights.data_ptr<float>(),
                                                  starts.data_ptr<int>(), ends.data_ptr<int>(), output.data_ptr<int>(),
                                                  workspace.data_ptr(), a.rows, a.keys, a.topk, a.num_sms, stream,
                                                  &map_error, a.probe, a.target);
    fused_mqa_topk_report(err, map_error);
    return;
  }
  const cudaError_t err = with_variant(variant, [&](auto cfg) {
    using Cfg = decltype(cfg);
    return launch_sm90_fused_mqa_topk<Cfg>(q.data_ptr(), a.keys ? k.data_ptr() : nullptr,
                                           a.keys ? scales.data_ptr<float>() : nullptr, weights.data_ptr<float>(),
                                           starts.data_ptr<int>(), ends.data_ptr<int>(), output.data_ptr<int>(),
                                           workspace.data_ptr(), a.rows, a.keys, a.topk, a.num_sms, stream,
                                           &map_error, a.probe, a.cap, {}, a.target);
  });
  fused_mqa_topk_report(err, map_error);
}
