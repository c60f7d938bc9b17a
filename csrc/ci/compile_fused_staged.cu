// Torch-free translation unit: instantiates the fused staged kernel
// (sm90_fused_staged_topk.cuh; the op's path for at most SMs / 2 row blocks
// since session 25) in every kept variant's mode through its host launcher, so
// CI catches a kernel that does not compile for sm_90a: 109 / 113 / 117 / 123 / 125 (kMode
// 27 / 91 / 219 / 475 / 987; 117 the op's default) on pieces of row blocks, 119 / 121 (95 /
// 223) on shares of every SM. Nothing is launched.
#include "mqa_topk/sm90_fused_staged_topk.cuh"

namespace {
template <int kMode>
cudaError_t ci_launch_staged_mode(int rows, int keys) {
  const int m = (kMode & 4) != 0 ? 132 : mqa_topk::fused_staged_pieces(rows, keys, 132);
  return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsV2Default, kMode>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, rows, keys, 2048, m, nullptr);
}
}  // namespace

cudaError_t ci_launch_staged(int rows, int keys) { return ci_launch_staged_mode<219>(rows, keys); }  // (117, the op's)
cudaError_t ci_launch_staged_109(int rows, int keys) { return ci_launch_staged_mode<27>(rows, keys); }
cudaError_t ci_launch_staged_113(int rows, int keys) { return ci_launch_staged_mode<91>(rows, keys); }
cudaError_t ci_launch_staged_123(int rows, int keys) { return ci_launch_staged_mode<475>(rows, keys); }  // (117 + the next row's prefetch)
cudaError_t ci_launch_staged_125(int rows, int keys) { return ci_launch_staged_mode<987>(rows, keys); }  // (123 + the next row's bins)
cudaError_t ci_launch_staged_shares(int rows, int keys) { return ci_launch_staged_mode<95>(rows, keys); }  // (119)
cudaError_t ci_launch_staged_shares_pipe(int rows, int keys) { return ci_launch_staged_mode<223>(rows, keys); }  // (121)
static_assert(mqa_topk::staged_smem_bytes<mqa_topk::Sm90LogitsV2Default, 95>() <= 227 * 1024 &&
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
static_assert(mqa_topk::staged_topk::kSmemSelect <= mqa_topk::Sm90LogitsV2Default::kOffScales,
              "the staged select's buffers inside the tile loop's K ring and Q buffers");
// Pieces: 16 per block at 64 rows, 4 at 256, 2 at 512, 1 at 1056 on 132 SMs; none past one wave or 512K keys.
static_assert(mqa_topk::fused_staged_pieces(64, 65536, 132) == 16 && mqa_topk::fused_staged_pieces(256, 65536, 132) == 4 &&
                  mqa_topk::fused_staged_pieces(512, 65536, 132) == 2 && mqa_topk::fused_staged_pieces(1056, 9, 132) == 1 &&
                  mqa_topk::fused_staged_pieces(1064, 9, 132) == 0 && mqa_topk::fused_staged_pieces(8, 1 << 20, 132) == 0,
              "fused_staged_pieces");
