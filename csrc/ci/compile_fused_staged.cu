// Torch-free translation unit: instantiates the fused staged kernel
// (sm90_fused_staged_topk.cuh) through its host launcher, so CI catches a
// kernel that does not compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_staged_topk.cuh"

cudaError_t ci_launch_staged(int rows, int keys) {
  return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsV2Default>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, rows, keys, 2048,
      mqa_topk::fused_staged_pieces(rows, keys, 132), nullptr);
}
// The epilogue's histograms fill the second Q buffer exactly; -inf's bin.
static_assert(mqa_topk::staged_topk::kRows * mqa_topk::staged_topk::kEpiBins * 4 ==
                  mqa_topk::Sm90LogitsV2Default::kQTileBytes &&
                  mqa_topk::staged_topk::kEpiPadBin == 2,
              "the epilogue histograms' layout");
// The select's buffers fit the tile loop's K ring and Q buffers.
static_assert(mqa_topk::staged_topk::kSmemSelect <= mqa_topk::Sm90LogitsV2Default::kOffScales,
              "the staged select's buffers inside the tile loop's K ring and Q buffers");
// Pieces: 16 per block at 64 rows, 4 at 256, 2 at 512, 1 at 1056 on 132 SMs; none past one wave or 512K keys.
static_assert(mqa_topk::fused_staged_pieces(64, 65536, 132) == 16 && mqa_topk::fused_staged_pieces(256, 65536, 132) == 4 &&
                  mqa_topk::fused_staged_pieces(512, 65536, 132) == 2 && mqa_topk::fused_staged_pieces(1056, 9, 132) == 1 &&
                  mqa_topk::fused_staged_pieces(1064, 9, 132) == 0 && mqa_topk::fused_staged_pieces(8, 1 << 20, 132) == 0,
              "fused_staged_pieces");
