// Torch-free translation unit: instantiates the fused staged kernel
// (sm90_fused_staged_topk.cuh; the op's path for at most SMs / 4 row blocks
// since session 22) and its dev variants 99, 101 and 103 through their host
// launcher, so CI catches a kernel that does not compile for sm_90a. Nothing
// is launched.
#include "mqa_topk/sm90_fused_staged_topk.cuh"

cudaError_t ci_launch_staged(int rows, int keys) {
  return mqa_topk::launch_sm90_fused_staged_topk(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                                 nullptr, nullptr, rows, keys, 2048,
                                                 mqa_topk::fused_staged_pieces(rows, keys, 132), nullptr);
}
cudaError_t ci_launch_staged_v2(int rows, int keys) {  // (dev variant 99: kMode 1)
  return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsV2Default, 1>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, rows, keys, 2048,
      mqa_topk::fused_staged_pieces(rows, keys, 132), nullptr);
}
cudaError_t ci_launch_staged_epi(int rows, int keys) {  // (dev variant 101: kMode 3, the epilogue's histograms)
  return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsV2Default, 3>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, rows, keys, 2048,
      mqa_topk::fused_staged_pieces(rows, keys, 132), nullptr);
}
cudaError_t ci_launch_staged_shares(int rows, int keys) {  // (dev variant 103: kMode 7, shares of every SM)
  return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsV2Default, 7>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, rows, keys, 2048, 132,
      nullptr);
}
static_assert(mqa_topk::staged_smem_bytes<mqa_topk::Sm90LogitsV2Default, 7>() <= 227 * 1024 &&
                  mqa_topk::staged_share_hist_offset<mqa_topk::Sm90LogitsV2Default>() >=
                      mqa_topk::Sm90LogitsV2Default::kOffBars + mqa_topk::Sm90LogitsV2Default::kNumBars * 8 &&
                  mqa_topk::staged_topk::kSharePadBin == 1,
              "the shares' histograms past the tile loop's shared memory");
// The epilogue's histograms fill the second Q buffer exactly; -inf's bin.
static_assert(mqa_topk::staged_topk::kRows * mqa_topk::staged_topk::kEpiBins * 4 ==
                  mqa_topk::Sm90LogitsV2Default::kQTileBytes &&
                  mqa_topk::staged_topk::kEpiPadBin == 2,
              "the epilogue histograms' layout");
// The selects' buffers fit the tile loop's K ring and Q buffers.
static_assert(mqa_topk::staged_topk::kSmemUsed <= mqa_topk::Sm90LogitsV2Default::kOffScales,
              "the staged select's buffers inside the tile loop's K ring and Q buffers");
// Pieces: 16 per block at 64 rows, 4 at 256, 2 at 512, 1 at 1056 on 132 SMs; none past one wave or 512K keys.
static_assert(mqa_topk::fused_staged_pieces(64, 65536, 132) == 16 && mqa_topk::fused_staged_pieces(256, 65536, 132) == 4 &&
                  mqa_topk::fused_staged_pieces(512, 65536, 132) == 2 && mqa_topk::fused_staged_pieces(1056, 9, 132) == 1 &&
                  mqa_topk::fused_staged_pieces(1064, 9, 132) == 0 && mqa_topk::fused_staged_pieces(8, 1 << 20, 132) == 0,
              "fused_staged_pieces");
