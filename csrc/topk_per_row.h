// Exact, deterministic per-row top-k over fp32 logits (the dense path's second
// half). Kernel: include/mqa_topk/topk/sm90_topk_per_row.cuh.
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "launch_common.h"

// logits [rows, width] fp32 (unit column stride, row stride >= width),
// starts/ends [rows] int32, output [rows, topk] int32 with topk in
// {512, 1024, 2048}: indices (relative to start) of the top-k of each row's
// [start, end), ties to the lowest index, -1 padded.
// row_base: added to the row numbers of range errors (the rows are a chunk of
// a larger call starting at row row_base).
void topk_per_row(const at::Tensor& logits, const at::Tensor& starts, const at::Tensor& ends,
                  const at::Tensor& output, int64_t row_base = 0);
std::vector<mqa_topk::KernelInfo> topk_per_row_kernel_info();
