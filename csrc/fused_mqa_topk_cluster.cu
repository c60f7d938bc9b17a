// The fused cluster kernel (see fused_mqa_topk_cluster.h), in its own
// translation unit so the JIT build compiles it beside the others. Torch-free.
#include "fused_mqa_topk_cluster.h"

#include "mqa_topk/sm90_fused_cluster_topk.cuh"

int fused_cluster_plan(int rows, int keys, int num_sms) { return mqa_topk::fused_cluster_plan(rows, keys, num_sms); }

cudaError_t fused_cluster_launch(const void* q, const void* k, const float* scales, const float* weights,
                                 const int* starts, const int* ends, float* logits, int* out, int rows, int keys,
                                 int topk, int m, cudaStream_t stream, int* map_error,
                                 mqa_topk::RangeErrorSink range_err) {
  return mqa_topk::launch_sm90_fused_cluster_topk(q, k, scales, weights, starts, ends, logits, fused_cluster_ld(keys),
                                                  out, rows, keys, topk, m, stream, map_error, range_err);
}

cudaError_t fused_cluster_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90LogitsV2Default;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_cluster_topk_kernel<Cfg>));
}
