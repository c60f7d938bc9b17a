"""Diagnostics of the v3 fused kernel (dev variants 12, 13, 15) on small shapes:
per variant and setting, three runs compared with each other (as sets and in
order) and with the exact reference sets (from the dense logits). Settings:
default, no gate (MQA_TOPK_FUSED_TARGET past every row's length), one CTA
(MQA_TOPK_FUSED_GRID=1). Usage: MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_v3_debug.py [variants]"""
import os
import sys

import torch

sys.path.insert(0, "tests")
from test_gpu_topk import reference_sets  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402
from mqa_topk_cli.workloads import make_workload  # noqa: E402

ext = ops._native()
variants = [int(v) for v in sys.argv[1:]] or [12, 13, 14, 15]
cases = [dict(layout="causal", rows=67, keys=5001, dist="gaussian"),
         dict(layout="ragged", rows=100, keys=9001, dist="dsa", unaligned_starts=True),
         dict(layout="full", rows=24, keys=30000, dist="relu_saturated")]
settings = [("default", {}), ("no gate", {"MQA_TOPK_FUSED_TARGET": "100000000"}), ("one CTA", {"MQA_TOPK_FUSED_GRID": "1"})]


def run(variant, w, topk, poison):
    ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(variant, topk, 0), dtype=torch.uint8, device="cuda")
    ws.random_(0, 255)
    out = torch.full((w.rows, topk), poison, dtype=torch.int32, device="cuda")
    ext.fused_mqa_topk_probe(variant, w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, ws)
    torch.cuda.synchronize()
    return out


for kw in cases:
    for topk in (512, 2048):
        w = make_workload(device="cuda", seed=11, topk=topk, **kw)
        logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        ref = reference_sets(logits, w.starts, w.ends, topk)
        for variant in variants:
            for name, env in settings:
                for kk in ("MQA_TOPK_FUSED_TARGET", "MQA_TOPK_FUSED_GRID"):
                    os.environ.pop(kk, None)
                os.environ.update(env)
                outs = [run(variant, w, topk, p).cpu() for p in (-7, -3, -5)]
                for kk in env:
                    os.environ.pop(kk)
                order_diff = sum(int((outs[0][r] != outs[i][r]).any()) for i in (1, 2) for r in range(w.rows))
                set_diff = sum(int((outs[0][r].sort().values != outs[i][r].sort().values).any())
                               for i in (1, 2) for r in range(w.rows))
                wrong = 0
                for r in range(w.rows):
                    got = set(int(x) for x in outs[0][r].tolist() if x >= 0)
                    if got != set(int(x) for x in ref[r].tolist()):
                        wrong += 1
                print(f"{kw['layout']}-{kw['dist']} topk={topk} v{variant} {name:8s}: rows {w.rows}, "
                      f"wrong sets {wrong}, reruns differing in order {order_diff}, in set {set_diff}", flush=True)
