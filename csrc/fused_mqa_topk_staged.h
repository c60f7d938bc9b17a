// Torch-free entry points of the fused staged kernel (fused_mqa_topk_staged.cu;
// include/mqa_topk/sm90_fused_staged_topk.cuh): at most one wave of row blocks,
// each cut into m pieces that compute its logits with the dense kernel's tile
// loop into a logits workspace and publish their histograms; each row's owner
// CTA then selects the row's top-k exactly. One launch (after a memset of the
// blocks' counters).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mqa_topk/range_check.cuh"

// Pieces per row block for rows x keys on num_sms SMs: the launch's m (0: the
// kernel does not apply: more row blocks than SMs, or rows longer than its
// owner's bitmaps).
int fused_staged_pieces(int rows, int keys, int num_sms);

// Workspace bytes: the logits [rows, fused_staged_ld(keys)] fp32, then the
// pieces' histograms and the blocks' counters (256-byte aligned parts).
inline int64_t fused_staged_ld(int keys) { return (static_cast<int64_t>(keys) + 3) / 4 * 4; }
size_t fused_staged_workspace_bytes(int rows, int keys, int m);

// Launches it: q, k, scales, weights, starts, ends, out as the fused op;
// workspace: fused_staged_workspace_bytes(rows, keys, m) bytes, 256-byte
// aligned (contents overwritten); m from fused_staged_pieces.
// cudaErrorInvalidValue for an m outside [1, 16] or a tensor map that cannot
// be encoded (*map_error as the logits launcher's).
cudaError_t fused_staged_launch(const void* q, const void* k, const float* scales, const float* weights,
                                const int* starts, const int* ends, void* workspace, int* out, int rows, int keys,
                                int topk, int m, cudaStream_t stream, int* map_error,
                                mqa_topk::RangeErrorSink range_err);

// Its kernel's attributes and dynamic shared memory (for `mqa-topk build`'s table).
cudaError_t fused_staged_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
