// Launcher of the fused FP8 MQA-logits + top-k kernel: contract checks, then
// one memset (the block counter) and one launch.
#include "fused_mqa_topk.h"

#include "fused_mqa_topk_hybrid.h"
#include "fused_mqa_topk_staged.h"
#include "fused_mqa_topk_split.h"
#include "mqa_topk/sm90_fused_mqa_topk.cuh"
#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"
#include "range_errors.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace {
bool valid_topk(int64_t t) { return t == 512 || t == 1024 || t == 2048; }
// Development knobs (scripts/fused_probe.py), never set in normal use:
// MQA_TOPK_FUSED_PROBE=1 skips every append (logits + filter alone; the output
// is then all -1), MQA_TOPK_FUSED_CAP=N shrinks the candidate capacity,
// MQA_TOPK_FUSED_TARGET=N sets the gate's candidate target (results stay exact),
// MQA_TOPK_FUSED_SPLIT=0/1 never / always splits blocks across CTAs (unset: fused_use_split),
// MQA_TOPK_FUSED_GRID=N launches min(N, SMs) CTAs (fewer, longer pieces of split blocks),
// MQA_TOPK_FUSED_SPLIT_LARGE=1 runs the split kernel on the lean loop where
// its grid is every SM (fused_mqa_topk_split.h; exact, reruns may differ in order),
// MQA_TOPK_FUSED_KERNEL=v2 runs the whole-block calls on the v2 kernel instead
// of the v3 one (sm90_fused_mqa_topk_v3.cuh, the dense op's main loop; the
// default since 2026-12-02; MQA_TOPK_FUSED_CAP, a v2 knob, also selects v2),
// MQA_TOPK_FUSED_STAGED=0/1 never / always (where it applies) runs the
// staged kernel for at most one wave of row blocks (unset: fused_use_staged);
// a set MQA_TOPK_FUSED_SPLIT or MQA_TOPK_FUSED_KERNEL, a probe, cap or target knob turns it off;
// MQA_TOPK_FUSED_STAGED_VARIANT=109/113/117/119/121/123/125 picks the staged kernel's variant
// (fused_mqa_topk_staged.h; unset: kFusedStagedVariant; 119 / 121 apply at any
// number of row blocks, so with MQA_TOPK_FUSED_STAGED=1 they run every call);
// MQA_TOPK_FUSED_HYBRID=0/1 never / always (where it applies: SMs + 1 or 2 row blocks) runs the
// hybrid kernel (fused_mqa_topk_hybrid.h; unset: kFusedHybrid; the knobs that turn the staged kernel off
// turn it off too);
// MQA_TOPK_FUSED_SHARE_RULE=N sets the split kernel's share rule (fused_v3_share_blocks
// in sm90_fused_mqa_topk_v3.cuh: 0 the session-12 rule, N in [1, 4096] shares
// only over the partial last wave's blocks, at least N tiles each; unset: kFusedShareRule).
const char* env_str(const char* name) { return std::getenv(name); }
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}
// Where the staged kernel (fused_mqa_topk_staged.h) runs by default: at most
// SMs / 2 row blocks (two or more pieces per block). Issue 12: session 22
// took SMs / 4 (at 512 rows its owners' passes made it 1.18x native, the
// split kernel 87 ~1.0x); session 25 (op bench at 64K keys) measured the
// lean pass (109) at 512 rows 1.000-1.005x native against 87's 1.03x (H200),
// and the default 117 there at 0.96-0.97x (H100).
bool fused_use_staged(int rows, int num_sms) { return 2 * ((static_cast<long long>(rows) + 7) / 8) <= num_sms; }
// Whether rows just past whole waves take the hybrid kernel by default
// (fused_mqa_topk_hybrid.h; issue 12, session 26: on an H100 at 64K keys,
// 1064 rows 0.88-0.91x native against the split kernel 87's 0.97-1.02x,
// 2120 rows 0.86-0.90x against 0.92-0.93x; BENCHMARKS.md).
constexpr bool kFusedHybrid = true;
// The split kernel's share rule (Sm90FusedParams::share_rule) by default.
constexpr int kFusedShareRule = 0;
// (Past SMs / 2 row blocks the split kernels keep the poorly filled waves:
// session 25 measured the shares variants 119 / 121 there at 1.01-1.23x
// native on an H100, 87 at 0.93-1.00x; BENCHMARKS.md.)
}  // namespace

