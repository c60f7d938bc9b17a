// Torch-free entry points of the fused staged kernel (fused_mqa_topk_staged.cu;
// include/mqa_topk/sm90_fused_staged_topk.cuh, issue 12 session 22): at most one
// wave of row blocks, each cut into m pieces that compute its logits with the
// dense kernel's tile loop into a logits workspace and publish their
// histograms; each row's owner CTA then selects the row's top-k exactly. One
// launch (after a memset of the blocks' counters).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mqa_topk/range_check.cuh"

// Pieces per row block for rows x keys on num_sms SMs (0: the kernel does not
// apply: more row blocks than SMs, or rows longer than its owner's bitmaps).
int fused_staged_pieces(int rows, int keys, int num_sms);
// The launch's m for a variant (fused_staged_launch): the pieces per row
// block, or for variants 119 / 121 (shares: any number of row blocks) the
// grid, num_sms; 0 where the variant does not apply.
int fused_staged_grid_param(int variant, int rows, int keys, int num_sms);
// Whether fused_staged_launch knows the variant (109, 113, 117, 119, 121, 123, 125).
bool fused_staged_variant_known(int variant);

// Workspace bytes: the logits [rows, fused_staged_ld(keys)] fp32, then the
// pieces' histograms and the blocks' counters (256-byte aligned parts).
inline int64_t fused_staged_ld(int keys) { return (static_cast<int64_t>(keys) + 3) / 4 * 4; }
size_t fused_staged_workspace_bytes(int rows, int keys, int m, int variant);

// Launches it: q, k, scales, weights, starts, ends, out as the fused op;
// workspace: fused_staged_workspace_bytes(rows, keys, m, variant) bytes, 256-byte
// aligned (contents overwritten); m from fused_staged_grid_param. variant: the
// op's kFusedStagedVariant, or a development one (docs/FUSED.md; 109: the
// first digit's histograms from the tile loops, the deep owner pass with the
// lean pass, session 24; 113: 109 with the class staged in each thread's own
// slots, 117: 113 with the pass's loads a round ahead, 119 / 121: 113's /
// 117's pass on shares of every SM, session 25; the variants 97-107, 111 and
// 115 of sessions 22-25 were retired); cudaErrorInvalidValue for any other.
constexpr int kFusedStagedVariant = 117;
cudaError_t fused_staged_launch(const void* q, const void* k, const float* scales, const float* weights,
                                const int* starts, const int* ends, void* workspace, int* out, int rows, int keys,
                                int topk, int m, cudaStream_t stream, int* map_error,
                                mqa_topk::RangeErrorSink range_err, int variant = kFusedStagedVariant);

// Its kernel's attributes and dynamic shared memory (for `mqa-topk build`'s table).
cudaError_t fused_staged_attributes(cudaFuncAttributes* attr, int* dynamic_smem);
