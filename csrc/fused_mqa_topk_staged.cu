// The fused staged kernel (see fused_mqa_topk_staged.h), in its own
// translation unit so the JIT build compiles it beside the others. Torch-free.
#include "fused_mqa_topk_staged.h"

#include "mqa_topk/sm90_fused_staged_topk.cuh"

namespace {
using Cfg = mqa_topk::Sm90LogitsV2Default;  // the op's lean logits loop
size_t logits_bytes(int rows, int keys) {
  return (static_cast<size_t>(rows) * static_cast<size_t>(fused_staged_ld(keys)) * 4 + 255) / 256 * 256;
}
}  // namespace

int fused_staged_pieces(int rows, int keys, int num_sms) { return mqa_topk::fused_staged_pieces(rows, keys, num_sms); }

size_t fused_staged_workspace_bytes(int rows, int keys, int m) {
  return logits_bytes(rows, keys) + mqa_topk::fused_staged_aux_bytes(rows, m);
}

cudaError_t fused_staged_launch(const void* q, const void* k, const float* scales, const float* weights,
                                const int* starts, const int* ends, void* workspace, int* out, int rows, int keys,
                                int topk, int m, cudaStream_t stream, int* map_error,
                                mqa_topk::RangeErrorSink range_err) {
  float* logits = static_cast<float*>(workspace);
  void* aux = static_cast<uint8_t*>(workspace) + logits_bytes(rows, keys);
  return mqa_topk::launch_sm90_fused_staged_topk<Cfg>(q, k, scales, weights, starts, ends, logits,
                                                      fused_staged_ld(keys), aux, out, rows, keys, topk, m, stream,
                                                      map_error, range_err);
}

cudaError_t fused_staged_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_staged_topk_kernel<Cfg>));
}
