// Fused FP8 MQA logits + exact per-row top-k in one launch.
// Kernel: include/mqa_topk/sm90_fused_mqa_topk.cuh.
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "launch_common.h"

// q [rows, 32, 128] fp8, k [keys, 128] fp8, scales [keys] fp32, weights
// [rows, 32] fp32, starts/ends [rows] int32, output [rows, topk] int32
// (contiguous, topk in {512, 1024, 2048}), workspace a CUDA uint8 tensor of at
// least fused_mqa_topk_workspace_bytes(topk, device) bytes. Writes the indices
// (relative to start) of each row's top-k, ties to the lowest index, -1 padded.
void fused_mqa_topk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales, const at::Tensor& weights,
                    const at::Tensor& starts, const at::Tensor& ends, const at::Tensor& output,
                    const at::Tensor& workspace);
int64_t fused_mqa_topk_workspace_bytes(int64_t topk, int64_t device);
std::vector<mqa_topk::KernelInfo> fused_mqa_topk_kernel_info();

// For the launcher and the development probes (csrc/dev/): every contract
// check of fused_mqa_topk, then what a launch needs (probe / cap / target:
// the development knobs MQA_TOPK_FUSED_PROBE / MQA_TOPK_FUSED_CAP /
// MQA_TOPK_FUSED_TARGET, 0 when unset);
// and the error report after a launch.
struct FusedLaunchArgs {
  int rows, keys, topk, num_sms, probe, cap, target;
};
FusedLaunchArgs fused_mqa_topk_check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                                     const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                                     const at::Tensor& output, const at::Tensor& workspace);
void fused_mqa_topk_report(cudaError_t err, int map_error);