int64_t fused_mqa_topk_workspace_bytes(int64_t topk, int64_t device) {
  MQA_CHECK_ARG(valid_topk(topk), "topk", "must be 512, 1024 or 2048, got ", topk);
  MQA_CHECK_ARG(device >= 0, "device", "must be a CUDA device index, got ", device);
  // Room for the split kernel too (it needs more than the unsplit one).
  const int sms = mqa_topk::sm_count(static_cast<int>(device));
  return static_cast<int64_t>(
      std::max({mqa_topk::fused_workspace_bytes<mqa_topk::Sm90FusedDefault>(static_cast<int>(topk), sms),
                fused_split_workspace_bytes(static_cast<int>(topk), sms),
                fused_v3_split_workspace_bytes(static_cast<int>(topk), sms)}));
}

FusedLaunchArgs fused_mqa_topk_check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                                     const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                                     const at::Tensor& output, const at::Tensor& workspace) {
  int64_t rows = 0, keys = 0;
  mqa_topk::check_mqa_inputs(q, k, scales, weights, starts, ends, &rows, &keys);
  const at::Device dev = q.device();
  mqa_topk::check_cuda_tensor(output, "output", dev);
  MQA_CHECK_ARG(output.scalar_type() == at::kInt, "output", "expected dtype int32, got ", output.scalar_type());
  MQA_CHECK_ARG(output.dim() == 2 && output.size(0) == rows, "output", "expected shape [rows=", rows,
                ", topk], got ", output.sizes());
  const int64_t topk = output.size(1);
  MQA_CHECK_ARG(valid_topk(topk), "output", "topk (its second dimension) must be 512, 1024 or 2048, got ", topk);
  MQA_CHECK_ARG(output.is_contiguous(), "output", "must be contiguous");
  mqa_topk::check_cuda_tensor(workspace, "workspace", dev);
  MQA_CHECK_ARG(workspace.scalar_type() == at::kByte && workspace.dim() == 1 && workspace.is_contiguous(),
                "workspace", "expected a contiguous 1-D uint8 tensor, got ", workspace.scalar_type(), " ",
                workspace.sizes());
  mqa_topk::check_aligned(workspace, "workspace");
  const int grid = env_int("MQA_TOPK_FUSED_GRID");
  const int num_sms = grid > 0 ? std::min(grid, mqa_topk::sm_count(dev.index())) : mqa_topk::sm_count(dev.index());
  // The development variants (csrc/dev/) check their own, larger, need.
  const int64_t need =
      static_cast<int64_t>(mqa_topk::fused_workspace_bytes<mqa_topk::Sm90FusedDefault>(static_cast<int>(topk), num_sms));
  MQA_CHECK_ARG(workspace.numel() >= need, "workspace", "needs ", need, " bytes for topk=", topk, ", got ",
                workspace.numel());
  return FusedLaunchArgs{static_cast<int>(rows), static_cast<int>(keys), static_cast<int>(topk), num_sms,
                         env_int("MQA_TOPK_FUSED_PROBE"), env_int("MQA_TOPK_FUSED_CAP"),
                         env_int("MQA_TOPK_FUSED_TARGET")};
}

void fused_mqa_topk_report(cudaError_t err, int map_error) {
  static const char* const kMapNames[4] = {"q", "k", "scales", "weights"};
  TORCH_CHECK(map_error == 0, "fused_mqa_topk: could not encode the TMA tensor map of ",
              kMapNames[map_error / 1000 % 4], " (CUresult ", map_error % 1000, ")");
  TORCH_CHECK(err == cudaSuccess, "fused_mqa_topk: launch failed: ", cudaGetErrorString(err));
}

