// Torch-free translation unit: instantiates the v3 fused kernel (the dense
// op's main loop; sm90_fused_mqa_topk_v3.cuh) through its host launcher, each
// configuration the dev probes or the op build, so CI catches a kernel that
// does not compile for sm_90a. Nothing is launched.
#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"

template <class Cfg>
cudaError_t ci_launch_v3() {
  return mqa_topk::launch_sm90_fused_mqa_topk_v3<Cfg>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                      nullptr, 0, 0, 2048, 132, nullptr);
}
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3S8>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3S7Sets2>();

// The segment capacity: the v2 kernel's bytes per row, a multiple of 4.
static_assert(mqa_topk::Sm90FusedV3S8::cap(2048) == 992 && mqa_topk::Sm90FusedV3S8::cap(1024) == 736 &&
                  mqa_topk::Sm90FusedV3S8::cap(512) == 608,
              "v3 segment capacity");
static_assert(8 * mqa_topk::Sm90FusedV3S8::cap(2048) == 2 * mqa_topk::Sm90FusedGated::cap(2048),
              "v3 workspace per row = v2's");
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Inline>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Direct>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3DirectSets2>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3S8RegW>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Default>();  // the op's configuration
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Async104>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Pair>();  // dev variant 23 (pair selects)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3PairGate>();  // dev variant 24 (pair selects and gate)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3LazyDrop>();  // dev variant 25 (24, small samples not dropped)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SelPhases>();  // dev variant 26 (25 + select phase stats)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3GateRange>();  // dev variant 27 (25 binning from the gate)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3WideOut>();  // dev variant 28 (27, 6 groups in the output pass)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Target125>();  // dev variant 29 (27, gate target 1.25 k + 256)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3RankFloor>();  // dev variant 30 (29 with the gate rank floor)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3FloorCapped>();  // dev variant 31 (30, the floor where the sample is capped)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SafeTarget>();  // dev variant 32 (31 with the target 1.5 k + 256; the op's until session 13)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Shares>();  // dev variant 33 (32 on equal shares: split blocks)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SharesWhole>();  // dev variant 34 (33, whole blocks as one-piece splits)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SharesHybrid>();  // dev variant 35 (33, shares over the partial waves only)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SharesWholeHybrid>();  // dev variant 36 (34, shares over the partial waves only)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3HybridEarlyW>();  // dev variant 37 (35, weights loaded during the MMAs)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3EarlyW>();  // dev variant 38 (32, weights loaded during the MMAs)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3CutStores>();  // v3check timing cut 39 (32 without the main loop's stores)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3CutSelect>();  // v3check timing cut 40 (32 without the block-end select)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3CutBoth>();  // v3check timing cut 41 (32 without either)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3LeanFilter>();  // v3check variant 42 (32, lean filter and appends; the op's in session 13)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3HybridLean>();  // v3check variant 43 (35, lean filter and appends)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3CutChecks>();  // v3check timing cut 44 (42 without the checks after the gate)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3PipeTail>();  // v3check variant 45 (42, tails overlap the next MMAs)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3PipeRelaxed>();  // v3check variant 46 (45, relaxed stage releases)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Relaxed>();  // v3check variant 47 (42, relaxed stage releases)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3PipeLazy>();  // v3check variant 48 (46, lazy compaction checks; the op's in session 14)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3RegW1>();  // v3check variant 49 (48, row 0's weights in registers)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SplitRG>();  // v3check variant 50 (48, row groups decoupled)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3SplitRGW1>();  // v3check variant 51 (49, row groups decoupled)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3LeanLoop>();  // v3check variant 52 (48, lean tile loop; the op's at 0eb52d7)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3LeanStores>();  // v3check variant 53 (52, predicated appends)
// v3check variant 54 (53, the tail without a flag) is Sm90FusedV3Default, instantiated above.
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3LeanFlagless>();  // v3check variant 55 (52, the tail without a flag)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3LeanFixed<2048>>();  // v3check variant 56 (54 per topk; the op's in session 15)
// session 16: v3check variants 57-61 (kQPerm and the held invariants); 62 (+ kFastGate) is Sm90FusedV3Whole
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3QPerm<2048>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3QPermMasks<2048>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3QPermAddr<2048>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3QPermDesc<2048>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3QPermDescA<2048>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3HybridFastGate>();  // v3check variant 63 (43 + kFastGate; the op's split kernel, Sm90FusedV3Split)
// the op's whole-block kernels (Sm90FusedV3Whole<topk> = v3check variant 62, csrc/fused_mqa_topk_v3_t*.cu)
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Whole<512>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Whole<1024>>();
template cudaError_t ci_launch_v3<mqa_topk::Sm90FusedV3Whole<2048>>();
// Where the op's split launch takes Sm90FusedV3SplitLarge (csrc/fused_mqa_topk_v3_split_t*.cu; v3check variant 72,
// compiled with tools/v3check): more than SMs / 4 row blocks.
static_assert(!mqa_topk::fused_v3_split_large(256, 132) && !mqa_topk::fused_v3_split_large(264, 132) &&
                  mqa_topk::fused_v3_split_large(272, 132) && mqa_topk::fused_v3_split_large(512, 132),
              "the split kernel on the lean loop: more than SMs / 4 row blocks");
// kHybrid's share blocks: all up to two waves, none on whole waves, else the partial wave and one more.
static_assert(mqa_topk::fused_v3_share_blocks(8, 132) == 8 && mqa_topk::fused_v3_share_blocks(264, 132) == 264 &&
                  mqa_topk::fused_v3_share_blocks(265, 132) == 133 && mqa_topk::fused_v3_share_blocks(396, 132) == 0 &&
                  mqa_topk::fused_v3_share_blocks(1024, 132) == 232,
              "kHybrid share blocks");
// Rule n > 0 (session 26): all up to one wave, else only the partial last wave.
static_assert(mqa_topk::fused_v3_share_blocks(8, 132, 8) == 8 && mqa_topk::fused_v3_share_blocks(132, 132, 8) == 132 &&
                  mqa_topk::fused_v3_share_blocks(133, 132, 8) == 1 &&
                  mqa_topk::fused_v3_share_blocks(197, 132, 4) == 65 &&
                  mqa_topk::fused_v3_share_blocks(264, 132, 8) == 0 && mqa_topk::fused_v3_share_blocks(265, 132, 8) == 1,
              "kHybrid share blocks, partial-wave rule");

// The gate targets: 1.5 k + 256 (the op's, fused_gate_target) and 1.25 k + 256 (dev variants 29-31).
static_assert(mqa_topk::Sm90FusedV3Default::gate_target(512) == 1024 &&
                  mqa_topk::Sm90FusedV3Default::gate_target(1024) == 1792 &&
                  mqa_topk::Sm90FusedV3Default::gate_target(2048) == 3328,
              "op gate target");
static_assert(mqa_topk::Sm90FusedV3Target125::gate_target(512) == 896 &&
                  mqa_topk::Sm90FusedV3Target125::gate_target(1024) == 1536 &&
                  mqa_topk::Sm90FusedV3Target125::gate_target(2048) == 2816,
              "1.25 k + 256 gate target");
