"""The v3 fused kernel (dev variants 12, 13, 15) against the v2 default, the
dense logits kernel alone and the native dense path on one shape (default: the
headline, causal 8192 rows x 64K keys), cold L2, medians, same process: a
quick exactness check first (small shapes, against the dense logits), then
the times, the same-set check against the v2 kernel, the time with appends
off (MQA_TOPK_FUSED_PROBE=1: logits + filter) and the in-kernel statistics
(MQA_TOPK_FUSED_PROBE=2). Usage: MQA_TOPK_DEV_PROBES=1 python3
scripts/fused_v3_ab.py [rows keys [dist]] [--variants 12,13] [--topk 2048,512]
The numbers that count come from `mqa-topk bench`."""
import os
import sys

import torch

sys.path.insert(0, "scripts")
sys.path.insert(0, "tests")
from logits_probe import make_causal  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402
from mqa_topk_cli.timing import time_fn  # noqa: E402
from mqa_topk_cli.workloads import make_workload  # noqa: E402


def opt(name, default):
    for i, a in enumerate(sys.argv):
        if a == name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


ARGS = []
skip = False
for a in sys.argv[1:]:
    if skip:
        skip = False
        continue
    if a.startswith("--"):
        skip = True
        continue
    ARGS.append(a)
rows, keys = (int(a) for a in (ARGS[0:2] if len(ARGS) > 1 else (8192, 65536)))
DIST = ARGS[2] if len(ARGS) > 2 else None
VARIANTS = [int(v) for v in opt("--variants", "12,13,15").split(",")]
TOPKS = [int(v) for v in opt("--topk", "2048,512").split(",")]
ext = ops._native()


def probe_ws(variant, topk):
    return torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(variant, topk, 0), dtype=torch.uint8, device="cuda")


def run_v(variant, q, k, s, w, st, en, topk, ws, poison=-7):
    out = torch.full((q.shape[0], topk), poison, dtype=torch.int32, device="cuda")
    ext.fused_mqa_topk_probe(variant, q, k, s, w, st, en, out, ws)
    return out


# ---- quick exactness first (a wrong kernel must not be timed) ----
from test_gpu_topk import assert_exact  # noqa: E402

for variant in VARIANTS:
    for kw in (dict(layout="causal", rows=67, keys=5001, dist="gaussian"),
               dict(layout="full", rows=24, keys=30000, dist="relu_saturated"),
               dict(layout="causal", rows=40, keys=12000, dist="ties", tie_mode="whole"),
               dict(layout="ragged", rows=100, keys=9001, dist="dsa", unaligned_starts=True)):
        for topk in (512, 2048):
            wl = make_workload(device="cuda", seed=11, topk=topk, **kw)
            ws = probe_ws(variant, topk)
            a = run_v(variant, wl.q, wl.k, wl.scales, wl.weights, wl.starts, wl.ends, topk, ws, -7)
            b = run_v(variant, wl.q, wl.k, wl.scales, wl.weights, wl.starts, wl.ends, topk, ws, -3)
            try:
                assert torch.equal(a, b), f"variant {variant} {kw}: reruns differ"
                logits = ops.mqa_logits(wl.q, wl.k, wl.scales, wl.weights, wl.starts, wl.ends)
                assert_exact(a, logits, wl.starts, wl.ends, topk, f"variant {variant} {kw} topk {topk}")
            except AssertionError as e:
                print(f"variant {variant}: NOT EXACT: {str(e).splitlines()[0][:200]}", flush=True)
                if "--strict" in sys.argv:
                    raise
    print(f"variant {variant}: quick shapes checked", flush=True)

q, k, scales, w, starts, ends = make_causal(rows, keys, DIST)
flop = 8192.0 * float((ends - starts).sum())


def line(label, t, extra=""):
    print(f"{label:40s} {t.median_ms:8.3f} ms (p20 {t.p20_ms:.3f}, p80 {t.p80_ms:.3f})  "
          f"{flop / t.median_ms / 1e9:7.1f} TFLOP/s  {extra}", flush=True)


def stats_of(variant, topk):
    os.environ["MQA_TOPK_FUSED_PROBE"] = "2"
    ws = probe_ws(variant, topk)
    run_v(variant, q, k, scales, w, starts, ends, topk, ws)
    torch.cuda.synchronize()
    os.environ.pop("MQA_TOPK_FUSED_PROBE")
    st = ws[8:128].view(torch.int64).tolist()
    comp, comp_entries, _, check_cyc, cands, sel_cyc, math_cyc, gate_cyc, redo, gated = st[:10]
    rows_done = st[13]
    warps = torch.cuda.get_device_properties(0).multi_processor_count * 16
    print(f"  stats v{variant} topk={topk}: gated rows {gated} ({gated / max(rows, 1):.1%}), redone {redo}; "
          f"candidates per row at the select {cands / max(rows_done, 1):.0f}; compactions {comp} "
          f"({comp_entries / max(comp, 1):.0f} entries each); of the math warps' cycles: compaction checks that "
          f"compacted {check_cyc / max(math_cyc, 1):.2%}, gate {gate_cyc / max(math_cyc, 1):.2%}, block-end select "
          f"(selector warps, summed) {sel_cyc / max(math_cyc, 1):.2%}; {math_cyc / warps:.0f} cycles per math warp",
          flush=True)


line("dense logits kernel alone", time_fn(lambda: ops.mqa_logits(q, k, scales, w, starts, ends)))
for topk in TOPKS:
    print(f"--- topk {topk}, {rows} rows x {keys} keys {DIST or 'gaussian'} (causal)", flush=True)
    dense = torch.full((rows, topk), -9, dtype=torch.int32, device="cuda")
    line("native dense", time_fn(lambda: ops.dense_mqa_topk_prefill(q, k, scales, w, starts, ends, dense)))
    ref = torch.full((rows, topk), -7, dtype=torch.int32, device="cuda")
    line("fused v2 (the op's default)", time_fn(lambda: ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, ref)))
    ref_sorted = ref.sort(dim=1).values
    for variant in VARIANTS:
        ws = probe_ws(variant, topk)
        out = torch.full((rows, topk), -5, dtype=torch.int32, device="cuda")
        t = time_fn(lambda: ext.fused_mqa_topk_probe(variant, q, k, scales, w, starts, ends, out, ws))
        same = torch.equal(out.sort(dim=1).values, ref_sorted)
        line(f"fused v3, variant {variant}", t, "same sets as v2" if same else "SETS DIFFER from v2")
        os.environ["MQA_TOPK_FUSED_PROBE"] = "1"
        line(f"fused v3, variant {variant}, no appends", time_fn(
            lambda: ext.fused_mqa_topk_probe(variant, q, k, scales, w, starts, ends, out, ws)))
        os.environ.pop("MQA_TOPK_FUSED_PROBE")
        stats_of(variant, topk)
    line("fused v2 (the op's default), again", time_fn(
        lambda: ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, ref)))
