// Torch-free translation unit: instantiates the fused kernel through its host
// launcher so CI (a CPU machine with nvcc) catches a kernel that does not
// compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_mqa_topk.cuh"

// One launcher instantiation per kernel configuration: the default and the
// development variants (dev probes): v1 (running threshold), v2 with the
// select on selector warps, v2 with 8 stages, v2 with plain appends, the
// binned selects, and the split kernels (kSplit, kSplitGate, kSplitThin,
// kSplitAlign).
template <class Cfg>
cudaError_t ci_launch() {
  return mqa_topk::launch_sm90_fused_mqa_topk<Cfg>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                   nullptr, 0, 0, 2048, 132, nullptr);
}
template cudaError_t ci_launch<mqa_topk::Sm90FusedDefault>();  // = Sm90FusedBinnedEnd (bins at the block end)
template cudaError_t ci_launch<mqa_topk::Sm90FusedV1>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedSelectors>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedGated8>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedGated>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedBinned>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedSplit>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedSplitGate>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedSplitThin>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedSplitAlign>();
template cudaError_t ci_launch<mqa_topk::Sm90FusedLeanMma>();  // dev: lean wgmma descriptors

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
