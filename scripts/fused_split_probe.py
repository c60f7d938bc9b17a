"""Issue 12 probe (MQA_TOPK_DEV_PROBES=1 builds): small row counts at 64K keys,
causal, gaussian. For each row count and topk: native dense (logits + top-k),
the default fused kernel and dev variant 7 (blocks split across CTAs) timed in
one process (cold L2, medians), with the split kernel's sets checked against
the default's. Usage: fused_split_probe.py [keys [rows ...]]."""
import sys

import torch

from mqa_topk_cli import ops
from mqa_topk_cli.timing import time_fn
from mqa_topk_cli.workloads import make_workload

args = [int(a) for a in sys.argv[1:]]
keys = args[0] if args else 65536
rows_list = args[1:] or [64, 256, 512, 1064, 1576, 2120]
ext = ops._native()
print(f"{'rows':>6} {'topk':>5} {'native ms':>10} {'fused ms':>9} {'split ms':>9} {'split/native':>13}  sets")
for rows in rows_list:
    for topk in (512, 1024, 2048):
        w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist="gaussian", seed=3, device="cuda")
        a = torch.full((rows, topk), -7, dtype=torch.int32, device="cuda")
        b = torch.full_like(a, -5)
        c = torch.full_like(a, -3)
        ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(7, topk, 0), dtype=torch.uint8, device="cuda")
        tn = time_fn(lambda: ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, c))
        tf = time_fn(lambda: ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, a))
        ts = time_fn(lambda: ext.fused_mqa_topk_probe(7, w.q, w.k, w.scales, w.weights, w.starts, w.ends, b, ws))
        same = torch.equal(a.sort(dim=1).values, b.sort(dim=1).values) and torch.equal(
            a.sort(dim=1).values, c.sort(dim=1).values)
        print(f"{rows:6d} {topk:5d} {tn.median_ms:10.3f} {tf.median_ms:9.3f} {ts.median_ms:9.3f} "
              f"{ts.median_ms / tn.median_ms:13.2f}  {'same' if same else 'DIFFER'}", flush=True)
