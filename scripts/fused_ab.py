"""A/B of the default fused kernel against one dev variant on the headline
shape (cold L2, medians, same process): same sets, and the two times.
Usage: MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_ab.py VARIANT [topk ...]"""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402
from mqa_topk_cli.timing import time_fn  # noqa: E402

variant = int(sys.argv[1])
topks = [int(t) for t in sys.argv[2:]] or [2048, 512]
q, k, scales, w, starts, ends = make(8192, 65536, 5, "causal")
ext = ops._native()
for topk in topks:
    ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(variant, topk, 0), dtype=torch.uint8, device="cuda")
    a = torch.full((8192, topk), -7, dtype=torch.int32, device="cuda")
    b = torch.full_like(a, -5)
    ta = time_fn(lambda: ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, a))
    tb = time_fn(lambda: ext.fused_mqa_topk_probe(variant, q, k, scales, w, starts, ends, b, ws))
    ta2 = time_fn(lambda: ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, a))
    same = torch.equal(a.sort(dim=1).values, b.sort(dim=1).values)
    print(f"topk={topk}: default {ta.median_ms:.3f} / {ta2.median_ms:.3f} ms, variant {variant} {tb.median_ms:.3f} ms, "
          f"{'same sets' if same else 'SETS DIFFER'}", flush=True)
