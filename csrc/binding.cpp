// Registers the ops with Python. Nothing else lives here: contract checks are
// in the launchers (one .cu per op), kernels in include/mqa_topk/.
#include <torch/extension.h>

#include "mqa_logits.h"
#include "range_errors.h"
#if __has_include("topk_per_row.h")
#include "topk_per_row.h"
#define MQA_HAS_TOPK 1
#endif
#if __has_include("fused_mqa_topk.h")
#include "fused_mqa_topk.h"
#define MQA_HAS_FUSED 1
#endif

#ifdef MQA_TOPK_DEV_PROBES
void mqa_logits_probe(int64_t variant, const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                      const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                      const at::Tensor& logits);
#ifdef MQA_HAS_FUSED
void fused_mqa_topk_probe(int64_t variant, const at::Tensor& q, const at::Tensor& k, const at::Tensor& scales,
                          const at::Tensor& weights, const at::Tensor& starts, const at::Tensor& ends,
                          const at::Tensor& output, const at::Tensor& workspace);
int64_t fused_mqa_topk_probe_workspace_bytes(int64_t variant, int64_t topk, int64_t device);
#endif
#endif

namespace {
py::list kernel_info() {
  std::vector<mqa_topk::KernelInfo> all = mqa_logits_kernel_info();
#ifdef MQA_HAS_TOPK
  for (auto& k : topk_per_row_kernel_info()) all.push_back(k);
#endif
#ifdef MQA_HAS_FUSED
  for (auto& k : fused_mqa_topk_kernel_info()) all.push_back(k);
#endif
  py::list out;
  for (const auto& k : all) {
    py::dict d;
    d["name"] = k.name;
    d["registers"] = k.registers;
    d["shared_static_bytes"] = k.shared_static_bytes;
    d["shared_bytes"] = k.shared_static_bytes + k.shared_dynamic_bytes;
    d["local_bytes"] = k.local_bytes;
    d["max_threads"] = k.max_threads;
    out.append(d);
  }
  return out;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // row_base (the ops' dense path passes the chunk's first row): added to
  // the row number of a range error recorded on the device.
  m.def("mqa_logits", &mqa_logits, "FP8 MQA logits (sm90)", py::arg("q"), py::arg("k"), py::arg("scales"),
        py::arg("weights"), py::arg("starts"), py::arg("ends"), py::arg("logits"), py::arg("row_base") = 0);
#ifdef MQA_HAS_TOPK
  m.def("topk_per_row", &topk_per_row, "exact deterministic per-row top-k (sm90)", py::arg("logits"),
        py::arg("starts"), py::arg("ends"), py::arg("output"), py::arg("row_base") = 0);
#endif
#ifdef MQA_HAS_FUSED
  m.def("fused_mqa_topk", &fused_mqa_topk, "fused FP8 MQA logits + top-k (sm90)");
  m.def("fused_mqa_topk_workspace_bytes", &fused_mqa_topk_workspace_bytes, "fused workspace size");
#endif
#ifdef MQA_TOPK_DEV_PROBES
  m.def("mqa_logits_probe", &mqa_logits_probe, "development-only logits kernel variants");
#ifdef MQA_HAS_FUSED
  m.def("fused_mqa_topk_probe", &fused_mqa_topk_probe, "development-only fused kernel variants");
  m.def("fused_mqa_topk_probe_workspace_bytes", &fused_mqa_topk_probe_workspace_bytes,
        "workspace a development variant needs");
#endif
#endif
  m.def("range_error_mirror_address", &range_error_mirror_address,
        "host address of the device's range-error mirror (uint64, ~0 when clean)");
  m.def("range_error_take", &range_error_take, "the device's range-error record (0: none), then reset");
  m.def("empty_outside_capture", &empty_outside_capture, "uint8 device buffer from cudaMalloc, outside graph pools");
  m.def("kernel_info", &kernel_info, "registers / shared memory / local memory of each kernel");
}