void fused_mqa_topk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales, const at::Tensor& weights,
                    const at::Tensor& starts, const at::Tensor& ends, const at::Tensor& output,
                    const at::Tensor& workspace) {
  const FusedLaunchArgs a = fused_mqa_topk_check(q, k, scales, weights, starts, ends, output, workspace);
  if (a.rows == 0) return;
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index());
  int map_error = 0;
  const char* force = env_str("MQA_TOPK_FUSED_SPLIT");
  const char* kern = env_str("MQA_TOPK_FUSED_KERNEL");
  // (a development knob that picks another kernel or probes one: the staged and hybrid kernels stand aside)
  const bool knobs = a.probe != 0 || a.cap != 0 || a.target != 0 || (force && *force) || (kern && *kern);
  // Few row blocks: the staged kernel, its workspace (the logits, rows x keys x
  // 4 bytes: 16 MB at 64 x 64K; the pieces' histograms) from the caching
  // allocator on this stream.
  {
    const char* st = env_str("MQA_TOPK_FUSED_STAGED");
    const bool want = !knobs && (st && *st ? std::atoi(st) != 0 : fused_use_staged(a.rows, a.num_sms));
    const char* sv = env_str("MQA_TOPK_FUSED_STAGED_VARIANT");
    const int variant = sv && *sv ? std::atoi(sv) : kFusedStagedVariant;
    TORCH_CHECK(!want || fused_staged_variant_known(variant),
                "MQA_TOPK_FUSED_STAGED_VARIANT: must be 109, 113, 117, 119, 121, 123 or 125 (97-107, 111 "
                "and 115 were retired), got ", sv);
    const int m = want ? fused_staged_grid_param(variant, a.rows, a.keys, a.num_sms) : 0;
    if (m > 0) {
      const at::Tensor ws = at::empty({static_cast<int64_t>(fused_staged_workspace_bytes(a.rows, a.keys, m, variant))},
                                      q.options().dtype(at::kByte));
      const cudaError_t err =
          fused_staged_launch(q.data_ptr(), k.data_ptr(), scales.data_ptr<float>(), weights.data_ptr<float>(),
                              starts.data_ptr<int>(), ends.data_ptr<int>(), ws.data_ptr(), output.data_ptr<int>(),
                              a.rows, a.keys, a.topk, m, stream, &map_error,
                              mqa_topk::range_error_sink(q.device().index()), variant);
      fused_mqa_topk_report(err, map_error);
      return;
    }
  }
  // Rows just past whole waves (B = SMs + r row blocks, r = 1 or 2): the
  // hybrid kernel (whole blocks beside the staged kernel's pieces and owners
  // for the last r blocks; fused_mqa_topk_hybrid.h), where the workspace holds
  // its v3 part; its own buffer (the r blocks' logits) from the caching allocator.
  {
    const char* hy = env_str("MQA_TOPK_FUSED_HYBRID");
    TORCH_CHECK(!(hy && *hy) || std::strcmp(hy, "0") == 0 || std::strcmp(hy, "1") == 0,
                "MQA_TOPK_FUSED_HYBRID: must be 0 or 1, got ", hy);
    const bool want = !knobs && (hy && *hy ? std::strcmp(hy, "1") == 0 : kFusedHybrid);
    if (want && fused_hybrid_extra(a.rows, a.keys, a.num_sms) > 0 &&
        workspace.numel() >= static_cast<int64_t>(fused_hybrid_workspace_bytes(a.topk, a.rows, a.keys, a.num_sms))) {
      const at::Tensor aux = at::empty({static_cast<int64_t>(fused_hybrid_aux_bytes(a.rows, a.keys, a.num_sms))},
                                       q.options().dtype(at::kByte));
      const cudaError_t err =
          fused_hybrid_launch(q.data_ptr(), k.data_ptr(), scales.data_ptr<float>(), weights.data_ptr<float>(),
                              starts.data_ptr<int>(), ends.data_ptr<int>(), output.data_ptr<int>(), workspace.data_ptr(),
                              aux.data_ptr(), a.rows, a.keys, a.topk, a.num_sms, stream, &map_error,
                              mqa_topk::range_error_sink(q.device().index()));
      fused_mqa_topk_report(err, map_error);
      return;
    }
  }
  // Split blocks across CTAs when whole blocks would leave the last wave poorly
  // filled, and the workspace has the split kernel's room (a workspace sized
  // for the unsplit kernel alone, as before, keeps the unsplit kernel).
  // The split blocks run on the v3 kernel's shares (fused_v3_split_launch)
  // where the workspace holds its regions, else on the v2 split kernel.
  const bool want = force && *force ? std::atoi(force) != 0 : fused_use_split(a.rows, a.num_sms);
  const bool v2 = a.cap != 0 || (kern && std::strcmp(kern, "v2") == 0);
  const int64_t ws_bytes = workspace.numel();
  const bool split_v3 =
      want && !v2 && ws_bytes >= static_cast<int64_t>(fused_v3_split_workspace_bytes(a.topk, a.num_sms));
  const bool split =
      want && !split_v3 && ws_bytes >= static_cast<int64_t>(fused_split_workspace_bytes(a.topk, a.num_sms));
  const void* kp = a.keys ? k.data_ptr() : nullptr;
  const float* sp = a.keys ? scales.data_ptr<float>() : nullptr;
  const bool use_v3 = !split && !split_v3 && !v2;
  const char* large_env = env_str("MQA_TOPK_FUSED_SPLIT_LARGE");
  // (the lean-loop split kernel where its grid is every SM: the default since
  // session 20; MQA_TOPK_FUSED_SPLIT_LARGE=0 keeps the split kernel 66 there)
  const bool split_large = !(large_env && *large_env && std::atoi(large_env) == 0);
  const char* rule_env = env_str("MQA_TOPK_FUSED_SHARE_RULE");
  int share_rule = kFusedShareRule;
  if (split_v3 && rule_env && *rule_env) {
    char* end = nullptr;
    const long v = std::strtol(rule_env, &end, 10);
    TORCH_CHECK(*end == '\0' && v >= 0 && v <= 4096,
                "MQA_TOPK_FUSED_SHARE_RULE: must be an integer in [0, 4096] (0: the session-12 share rule, N: "
                "shares only over the partial last wave, at least N tiles each), got ", rule_env);
    share_rule = static_cast<int>(v);
  }
  const cudaError_t err =
      use_v3 ? fused_v3_whole_launch(q.data_ptr(), kp, sp, weights.data_ptr<float>(), starts.data_ptr<int>(),
                                     ends.data_ptr<int>(), output.data_ptr<int>(), workspace.data_ptr(), a.rows,
                                     a.keys, a.topk, a.num_sms, stream, &map_error, a.probe,
                                     mqa_topk::range_error_sink(q.device().index()), a.target)
      : split_v3 ? fused_v3_split_launch(q.data_ptr(), kp, sp, weights.data_ptr<float>(), starts.data_ptr<int>(),
                                         ends.data_ptr<int>(), output.data_ptr<int>(), workspace.data_ptr(), a.rows,
                                         a.keys, a.topk, a.num_sms, stream, &map_error, a.probe,
                                         mqa_topk::range_error_sink(q.device().index()), a.target, split_large,
                                         share_rule)
      : split ? fused_split_launch(q.data_ptr(), kp, sp, weights.data_ptr<float>(), starts.data_ptr<int>(),
                                 ends.data_ptr<int>(), output.data_ptr<int>(), workspace.data_ptr(), a.rows, a.keys,
                                 a.topk, a.num_sms, stream, &map_error, a.probe, a.cap,
                                 mqa_topk::range_error_sink(q.device().index()), a.target)
            : mqa_topk::launch_sm90_fused_mqa_topk(q.data_ptr(), kp, sp, weights.data_ptr<float>(),
                                                   starts.data_ptr<int>(), ends.data_ptr<int>(),
                                                   output.data_ptr<int>(), workspace.data_ptr(), a.rows, a.keys,
                                                   a.topk, a.num_sms, stream, &map_error, a.probe, a.cap,
                                                   mqa_topk::range_error_sink(q.device().index()), a.target);
  fused_mqa_topk_report(err, map_error);
}

