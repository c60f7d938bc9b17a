// Torch-free entry points of the fused hybrid kernel (include/mqa_topk/sm90_fused_hybrid_topk.cuh,
// issue 12 session 26): calls of B = SMs + r row blocks (r = 1 or 2) run the whole-block v3 kernel's
// body on B - r blocks and the staged kernel's pieces and owners on the last r, in one
// launch. Instantiated per topk in csrc/fused_mqa_topk_hybrid_t{512,1024,2048}.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "mqa_topk/range_check.cuh"

// r, the extra row blocks past whole waves where the kernel applies (0: it does not).
int fused_hybrid_extra(int rows, int keys, int num_sms);
// Bytes of the op's workspace it needs (the v3 part), and of its own aux buffer (the extra rows' logits,
// the pieces' histograms, counters).
size_t fused_hybrid_workspace_bytes(int topk, int rows, int keys, int num_sms);
size_t fused_hybrid_aux_bytes(int rows, int keys, int num_sms);
// Launches it (fused_hybrid_extra(rows, keys, num_sms) > 0; workspace and aux as above, 256-byte aligned,
// contents overwritten). Same other arguments as the fused op's launchers.
cudaError_t fused_hybrid_launch(const void* q, const void* k, const float* scales, const float* weights,
                                const int* starts, const int* ends, int* out, void* workspace, void* aux, int rows,
                                int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                mqa_topk::RangeErrorSink range_err);
template <int kTopk>
cudaError_t fused_hybrid_launch_t(const void* q, const void* k, const float* scales, const float* weights,
                                  const int* starts, const int* ends, int* out, void* workspace, void* aux, int rows,
                                  int keys, int topk, int num_sms, cudaStream_t stream, int* map_error,
                                  mqa_topk::RangeErrorSink range_err);
extern template cudaError_t fused_hybrid_launch_t<512>(const void*, const void*, const float*, const float*,
                                                       const int*, const int*, int*, void*, void*, int, int, int, int,
                                                       cudaStream_t, int*, mqa_topk::RangeErrorSink);
extern template cudaError_t fused_hybrid_launch_t<1024>(const void*, const void*, const float*, const float*,
                                                        const int*, const int*, int*, void*, void*, int, int, int, int,
                                                        cudaStream_t, int*, mqa_topk::RangeErrorSink);
extern template cudaError_t fused_hybrid_launch_t<2048>(const void*, const void*, const float*, const float*,
                                                        const int*, const int*, int*, void*, void*, int, int, int, int,
                                                        cudaStream_t, int*, mqa_topk::RangeErrorSink);
// The top-2048 kernel's attributes and dynamic shared memory (for `mqa-topk build`'s table).
cudaError_t fused_hybrid_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
