// The fused entry points' definitions (fused_kernels.h): one template per
// kernel over (topk, heads); each csrc/kernels/fused_<kernel>_t<topk>[_h64].cu
// instantiates one, so the JIT build compiles them in parallel. Torch-free.
#pragma once
#include "kernels/fused_kernels.h"
#include "mqa_topk/fused/sm90_fused_hybrid.cuh"

template <int kTopk, int kHeads>
cudaError_t fused_whole_launch(const FusedCall& c, void* workspace, int* map_error) {
  return mqa_topk::launch_sm90_fused_blocks<mqa_topk::FusedWholeConfig<kTopk, kHeads>>(
      c.q, c.k, c.scales, c.weights, c.starts, c.ends, c.out, workspace, c.rows, c.keys, c.topk, c.num_sms, c.stream,
      map_error, c.range_err);
}

template <int kTopk, int kHeads>
cudaError_t fused_split_launch(const FusedCall& c, void* workspace, int* map_error) {
  // (few row blocks: fewer CTAs than SMs, every block the same whole number of pieces)
  return mqa_topk::launch_sm90_fused_blocks<mqa_topk::FusedSplitConfig<kTopk, kHeads>>(
      c.q, c.k, c.scales, c.weights, c.starts, c.ends, c.out, workspace, c.rows, c.keys, c.topk,
      mqa_topk::blocks_split_grid(c.rows, c.num_sms), c.stream, map_error, c.range_err);
}

template <int kTopk, int kHeads>
cudaError_t fused_hybrid_launch(const FusedCall& c, void* workspace, void* buffer, int* map_error) {
  return mqa_topk::launch_sm90_fused_hybrid_topk<mqa_topk::FusedWholeConfig<kTopk, kHeads>>(
      c.q, c.k, c.scales, c.weights, c.starts, c.ends, c.out, workspace, buffer, c.rows, c.keys, c.topk, c.num_sms,
      c.stream, map_error, c.range_err);
}
