// The fused kernels' dispatch by kernel and topk, and their sizes
// (fused_kernels.h). Torch-free.
#include "kernels/fused_kernels.h"
#include "mqa_topk/fused/sm90_fused_hybrid.cuh"

namespace {
template <int kTopk>
size_t workspace_bytes_t(int num_sms) {
  // The split configuration's layout (three candidate regions per CTA, the
  // split protocol's records and histograms) and the hybrid kernel's whole
  // part (one region per CTA of its grid: SMs + 2 x 16 pieces); the first is
  // the larger from 16 SMs on.
  // (The same for 32 and 64 heads: the layout depends on topk and the grid only.)
  const size_t split = mqa_topk::fused_blocks_workspace_bytes<mqa_topk::FusedSplitConfig<kTopk>>(kTopk, num_sms);
  const size_t hybrid =
      mqa_topk::fused_hybrid_blocks_workspace_bytes<mqa_topk::FusedWholeConfig<kTopk>>(kTopk, 2, num_sms);
  return split > hybrid ? split : hybrid;
}
}  // namespace

size_t fused_workspace_bytes(int topk, int num_sms) {
  switch (topk) {
    case 512: return workspace_bytes_t<512>(num_sms);
    case 1024: return workspace_bytes_t<1024>(num_sms);
    case 2048: return workspace_bytes_t<2048>(num_sms);
    default: return 0;
  }
}

size_t fused_hybrid_buffer_bytes(int rows, int keys, int num_sms) {
  const int r = mqa_topk::fused_hybrid_extra_blocks(rows, keys, num_sms);
  return r == 0 ? 0 : mqa_topk::fused_hybrid_aux_bytes(keys, r);
}

size_t fused_buffer_bytes(mqa_topk::FusedKernel kernel, int rows, int keys, int num_sms) {
  switch (kernel) {
    case mqa_topk::FusedKernel::kStaged: return fused_staged_buffer_bytes(rows, keys, num_sms);
    case mqa_topk::FusedKernel::kHybrid: return fused_hybrid_buffer_bytes(rows, keys, num_sms);
    default: return 0;
  }
}

namespace {
template <int kTopk, int kHeads>
cudaError_t launch_th(mqa_topk::FusedKernel kernel, const FusedCall& c, void* workspace, void* buffer,
                      int* map_error) {
  switch (kernel) {
    case mqa_topk::FusedKernel::kWhole: return fused_whole_launch<kTopk, kHeads>(c, workspace, map_error);
    case mqa_topk::FusedKernel::kSplit: return fused_split_launch<kTopk, kHeads>(c, workspace, map_error);
    case mqa_topk::FusedKernel::kHybrid: return fused_hybrid_launch<kTopk, kHeads>(c, workspace, buffer, map_error);
    case mqa_topk::FusedKernel::kStaged: return fused_staged_launch<kHeads>(c, buffer, map_error);
  }
  return cudaErrorInvalidValue;
}
template <int kTopk>
cudaError_t launch_t(mqa_topk::FusedKernel kernel, const FusedCall& c, void* workspace, void* buffer, int* map_error) {
  switch (c.heads) {
    case 32: return launch_th<kTopk, 32>(kernel, c, workspace, buffer, map_error);
    case 64: return launch_th<kTopk, 64>(kernel, c, workspace, buffer, map_error);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace

cudaError_t fused_launch(mqa_topk::FusedKernel kernel, const FusedCall& c, void* workspace, void* buffer,
                         int* map_error) {
  if (!mqa_topk::fused_kernel_runs(kernel, c.rows, c.keys, c.num_sms)) return cudaErrorInvalidValue;
  switch (c.topk) {
    case 512: return launch_t<512>(kernel, c, workspace, buffer, map_error);
    case 1024: return launch_t<1024>(kernel, c, workspace, buffer, map_error);
    case 2048: return launch_t<2048>(kernel, c, workspace, buffer, map_error);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t fused_kernel_attributes(mqa_topk::FusedKernel kernel, cudaFuncAttributes* attr, int* dynamic_smem) {
  switch (kernel) {
    case mqa_topk::FusedKernel::kWhole: return fused_whole_attributes(attr, dynamic_smem);
    case mqa_topk::FusedKernel::kSplit: return fused_split_attributes(attr, dynamic_smem);
    case mqa_topk::FusedKernel::kStaged: return fused_staged_attributes(attr, dynamic_smem);
    case mqa_topk::FusedKernel::kHybrid: return fused_hybrid_attributes(attr, dynamic_smem);
  }
  return cudaErrorInvalidValue;
}
