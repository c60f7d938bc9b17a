// Launcher of the fused op: contract checks, the kernel choice
// (include/mqa_topk/fused/heuristics.h), the launch (csrc/kernels/).
#include "fused_mqa_topk.h"

#include "kernels/fused_kernels.h"
#include "range_errors.h"

namespace {
bool valid_topk(int64_t t) { return t == 512 || t == 1024 || t == 2048; }

// What a kernel runs, for the error of a forced kernel that cannot run a shape.
const char* kernel_scope(mqa_topk::FusedKernel k) {
  switch (k) {
    case mqa_topk::FusedKernel::kStaged: return "at most one row block of 8 rows per SM, rows of at most 2^19 keys";
    case mqa_topk::FusedKernel::kHybrid:
      return "SMs + 1 or SMs + 2 row blocks of 8 rows (mod the SMs), rows of at most 2^19 keys";
    default: return "any shape";
  }
}
}  // namespace

int64_t fused_mqa_topk_workspace_bytes(int64_t topk, int64_t device) {
  MQA_CHECK_ARG(valid_topk(topk), "topk", "must be 512, 1024 or 2048, got ", topk);
  MQA_CHECK_ARG(device >= 0, "device", "must be a CUDA device index, got ", device);
  return static_cast<int64_t>(fused_workspace_bytes(static_cast<int>(topk), mqa_topk::sm_count(static_cast<int>(device))));
}

std::tuple<std::string, int64_t> fused_mqa_topk_choice(int64_t rows, int64_t keys, int64_t topk, int64_t heads,
                                                       int64_t device) {
  MQA_CHECK_ARG(rows >= 0 && rows < (int64_t(1) << 31), "rows", "must be in [0, 2^31), got ", rows);
  MQA_CHECK_ARG(keys >= 0 && keys <= mqa_topk::kMaxKeys, "keys", "must be in [0, ", mqa_topk::kMaxKeys, "], got ", keys);
  MQA_CHECK_ARG(valid_topk(topk), "topk", "must be 512, 1024 or 2048, got ", topk);
  MQA_CHECK_ARG(mqa_topk::valid_heads(heads), "heads", "must be 16, 32 or 64, got ", heads);
  MQA_CHECK_ARG(device >= 0, "device", "must be a CUDA device index, got ", device);
  const int num_sms = mqa_topk::sm_count(static_cast<int>(device));
  const mqa_topk::FusedKernel choice = mqa_topk::choose_fused_kernel(
      static_cast<int>(rows), static_cast<int>(keys), num_sms, static_cast<int>(topk), static_cast<int>(heads));
  return {mqa_topk::fused_kernel_name(choice),
          static_cast<int64_t>(fused_buffer_bytes(choice, static_cast<int>(rows), static_cast<int>(keys), num_sms))};
}

