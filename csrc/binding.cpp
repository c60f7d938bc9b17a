// Registers the ops with Python. Nothing else lives here: contract checks are
// in the launchers (csrc/*.cpp, one per op), the kernels' instantiations in
// csrc/kernels/, the kernels in include/mqa_topk/.
#include <torch/extension.h>

#include "fused_mqa_topk.h"
#include "mqa_logits.h"
#include "range_errors.h"
#include "topk_per_row.h"

namespace {
py::list kernel_info() {
  std::vector<mqa_topk::KernelInfo> all = mqa_logits_kernel_info();
  for (auto& k : topk_per_row_kernel_info()) all.push_back(k);
  for (auto& k : fused_mqa_topk_kernel_info()) all.push_back(k);
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
  m.def("topk_per_row", &topk_per_row, "exact deterministic per-row top-k (sm90)", py::arg("logits"),
        py::arg("starts"), py::arg("ends"), py::arg("output"), py::arg("row_base") = 0);
  // kernel: -1 chooses by shape (include/mqa_topk/fused/heuristics.h); 0-3 forces whole, split, staged, hybrid. Returns its name.
  m.def("fused_mqa_topk", &fused_mqa_topk, "fused FP8 MQA logits + top-k (sm90)", py::arg("q"), py::arg("k"),
        py::arg("scales"), py::arg("weights"), py::arg("starts"), py::arg("ends"), py::arg("output"),
        py::arg("workspace"), py::arg("kernel") = -1);
  m.def("fused_mqa_topk_workspace_bytes", &fused_mqa_topk_workspace_bytes, "fused workspace size", py::arg("topk"),
        py::arg("device"));
  m.def("fused_mqa_topk_choice", &fused_mqa_topk_choice, "(the fused kernel a shape runs by default, its per-call buffer bytes)",
        py::arg("rows"), py::arg("keys"), py::arg("topk"), py::arg("heads"), py::arg("device"));
  m.def("range_error_mirror_address", &range_error_mirror_address,
        "host address of the device's range-error mirror (uint64, ~0 when clean)");
  m.def("range_error_take", &range_error_take, "the device's range-error record (0: none), then reset");
  m.def("empty_outside_capture", &empty_outside_capture, "uint8 device buffer from cudaMalloc, outside graph pools");
  m.def("kernel_info", &kernel_info, "registers / shared memory / local memory of each kernel");
}
