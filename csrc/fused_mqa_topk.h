// Fused FP8 MQA logits + exact per-row top-k in one launch (the op's
// launcher; the kernels in csrc/kernels/ and include/mqa_topk/).
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <tuple>
#include <vector>

#include "launch_common.h"

// q [rows, heads, 128] fp8 (heads 16, 32 or 64), k [keys, 128] fp8, scales
// [keys] fp32, weights [rows, heads] fp32, starts/ends [rows] int32, output [rows, topk] int32
// (contiguous, topk in {512, 1024, 2048}), workspace a CUDA uint8 tensor of at
// least fused_mqa_topk_workspace_bytes(topk, device) bytes; kernel -1 (chosen
// by shape) or 0-3 (whole, split, staged, hybrid: must run the shape). Writes
// the indices (relative to start) of each row's top-k, ties to the lowest
// index, -1 padded. Returns the kernel's name.
std::string fused_mqa_topk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                           const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                           const at::Tensor& output, const at::Tensor& workspace, int64_t kernel = -1);
int64_t fused_mqa_topk_workspace_bytes(int64_t topk, int64_t device);
// The fused kernel a shape runs by default and what a call of it allocates
// beyond the fixed workspace (its per-call buffer, bytes).
std::tuple<std::string, int64_t> fused_mqa_topk_choice(int64_t rows, int64_t keys, int64_t topk, int64_t heads,
                                                       int64_t device);
std::vector<mqa_topk::KernelInfo> fused_mqa_topk_kernel_info();
