// The fused kernel with blocks split across CTAs (kSplit, issue 12), in its
// own translation unit so the JIT build compiles it beside the default one.
// fused_mqa_topk (fused_mqa_topk.cu) launches it when the row blocks would
// leave the last wave of the unsplit schedule poorly filled
// (fused_use_split); see include/mqa_topk/sm90_fused_mqa_topk.cuh, kSplit. The shared-gate
// variants (kSplitGate, kSplitThin: dev variants 8 and 9) measured slower
// (BENCHMARKS.md, 2026-12-02); the workspace formula is shared by all split configs.
#include "fused_mqa_topk_split.h"

#include "mqa_topk/sm90_fused_mqa_topk.cuh"

size_t fused_split_workspace_bytes(int topk, int num_sms) {
  return mqa_topk::fused_workspace_bytes<mqa_topk::Sm90FusedSplit>(topk, num_sms);
}

cudaError_t fused_split_launch(const void* q, const void* k, const float* scales, const float* weights,
                               const int* starts, const int* ends, int* out, void* workspace, int rows, int keys,
                               int topk, int num_sms, cudaStream_t stream, int* map_error, int probe, int cap,
                               mqa_topk::RangeErrorSink range_err, int target) {
  return mqa_topk::launch_sm90_fused_mqa_topk<mqa_topk::Sm90FusedSplit>(q, k, scales, weights, starts, ends, out,
                                                                        workspace, rows, keys, topk, num_sms, stream,
                                                                        map_error, probe, cap, range_err, target);
}