std::string fused_mqa_topk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                           const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                           const at::Tensor& output, const at::Tensor& workspace, int64_t kernel) {
  int64_t rows = 0, keys = 0;
  mqa_topk::check_mqa_inputs(q, k, scales, weights, starts, ends, &rows, &keys);
  const at::Device dev = q.device();
  // output: [rows, topk] int32, contiguous, topk in {512, 1024, 2048}
  mqa_topk::check_cuda_tensor(output, "output", dev);
  MQA_CHECK_ARG(output.scalar_type() == at::kInt, "output", "expected dtype int32, got ", output.scalar_type());
  MQA_CHECK_ARG(output.dim() == 2 && output.size(0) == rows, "output", "expected shape [rows=", rows,
                ", topk], got ", output.sizes());
  const int64_t topk = output.size(1);
  MQA_CHECK_ARG(valid_topk(topk), "output", "topk (its second dimension) must be 512, 1024 or 2048, got ", topk);
  MQA_CHECK_ARG(output.is_contiguous(), "output", "must be contiguous");
  // workspace: a contiguous 1-D uint8 CUDA tensor of fused_mqa_topk_workspace_bytes(topk) bytes or more, 16-byte aligned
  mqa_topk::check_cuda_tensor(workspace, "workspace", dev);
  MQA_CHECK_ARG(workspace.scalar_type() == at::kByte && workspace.dim() == 1 && workspace.is_contiguous(),
                "workspace", "expected a contiguous 1-D uint8 tensor, got ", workspace.scalar_type(), " ",
                workspace.sizes());
  mqa_topk::check_aligned(workspace, "workspace");
  const int num_sms = mqa_topk::sm_count(dev.index());
  const int64_t need = static_cast<int64_t>(fused_workspace_bytes(static_cast<int>(topk), num_sms));
  MQA_CHECK_ARG(workspace.numel() >= need, "workspace", "needs ", need, " bytes for topk=", topk, " on ", num_sms,
                " SMs (fused_mqa_topk_workspace_bytes), got ", workspace.numel());
  // kernel: -1 chooses (include/mqa_topk/fused/heuristics.h); 0-3 forces whole / split / staged / hybrid
  MQA_CHECK_ARG(kernel >= -1 && kernel <= 3, "kernel", "must be -1 (chosen by shape) or 0-3 (whole, split, staged, hybrid), got ",
                kernel);
  const mqa_topk::FusedKernel choice =
      kernel >= 0 ? static_cast<mqa_topk::FusedKernel>(kernel)
                  : mqa_topk::choose_fused_kernel(static_cast<int>(rows), static_cast<int>(keys), num_sms,
                                                  static_cast<int>(topk), static_cast<int>(q.size(1)));
  const char* name = mqa_topk::fused_kernel_name(choice);
  if (rows == 0) return name;
  MQA_CHECK_ARG(mqa_topk::fused_kernel_runs(choice, static_cast<int>(rows), static_cast<int>(keys), num_sms), "kernel",
                "the ", name, " kernel cannot run ", rows, " rows x ", keys, " keys on ", num_sms, " SMs (it runs ",
                kernel_scope(choice), ")");

  const c10::cuda::CUDAGuard guard(dev);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index());
  // The staged and hybrid kernels' per-call logits buffer, from the caching allocator on this stream.
  const size_t buffer_bytes = fused_buffer_bytes(choice, static_cast<int>(rows), static_cast<int>(keys), num_sms);
  const at::Tensor buffer =
      buffer_bytes ? at::empty({static_cast<int64_t>(buffer_bytes)}, q.options().dtype(at::kByte)) : at::Tensor();
  const mqa_topk::KernelHeads kh = mqa_topk::kernel_heads(q, weights);  // (16 heads run as 32)
  const FusedCall call{kh.q.data_ptr(),
                       keys ? k.data_ptr() : nullptr,
                       keys ? scales.data_ptr<float>() : nullptr,
                       kh.weights.data_ptr<float>(),
                       starts.data_ptr<int>(),
                       ends.data_ptr<int>(),
                       output.data_ptr<int>(),
                       static_cast<int>(rows),
                       static_cast<int>(keys),
                       static_cast<int>(topk),
                       num_sms,
                       stream,
                       mqa_topk::range_error_sink(dev.index()),
                       kh.heads};
  int map_error = 0;
  const cudaError_t err =
      fused_launch(choice, call, workspace.data_ptr(), buffer_bytes ? buffer.data_ptr() : nullptr, &map_error);
  static const char* const kMapNames[5] = {"q", "k", "scales", "weights", "logits"};
  TORCH_CHECK(map_error == 0, "fused_mqa_topk: could not encode the TMA tensor map of ",
              kMapNames[map_error / 1000 % 5], " (CUresult ", map_error % 1000, ")");
  TORCH_CHECK(err == cudaSuccess, "fused_mqa_topk (", name, " kernel): launch failed: ", cudaGetErrorString(err));
  return name;
}

std::vector<mqa_topk::KernelInfo> fused_mqa_topk_kernel_info() {
  std::vector<mqa_topk::KernelInfo> out;
  for (int i = 0; i < 4; ++i) {
    const auto k = static_cast<mqa_topk::FusedKernel>(i);
    cudaFuncAttributes a{};
    int smem = 0;
    const cudaError_t err = fused_kernel_attributes(k, &a, &smem);
    out.push_back(mqa_topk::kernel_info((std::string("sm90_fused_") + mqa_topk::fused_kernel_name(k) + "<topk=2048>").c_str(),
                                        err, a, smem));
  }
  return out;
}
