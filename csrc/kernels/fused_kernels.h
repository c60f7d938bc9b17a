// Torch-free entry points of the fused kernels (csrc/kernels/fused_*.cu: one
// translation unit per kernel and topk, so the JIT build compiles them in
// parallel and CI compiles each with nvcc alone). The op's launcher
// (csrc/fused_mqa_topk.cpp) checks the contract, picks the kernel
// (include/mqa_topk/fused/heuristics.h) and calls one of these.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "mqa_topk/fused/heuristics.h"
#include "mqa_topk/common/range_check.cuh"

// One call of the fused op: q [rows, heads, 128] and k [keys, 128] fp8,
// scales [keys] and weights [rows, heads] fp32 (heads 32 or 64), starts /
// ends [rows] int32, out [rows, topk] int32 (topk 512, 1024 or 2048), on
// num_sms SMs.
struct FusedCall {
  const void* q;
  const void* k;  // (null when keys == 0)
  const float* scales;
  const float* weights;
  const int* starts;
  const int* ends;
  int* out;
  int rows, keys, topk, num_sms;
  cudaStream_t stream;
  mqa_topk::RangeErrorSink range_err;
  int heads;
};

// The op's fixed workspace (every kernel's need; independent of rows and
// keys): the split kernel's, the largest on any GPU of 16 SMs or more.
size_t fused_workspace_bytes(int topk, int num_sms);

// The per-call buffer a kernel needs beyond the fixed workspace (the staged
// and hybrid kernels' logits of their row blocks; 0 for whole and split).
size_t fused_buffer_bytes(mqa_topk::FusedKernel kernel, int rows, int keys, int num_sms);

// Launches `kernel` (which must run the shape: mqa_topk::fused_kernel_runs):
// workspace fused_workspace_bytes(topk, num_sms) bytes and buffer
// fused_buffer_bytes(...) bytes, 256-byte aligned, contents overwritten.
// *map_error: the first tensor map that could not be encoded (1000 x its
// index (q, k, scales, weights, logits) + CUresult; 0 if none).
cudaError_t fused_launch(mqa_topk::FusedKernel kernel, const FusedCall& c, void* workspace, void* buffer,
                         int* map_error);

// A kernel's attributes (its top-2048 instantiation) and the dynamic shared
// memory it requests, for `mqa-topk build`'s table.
cudaError_t fused_kernel_attributes(mqa_topk::FusedKernel kernel, cudaFuncAttributes* attr, int* dynamic_smem);

// The per-kernel, per-topk, per-heads entry points behind fused_launch
// (kernels/fused_entries.cuh; each instantiated in its own translation unit).
template <int kTopk, int kHeads>
cudaError_t fused_whole_launch(const FusedCall& c, void* workspace, int* map_error);
template <int kTopk, int kHeads>
cudaError_t fused_split_launch(const FusedCall& c, void* workspace, int* map_error);
template <int kTopk, int kHeads>
cudaError_t fused_hybrid_launch(const FusedCall& c, void* workspace, void* buffer, int* map_error);
template <int kHeads>
cudaError_t fused_staged_launch(const FusedCall& c, void* buffer, int* map_error);
#define FUSED_ENTRY_POINTS(kTopk, kHeads)                                                                   \
  extern template cudaError_t fused_whole_launch<kTopk, kHeads>(const FusedCall&, void*, int*);             \
  extern template cudaError_t fused_split_launch<kTopk, kHeads>(const FusedCall&, void*, int*);             \
  extern template cudaError_t fused_hybrid_launch<kTopk, kHeads>(const FusedCall&, void*, void*, int*);
FUSED_ENTRY_POINTS(512, 32)
FUSED_ENTRY_POINTS(1024, 32)
FUSED_ENTRY_POINTS(2048, 32)
FUSED_ENTRY_POINTS(512, 64)
FUSED_ENTRY_POINTS(1024, 64)
FUSED_ENTRY_POINTS(2048, 64)
#undef FUSED_ENTRY_POINTS
extern template cudaError_t fused_staged_launch<32>(const FusedCall&, void*, int*);
extern template cudaError_t fused_staged_launch<64>(const FusedCall&, void*, int*);
// The 32-head top-2048 instantiations' attributes.
cudaError_t fused_whole_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
cudaError_t fused_split_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
cudaError_t fused_staged_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
cudaError_t fused_hybrid_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
size_t fused_staged_buffer_bytes(int rows, int keys, int num_sms);
size_t fused_hybrid_buffer_bytes(int rows, int keys, int num_sms);
