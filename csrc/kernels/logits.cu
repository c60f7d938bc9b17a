// The dense logits kernel's instantiation (dense_kernels.h). Torch-free.
#include "kernels/dense_kernels.h"
#include "mqa_topk/logits/sm90_fp8_mqa_logits.cuh"

cudaError_t logits_launch(const void* q, const void* k, const float* scales, const float* weights, const int* starts,
                          const int* ends, float* logits, int64_t ld, int rows, int keys, int heads, int num_sms,
                          cudaStream_t stream, int* map_error, mqa_topk::RangeErrorSink range_err) {
  switch (heads) {
    case 32:
      return mqa_topk::launch_sm90_fp8_mqa_logits<mqa_topk::Sm90LogitsConfigH<32>>(
          q, k, scales, weights, starts, ends, logits, ld, rows, keys, num_sms, stream, map_error, range_err);
    case 64:
      return mqa_topk::launch_sm90_fp8_mqa_logits<mqa_topk::Sm90LogitsConfigH<64>>(
          q, k, scales, weights, starts, ends, logits, ld, rows, keys, num_sms, stream, map_error, range_err);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t logits_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90LogitsConfig;
  *dynamic_smem = Cfg::kSmemBytes;
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(&mqa_topk::sm90_fp8_mqa_logits_kernel<Cfg>));
}
