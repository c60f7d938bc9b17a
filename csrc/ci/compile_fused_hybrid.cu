// Torch-free translation unit: instantiates the fused hybrid kernel
// (sm90_fused_hybrid_topk.cuh, issue 12 session 26: whole blocks beside the
// staged kernel's pieces and owners of the last one or two row blocks) through
// its host launcher for top-2048, so CI catches a kernel that does not compile
// for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_hybrid_topk.cuh"

cudaError_t ci_launch_hybrid(int rows, int keys) {
  return mqa_topk::launch_sm90_fused_hybrid_topk<mqa_topk::Sm90FusedV3Whole<2048>>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, rows, keys, 2048, 132, nullptr);
}
// Where it applies: SMs + 1 or 2 row blocks (1064 / 1072 rows, 2120 rows on 132 SMs), not a whole wave,
// not fewer blocks than SMs, not 3 extra blocks, not rows past the owner's bitmaps.
static_assert(mqa_topk::fused_hybrid_extra_blocks(1064, 65536, 132) == 1 &&
                  mqa_topk::fused_hybrid_extra_blocks(1057, 65536, 132) == 1 &&
                  mqa_topk::fused_hybrid_extra_blocks(1072, 65536, 132) == 2 &&
                  mqa_topk::fused_hybrid_extra_blocks(2120, 65536, 132) == 1 &&
                  mqa_topk::fused_hybrid_extra_blocks(1056, 65536, 132) == 0 &&
                  mqa_topk::fused_hybrid_extra_blocks(512, 65536, 132) == 0 &&
                  mqa_topk::fused_hybrid_extra_blocks(1080, 65536, 132) == 0 &&
                  mqa_topk::fused_hybrid_extra_blocks(1064, (1 << 19) + 1, 132) == 0,
              "the hybrid kernel's calls");
// Both bodies' shared memory in one CTA: the dynamic part and the static 528 bytes ptxas reports for the
// kernel (session 26; a launch past 227 KB fails at cudaFuncSetAttribute, reported by the op).
static_assert(mqa_topk::hybrid_smem_bytes<mqa_topk::Sm90FusedV3Whole<2048>, mqa_topk::Sm90LogitsV2Default>() + 528 <=
                  227 * 1024,
              "the hybrid kernel's shared memory");
