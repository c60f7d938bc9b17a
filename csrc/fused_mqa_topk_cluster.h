// Torch-free entry points of the fused cluster kernel (fused_mqa_topk_cluster.cu;
// include/mqa_topk/sm90_fused_cluster_topk.cuh, issue 12 session 22): few row
// blocks, each on a cluster of m CTAs that compute its logits with the dense
// kernel's tile loop into a logits workspace and select its top-k exactly
// through distributed shared memory, in one launch.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mqa_topk/range_check.cuh"

// The cluster size for rows x keys on num_sms SMs (0: the kernel does not
// apply: more than SMs / 2 row blocks, pieces over 32K keys, or no cluster of
// that size resident for every block at once).
int fused_cluster_plan(int rows, int keys, int num_sms);

// The logits workspace's row pitch (floats) for `keys` keys.
inline int64_t fused_cluster_ld(int keys) { return (static_cast<int64_t>(keys) + 3) / 4 * 4; }

// Launches it: q, k, scales, weights, starts, ends, out as the fused op;
// logits: [rows, fused_cluster_ld(keys)] fp32, 16-byte aligned (contents
// overwritten); m from fused_cluster_plan.
cudaError_t fused_cluster_launch(const void* q, const void* k, const float* scales, const float* weights,
                                 const int* starts, const int* ends, float* logits, int* out, int rows, int keys,
                                 int topk, int m, cudaStream_t stream, int* map_error,
                                 mqa_topk::RangeErrorSink range_err);

// Its kernel's attributes and dynamic shared memory (for `mqa-topk build`'s table).
cudaError_t fused_cluster_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
