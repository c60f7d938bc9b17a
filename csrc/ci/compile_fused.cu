// Torch-free translation unit: instantiates the fused kernel through its host
// launcher so CI (a CPU machine with nvcc) catches a kernel that does not
// compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_mqa_topk.cuh"

cudaError_t ci_launch_fused() {
  return mqa_topk::launch_sm90_fused_mqa_topk(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              0, 0, 2048, 132, nullptr);
}

// Development variants (dev probes): v1 (running threshold), v2 with the
// select on selector warps, v2 with 8 stages, v2 with plain appends, the
// binned select.
cudaError_t ci_launch_fused_v1() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedV1>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_selectors() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedSelectors>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_gated8() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedGated8>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_plain_append() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedGated>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_split() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedSplit>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_split_gate() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedSplitGate>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_split_thin() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedSplitThin>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_binned_end() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedBinnedEnd>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_binned() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedBinned>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
