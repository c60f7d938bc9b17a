// v3check: a torch-free device harness for the v3 fused kernel
// (sm90_fused_mqa_topk_v3.cuh). Built on the CPU machine with nvcc alone
// (tools/v3check/build.sh -> build/v3check), carried to the GPU machine and
// run there with no extension build: a debugging round then costs the machine
// start and the run, not 2.5 minutes of JIT build.
//
// It generates inputs on the host (gaussian / relu-saturated / rising /
// all-equal / zero-weights), computes the dense logits with the op's logits
// kernel (sm90_fp8_mqa_logits_v2.cuh), the exact reference sets on the host
// from them ((value desc, index asc), the fused kernels' logits are bitwise
// equal to the dense ones, so the sets must be identical), and runs:
//   check  VARIANTS ROWS KEYS TOPK LAYOUT DIST [grid=G] [target=T]
//          three runs per variant with poisoned outputs: wrong rows, reruns
//          differing (set / order)
//   dump   VARIANTS KEYS  (probe 3: 8 rows, one CTA, every appended entry
//          compared with the dense logit at its index)
//   stages VARIANTS ROWS KEYS (probe 4: K stages a warp read that did not
//          hold the tile its walk expected, per row group)
//   stats  VARIANTS ROWS KEYS TOPK LAYOUT DIST (probe 2: gated / redone rows,
//          candidates and cycles of the gate, selects and compactions)
//   wcheck VARIANTS ROWS KEYS TOPK LAYOUT DIST (probe 5: the weight copy
//          compared with the TMA buffer at every tile; copy variants only)
//   timeline VARIANTS ROWS KEYS TOPK LAYOUT DIST [grid=G] (probe 8, kShares
//          variants: thread 0's global-timer marks per CTA and visit, from
//          the kernel's start: the split phases' spread over the CTAs)
//   time   VARIANTS ROWS KEYS TOPK LAYOUT DIST (cold-L2 medians: dense logits
//          alone, native dense = logits + top-k, fused v2 (the op's kernel),
//          fused v3 variants; and each path's wrong rows)
// VARIANTS: comma list of 12 (op candidate: 8 stages, smem weights), 13 (7
// stages, two sets), 14 (check inlined), 15 (register weights), 2 (the op's v2
// fused kernel). Development only: never part of the extension or the op.
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mqa_topk/sm90_fp8_mqa_logits_v2.cuh"
#include "mqa_topk/sm90_fused_staged_topk.cuh"
#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"
#include "mqa_topk/sm90_topk_per_row.cuh"

#include "../harness_common.h"

namespace {
using namespace mqa_topk;
using namespace harness;

struct Work {
  int rows = 0, keys = 0, topk = 0;
  std::vector<uint8_t> q, k;
  std::vector<float> scales, weights;
  std::vector<int> starts, ends;
};

Work make_work(int rows, int keys, int topk, const std::string& layout, const std::string& dist, uint64_t seed) {
  Work w;
  w.rows = rows, w.keys = keys, w.topk = topk;
  Rng rng(seed);
  w.starts.resize(rows), w.ends.resize(rows);
  for (int i = 0; i < rows; ++i) {
    if (layout == "causal") {
      w.starts[i] = 0, w.ends[i] = std::max(0, std::min(keys, keys - rows + i + 1));
    } else if (layout == "full") {
      w.starts[i] = 0, w.ends[i] = keys;
    } else {  // ragged: random ranges, unaligned starts, some short or empty rows
      const int s = static_cast<int>(rng.next() % std::max(1, keys / 2));
      const int mode = static_cast<int>(rng.next() % 8);
      int len = mode == 0 ? 0 : mode == 1 ? static_cast<int>(rng.next() % (topk + 1)) : static_cast<int>(rng.next() % (keys - s + 1));
      w.starts[i] = s, w.ends[i] = std::min(keys, s + len);
    }
  }
  w.q.resize(size_t(rows) * 32 * 128), w.k.resize(size_t(keys) * 128);
  w.scales.resize(keys), w.weights.resize(size_t(rows) * 32);
  if (dist == "relu_saturated") {
    for (auto& x : w.k) x = fp8(1.0 + 0.3 * rng.gauss());
    for (int r = 0; r < rows; ++r) {
      const double b = -0.06 - 0.06 * rng.uni();
      for (int j = 0; j < 32 * 128; ++j) w.q[size_t(r) * 4096 + j] = fp8(b + 0.3 * rng.gauss());
    }
  } else if (dist == "rising") {
    std::vector<double> t(128);
    for (auto& x : t) x = rng.uni() < 0.5 ? -1.0 / std::sqrt(128.0) : 1.0 / std::sqrt(128.0);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < 32; ++h) {
        const double a = 0.5 + rng.uni();
        for (int d = 0; d < 128; ++d) w.q[(size_t(r) * 32 + h) * 128 + d] = fp8(a * t[d] * 8 + 0.25 * rng.gauss());
      }
    for (int j = 0; j < keys; ++j) {
      const double pos = double(j) / std::max(keys, 1);
      for (int d = 0; d < 128; ++d) w.k[size_t(j) * 128 + d] = fp8((0.25 + 1.75 * pos) * t[d] * 8 + 0.1 * rng.gauss());
    }
  } else if (dist == "equal") {  // every logit equal: pure tie-break
    for (auto& x : w.q) x = fp8(0.5);
    for (auto& x : w.k) x = fp8(0.5);
  } else {
    for (auto& x : w.q) x = fp8(rng.gauss());
    for (auto& x : w.k) x = fp8(rng.gauss());
  }
  for (int j = 0; j < keys; ++j)
    w.scales[j] = dist == "equal" ? 1.0f
                  : dist == "rising" ? static_cast<float>(std::exp2(-1.0 + 2.0 * j / std::max(keys, 1)))
                                     : static_cast<float>(0.5 + 1.5 * rng.uni());
  for (auto& x : w.weights)
    x = dist == "zero_weights" ? 0.f : dist == "equal" ? 1.f / 32 : static_cast<float>(std::fabs(rng.gauss()) / 32 + 1.0 / 1024);
  return w;
}

struct Dev {
  const Work* w = nullptr;
  void *q = nullptr, *k = nullptr;
  float *scales = nullptr, *weights = nullptr, *logits = nullptr;
  int *starts = nullptr, *ends = nullptr, *out = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  int64_t ld = 0;
};

