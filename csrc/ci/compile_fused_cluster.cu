// Torch-free translation unit: instantiates the fused cluster kernel
// (sm90_fused_cluster_topk.cuh; the op's few-row-block path since session 22)
// through its host launcher, so CI catches a kernel that does not compile for
// sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_cluster_topk.cuh"

cudaError_t ci_launch_cluster(int rows, int keys) {
  return mqa_topk::launch_sm90_fused_cluster_topk(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                                  nullptr, rows, keys, 2048, mqa_topk::fused_cluster_plan(rows, keys, 132),
                                                  nullptr);
}
// The select's state fits the free K ring and Q buffers; the plan's rule.
static_assert(mqa_topk::cluster_topk::kOffCtl + sizeof(mqa_topk::cluster_topk::Ctl) <=
                  static_cast<size_t>(mqa_topk::Sm90LogitsV2Default::kOffScales),
              "the select's state inside the tile loop's K ring and Q buffers");
