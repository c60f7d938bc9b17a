// The fused staged kernel (see fused_mqa_topk_staged.h), in its own
// translation unit so the JIT build compiles it beside the others. Torch-free.
#include "fused_mqa_topk_staged.h"

#include "mqa_topk/sm90_fused_staged_topk.cuh"

#include <type_traits>

namespace {
size_t logits_bytes(int rows, int keys) {
  return (static_cast<size_t>(rows) * static_cast<size_t>(fused_staged_ld(keys)) * 4 + 255) / 256 * 256;
}
}  // namespace

int fused_staged_pieces(int rows, int keys, int num_sms) { return mqa_topk::fused_staged_pieces(rows, keys, num_sms); }

namespace {
// The staged variants' kernel modes (kMode of sm90_fused_staged_topk_kernel;
// -1: no such variant): the one table behind the knob's check, the launch and
// the attributes. (The retired variants 97-107, 111 and 115, sessions 22-25:
// docs/FUSED.md.)
constexpr int staged_mode(int variant) {
  switch (variant) {
    case 109: return 27;  // (the epilogue's histograms, the deep owner pass with the lean pass)
    case 113: return 91;  // (109 with the class staged in each thread's own slots)
    case 117: return 219;  // (113 with the pass's loads a round ahead)
    case 123: return 475;  // (117 with the owner's next row prefetched into L2 after each pass)
    case 125: return 987;  // (123 with the next row's first-digit bins summed there too)
    case 119: return 95;  // (113's pass on shares of every SM: the shares' owners)
    case 121: return 223;  // (119 with 117's loads a round ahead)
    default: return -1;
  }
}
bool staged_shares(int variant) { return staged_mode(variant) >= 0 && (staged_mode(variant) & 4) != 0; }
}  // namespace

bool fused_staged_variant_known(int variant) { return staged_mode(variant) >= 0; }

int fused_staged_grid_param(int variant, int rows, int keys, int num_sms) {
  if (staged_shares(variant)) return rows > 0 && keys > 0 && keys <= mqa_topk::staged_topk::kMaxRowKeys ? num_sms : 0;
  return mqa_topk::fused_staged_pieces(rows, keys, num_sms);
}

size_t fused_staged_workspace_bytes(int rows, int keys, int m, int variant) {
  return logits_bytes(rows, keys) + mqa_topk::fused_staged_aux_bytes(rows, staged_shares(variant) ? 1 : m);
}

cudaError_t fused_staged_launch(const void* q, const void* k, const float* scales, const float* weights,
                                const int* starts, const int* ends, void* workspace, int* out, int rows, int keys,
                                int topk, int m, cudaStream_t stream, int* map_error,
                                mqa_topk::RangeErrorSink range_err, int variant) {
  float* logits = static_cast<float*>(workspace);
  void* aux = static_cast<uint8_t*>(workspace) + logits_bytes(rows, keys);
  auto go = [&](auto mode) {
    return mqa_topk::launch_sm90_fused_staged_topk<mqa_topk::Sm90LogitsV2Default, decltype(mode)::value>(
        q, k, scales, weights, starts, ends, logits, fused_staged_ld(keys), aux, out, rows, keys, topk, m, stream,
        map_error, range_err);
  };
  switch (variant) {
#define STAGED_LAUNCH_CASE(v) \
  case v: return go(std::integral_constant<int, staged_mode(v)>{});
    STAGED_LAUNCH_CASE(109)
    STAGED_LAUNCH_CASE(113)
    STAGED_LAUNCH_CASE(117)
    STAGED_LAUNCH_CASE(123)
    STAGED_LAUNCH_CASE(125)
    STAGED_LAUNCH_CASE(119)
    STAGED_LAUNCH_CASE(121)
#undef STAGED_LAUNCH_CASE
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t fused_staged_attributes(cudaFuncAttributes* attr, int* dynamic_smem) {
  using Cfg = mqa_topk::Sm90LogitsV2Default;
  *dynamic_smem = Cfg::kSmemBytes;
  constexpr int kMode = staged_mode(kFusedStagedVariant);  // (the default variant's kernel)
  static_assert(kMode >= 0, "kFusedStagedVariant is a staged variant");
  static_assert((kMode & 4) == 0, "the default's dynamic shared memory is the loop's (not a shares variant)");
  return cudaFuncGetAttributes(attr,
                               reinterpret_cast<const void*>(&mqa_topk::sm90_fused_staged_topk_kernel<Cfg, kMode>));
}
