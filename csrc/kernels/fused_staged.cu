// The staged kernel (fused_kernels.h), in its own translation unit. Torch-free.
#include "kernels/fused_kernels.h"
#include "mqa_topk/fused/sm90_fused_staged.cuh"

namespace {
using Cfg = mqa_topk::Sm90LogitsConfig;  // the dense kernel's tile loop (32 heads; 64: Sm90LogitsConfigH<64>)
}  // namespace

// The buffer: the logits [rows, ld] fp32, then the pieces' histograms and the blocks' counters.
size_t fused_staged_buffer_bytes(int rows, int keys, int num_sms) {
  const int m = mqa_topk::fused_staged_pieces(rows, keys, num_sms);
  return m > 0 ? mqa_topk::staged_logits_bytes(rows, keys) + mqa_topk::fused_staged_aux_bytes(rows, m) : 0;
}

template <int kHeads>
cudaError_t fused_staged_launch(const FusedCall& c, void* buffer, int* map_error) {
  const int m = mqa_topk::fused_staged_pieces(c.rows, c.keys, c.num_sms);
  if (m == 0) return cudaErrorInvalidValue;
  float* logits = static_cast<float*>(buffer);
  void* aux = static_cast<uint8_t*>(buffer) + mqa_topk::staged_logits_bytes(c.rows, c.keys);
  return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsConfigH<kHeads>>(c.q, c.k, c.scales, c.weights, c.starts, c.ends, logits,
                                                      mqa_topk::staged_logits_ld(c.keys), aux, c.out, c.rows, c.keys,
                                                      c.topk, m, c.stream, map_error, c.range_err);
}

template cudaError_t fused_staged_launch<32>(const FusedCall&, void*, int*);
template cudaError_t fused_staged_launch<64>(const FusedCall&, void*, int*);

cudaError_t fused_staged_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fused_staged_topk_kernel<Cfg>));
}
