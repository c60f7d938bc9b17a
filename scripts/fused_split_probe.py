"""Issue 12 probe (MQA_TOPK_DEV_PROBES=1 builds): small row counts at 64K keys,
causal, gaussian. For each row count and topk: native dense (logits + top-k),
the fused kernel with whole blocks (MQA_TOPK_FUSED_SPLIT=0) and dev variant 7
(blocks split across CTAs) timed in one process (cold L2, medians), the split
kernel's sets checked against the unsplit one's, and which one the op's rule
(fused_use_split) picks. Usage: fused_split_probe.py [keys [rows ...]]."""
import os
import sys

import torch

from mqa_topk_cli import ops
from mqa_topk_cli.timing import time_fn
from mqa_topk_cli.workloads import make_workload

args = [int(a) for a in sys.argv[1:]]
keys = args[0] if args else 65536
rows_list = args[1:] or [64, 256, 512, 1064, 1576, 2120]
ext = ops._native()
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def rule(rows):
    """csrc/fused_mqa_topk_split.h: fused_use_split."""
    blocks = (rows + 7) // 8
    return -(-blocks // SMS) * SMS * 100 > 115 * blocks


print(f"{'rows':>6} {'topk':>5} {'native ms':>10} {'whole ms':>9} {'split ms':>9} {'split/native':>13} "
      f"{'rule':>6} {'op/native':>10}  sets")
for rows in rows_list:
    for topk in (512, 1024, 2048):
        w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist="gaussian", seed=3, device="cuda")
        a = torch.full((rows, topk), -7, dtype=torch.int32, device="cuda")
        b = torch.full_like(a, -5)
        c = torch.full_like(a, -3)
        ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(7, topk, 0), dtype=torch.uint8, device="cuda")
        tn = time_fn(lambda: ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, c))
        os.environ["MQA_TOPK_FUSED_SPLIT"] = "0"
        tf = time_fn(lambda: ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, a))
        del os.environ["MQA_TOPK_FUSED_SPLIT"]
        ts = time_fn(lambda: ext.fused_mqa_topk_probe(7, w.q, w.k, w.scales, w.weights, w.starts, w.ends, b, ws))
        same = torch.equal(a.sort(dim=1).values, b.sort(dim=1).values) and torch.equal(
            a.sort(dim=1).values, c.sort(dim=1).values)
        op = ts.median_ms if rule(rows) else tf.median_ms
        print(f"{rows:6d} {topk:5d} {tn.median_ms:10.3f} {tf.median_ms:9.3f} {ts.median_ms:9.3f} "
              f"{ts.median_ms / tn.median_ms:13.2f} {'split' if rule(rows) else 'whole':>6} "
              f"{op / tn.median_ms:10.2f}  {'same' if same else 'DIFFER'}", flush=True)
