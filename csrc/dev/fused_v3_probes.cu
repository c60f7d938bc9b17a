// Development variants of the v3 fused kernel (MQA_TOPK_DEV_PROBES=1 builds;
// sm90_fused_mqa_topk_v3.cuh names them): 12 8 stages, one candidate set, the
// weights from a per-lane shared-memory copy; 13 7 stages, two sets (the
// second warpgroup of a row group starts the next block while the first
// selects); 14 12 with the compaction check inlined; 15 12 with the weights in
// registers (they spill); 16 the weights read from the TMA buffer each tile
// (the op's v3 configuration); 17 12 with a barrier after the copy; 18 15
// inlined; 19 16 with two sets; 20 19 with the block-end selects on the
// producer warpgroup's spare warps (kAsyncSelect); 21 20 at 104 / 64 registers;
// 22 16 with the compaction check every 12 tiles instead of 8.
// (12, 13, 14, 17 and 20 returned wrong sets until the key scales were read
// before the MMAs: tile_scales in sm90_fp8_mqa_logits.cuh.)
// Torch-free: fused_probes.cu checks the contract and calls these.
#include "fused_v3_probes.h"

#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"

namespace {
template <class F>
auto with_v3_variant(int64_t variant, F&& f) {
  using namespace mqa_topk;
  return variant == 13   ? f(Sm90FusedV3S7Sets2{})
         : variant == 14 ? f(Sm90FusedV3Inline{})
         : variant == 15 ? f(Sm90FusedV3S8RegW{})
         : variant == 16 ? f(Sm90FusedV3Direct{})
         : variant == 17 ? f(Sm90FusedV3CopySync{})
         : variant == 18 ? f(Sm90FusedV3RegWInline{})
         : variant == 19 ? f(Sm90FusedV3DirectSets2{})
         : variant == 20 ? f(Sm90FusedV3Async{})
         : variant == 21 ? f(Sm90FusedV3Async104{})
         : variant == 22 ? f(Sm90FusedV3Check12{})
         : variant == 23 ? f(Sm90FusedV3Pair{})
         : variant == 24 ? f(Sm90FusedV3PairGate{})
         : variant == 25 ? f(Sm90FusedV3LazyDrop{})
         : variant == 26 ? f(Sm90FusedV3SelPhases{})
         : variant == 27 ? f(Sm90FusedV3GateRange{})
         : variant == 28 ? f(Sm90FusedV3WideOut{})
         : variant == 29 ? f(Sm90FusedV3Target125{})
         : variant == 30 ? f(Sm90FusedV3RankFloor{})
         : variant == 31 ? f(Sm90FusedV3FloorCapped{})
         : variant == 32 ? f(Sm90FusedV3SafeTarget{})
         : variant == 33 ? f(Sm90FusedV3Shares{})
         : variant == 34 ? f(Sm90FusedV3SharesWhole{})
         : variant == 35 ? f(Sm90FusedV3SharesHybrid{})
         : variant == 36 ? f(Sm90FusedV3SharesWholeHybrid{})
         : variant == 37 ? f(Sm90FusedV3HybridEarlyW{})
         : variant == 38 ? f(Sm90FusedV3EarlyW{})
         : variant == 42 ? f(Sm90FusedV3LeanFilter{})
         : variant == 43 ? f(Sm90FusedV3HybridLean{})
                         : f(Sm90FusedV3S8{});
}
}  // namespace

int64_t fused_v3_probe_workspace_bytes(int64_t variant, int64_t topk, int sms) {
  return with_v3_variant(variant, [&](auto cfg) {
    return static_cast<int64_t>(mqa_topk::fused_v3_workspace_bytes<decltype(cfg)>(static_cast<int>(topk), sms));
  });
}

cudaError_t fused_v3_probe_launch(int64_t variant, const void* q, const void* k, const float* scales,
                                  const float* weights, const int* starts, const int* ends, int* out,
                                  void* workspace, int rows, int keys, int topk, int num_sms, cudaStream_t stream,
                                  int* map_error, int probe, int target) {
  return with_v3_variant(variant, [&](auto cfg) {
    return mqa_topk::launch_sm90_fused_mqa_topk_v3<decltype(cfg)>(q, k, scales, weights, starts, ends, out, workspace,
                                                                  rows, keys, topk, num_sms, stream, map_error, probe,
                                                                  {}, target);
  });
}
