"""One call of an op on a generated workload, for Nsight Compute (the launch
after a warm-up one is profiled):

    ncu --clock-control none -k regex:sm90_fused -s 1 -c 1 --section WarpStateStats --section SchedulerStats \\
        python3 scripts/ncu_ops.py fused 8192 65536 2048
    ncu --clock-control none -k regex:sm90_fp8 -s 1 -c 1 ... python3 scripts/ncu_ops.py logits 8192 65536

    python3 scripts/ncu_ops.py OP ROWS KEYS [TOPK] [--dist D] [--kernel K] [--heads H]
OP: logits, topk, native (logits then top-k) or fused (--kernel: whole, split,
staged or hybrid; default: chosen by shape). Causal rows, as the headline.
"""
import argparse

import torch

from mqa_topk_cli import ops
from mqa_topk_cli.workloads import make_workload

ap = argparse.ArgumentParser()
ap.add_argument("op", choices=("logits", "topk", "native", "fused"))
ap.add_argument("rows", type=int)
ap.add_argument("keys", type=int)
ap.add_argument("topk", type=int, nargs="?", default=2048)
ap.add_argument("--dist", default="gaussian")
ap.add_argument("--kernel", default=None, choices=ops.FUSED_KERNELS)
ap.add_argument("--heads", type=int, default=32, choices=(16, 32, 64))
a = ap.parse_args()
w = make_workload("causal", rows=a.rows, keys=a.keys, topk=a.topk, dist=a.dist, seed=3, device="cuda", heads=a.heads)
out = torch.empty((a.rows, a.topk), dtype=torch.int32, device="cuda")
logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends) if a.op == "topk" else None
for _ in range(2):  # (the first call builds or loads the extension and warms up)
    if a.op == "logits":
        ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    elif a.op == "topk":
        ops.top_k_per_row_prefill(logits, w.starts, w.ends, out)
    elif a.op == "native":
        ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
    else:
        ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, kernel=a.kernel)
torch.cuda.synchronize()
