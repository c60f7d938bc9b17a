#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "launch_common.h"

void mqa_logits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales, const at::Tensor& weights,
                const at::Tensor& starts, const at::Tensor& ends, const at::Tensor& logits, int64_t row_base = 0);
std::vector<mqa_topk::KernelInfo> mqa_logits_kernel_info();