Dev upload_work(const Work& w) {
  Dev d;
  d.w = &w;
  upload_inputs(w, d);
  d.ld = (w.keys + 3) / 4 * 4;
  CK(cudaMalloc(&d.logits, std::max<size_t>(16, size_t(w.rows) * d.ld * 4)));
  // (+ probe 8's timeline marks after the output: 128 words per CTA)
  CK(cudaMalloc(&d.out, (size_t(w.rows) * w.topk + size_t(256) * 128) * 4));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  d.ws_bytes = std::max({fused_v3_workspace_bytes<Sm90FusedV3S7Sets2>(w.topk, sms),
                         fused_v3_workspace_bytes<Sm90FusedV3S8>(w.topk, sms),
                         fused_workspace_bytes<Sm90FusedDefault>(w.topk, sms),
                         fused_workspace_bytes<Sm90FusedSplit>(w.topk, sms),
                         fused_workspace_bytes<Sm90FusedSplitAlign>(w.topk, sms),
                         fused_v3_workspace_bytes<Sm90FusedV3Shares>(w.topk, sms),
                         fused_v3_workspace_bytes<Sm90FusedV3SharesWhole>(w.topk, sms),
                         fused_v3_workspace_bytes<Sm90FusedV3SplitHist>(w.topk, sms),
                         fused_staged_aux_bytes(w.rows, std::max(1, fused_staged_pieces(w.rows, w.keys, sms)))});
  CK(cudaMalloc(&d.ws, d.ws_bytes));
  return d;
}

void free_dev(Dev& d) {
  for (void* p : {d.q, d.k, static_cast<void*>(d.scales), static_cast<void*>(d.weights), static_cast<void*>(d.logits),
                  static_cast<void*>(d.starts), static_cast<void*>(d.ends), static_cast<void*>(d.out), d.ws})
    cudaFree(p);
}

int g_sms = 132;

cudaError_t launch_dense_logits(const Dev& d, cudaStream_t st = 0) {
  const Work& w = *d.w;
  int me = 0;
  return launch_sm90_fp8_mqa_logits_v2(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.logits, d.ld, w.rows, w.keys,
                                       g_sms, st, &me);
}

// The staged kernel here (sm90_fused_staged_topk.cuh, the op's): variant 117,
// and 118 with thread 0's timeline marks.
bool staged_pieces_variant(int v) { return v == 117 || v == 118; }

// Variants 91 / 92 (kSplitHist bit 1024): whether their launch is a cluster
// launch here (fused_v3_cluster_plan), printed before they run.
void report_cluster_plan(int variant, const Work& w, int grid) {
  if (staged_pieces_variant(variant)) {
    const int sms = grid > 0 ? std::min(grid, g_sms) : g_sms;
    const int m = fused_staged_pieces(w.rows, w.keys, sms);
    std::printf("  (v%d: %d row blocks x %d pieces = %d CTAs)\n", variant, (w.rows + 7) / 8, m, m * ((w.rows + 7) / 8));
    return;
  }
#ifdef V3CHECK_CLUSTER
  (void)w, (void)grid;
#else
  if (variant != 91 && variant != 92) return;
  const int sms = grid > 0 ? std::min(grid, g_sms) : g_sms;
  int mc = 0;
  const int m = variant == 91 ? fused_v3_cluster_plan<Sm90FusedV3SplitAlignCl>(w.rows, sms, &mc)
                : fused_v3_cluster_plan<Sm90FusedV3SplitPipeAlignCl<2048>>(w.rows, sms, &mc);
  const int nb = (w.rows + 7) / 8;
  std::printf("  (v%d: %d row blocks on %d CTAs: %s; cudaOccupancyMaxActiveClusters %d)\n", variant, nb, sms,
              m ? (std::string("clusters of ") + std::to_string(m) + ", " + std::to_string(m * nb) + " CTAs").c_str()
                : "no cluster launch", mc);
#endif
}

// The per-topk configurations C<512>, C<1024>, C<2048> through v3 (any other topk: invalid).
template <template <int> class C, class F>
cudaError_t per_topk(int topk, F&& v3) {
  switch (topk) {
    case 512: return v3(C<512>{});
    case 1024: return v3(C<1024>{});
    case 2048: return v3(C<2048>{});
    default: return cudaErrorInvalidValue;
  }
}

// Variants 86-94, in every build: the op's split kernels (86, 87) and session
// 21's (88-94). False when `variant` is none of them.
template <class F>
bool launch_split_86_94(int variant, int topk, F&& v3, cudaError_t* e) {
  switch (variant) {
    case 86: *e = v3(Sm90FusedV3SplitFence{}); return true;  // (session 20: 66 with the split protocol's lean fences)
    case 87: *e = per_topk<Sm90FusedV3SplitPipeFence>(topk, v3); return true;  // (72 with them)
    case 88: *e = v3(Sm90FusedV3SplitAlign{}); return true;  // (86 on aligned pieces, kSplitHist bit 512)
    case 89: *e = per_topk<Sm90FusedV3SplitPipeAlign>(topk, v3); return true;  // (87 on aligned pieces)
    case 90: *e = v3(Sm90FusedV3SplitAlignMarks{}); return true;  // (88 with probe 8's timeline marks)
    case 91: *e = v3(Sm90FusedV3SplitAlignCl{}); return true;  // (88 launched as clusters of the aligned pieces)
    case 92: *e = per_topk<Sm90FusedV3SplitPipeAlignCl>(topk, v3); return true;  // (89 launched as clusters)
    case 93: *e = v3(Sm90FusedV3SplitAlignList{}); return true;  // (88 with the list gate, kSplitHist bit 2048)
    case 94: *e = per_topk<Sm90FusedV3SplitPipeAlignList>(topk, v3); return true;  // (89 with the list gate)
    default: return false;
  }
}

