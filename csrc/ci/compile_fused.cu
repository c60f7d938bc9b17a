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
cudaError_t ci_launch_fused_split_align() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedSplitAlign>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
// kSplitAlign's rule, pinned at compile time: 64 rows x 64K keys (8 blocks of
// 512 tiles) on 102 CTAs -> 12 pieces per block; 256 rows (32 blocks) on 132
// -> 4; one block per CTA (m = 1), more blocks than CTAs, unequal blocks (one
// 1.2x the mean), a block shorter than m, and m B under 90% of gp -> 0 (equal shares).
static_assert(mqa_topk::split_align_pieces(8, 102, 8 * 512, 511, 513) == 12, "align: 64 rows");
static_assert(mqa_topk::split_align_pieces(32, 132, 32 * 512, 500, 520) == 4, "align: 256 rows");
static_assert(mqa_topk::split_align_pieces(100, 132, 100 * 512, 512, 512) == 0, "align: m = 1");
static_assert(mqa_topk::split_align_pieces(133, 132, 133 * 512, 512, 512) == 0, "align: B > gp");
static_assert(mqa_topk::split_align_pieces(8, 128, 8 * 500, 480, 600) == 0, "align: unequal blocks");
static_assert(mqa_topk::split_align_pieces(8, 128, 8 * 500, 15, 520) == 0, "align: a block under m tiles");
static_assert(mqa_topk::split_align_pieces(8, 128, 8 * 500, 16, 500) == 16, "align: every block m tiles or more");
static_assert(mqa_topk::split_align_pieces(45, 132, 45 * 512, 512, 512) == 0, "align: 90 of 132 CTAs");
static_assert(mqa_topk::split_align_pieces(0, 132, 0, 0, 0) == 0, "align: no blocks");
cudaError_t ci_launch_fused_binned_end() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedBinnedEnd>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
cudaError_t ci_launch_fused_binned() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedBinned>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
