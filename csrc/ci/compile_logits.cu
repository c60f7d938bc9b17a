// Torch-free translation unit: instantiates every logits kernel variant (via
// its host launcher) so CI, a CPU machine with nvcc, catches a kernel that does
// not compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fp8_mqa_logits.cuh"
#include "mqa_topk/sm90_fp8_mqa_logits_v2.cuh"

// The op's kernel (v2: 8 rows on four N = 128 math warpgroups, kLean2 tile loop).
cudaError_t ci_launch_logits_v2() {
  return mqa_topk::launch_sm90_fp8_mqa_logits_v2(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0,
                                                 0, 132, nullptr);
}

// The op's kernel until session 17 (the lean path without kLean2).
cudaError_t ci_launch_logits_v2_lean() {
  return mqa_topk::launch_sm90_fp8_mqa_logits_v2<mqa_topk::Sm90LogitsV2Lean>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 0, 132, nullptr);
}

// The v1 kernel: its main loop is the fused kernel's.
cudaError_t ci_launch_logits() {
  return mqa_topk::launch_sm90_fp8_mqa_logits(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0,
                                              0, 132, nullptr);
}

// The four-row variant (N = 128, four math warpgroups) is kept compiling too.
cudaError_t ci_launch_logits_rows4() {
  return mqa_topk::launch_sm90_fp8_mqa_logits<mqa_topk::Sm90LogitsConfig<4, 4, 4>>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 0, 132, nullptr);
}

// Experimental: three math warpgroups, TMA issued inline (no producer warpgroup).
cudaError_t ci_launch_logits_inline3() {
  return mqa_topk::launch_sm90_fp8_mqa_logits<mqa_topk::Sm90LogitsConfig<8, 3, 5, 0, true>>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 0, 132, nullptr);
}

// Dev: the ping-pong structure (two math warpgroups, two accumulator sets each).
cudaError_t ci_launch_logits_v2_pingpong() {
  return mqa_topk::launch_sm90_fp8_mqa_logits_v2<
      mqa_topk::Sm90LogitsV2Config<8, 2, 12, 0, 232, 1, true, 2, true, true, true>>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 0, 132, nullptr);
}
