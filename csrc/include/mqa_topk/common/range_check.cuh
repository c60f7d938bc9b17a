// Row ranges checked on the device (SPEC §3: 0 <= starts[r] <= ends[r] <= keys),
// so that the ops never read starts/ends back to the host. Torch-free.
//
// Two halves, independent of each other:
// - Safety: every kernel clamps a row's range before it uses it for an
//   address, a mask or an output index, the same way everywhere
//   (`clamp_row_range`: start' = clamp(start, 0, keys), end' = clamp(end,
//   start', keys)), so ANY int32 values (negative, past keys, start > end,
//   INT32_MAX) stay in bounds, a bad row reads as its clamped range (start >
//   end: empty), and the fused and the dense path still agree on it.
// - Reporting: each kernel checks every row once (`check_row_ranges`, a
//   grid-stride loop run by threads that have nothing else to do, so it costs
//   the critical path nothing) and records the lowest bad row of the launch in
//   a per-device error word: atomicMin of a packed 64-bit record
//   (`pack_range_error`: row, condition, kernel, the offending value), so
//   "lowest row first, then the first failed condition" wins, whatever the
//   order the threads run in. The thread whose record lowers the word also
//   stores it to a host-mapped mirror that the host polls without any sync;
//   the host reads the word itself (after a sync) only when the mirror says
//   there is something to report. A null word disables the recording (the
//   clamping stays).
// Why in the kernels and not a separate check kernel per op: a separate
// launch would add host launch overhead and a few microseconds of GPU time in
// front of every op on the stream (visible at small shapes, where the ops take
// ~0.1 ms); the in-kernel check runs on warps that are idle anyway (the
// producer warpgroup's warps 1-3 of the logits and fused kernels, thread 0 of
// each top-k CTA, which loads its row's range regardless), so it costs the
// critical path nothing and no kernel's registers or spills grew. The
// standalone `row_range_check_kernel` only runs where no kernel does (the
// logits op with zero keys).
#pragma once

#ifndef MQA_TOPK_HOST_EMULATION
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace mqa_topk {

// The error word and its host mirror (both kRangeOk when clean).
struct RangeErrorSink {
  unsigned long long* word;    // device memory, one per device
  unsigned long long* mirror;  // pinned host memory mapped into the device (may be null)
  int row_base;                // added to the launch's row index (a chunk of a larger call)
};

// "No error": larger than every record (a record's condition field is <= 2).
constexpr unsigned long long kRangeOk = ~0ull;

// Conditions, in the order they are tested for one row.
enum RangeCond : unsigned { kStartNegative = 0, kEndBeforeStart = 1, kEndPastKeys = 2 };
// Which kernel recorded it.
enum RangeKernel : unsigned { kKernelLogits = 1, kKernelTopk = 2, kKernelFused = 3 };

// Record layout, most significant first: row (28 bits, saturated at 2^28 - 1),
// condition (2), kernel (2), the offending int32 value (32: the start for
// kStartNegative, the end otherwise).
constexpr int kRangeRowBits = 28;
constexpr unsigned kRangeRowMax = (1u << kRangeRowBits) - 1u;

__host__ __device__ constexpr unsigned long long pack_range_error(unsigned row, unsigned cond, unsigned kernel,
                                                                  int value) {
  return (static_cast<unsigned long long>(row < kRangeRowMax ? row : kRangeRowMax) << 36) |
         (static_cast<unsigned long long>(cond & 3u) << 34) | (static_cast<unsigned long long>(kernel & 3u) << 32) |
         static_cast<unsigned long long>(static_cast<uint32_t>(value));
}

// The device side (compiled by nvcc only; a host translation unit, such as
// the error word's owner csrc/range_errors.cpp, sees the record format alone).
#if defined(__CUDACC__) && !defined(MQA_TOPK_HOST_EMULATION)

// The one clamping rule of every kernel.
__device__ __forceinline__ void clamp_row_range(int& start, int& end, int keys) {
  start = min(max(start, 0), keys);
  end = min(max(end, start), keys);
}

// The record of row `row` with raw range [s, e), or kRangeOk.
__device__ __forceinline__ unsigned long long range_error_of(unsigned row, int s, int e, int keys, unsigned kernel) {
  if (s < 0) return pack_range_error(row, kStartNegative, kernel, s);
  if (e < s) return pack_range_error(row, kEndBeforeStart, kernel, e);
  if (e > keys) return pack_range_error(row, kEndPastKeys, kernel, e);
  return kRangeOk;
}

__device__ __forceinline__ void record_range_error(const RangeErrorSink& sink, unsigned long long code) {
  const unsigned long long old = atomicMin(sink.word, code);
  if (code < old && sink.mirror != nullptr) *reinterpret_cast<volatile unsigned long long*>(sink.mirror) = code;
}

// Checks one row (`row` of the launch) and records it if bad; sink.word must be non-null.
__device__ __forceinline__ void check_row_range(const RangeErrorSink& sink, unsigned row, int s, int e, int keys,
                                                unsigned kernel) {
  const unsigned long long code = range_error_of(row + static_cast<unsigned>(sink.row_base), s, e, keys, kernel);
  if (code != kRangeOk) record_range_error(sink, code);
}

// This thread's index among the checking threads of the grid when it is one
// of the `per_cta` threads [lo, lo + per_cta) of its CTA, else -1.
__device__ __forceinline__ int range_checker_index(int tid, int lo, int per_cta) {
  return tid >= lo && tid < lo + per_cta ? static_cast<int>(blockIdx.x) * per_cta + (tid - lo) : -1;
}

// Checks rows first, first + stride, ... < rows (the caller picks the threads:
// `first` is the thread's index among the checking threads of the grid,
// `stride` their number; a negative `first` checks nothing).
__device__ __forceinline__ void check_row_ranges(const RangeErrorSink& sink, const int* starts, const int* ends,
                                                 int rows, int keys, unsigned kernel, int first, int stride) {
  if (sink.word == nullptr || first < 0) return;
  for (unsigned r = static_cast<unsigned>(first); r < static_cast<unsigned>(rows); r += static_cast<unsigned>(stride))
    check_row_range(sink, r, __ldg(starts + r), __ldg(ends + r), keys, kernel);
}

// Standalone check for a launch that runs no kernel of its own (the logits op
// with zero keys, where every row must be empty).
template <unsigned kKernel>
__global__ void __launch_bounds__(256) row_range_check_kernel(const RangeErrorSink sink, const int* starts,
                                                              const int* ends, int rows, int keys) {
  check_row_ranges(sink, starts, ends, rows, keys, kKernel, blockIdx.x * blockDim.x + threadIdx.x,
                   gridDim.x * blockDim.x);
}

template <unsigned kKernel>
inline cudaError_t launch_row_range_check(const RangeErrorSink& sink, const int* starts, const int* ends, int rows,
                                          int keys, cudaStream_t stream) {
  if (rows <= 0 || sink.word == nullptr) return cudaSuccess;
  const long long need = (static_cast<long long>(rows) + 255) / 256;
  const int blocks = static_cast<int>(need < 1024 ? need : 1024);
  row_range_check_kernel<kKernel><<<blocks, 256, 0, stream>>>(sink, starts, ends, rows, keys);
  return cudaGetLastError();
}

#endif  // __CUDACC__ && !MQA_TOPK_HOST_EMULATION

}  // namespace mqa_topk
