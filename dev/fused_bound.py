"""Development measurement of what the fused block kernel's per-tile weight
loads cost at the headline (causal 8192 x 65536, top-2048, 32 heads): the
shipped fused kernel, two probe builds whose tile loop reads the block's
weights from shared memory once per row (4 loads per tile) or not at all
(-DMQA_TOPK_FUSED_PROBE_WLOADS=1 / =0; their logits are wrong, their
selection work alike on these rows), and the dense logits kernel alone,
interleaved three times in one process (cold L2, medians).

    python3 dev/fused_bound.py
"""
from __future__ import annotations

import torch

from mqa_topk_cli import jit, timing
from mqa_topk_cli.workloads import make_workload


def main():
    rows, keys, topk = 8192, 65536, 2048
    w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist="gaussian", seed=0, device="cuda")
    ld = (keys + 3) // 4 * 4
    lg = torch.empty(rows, ld, device="cuda")
    out = torch.empty(rows, topk, dtype=torch.int32, device="cuda")
    args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    shipped = jit.load_extension()
    exts = {"shipped": shipped,
            "w-once": jit.load_with_define("probe_w1", "MQA_TOPK_FUSED_PROBE_WLOADS=1"),
            "w-none": jit.load_with_define("probe_w0", "MQA_TOPK_FUSED_PROBE_WLOADS=0")}
    ws = {n: torch.zeros(e.fused_mqa_topk_workspace_bytes(topk, 0), dtype=torch.uint8, device="cuda")
          for n, e in exts.items()}
    for n, e in exts.items():  # the kernel the headline runs
        print(n, e.fused_mqa_topk(*args, out, ws[n], -1), flush=True)
    runs = {f"fused {n}": (lambda e=e, n=n: e.fused_mqa_topk(*args, out, ws[n], -1)) for n, e in exts.items()}
    runs["logits"] = lambda: shipped.mqa_logits(*args, lg)
    for rep in range(3):
        line = []
        for name, fn in runs.items():
            t = timing.time_fn(fn)
            line.append(f"{name} {t.median_ms:.3f}")
        print(f"[{rep}] ms: " + " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
