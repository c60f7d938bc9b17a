"""Times the development variants of the logits kernel (MQA_TOPK_DEV_PROBES=1):
0 real (8 rows, 2 math warpgroups + producer, 8 stages), 1 no epilogue
arithmetic, 2 no MMA, 3 six stages, 4 three math warpgroups with the TMA issued
inline (no producer warpgroup), 5 the same without epilogue arithmetic.
Variants 3 and 4 must write logits bitwise equal to variant 0 (same MMA, same
epilogue order); that is checked first, on fresh random inputs with a
NaN-poisoned output, including random ranges and awkward sizes, inside each
row's [start, end) (outside it the tile size changes what is written)."""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import cold_time, make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402

ext = ops._native()
ok = True
for rows, keys, layout in ((67, 1000, "causal"), (1023, 20001, "random"), (300, 70000, "random"), (2048, 65536, "causal"),
                           (5, 1, "random")):
    q, k, scales, w, starts, ends = make(rows, keys, 5, layout)
    pitch = -(-keys // 4) * 4
    outs = {}
    for v in (0, 3, 4):
        out = torch.full((rows, pitch), float("nan"), device="cuda")
        ext.mqa_logits_probe(v, q, k, scales, w, starts, ends, out)
        outs[v] = torch.nan_to_num(out, nan=7.0)
    torch.cuda.synchronize()
    col = torch.arange(pitch, device="cuda")[None]
    inside = (col >= starts[:, None].long()) & (col < ends[:, None].long())  # the contract's region
    for v in (3, 4):
        same = torch.equal(outs[0][inside], outs[v][inside]) and not torch.isnan(outs[v][inside]).any()
        ok &= same
        print(f"variant {v} vs 0, rows={rows} keys={keys} {layout}: bitwise {'equal' if same else 'DIFFERENT'}", flush=True)
if not ok:
    sys.exit(1)
names = {0: "real", 1: "no-epilogue", 3: "stages=6", 4: "inline-3wg", 5: "inline-3wg-no-epi"}
for rows, keys in ((8192, 65536), (8192, 8192), (1024, 8192), (1024, 131072)):
    q, k, scales, w, starts, ends = make(rows, keys, 7)
    out = torch.empty((rows, keys), device="cuda")
    pairs = (ends - starts).sum().item()
    for v, name in names.items():
        ms = cold_time(lambda: ext.mqa_logits_probe(v, q, k, scales, w, starts, ends, out))
        print(f"R={rows} N={keys} {name:>18}: {ms:.3f} ms  {8192 * pairs / ms / 1e12:.3f} PF/s", flush=True)
