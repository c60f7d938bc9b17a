// Torch-free translation unit: instantiates every logits kernel variant (via
// its host launcher) so CI, a CPU machine with nvcc, catches a kernel that does
// not compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fp8_mqa_logits.cuh"

cudaError_t ci_launch_logits() {
  return mqa_topk::launch_sm90_fp8_mqa_logits(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0,
                                              0, 132, nullptr);
}

