// Host side of the device range check: see range_errors.h.
#include "range_errors.h"

#include <atomic>
#include <mutex>

#include "launch_common.h"
#include "mqa_topk/common/range_check.cuh"

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::atomic<unsigned long long*> word{nullptr};
  unsigned long long* mirror_host = nullptr;
  unsigned long long* mirror_dev = nullptr;
  cudaStream_t stream = nullptr;  // private, non-blocking: reads and resets never touch the caller's streams
};

DeviceState g_states[kMaxDevices];
std::mutex g_mutex;

// This thread's capture mode set to relaxed for the scope: cudaMalloc and
// cudaHostAlloc are "unsafe" during a global-mode capture (torch's own
// allocator does the same around its cudaMalloc); nothing here is enqueued on
// a capturing stream.
struct RelaxedCaptureMode {
  cudaStreamCaptureMode prev = cudaStreamCaptureModeRelaxed;
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&prev); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&prev); }
};

DeviceState& state(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "range errors: CUDA device index ", device, " out of range");
  DeviceState& s = g_states[device];
  if (s.word.load(std::memory_order_acquire) != nullptr) return s;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (s.word.load(std::memory_order_relaxed) != nullptr) return s;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const RelaxedCaptureMode relaxed;
  void* word = nullptr;
  void* mirror = nullptr;
  void* mirror_dev = nullptr;
  MQA_CHECK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  MQA_CHECK_CUDA(cudaMalloc(&word, sizeof(unsigned long long)));
  MQA_CHECK_CUDA(cudaHostAlloc(&mirror, sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable));
  *static_cast<volatile unsigned long long*>(mirror) = mqa_topk::kRangeOk;
  // Mapped pinned memory is implicit for the runtime's primary context; should
  // a context lack it, the kernels get no mirror (the next-call report is then
  // lost, check_errors() still reads the word).
  if (cudaHostGetDevicePointer(&mirror_dev, mirror, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    mirror_dev = nullptr;
  }
  MQA_CHECK_CUDA(cudaMemsetAsync(word, 0xff, sizeof(unsigned long long), s.stream));  // kRangeOk
  MQA_CHECK_CUDA(cudaStreamSynchronize(s.stream));
  s.mirror_host = static_cast<unsigned long long*>(mirror);
  s.mirror_dev = static_cast<unsigned long long*>(mirror_dev);
  s.word.store(static_cast<unsigned long long*>(word), std::memory_order_release);
  return s;
}

}  // namespace

namespace mqa_topk {
RangeErrorSink range_error_sink(int device, int64_t row_base) {
  DeviceState& s = state(device);
  MQA_CHECK_ARG(row_base >= 0 && row_base <= INT32_MAX, "row_base", "must be in [0, 2^31), got ", row_base);
  return RangeErrorSink{s.word.load(std::memory_order_relaxed), s.mirror_dev, static_cast<int>(row_base)};
}
}  // namespace mqa_topk

uint64_t range_error_mirror_address(int64_t device) {
  return reinterpret_cast<uint64_t>(state(static_cast<int>(device)).mirror_host);
}

uint64_t range_error_take(int64_t device) {
  DeviceState& s = state(static_cast<int>(device));
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  unsigned long long* word = s.word.load(std::memory_order_relaxed);
  unsigned long long v = mqa_topk::kRangeOk;
  MQA_CHECK_CUDA(cudaMemcpyAsync(&v, word, sizeof(v), cudaMemcpyDeviceToHost, s.stream));
  MQA_CHECK_CUDA(cudaStreamSynchronize(s.stream));
  if (v != mqa_topk::kRangeOk) {
    MQA_CHECK_CUDA(cudaMemsetAsync(word, 0xff, sizeof(unsigned long long), s.stream));
    MQA_CHECK_CUDA(cudaStreamSynchronize(s.stream));
  }
  *reinterpret_cast<volatile unsigned long long*>(s.mirror_host) = mqa_topk::kRangeOk;
  return v == mqa_topk::kRangeOk ? 0 : static_cast<uint64_t>(v);
}

at::Tensor empty_outside_capture(int64_t nbytes, int64_t device) {
  MQA_CHECK_ARG(nbytes >= 0, "nbytes", "must be >= 0, got ", nbytes);
  MQA_CHECK_ARG(device >= 0, "device", "must be a CUDA device index, got ", device);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  void* p = nullptr;
  {
    const RelaxedCaptureMode relaxed;
    MQA_CHECK_CUDA(cudaMalloc(&p, static_cast<size_t>(nbytes > 0 ? nbytes : 1)));
  }
  return at::from_blob(
      p, {nbytes}, [](void* ptr) { (void)cudaFree(ptr); },
      at::TensorOptions().dtype(at::kByte).device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}
