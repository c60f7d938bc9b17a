// Host side of the device range check (include/mqa_topk/common/range_check.cuh): one
// error word per device (device memory) and its host-mapped mirror (pinned
// memory), allocated on first use and kept for the life of the process, so a
// CUDA graph that captured a launch keeps pointing at them.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace mqa_topk {
struct RangeErrorSink;
// The sink the launchers pass to their kernels (allocates on first use; safe
// during CUDA-graph capture: nothing is enqueued on the capturing stream).
// row_base: added to the row index of every record (a chunk of a larger call).
RangeErrorSink range_error_sink(int device, int64_t row_base = 0);
}  // namespace mqa_topk

// Host address of device `device`'s mirror: a uint64 that is ~0 while no bad
// row has been recorded (Python polls it without synchronising).
uint64_t range_error_mirror_address(int64_t device);
// The error word of `device` (0 when clean, else the packed record of
// range_check.cuh), then resets word and mirror. The caller synchronises the
// device first; this only copies 8 bytes on a private stream.
uint64_t range_error_take(int64_t device);
// `nbytes` of device memory from cudaMalloc, never from a CUDA graph's private
// pool, even during capture (the fused workspace for a capturing stream).
at::Tensor empty_outside_capture(int64_t nbytes, int64_t device);
