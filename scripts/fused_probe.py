"""Development probe of the fused kernel: where its time goes. Times (cold L2,
medians) on the headline shape (or rows keys [dist]): the dense logits kernel
alone, the fused kernel, the fused kernel with appends switched off
(MQA_TOPK_FUSED_PROBE=1: logits + filter only), and, in MQA_TOPK_DEV_PROBES=1
builds, the variants (1: v2 with the select on selector warps, 2: v1, 3: plain
appends with 8 stages, 4: plain appends, 5: bins counted by the appends, 6: lean
appends with the general select, the default before the bins counted at the
block end; the default and 6 at lower gate targets, MQA_TOPK_FUSED_TARGET); checks
that every real variant returns the same sets; prints the in-kernel statistics
(MQA_TOPK_FUSED_PROBE=2) of each. Usage: fused_probe.py [rows keys [dist]
[--stats-only] [--all]] (dist: a workloads.DISTS name; --all: also variants 1-3).
The numbers that count come from `mqa-topk bench`."""
import os
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import make_causal  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402
from mqa_topk_cli.timing import time_fn  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
rows, keys = (int(a) for a in (ARGS[0:2] if len(ARGS) > 1 else (8192, 65536)))
DIST = ARGS[2] if len(ARGS) > 2 else None  # a workloads.DISTS name; default: logits_probe's gaussian
STATS_ONLY = "--stats-only" in sys.argv
ALL = "--all" in sys.argv  # also the older, slower variants 1-3
q, k, scales, w, starts, ends = make_causal(rows, keys, DIST)
flop = 8192.0 * float((ends - starts).sum())
base = {}


ext = ops._native()
_ws = {}


def probe_ws(variant, topk):
    """A workspace large enough for the dev variant (v1 needs more than the default)."""
    key = (variant, topk)
    if key not in _ws:
        _ws[key] = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(variant, topk, 0), dtype=torch.uint8,
                               device="cuda")
    return _ws[key]


def run(label, topk, env, variant=None):
    """variant: a dev-probe variant of the kernel (MQA_TOPK_DEV_PROBES=1 builds)."""
    for name in ("MQA_TOPK_FUSED_PROBE", "MQA_TOPK_FUSED_CAP", "MQA_TOPK_FUSED_TARGET"):
        os.environ.pop(name, None)
    os.environ.update(env)
    out = torch.full((rows, topk), -7, dtype=torch.int32, device="cuda")
    if variant is None:
        fn = lambda: ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)  # noqa: E731
    else:
        ws = probe_ws(variant, topk)
        fn = lambda: ext.fused_mqa_topk_probe(variant, q, k, scales, w, starts, ends, out, ws)  # noqa: E731
    t = time_fn(fn)
    same = ""
    if env.get("MQA_TOPK_FUSED_PROBE") != "1":
        srt = out.sort(dim=1).values
        if topk not in base:
            base[topk] = srt
        same = "same sets" if torch.equal(base[topk], srt) else "SETS DIFFER"
    print(f"{label:34s} topk={topk:5d} {t.median_ms:8.3f} ms  {flop / t.median_ms / 1e9:7.1f} TFLOP/s  {same}",
          flush=True)


def stats(topk, variant=None, target=None):
    """One run with MQA_TOPK_FUSED_PROBE=2: where the warps spend cycles."""
    os.environ.pop("MQA_TOPK_FUSED_CAP", None)
    os.environ.pop("MQA_TOPK_FUSED_TARGET", None)
    if target:
        os.environ["MQA_TOPK_FUSED_TARGET"] = str(target)
    os.environ["MQA_TOPK_FUSED_PROBE"] = "2"
    out = torch.full((rows, topk), -7, dtype=torch.int32, device="cuda")
    ws = ops.fused_mqa_topk_workspace("cuda", topk) if variant is None else probe_ws(variant, topk)
    if variant is None:
        ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    else:
        ext.fused_mqa_topk_probe(variant, q, k, scales, w, starts, ends, out, ws)
    torch.cuda.synchronize()
    os.environ.pop("MQA_TOPK_FUSED_PROBE")
    os.environ.pop("MQA_TOPK_FUSED_TARGET", None)
    st = ws[8:128].view(torch.int64).tolist()
    (comp, comp_entries, comp_cyc, over_cyc, merge_entries, merge_cyc, math_cyc, gate_cyc, redo_rows, gated_rows,
     sel_busy, sel_total, sel_wait, rows_done, binned_general) = st
    warps = torch.cuda.get_device_properties(0).multi_processor_count * 8
    blocks = (rows + 7) // 8
    name = ("default" if variant is None else f"variant {variant}") + (f", target {target}" if target else "")
    print(f"stats topk={topk} {name}: gated rows {gated_rows} ({gated_rows / max(rows, 1):.1%}), redone rows "
          f"{redo_rows} ({redo_rows / max(rows, 1):.3%}); candidates per row at the select "
          f"{merge_entries / max(rows_done, 1):.0f}; {comp} compactions ({comp / blocks / 16:.3f} per warpgroup-row per "
          f"block, {comp_entries / max(comp, 1):.0f} entries, {comp_cyc / max(comp, 1):.0f} cycles each); "
          f"math warps: compaction branch {over_cyc / max(math_cyc, 1):.1%}, gate {gate_cyc / max(math_cyc, 1):.1%}, "
          f"block-end select {merge_cyc / max(math_cyc, 1):.1%}, waiting for the selectors "
          f"{sel_wait / max(math_cyc, 1):.1%} of {math_cyc / warps:.0f} cycles per math warp; "
          f"selector warps busy {sel_busy / max(sel_total, 1):.1%}"
          + (f"; binned rows that took the general select {binned_general}" if variant in (None, 5) else ""), flush=True)


DEV = hasattr(ext, "fused_mqa_topk_probe")
if STATS_ONLY:  # only the in-kernel statistics of the default kernel (gate, redo, candidates)
    for topk in (2048, 512):
        for v in (None,):
            print(f"[{DIST or 'gaussian'}]", end=" ")
            stats(topk, variant=v)
    sys.exit(0)
t = time_fn(lambda: ops.mqa_logits(q, k, scales, w, starts, ends))
print(f"{'dense logits kernel alone':34s} {'':11s} {t.median_ms:8.3f} ms  {flop / t.median_ms / 1e9:7.1f} TFLOP/s")
for topk in (2048, 512):
    run("fused (default)", topk, {})
    if DEV:
        run("fused, plain appends (4)", topk, {}, variant=4)
        run("fused, binned select (5)", topk, {}, variant=5)
        run("fused, general select (6)", topk, {}, variant=6)
        run("fused (default), again", topk, {})
        for tgt in (topk + topk // 4 + 256, topk + 256):  # lower gate targets (default 1.5k + 256)
            run(f"fused (default), target {tgt}", topk, {"MQA_TOPK_FUSED_TARGET": str(tgt)})
            stats(topk, target=tgt)
        if ALL:
            run("fused, selector warps (1)", topk, {}, variant=1)
            run("fused v1 (2)", topk, {}, variant=2)
            run("fused, plain appends, 8 stages (3)", topk, {}, variant=3)
    stats(topk)
    if DEV:
        stats(topk, variant=6)
    if topk == 2048:
        run("fused, no appends (probe 1)", topk, {"MQA_TOPK_FUSED_PROBE": "1"})
        if DEV:
            run("general select, no appends", topk, {"MQA_TOPK_FUSED_PROBE": "1"}, variant=6)
