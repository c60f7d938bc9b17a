"""Development measurement of the fused block kernel at the headline (causal
8192 x 65536, top-2048, 32 heads) against builds of it with one extra
preprocessor switch each, and the dense logits kernel alone, interleaved in
one process (cold L2, medians). By default the switches are the weight-load
probes: the tile loop reads the block's weights from shared memory once per
row (4 loads per tile) or not at all (-DMQA_TOPK_FUSED_PROBE_WLOADS=1 / =0;
their logits are wrong, their selection work alike on these rows). Other
probes: -DMQA_TOPK_FUSED_PROBE_NOTAIL=1 (the gated tiles without their filter
and appends; =2 also without the weight loads; wrong sets).

    python3 dev/fused_bound.py [--reps N] [NAME=MACRO[=VALUE] ...]
"""
from __future__ import annotations

import argparse

import torch

from mqa_topk_cli import bench, jit, ops, timing
from mqa_topk_cli.workloads import make_workload

PROBES = ["w-once=MQA_TOPK_FUSED_PROBE_WLOADS=1", "w-none=MQA_TOPK_FUSED_PROBE_WLOADS=0"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("builds", nargs="*", default=PROBES, help="NAME=MACRO[=VALUE]: a build with -DMACRO[=VALUE]")
    a = ap.parse_args()
    h = bench.HEADLINE
    rows, keys, topk = h["rows"], h["keys"], h["topk"]
    w = make_workload(h["layout"], rows=rows, keys=keys, topk=topk, dist=h["dist"], seed=h["seed"], device="cuda")
    ld = ops._pitch(keys)  # the op's logits row pitch
    lg = torch.empty(rows, ld, device="cuda")
    out = torch.empty(rows, topk, dtype=torch.int32, device="cuda")
    args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    builds = {}  # name -> (tag, define): built together, then loaded here
    for b in a.builds:
        name, define = b.split("=", 1)
        builds[name] = ("fb_" + "".join(c if c.isalnum() else "_" for c in name), define)
    jit.build_variants({"shipped": None, **dict(builds.values())})
    exts = {"shipped": jit.load_extension()}
    for name, (tag, define) in builds.items():
        exts[name] = jit.load_with_define(tag, define)
    ws = {n: torch.zeros(e.fused_mqa_topk_workspace_bytes(topk, 0), dtype=torch.uint8, device="cuda")
          for n, e in exts.items()}
    ref = None
    for n, e in exts.items():  # the kernel the headline runs; the sets against the shipped build's
        out.fill_(-7)  # (poisoned: a row the kernel does not write differs)
        kernel = e.fused_mqa_topk(*args, out, ws[n], -1)
        sets = torch.sort(out, dim=1).values
        ref = sets.clone() if ref is None else ref
        print(f"{n}: {kernel}, sets {'equal to' if torch.equal(sets, ref) else 'differ from'} shipped's", flush=True)
    runs = {f"fused {n}": (lambda e=e, n=n: e.fused_mqa_topk(*args, out, ws[n], -1)) for n, e in exts.items()}
    runs["logits"] = lambda e=exts["shipped"]: e.mqa_logits(*args, lg)
    for rep in range(a.reps):
        line = []
        for name, fn in runs.items():
            t = timing.time_fn(fn)
            line.append(f"{name} {t.median_ms:.3f}")
        print(f"[{rep}] ms: " + " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