// Runs one fused variant into d.out (2 = the op's v2 kernel).
cudaError_t launch_fused(int variant, const Dev& d, int grid, int probe, int target, cudaStream_t st = 0) {
  const Work& w = *d.w;
  const int sms = grid > 0 ? std::min(grid, g_sms) : g_sms;
  int me = 0;
  auto v3 = [&](auto cfg) {
    return launch_sm90_fused_mqa_topk_v3<decltype(cfg)>(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.out, d.ws,
                                                         w.rows, w.keys, w.topk, sms, st, &me, probe, {}, target);
  };
  if (staged_pieces_variant(variant)) {  // the staged kernel (sm90_fused_staged_topk.cuh): the logits
    // buffer its logits workspace, d.ws its histograms and counters; 118 with thread 0's timeline marks
    const int m = fused_staged_pieces(w.rows, w.keys, sms);
    if (m == 0 || fused_staged_aux_bytes(w.rows, m) > d.ws_bytes) return cudaErrorInvalidConfiguration;
    uint32_t* marks = variant % 2 == 0 ? reinterpret_cast<uint32_t*>(d.out + size_t(w.rows) * w.topk) : nullptr;
    return launch_sm90_fused_staged_topk<Sm90LogitsV2Default>(d.q, d.k, d.scales, d.weights, d.starts, d.ends,
                                                              d.logits, d.ld, d.ws, d.out, w.rows, w.keys, w.topk, m,
                                                              st, &me, {}, marks);
  }
#ifdef V3CHECK_CLUSTER  // (-DV3CHECK_CLUSTER, a fast build: the staged kernel, the op's split kernels 86 / 87 and whole-block 62 only;
                        // the cluster kernel 95 / 96 it was named for was retired in session 23)
  switch (variant) {
    case 86: return v3(Sm90FusedV3SplitFence{});
    case 87: return per_topk<Sm90FusedV3SplitPipeFence>(w.topk, v3);
    case 62: return per_topk<Sm90FusedV3Whole>(w.topk, v3);  // (the op's whole-block kernel)
    default: std::fprintf(stderr, "variant %d not in this build (V3CHECK_CLUSTER)\n", variant); return cudaErrorInvalidValue;
  }
#else
  cudaError_t split_err = cudaSuccess;
  if (launch_split_86_94(variant, w.topk, v3, &split_err)) return split_err;
  switch (variant) {
#ifdef V3CHECK_SPLIT  // (-DV3CHECK_SPLIT: the op's split kernel and session 19's split variants, the fastest build)
    case 66: return v3(Sm90FusedV3SplitHistRegs{});
    case 72: return w.topk == 2048 ? v3(Sm90FusedV3SplitPipe<2048>{}) : cudaErrorInvalidValue;  // (top-2048 only here)
    default: std::fprintf(stderr, "variant %d not in this build (V3CHECK_SPLIT)\n", variant); return cudaErrorInvalidValue;
#else
#ifndef V3CHECK_MIN  // (-DV3CHECK_FEW -DV3CHECK_MIN: the op's kernel, 43 and the newest variants only)
    case 2:
      return launch_sm90_fused_mqa_topk<Sm90FusedDefault>(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.out, d.ws,
                                                          w.rows, w.keys, w.topk, sms, st, &me, probe, 0, {}, target);
#ifndef V3CHECK_FEW  // (-DV3CHECK_FEW: only the op's kernels and the newest variants, a faster build)
    case 13: return v3(Sm90FusedV3S7Sets2{});
    case 14: return v3(Sm90FusedV3Inline{});
    case 15: return v3(Sm90FusedV3S8RegW{});
    case 16: return v3(Sm90FusedV3Direct{});
    case 17: return v3(Sm90FusedV3CopySync{});
    case 18: return v3(Sm90FusedV3RegWInline{});
    case 19: return v3(Sm90FusedV3DirectSets2{});
    case 20: return v3(Sm90FusedV3Async{});
    case 21: return v3(Sm90FusedV3Async104{});
    case 22: return v3(Sm90FusedV3Check12{});
    case 23: return v3(Sm90FusedV3Pair{});
    case 24: return v3(Sm90FusedV3PairGate{});
    case 25: return v3(Sm90FusedV3LazyDrop{});
    case 26: return v3(Sm90FusedV3SelPhases{});
    case 27: return v3(Sm90FusedV3GateRange{});
    case 28: return v3(Sm90FusedV3WideOut{});
    case 29: return v3(Sm90FusedV3Target125{});
    case 30: return v3(Sm90FusedV3RankFloor{});
    case 31: return v3(Sm90FusedV3FloorCapped{});
#endif
    case 32: return v3(Sm90FusedV3SafeTarget{});
    case 33: return v3(Sm90FusedV3Shares{});
    case 34: return v3(Sm90FusedV3SharesWhole{});
    case 35: return v3(Sm90FusedV3SharesHybrid{});
    case 36: return v3(Sm90FusedV3SharesWholeHybrid{});
    case 37: return v3(Sm90FusedV3HybridEarlyW{});
    case 38: return v3(Sm90FusedV3EarlyW{});
    // timing cuts of 32 (wrong sets by design: time them, never check them)
    case 39: return v3(Sm90FusedV3CutStores{});
    case 40: return v3(Sm90FusedV3CutSelect{});
    case 41: return v3(Sm90FusedV3CutBoth{});
    case 7:  // the op's split kernel (v2 pieces and merge; issue 12)
      return launch_sm90_fused_mqa_topk<Sm90FusedSplit>(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.out, d.ws,
                                                        w.rows, w.keys, w.topk, sms, st, &me, probe, 0, {}, target);
#endif
    case 42: return v3(Sm90FusedV3LeanFilter{});
    case 43: return v3(Sm90FusedV3HybridLean{});
    case 63: return v3(Sm90FusedV3HybridFastGate{});  // session 16: 43 with the one-pass sample gate
    // session 18: 63 with the split selects from the pieces' published histograms (merge; merge + gate)
    case 64: return v3(Sm90FusedV3SplitHistMerge{});
    case 65: return v3(Sm90FusedV3SplitHist{});
    case 66: return v3(Sm90FusedV3SplitHistRegs{});  // 65 with the gate's records read once
    case 67: return v3(Sm90FusedV3SplitHistLat{});  // 66 with dependent-load chases in the gate and the merge (probe 6)
    case 68: return v3(Sm90FusedV3SplitDist{});  // session 19: 66 with the merge by every piece
    case 69: return v3(Sm90FusedV3SplitLean{});  // session 19: 66 on the lean loop (kLeanLoop 3, kRelaxedRelease)
    case 70:  // 69 for one topk
    case 71:  // 70 with kQPerm 7
      switch (variant * 4096 + w.topk) {
        case 70 * 4096 + 512: return v3(Sm90FusedV3SplitLeanFixed<512>{});
        case 70 * 4096 + 1024: return v3(Sm90FusedV3SplitLeanFixed<1024>{});
        case 70 * 4096 + 2048: return v3(Sm90FusedV3SplitLeanFixed<2048>{});
        case 71 * 4096 + 512: return v3(Sm90FusedV3SplitQPerm<512>{});
        case 71 * 4096 + 1024: return v3(Sm90FusedV3SplitQPerm<1024>{});
        case 71 * 4096 + 2048: return v3(Sm90FusedV3SplitQPerm<2048>{});
        default: return cudaErrorInvalidValue;
      }
    case 74: return v3(Sm90FusedV3SplitRelaxed{});  // (session 19: 66 + kRelaxedRelease)
    case 75: return v3(Sm90FusedV3SplitLean1{});  // (74 + kLeanLoop 1)
    case 76: return w.topk == 2048 ? v3(Sm90FusedV3SplitPipeMarks<2048>{}) : cudaErrorInvalidValue;  // (72 + probe 8's marks)
    case 77: return v3(Sm90FusedV3SplitGatePub{});  // (session 20: 66 with the published shared gate)
    case 78: return w.topk == 2048 ? v3(Sm90FusedV3SplitPipePub<2048>{}) : cudaErrorInvalidValue;  // (72 with it)
    case 79: return v3(Sm90FusedV3SplitGatePubMarks{});  // (77 + probe 8's marks)
    case 80: return w.topk == 2048 ? v3(Sm90FusedV3SplitPipePubMarks<2048>{}) : cudaErrorInvalidValue;  // (78 + them)
    case 81: return v3(Sm90FusedV3SplitGateSum{});  // (session 20: 66 with the gate's bins summed by loads, no atomics)
    case 82: return v3(Sm90FusedV3SplitGateSumMarks{});  // (81 + probe 8's marks)
    case 83:  // (72 with it)
      switch (w.topk) {
        case 512: return v3(Sm90FusedV3SplitPipeSum<512>{});
        case 1024: return v3(Sm90FusedV3SplitPipeSum<1024>{});
        case 2048: return v3(Sm90FusedV3SplitPipeSum<2048>{});
        default: return cudaErrorInvalidValue;
      }
    case 84: return w.topk == 2048 ? v3(Sm90FusedV3SplitPipeSumMarks<2048>{}) : cudaErrorInvalidValue;  // (83 + the marks)
    case 85: return v3(Sm90FusedV3SplitGateTwice{});  // (67 ranking its gate twice, probe 8)
    case 72:  // 71 with kPipeTail (session 19)
    case 73:  // 72 with the descriptors held (kQPerm 31)
      switch (variant * 4096 + w.topk) {
        case 72 * 4096 + 512: return v3(Sm90FusedV3SplitPipe<512>{});
        case 72 * 4096 + 1024: return v3(Sm90FusedV3SplitPipe<1024>{});
        case 72 * 4096 + 2048: return v3(Sm90FusedV3SplitPipe<2048>{});
        case 73 * 4096 + 512: return v3(Sm90FusedV3SplitPipeDesc<512>{});
        case 73 * 4096 + 1024: return v3(Sm90FusedV3SplitPipeDesc<1024>{});
        case 73 * 4096 + 2048: return v3(Sm90FusedV3SplitPipeDesc<2048>{});
        default: return cudaErrorInvalidValue;
      }
    // session 14: 44 a timing cut (exact only while no compaction is due), 45-47
    case 44: return v3(Sm90FusedV3CutChecks{});
    case 45: return v3(Sm90FusedV3PipeTail{});
    case 46: return v3(Sm90FusedV3PipeRelaxed{});
    case 47: return v3(Sm90FusedV3Relaxed{});
    case 48: return v3(Sm90FusedV3PipeLazy{});
    case 49: return v3(Sm90FusedV3RegW1{});
    // session 15: the row groups decoupled (own 4-row blocks, K rings, producer warps)
    case 50: return v3(Sm90FusedV3SplitRG{});
    case 51: return v3(Sm90FusedV3SplitRGW1{});
    case 52: return v3(Sm90FusedV3LeanLoop{});
    case 53: return v3(Sm90FusedV3LeanStores{});
    case 54: return v3(Sm90FusedV3LeanTail{});
    case 55: return v3(Sm90FusedV3LeanFlagless{});
    case 56:  // 54 for one topk (its index stores at an immediate offset)
      switch (w.topk) {
        case 512: return v3(Sm90FusedV3LeanFixed<512>{});
        case 1024: return v3(Sm90FusedV3LeanFixed<1024>{});
        case 2048: return v3(Sm90FusedV3LeanFixed<2048>{});
        default: return cudaErrorInvalidValue;
      }
    // session 16: the select-free reduce-scatter (kQPerm), then the quad masks and the weight rows' addresses held
    case 57:
    case 58:
    case 59:
    case 60:
    case 61:
    case 62:
      switch (variant * 4096 + w.topk) {
        case 57 * 4096 + 512: return v3(Sm90FusedV3QPerm<512>{});
        case 57 * 4096 + 1024: return v3(Sm90FusedV3QPerm<1024>{});
        case 57 * 4096 + 2048: return v3(Sm90FusedV3QPerm<2048>{});
        case 58 * 4096 + 512: return v3(Sm90FusedV3QPermMasks<512>{});
        case 58 * 4096 + 1024: return v3(Sm90FusedV3QPermMasks<1024>{});
        case 58 * 4096 + 2048: return v3(Sm90FusedV3QPermMasks<2048>{});
        case 59 * 4096 + 512: return v3(Sm90FusedV3QPermAddr<512>{});
        case 59 * 4096 + 1024: return v3(Sm90FusedV3QPermAddr<1024>{});
        case 59 * 4096 + 2048: return v3(Sm90FusedV3QPermAddr<2048>{});
        case 60 * 4096 + 512: return v3(Sm90FusedV3QPermDesc<512>{});
        case 60 * 4096 + 1024: return v3(Sm90FusedV3QPermDesc<1024>{});
        case 60 * 4096 + 2048: return v3(Sm90FusedV3QPermDesc<2048>{});
        case 61 * 4096 + 512: return v3(Sm90FusedV3QPermDescA<512>{});
        case 61 * 4096 + 1024: return v3(Sm90FusedV3QPermDescA<1024>{});
        case 61 * 4096 + 2048: return v3(Sm90FusedV3QPermDescA<2048>{});
        case 62 * 4096 + 512: return v3(Sm90FusedV3FastGate<512>{});
        case 62 * 4096 + 1024: return v3(Sm90FusedV3FastGate<1024>{});
        case 62 * 4096 + 2048: return v3(Sm90FusedV3FastGate<2048>{});
        default: return cudaErrorInvalidValue;
      }
#ifndef V3CHECK_FEW
    case 10:  // split shares that follow the blocks (kSplitAlign)
      return launch_sm90_fused_mqa_topk<Sm90FusedSplitAlign>(d.q, d.k, d.scales, d.weights, d.starts, d.ends, d.out,
                                                             d.ws, w.rows, w.keys, w.topk, sms, st, &me, probe, 0, {},
                                                             target);
    default: return v3(Sm90FusedV3S8{});
#else
    default: std::fprintf(stderr, "variant %d not in this build (V3CHECK_FEW)\n", variant); return cudaErrorInvalidValue;
#endif
#endif  // V3CHECK_SPLIT
  }
#endif  // V3CHECK_CLUSTER
}