std::vector<mqa_topk::KernelInfo> fused_mqa_topk_kernel_info() {
  using Cfg = mqa_topk::Sm90FusedDefault;
  // (the v3 kernels' attributes from their own translation units: one instantiation each)
  cudaFuncAttributes wa{}, sa{}, la{}, ca{}, ha{};
  int whole_smem = 0, split_smem = 0, large_smem = 0, staged_smem = 0, hybrid_smem = 0;
  const cudaError_t werr = fused_v3_whole_attributes(&wa, &whole_smem);
  const cudaError_t serr = fused_v3_split_attributes(&sa, &split_smem);
  const cudaError_t lerr = fused_v3_split_large_attributes(&la, &large_smem);
  const cudaError_t cerr = fused_staged_attributes(&ca, &staged_smem);
  const cudaError_t herr = fused_hybrid_attributes(&ha, &hybrid_smem);
  return {mqa_topk::kernel_info("sm90_fused_mqa_topk_v3<rows=8,wg=4,stages=8,check=12,gate,lean-loop,qperm,fast-gate,topk=2048>",
                                werr, wa, whole_smem),
          mqa_topk::kernel_info("sm90_fused_mqa_topk_v3<rows=8,wg=4,stages=8,check=12,gate,shares=partial-wave>",
                                serr, sa, split_smem),
          mqa_topk::kernel_info(
              "sm90_fused_mqa_topk_v3<rows=8,wg=4,stages=8,check=12,gate,shares=partial-wave,lean-loop,qperm,pipe-tail,topk=2048>",
              lerr, la, large_smem),
          mqa_topk::kernel_info("sm90_fused_staged_topk<logits_v2 loop,pieces<=16,published histograms,owner rows>",
                                cerr, ca, staged_smem),
          mqa_topk::kernel_info("sm90_fused_hybrid_topk<v3 whole blocks + staged pieces and owners of the last 1-2 blocks,topk=2048>",
                                herr, ha, hybrid_smem),
          mqa_topk::kernel_info("sm90_fused_mqa_topk<rows=8,wg=2,stages=7,gate>",
                                &mqa_topk::sm90_fused_mqa_topk_kernel<Cfg>, Cfg::kSmemBytes)};
}
