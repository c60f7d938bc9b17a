"""One dev logits variant on one shape (MQA_TOPK_DEV_PROBES=1 builds), compared
bitwise with variant 0 inside every row's range: for isolating a variant that
hangs or fails (run it under `timeout`, or compute-sanitizer). Usage:
logits_one.py VARIANT [ROWS KEYS [causal|random]]."""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402

v = int(sys.argv[1])
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 67
keys = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
layout = sys.argv[4] if len(sys.argv) > 4 else "causal"
ext = ops._native()
q, k, scales, w, starts, ends = make(rows, keys, 5, layout)
pitch = -(-keys // 4) * 4
outs = {}
for var in (0, v):
    out = torch.full((rows, pitch), float("nan"), device="cuda")
    print(f"variant {var}: launching rows={rows} keys={keys} {layout}", flush=True)
    ext.mqa_logits_probe(var, q, k, scales, w, starts, ends, out)
    torch.cuda.synchronize()
    print(f"variant {var}: done", flush=True)
    outs[var] = torch.nan_to_num(out, nan=7.0)
col = torch.arange(pitch, device="cuda")[None]
inside = (col >= starts[:, None].long()) & (col < ends[:, None].long())
same = torch.equal(outs[0][inside], outs[v][inside])
print(f"variant {v} vs 0: bitwise {'equal' if same else 'DIFFERENT'}", flush=True)
sys.exit(0 if same else 1)
