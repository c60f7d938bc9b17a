// Torch-free translation unit: instantiates the fused kernel through its host
// launcher so CI (a CPU machine with nvcc) catches a kernel that does not
// compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_mqa_topk.cuh"

cudaError_t ci_launch_fused() {
  return mqa_topk::launch_sm90_fused_mqa_topk(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              0, 0, 2048, 132, nullptr);
}

// Development variant (dev probe 1): the lean selection.
cudaError_t ci_launch_fused_lean() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedConfig<8, true>>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}

// Development variant (dev probe 2): window-histogram compactions (7 stages).
cudaError_t ci_launch_fused_window() {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedConfig<7, true, true>>(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 2048, 132, nullptr);
}