uint32_t okey(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t m = 0u - (u >> 31);
  return ((u ^ m) - m) ^ (~m & 0x80000000u);
}
float okey_to_float(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : (0u - k);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> host_logits(const Dev& d) {
  const Work& w = *d.w;
  std::vector<float> h(size_t(w.rows) * d.ld);
  if (!h.empty()) CK(cudaMemcpy(h.data(), d.logits, h.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

// Per row: the sorted relative indices of the exact top min(k, n) ((value desc, index asc)).
std::vector<std::vector<int>> reference_sets(const Work& w, const std::vector<float>& lg, int64_t ld) {
  std::vector<std::vector<int>> ref(w.rows);
  const int nth = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (int t = 0; t < nth; ++t)
    th.emplace_back([&, t] {
      std::vector<uint64_t> c;
      for (int r = t; r < w.rows; r += nth) {
        const int s = w.starts[r], e = w.ends[r];
        c.clear();
        for (int j = s; j < e; ++j)
          c.push_back((uint64_t(okey(lg[size_t(r) * ld + j])) << 32) | (0xffffffffu - uint32_t(j - s)));
        const size_t m = std::min<size_t>(w.topk, c.size());
        std::nth_element(c.begin(), c.begin() + m, c.end(), std::greater<uint64_t>());
        for (size_t i = 0; i < m; ++i) ref[r].push_back(static_cast<int>(0xffffffffu - uint32_t(c[i])));
        std::sort(ref[r].begin(), ref[r].end());
      }
    });
  for (auto& x : th) x.join();
  return ref;
}

std::vector<int> host_out(const Dev& d) {
  std::vector<int> h(size_t(d.w->rows) * d.w->topk);
  CK(cudaMemcpy(h.data(), d.out, h.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

// Rows whose output (indices >= 0, -1 padding after them) is not the reference set.
int wrong_rows(const Work& w, const std::vector<int>& out, const std::vector<std::vector<int>>& ref, int show = 0) {
  int bad = 0;
  for (int r = 0; r < w.rows; ++r) {
    std::vector<int> got;
    bool pad_ok = true;
    for (int i = 0; i < w.topk; ++i) {
      const int v = out[size_t(r) * w.topk + i];
      if (v >= 0) got.push_back(v);
      if (i >= static_cast<int>(ref[r].size()) && v != -1) pad_ok = false;
    }
    std::sort(got.begin(), got.end());
    if (got != ref[r] || !pad_ok) {
      if (bad < show) {
        std::vector<int> miss, extra;
        std::set_difference(ref[r].begin(), ref[r].end(), got.begin(), got.end(), std::back_inserter(miss));
        std::set_difference(got.begin(), got.end(), ref[r].begin(), ref[r].end(), std::back_inserter(extra));
        std::printf("    row %d [%d,%d): got %zu want %zu, missing %zu (first %d) extra %zu (first %d)%s\n", r,
                    w.starts[r], w.ends[r], got.size(), ref[r].size(), miss.size(), miss.empty() ? -1 : miss[0],
                    extra.size(), extra.empty() ? -1 : extra[0], pad_ok ? "" : " bad padding");
      }
      ++bad;
    }
  }
  return bad;
}

void poison(const Dev& d, int v) { CK(cudaMemset(d.out, v & 0xff, size_t(d.w->rows) * d.w->topk * 4)); }
void scramble_ws(const Dev& d, int v) { CK(cudaMemset(d.ws, v, d.ws_bytes)); }

int sync_or_report(const char* what) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("%s: %s\n", what, cudaGetErrorString(e));
    std::fflush(stdout);
    std::exit(3);
  }
  return 0;
}

// Runs variant v once with `probe` on `grid` CTAs (0: all) and returns the workspace header.
std::array<int, 32> run_probe(int v, const Dev& d, int grid, int probe, int target = 0) {
  CK(launch_fused(v, d, grid, probe, target));
  const std::string what = "fused probe " + std::to_string(probe);
  sync_or_report(what.c_str());
  std::array<int, 32> h{};
  CK(cudaMemcpy(h.data(), d.ws, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

// The workload of "ROWS KEYS TOPK LAYOUT DIST" at argv[3..7].
Work work_from_args(char** argv, int seed) {
  return make_work(std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), argv[6], argv[7], seed);
}

int cmd_check(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "check VARIANTS ROWS KEYS TOPK LAYOUT DIST [grid=G] [target=T] [probe=P] [seed=S]\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int grid = opt_int(argc, argv, "grid", 0), target = opt_int(argc, argv, "target", 0);
  const int probe = opt_int(argc, argv, "probe", 0);  // e.g. 5: the sets with the weight-copy check compiled in
  Work w = work_from_args(argv, opt_int(argc, argv, "seed", 11));
  const int rows = w.rows, keys = w.keys, topk = w.topk;
  const std::string layout = argv[6], dist = argv[7];
  Dev d = upload_work(w);
  CK(launch_dense_logits(d));
  sync_or_report("dense logits");
  const auto ref = reference_sets(w, host_logits(d), d.ld);
  for (int v : vars) {
    report_cluster_plan(v, w, grid);
    std::vector<std::vector<int>> outs;
    int wrong = 0;
    for (int run = 0; run < 3; ++run) {
      poison(d, run == 0 ? 0x7f : run == 1 ? 0x80 : 0xff);
      scramble_ws(d, 0x5a + run);
      CK(launch_fused(v, d, grid, probe, target));
      sync_or_report("fused");
      outs.push_back(host_out(d));
      if (run == 0) wrong = wrong_rows(w, outs[0], ref, 3);
    }
    int order_diff = 0, set_diff = 0;
    for (int i = 1; i < 3; ++i)
      for (int r = 0; r < rows; ++r) {
        auto a = std::vector<int>(outs[0].begin() + size_t(r) * topk, outs[0].begin() + size_t(r + 1) * topk);
        auto b = std::vector<int>(outs[i].begin() + size_t(r) * topk, outs[i].begin() + size_t(r + 1) * topk);
        if (a != b) {
          if (++order_diff <= 4) {  // (which rows: their range, block, the first differing position)
            int j = 0;
            while (a[j] == b[j]) ++j;
            int neg = 0;
            for (int x : a) neg += x < 0;
            std::printf("  order differs: run %d row %d (block %d) keys [%d, %d) len %d, padding %d, first at %d of %d: %d vs %d\n",
                        i, r, r / 8, w.starts[r], w.ends[r], w.ends[r] - w.starts[r], neg, j, topk, a[j], b[j]);
          }
        }
        std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
        if (a != b) ++set_diff;
      }
    std::printf("check %s-%s %dx%d top-%d v%d grid=%d target=%d probe=%d: wrong rows %d, reruns differing in order %d, in set %d\n",
                layout.c_str(), dist.c_str(), rows, keys, topk, v, grid, target, probe, wrong, order_diff, set_diff);
    std::fflush(stdout);
  }
  free_dev(d);
  return 0;
}

int cmd_dump(int argc, char** argv) {
  if (argc < 4) return std::fprintf(stderr, "dump VARIANTS KEYS\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int keys = std::atoi(argv[3]);
  const int topk = 512;
  Work w = make_work(8, keys, topk, "causal", "gaussian", 11);
  Dev d = upload_work(w);
  CK(launch_dense_logits(d));
  sync_or_report("dense logits");
  const auto lg = host_logits(d);
  const int cap = Sm90FusedV3S8::cap(topk);
  for (int v : vars) {
    if (v == 2) continue;
    poison(d, 0xff);
    scramble_ws(d, 0x5a);
    CK(launch_fused(v, d, 1, 3, 0));
    sync_or_report("fused probe 3");
    const auto o = host_out(d);
    std::vector<uint32_t> words((d.ws_bytes - kFusedHeaderBytes) / 4);
    CK(cudaMemcpy(words.data(), static_cast<uint8_t*>(d.ws) + kFusedHeaderBytes, words.size() * 4,
                  cudaMemcpyDeviceToHost));
    for (int r = 0; r < 8; ++r) {
      const int* orow = &o[size_t(r) * topk];
      const uint32_t set_off = static_cast<uint32_t>(orow[10]);
      int total = 0, bad_val = 0, bad_idx = 0, bad_seg = 0;
      std::string per_seg;
      for (int sg = 0; sg < 8; ++sg) {
        const int n = orow[sg];
        const size_t base = set_off + size_t(r * 8 + sg) * 2 * cap;
        int bad_here = 0, wrong_warp = 0;
        std::string tiles;
        for (int j = 0; j < n && j < cap; ++j) {
          const uint32_t key = words[base + j], idx = words[base + cap + j];
          ++total;
          if (static_cast<int>(idx) < w.starts[r] || static_cast<int>(idx) >= w.ends[r]) {
            ++bad_idx;
            continue;
          }
          if (((idx % 128) / 16) != static_cast<uint32_t>(sg)) ++wrong_warp;
          const float ref = lg[size_t(r) * d.ld + idx];
          if (okey(ref) != key) {
            ++bad_val, ++bad_here;
            if (bad_here <= 3) {
              const float fv = okey_to_float(key);
              int other_row = -1, other_key = -1;
              for (int rr = 0; rr < 8; ++rr)
                if (okey(lg[size_t(rr) * d.ld + idx]) == key) other_row = rr;
              for (int kk = w.starts[r]; kk < w.ends[r] && other_key < 0; ++kk)
                if (okey(lg[size_t(r) * d.ld + kk]) == key) other_key = kk;
              char buf[256];
              std::snprintf(buf, sizeof buf, "\n      seg %d slot %d key %u (tile %u): fused %.7g dense %.7g; = row %d's at this key, = this row's at key %d",
                            sg, j, idx, idx / 128, fv, ref, other_row, other_key);
              tiles += buf;
            }
          }
        }
        bad_seg += wrong_warp;
        per_seg += " " + std::to_string(n) + "/" + std::to_string(bad_here);
        if (!tiles.empty()) per_seg += tiles;
      }
      std::printf("dump v%d keys %d row %d: total %d, gate key %#x ns %d pubs %d; bad index %d, entry in the wrong warp's segment %d, bad value %d; per segment count/bad:%s\n",
                  v, keys, r, total, static_cast<unsigned>(orow[8]), orow[11], orow[12], bad_idx, bad_seg, bad_val,
                  per_seg.c_str());
    }
    std::fflush(stdout);
  }
  free_dev(d);
  return 0;
}

int cmd_stages(int argc, char** argv) {
  if (argc < 5) return std::fprintf(stderr, "stages VARIANTS ROWS KEYS\n"), 1;
  const auto vars = parse_variants(argv[2]);
  Work w = make_work(std::atoi(argv[3]), std::atoi(argv[4]), 512, "causal", "gaussian", 11);
  Dev d = upload_work(w);
  for (int v : vars) {
    if (v == 2) continue;
    const auto hdr = run_probe(v, d, 0, 4);
    std::printf("stages v%d %dx%d: stage/tile mismatches, row group 0 %d, row group 1 %d\n", v, w.rows, w.keys,
                hdr[24], hdr[25]);
  }
  free_dev(d);
  return 0;
}

int cmd_wcheck(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "wcheck VARIANTS ROWS KEYS TOPK LAYOUT DIST\n"), 1;
  const auto vars = parse_variants(argv[2]);
  Work w = work_from_args(argv, 11);
  Dev d = upload_work(w);
  for (int v : vars) {
    for (int rep = 0; rep < 3; ++rep) {
      const auto h = run_probe(v, d, 0, 5);
      std::printf("wcheck v%d %s-%s %dx%d top-%d: weight copy mismatches rg0 %d rg1 %d; first: cta %d warp %d lane %d block %d tile t=%d (it %d) ns %d pubs %d w[%d]: copy %#x,%#x tma %#x\n",
                  v, argv[6], argv[7], w.rows, w.keys, w.topk, h[16], h[17], h[27], h[25], h[30], h[19], h[20], h[29], h[21], h[26],
                  h[24], static_cast<unsigned>(h[22]), static_cast<unsigned>(h[28]), static_cast<unsigned>(h[23]));
    }
    std::fflush(stdout);
  }
  free_dev(d);
  return 0;
}

// Probe 2: the kernel's statistics in the workspace header (sm90_fused_mqa_topk_v3.cuh:
// u64 words from byte 8: 0 compactions, 1 their candidates, 3 check cycles (checks
// that compacted), 4 candidates at the block-end selects, 5 select cycles, 6 math
// warps' total cycles, 7 gate + drop cycles, 8 rows redone, 9 rows gated, 13 selects).
int cmd_stats(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "stats VARIANTS ROWS KEYS TOPK LAYOUT DIST [target=T]\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int target = opt_int(argc, argv, "target", 0);
  Work w = work_from_args(argv, 11);
  Dev d = upload_work(w);
  for (int v : vars) {
    if (v == 2) continue;
    if (opt_int(argc, argv, "probe", 2) == 7) {  // (67: clock marks between the gate's and the merge's steps)
      const auto h7 = run_probe(v, d, opt_int(argc, argv, "grid", 0), 7, target);
      unsigned long long q[15];
      std::memcpy(q, h7.data() + 2, sizeof q);
      const double g = q[12] ? double(q[12]) : 1.0, mg = q[6] ? double(q[6]) : 1.0;
      std::printf("marks v%d %s-%s %dx%d top-%d: gate per row (%llu): records %.0f, rho %.0f, bins %.0f, cap + set %.0f; "
                  "row group barrier after it per warp %.0f; merge per row (%llu): bins' sum %.0f, first histogram %.0f, "
                  "levels %.0f, gather pass %.0f, finish %.0f cycles\n", v, argv[6], argv[7], w.rows, w.keys, w.topk, q[12],
                  q[7] / g, q[8] / g, q[9] / g, q[10] / g, q[13] / (double(g_sms) * 16), q[6], q[1] / mg, q[2] / mg,
                  q[3] / mg, q[4] / mg, q[5] / mg);
      std::fflush(stdout);
      continue;
    }
    if (opt_int(argc, argv, "probe", 2) == 6) {  // (67: dependent __ldcg chases inside the loaded kernel)
      const auto h6 = run_probe(v, d, opt_int(argc, argv, "grid", 0), 6, target);
      unsigned long long q[15];
      std::memcpy(q, h6.data() + 2, sizeof q);
      std::printf("chase v%d %s-%s %dx%d top-%d: dependent __ldcg in the gate %.0f cycles per load (%llu loads), "
                  "before the merge %.0f (%llu loads)\n", v, argv[6], argv[7], w.rows, w.keys, w.topk,
                  q[6] ? double(q[1]) / q[6] : 0.0, q[6], q[3] ? double(q[2]) / q[3] : 0.0, q[3]);
      std::fflush(stdout);
      continue;
    }
    const auto hdr = run_probe(v, d, opt_int(argc, argv, "grid", 0), 2, target);
    unsigned long long h[15];  // the u64 statistics words from byte 8
    std::memcpy(h, hdr.data() + 2, sizeof h);
    const double warps = double(g_sms) * 16, sel = h[13] ? double(h[13]) : 1.0;
    std::printf("stats v%d %s-%s %dx%d top-%d target=%d: rows gated %llu, redone %llu; selects %llu, candidates per select %.0f, "
                "select cycles per select %.0f; gate+drop cycles per math warp %.0f; compactions %llu (candidates %.0f "
                "each, check cycles %llu); total cycles per math warp %.0f; pair selects handed to one warp %llu\n",
                v, argv[6], argv[7], w.rows, w.keys, w.topk, target, h[9], h[8], h[13], h[4] / sel, h[5] / sel, h[7] / warps,
                h[0], h[0] ? double(h[1]) / h[0] : 0.0, h[3], h[6] / warps, h[10]);
    if ((v >= 33 && v <= 37) || v == 43 || (v >= 63 && v <= 66) || (v >= 86 && v <= 94))  // kShares: 12 = the sample publications' cycles; 7 = the rest starts (gate, copy, waits)
      std::printf("  shares: sample publications per math warp %.0f cycles, rest starts (gate + copy + waits) %.0f\n",
                  h[12] / warps, h[7] / warps);
    if ((v >= 64 && v <= 66) || (v >= 86 && v <= 94))  // kSplitHist (probe 2): the rest start's parts
      std::printf("  split: wait for the samples per math warp %.0f cycles; gate with its wait %.0f\n", h[2] / warps,
                  h[1] / warps);
    else if (h[2] | h[11] | h[12] | h[14])  // kSelPhases (26): the pair select's phases, per select
      std::printf("  pair select phases per select (cycles): range pass %.0f, histogram levels %.0f, gather + output %.0f, "
                  "scratch finish %.0f\n", h[2] / sel, h[11] / sel, h[12] / sel, h[14] / sel);
    std::fflush(stdout);
  }
  free_dev(d);
  return 0;
}

// Probe 8 (kShares variants; fused_v3_mark in sm90_fused_mqa_topk_v3.cuh):
// thread 0's global-timer marks after the output (rows x topk words), CTA c's
// visit slot v mark id at word c * 128 + v * 16 + id. Prints, per (slot, id) present, the spread over
// the CTAs (min / median / max microseconds from the earliest kernel start),
// and the marks of a few CTAs.
int cmd_timeline(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "timeline VARIANTS ROWS KEYS TOPK LAYOUT DIST [grid=G]\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int grid = opt_int(argc, argv, "grid", 0);
  Work w = work_from_args(argv, 11);
  Dev d = upload_work(w);
  const int ctas = grid > 0 ? std::min(grid, g_sms) : g_sms;
  static const char* names[16] = {"", "loops done", "publish/merge done", "next start done", "Q in", "gate wait done",
                                  "gate done", "copy done", "merge entry", "bins published", "counted (last)",
                                  "merged", "gate: records", "gate: rho", "gate: bins", "kernel start"};
  for (int v : vars) {
    // (the staged kernel's marks variant: 16 words per CTA, its own marks)
    if (v % 2 == 0 && staged_pieces_variant(v)) {
      const int m = fused_staged_pieces(w.rows, w.keys, ctas);
      const int n = m * ((w.rows + 7) / 8);
      static const char* names98[16] = {"", "loops done", "piece hist", "published", "owner's wait done",
                                        "owner done", "v2: 1st digit", "v2: pass done", "v2: digits done", "",
                                        "", "", "", "", "", "kernel start"};
      const char* const* nm = names98;
      for (int rep = 0; rep < 2; ++rep) {
        CK(cudaMemset(d.out, 0, (size_t(w.rows) * w.topk + size_t(std::max(n, 1)) * 16) * 4));
        CK(launch_fused(v, d, grid, 0, 0));
        sync_or_report("fused staged (marks)");
      }
      std::vector<uint32_t> h(size_t(std::max(n, 1)) * 16);
      CK(cudaMemcpy(h.data(), d.out + size_t(w.rows) * w.topk, h.size() * 4, cudaMemcpyDeviceToHost));
      uint32_t base = 0;
      bool have = false;
      for (int c = 0; c < n; ++c) {
        const uint32_t t = h[size_t(c) * 16 + 15];
        if (t && (!have || static_cast<int32_t>(t - base) < 0)) base = t, have = true;
      }
      std::printf("timeline v%d %s-%s %dx%d top-%d on %d CTAs, %d per block (us from the first start; min / median / max)\n",
                  v, argv[6], argv[7], w.rows, w.keys, w.topk, n, m);
      for (int id = 15; id >= 1; id = id == 15 ? 1 : id + 1) {
        std::vector<double> x;
        for (int c = 0; c < n; ++c)
          if (const uint32_t t = h[size_t(c) * 16 + id]) x.push_back(static_cast<int32_t>(t - base) / 1000.0);
        if (!x.empty() && nm[id][0]) {
          std::sort(x.begin(), x.end());
          std::printf("  %-18s CTAs %3zu: %8.1f %8.1f %8.1f\n", nm[id], x.size(), x.front(), x[x.size() / 2],
                      x.back());
        }
        if (id == 14) break;
      }
      {  // (owner_row's mark 10: the first digit's class size of the CTA's last row, a count)
        std::vector<uint32_t> cs;
        for (int c = 0; c < n; ++c)
          if (const uint32_t t = h[size_t(c) * 16 + 10]) cs.push_back(t >> 1);
        if (!cs.empty()) {
          std::sort(cs.begin(), cs.end());
          std::printf("  %-18s CTAs %3zu: %8u %8u %8u (keys)\n", "v2: class size", cs.size(), cs.front(),
                      cs[cs.size() / 2], cs.back());
        }
      }
      std::fflush(stdout);
      continue;
    }
    for (int rep = 0; rep < 2; ++rep) {  // (the first run warms the clocks; the second is printed)
      CK(cudaMemset(d.out, 0, (size_t(w.rows) * w.topk + size_t(ctas) * 128) * 4));
      scramble_ws(d, 0x5a);
      CK(launch_fused(v, d, grid, 8, 0));
      sync_or_report("fused probe 8");
    }
    std::vector<uint32_t> h(size_t(ctas) * 128);
    CK(cudaMemcpy(h.data(), d.out + size_t(w.rows) * w.topk, h.size() * 4, cudaMemcpyDeviceToHost));
    uint32_t base = 0;
    bool have = false;
    for (int c = 0; c < ctas; ++c) {
      const uint32_t t = h[size_t(c) * 128 + 15];
      if (t && (!have || static_cast<int32_t>(t - base) < 0)) base = t, have = true;
    }
    std::printf("timeline v%d %s-%s %dx%d top-%d on %d CTAs (us from the first kernel start; min / median / max over CTAs)\n",
                v, argv[6], argv[7], w.rows, w.keys, w.topk, ctas);
    auto us = [&](uint32_t t) { return static_cast<int32_t>(t - base) / 1000.0; };
    for (int sl = 0; sl < 8; ++sl)
      for (int id = 1; id < 16; ++id) {
        std::vector<double> x;
        for (int c = 0; c < ctas; ++c)
          if (const uint32_t t = h[size_t(c) * 128 + sl * 16 + id]) x.push_back(us(t));
        if (x.empty() || !names[id][0]) continue;
        std::sort(x.begin(), x.end());
        std::printf("  slot %d %-20s CTAs %3zu: %8.1f %8.1f %8.1f\n", sl, names[id], x.size(), x.front(),
                    x[x.size() / 2], x.back());
      }
    for (int c : {0, 1, ctas / 2, ctas - 1}) {
      std::printf("  CTA %3d:", c);
      for (int sl = 0; sl < 8; ++sl)
        for (int id = 1; id < 16; ++id)
          if (const uint32_t t = h[size_t(c) * 128 + sl * 16 + id]) std::printf(" %d.%d=%.1f", sl, id, us(t));
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  free_dev(d);
  return 0;
}

int cmd_time(int argc, char** argv) {
  if (argc < 8) return std::fprintf(stderr, "time VARIANTS ROWS KEYS TOPK LAYOUT DIST [reps=N] [target=T] [probe=P] [grid=G]\n"), 1;
  const auto vars = parse_variants(argv[2]);
  const int reps = opt_int(argc, argv, "reps", 30), target = opt_int(argc, argv, "target", 0);
  const int probe = opt_int(argc, argv, "probe", 0);  // e.g. 1: no appends (the loops' cost)
  const int grid = opt_int(argc, argv, "grid", 0);    // fused kernels only (0: every SM)
  Work w = work_from_args(argv, 11);
  const int rows = w.rows, keys = w.keys, topk = w.topk;
  const std::string layout = argv[6], dist = argv[7];
  Dev d = upload_work(w);
  void* flush = nullptr;
  const size_t flush_bytes = size_t(128) << 20;  // >= 2x the H200's 60 MiB L2
  CK(cudaMalloc(&flush, flush_bytes));
  // As timing.time_fn does (mqa-topk bench): every sample queued back to back
  // (flush, start event, launch, end event) with one sync at the end, so the GPU
  // runs a sustained load. Samples with a host sync between them ran 5-12%
  // faster on the H200 for the tensor-bound kernels (2026-12-02: logits 3.75
  // against 4.27 ms), most likely clocks under the power limit.
  const int reps_all = reps + 1;
  std::vector<cudaEvent_t> ev(2 * reps_all);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  auto timed = [&](auto&& launch) {
    CK(launch());  // warm-up (excluded)
    for (int i = 0; i < reps_all; ++i) {
      CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
      CK(cudaEventRecord(ev[2 * i]));
      CK(launch());
      CK(cudaEventRecord(ev[2 * i + 1]));
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int i = 1; i < reps_all; ++i) {
      float t = 0;
      CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double flops = [&] {
    double s = 0;
    for (int r = 0; r < rows; ++r) s += double(w.ends[r] - w.starts[r]);
    return s * 32 * 128 * 2;
  }();
  const float t_logits = timed([&] { return launch_dense_logits(d); });
  CK(launch_dense_logits(d));
  sync_or_report("dense logits");
  const auto ref = reference_sets(w, host_logits(d), d.ld);
  const float t_native = timed([&] {
    cudaError_t e = launch_dense_logits(d);
    if (e != cudaSuccess) return e;
    return topk::launch_topk_per_row(d.logits, d.ld, d.starts, d.ends, d.out, rows, keys, topk, 0);
  });
  sync_or_report("native");
  const int wrong_native = wrong_rows(w, host_out(d), ref);
  std::printf("time %s-%s %dx%d top-%d: logits alone %.3f ms (%.3f PF/s), native dense %.3f ms (wrong rows %d)\n",
              layout.c_str(), dist.c_str(), rows, keys, topk, t_logits, flops / t_logits * 1e-12, t_native, wrong_native);
  for (int v : vars) {
    report_cluster_plan(v, w, grid);
    poison(d, 0xff);
    const float t = timed([&] { return launch_fused(v, d, grid, probe, target); });
    sync_or_report("fused");
    const int wrong = probe ? -1 : wrong_rows(w, host_out(d), ref, 2);
    std::printf("  fused v%d grid=%d target=%d probe=%d: %.3f ms = %.3fx logits alone, %.3fx faster than native dense; wrong rows %d\n", v,
                grid, target, probe, t, t / t_logits, t_native / t, wrong);
    std::fflush(stdout);
  }
  cudaFree(flush);
  free_dev(d);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: v3check check|dump|stages|time ...\n");
    return 1;
  }
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  const std::string cmd = argv[1];
  const auto t0 = std::chrono::steady_clock::now();
  int rc = cmd == "check" ? cmd_check(argc, argv)
           : cmd == "dump"  ? cmd_dump(argc, argv)
           : cmd == "stages" ? cmd_stages(argc, argv)
           : cmd == "time"  ? cmd_time(argc, argv)
           : cmd == "wcheck" ? cmd_wcheck(argc, argv)
           : cmd == "stats" ? cmd_stats(argc, argv)
           : cmd == "timeline" ? cmd_timeline(argc, argv)
                            : (std::fprintf(stderr, "unknown command %s\n", cmd.c_str()), 1);
  std::printf("[%s: %.1f s]\n", cmd.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return rc;
}
