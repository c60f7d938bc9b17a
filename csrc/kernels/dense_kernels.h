// Torch-free entry points of the dense path's kernels (csrc/kernels/logits.cu,
// topk.cu), called by the op launchers csrc/mqa_logits.cpp and
// csrc/topk_per_row.cpp after their contract checks.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mqa_topk/common/range_check.cuh"

// The dense logits: q [rows, heads, 128] and k [keys, 128] fp8 (k null when
// keys == 0: only the range check runs), scales [keys] and weights [rows,
// heads] fp32 (heads 32 or 64), starts / ends [rows] int32, logits [rows, ld]
// fp32 (ld a multiple of 4, 16-byte aligned). *map_error as fused_launch's
// (index 4: logits).
cudaError_t logits_launch(const void* q, const void* k, const float* scales, const float* weights, const int* starts,
                          const int* ends, float* logits, int64_t ld, int rows, int keys, int heads, int num_sms,
                          cudaStream_t stream, int* map_error, mqa_topk::RangeErrorSink range_err);
cudaError_t logits_attributes(cudaFuncAttributes* attr, int* dynamic_smem);

// The per-row top-k of logits [rows, >= width] (row stride ld) over each
// row's [start, end) into out [rows, topk].
cudaError_t topk_launch(const float* logits, int64_t ld, const int* starts, const int* ends, int* out, int rows,
                        int width, int topk, cudaStream_t stream, mqa_topk::RangeErrorSink range_err);
cudaError_t topk_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
