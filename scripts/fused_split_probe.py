"""Issue 12 probe (MQA_TOPK_DEV_PROBES=1 builds): small row counts at 64K keys,
causal, gaussian (or another workloads.DISTS name with --dist). For each row
count and topk, timed in one process (cold L2, medians): native dense (logits +
top-k), the fused kernel with whole blocks (MQA_TOPK_FUSED_SPLIT=0) and the
split dev variants 7 (equal tile shares, each piece's own gate), 8 (+ one gate
per block shared by its pieces), 9 (+ only the last partial wave's blocks
split) and 10 (variant 7 with shares that follow the blocks, kSplitAlign);
every variant's sets checked against the unsplit kernel's and native's;
which one the op's rule (fused_use_split) picks; variant 9's merged rows that
failed the merge's check and were redone whole (development statistics).
With --breakdown, instead: where variant 7's time goes (the op's split
kernel): native logits kernel alone, native dense total, variant 7, variant 7
with appends off (MQA_TOPK_FUSED_PROBE=1: logits, sample and filter, empty
selects and merges), and its in-kernel statistics (probe 2) per math warp in
microseconds at 1.98 GHz: the warp's whole run, the sample + gate phase, the
block end (pieces' selects and the merges). With --grid: variant 7 launched on fewer CTAs (MQA_TOPK_FUSED_GRID:
fewer, longer pieces per block), against native. Usage:
fused_split_probe.py [--dist NAME] [--breakdown | --grid] [keys [rows ...]]."""
import os
import sys

import torch

from mqa_topk_cli import ops
from mqa_topk_cli.timing import time_fn
from mqa_topk_cli.workloads import make_workload

argv = sys.argv[1:]
dist = "gaussian"
if "--dist" in argv:
    i = argv.index("--dist")
    dist = argv[i + 1]
    del argv[i:i + 2]
BREAKDOWN = "--breakdown" in argv
GRID = "--grid" in argv
argv = [a for a in argv if a not in ("--breakdown", "--grid")]
args = [int(a) for a in argv]
keys = args[0] if args else 65536
rows_list = args[1:] or [64, 256, 512, 1064, 1576, 2120, 2640]
ext = ops._native()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
VARIANTS = (7, 8, 9, 10)


def rule(rows):
    """csrc/fused_mqa_topk_split.h: fused_use_split."""
    blocks = (rows + 7) // 8
    return -(-blocks // SMS) * SMS * 100 > 115 * blocks


def sets(t):
    return t.sort(dim=1).values


print(f"dist {dist}, keys {keys}, {SMS} SMs", flush=True)


def breakdown():
    ghz = 1.98e3  # cycles per microsecond
    print(f"{'rows':>6} {'topk':>5} {'logits':>8} {'native':>8} {'v7':>8} {'v7-noapp':>8} "
          f"{'warp us':>8} {'gate us':>8} {'end us':>8}  sets")
    for rows in rows_list:
        for topk in (512, 2048):
            w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist=dist, seed=3, device="cuda")
            nat = torch.full((rows, topk), -3, dtype=torch.int32, device="cuda")
            tl = time_fn(lambda: ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends))
            tn = time_fn(lambda: ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, nat))
            out = torch.full_like(nat, -5)
            ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(7, topk, 0), dtype=torch.uint8, device="cuda")
            run = lambda: ext.fused_mqa_topk_probe(7, w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, ws)  # noqa: E731
            t7 = time_fn(run)
            same = torch.equal(sets(out), sets(nat))
            os.environ["MQA_TOPK_FUSED_PROBE"] = "1"
            t7n = time_fn(run)
            os.environ["MQA_TOPK_FUSED_PROBE"] = "2"
            run()
            torch.cuda.synchronize()
            del os.environ["MQA_TOPK_FUSED_PROBE"]
            st = ws[8:128].view(torch.int64).tolist()
            warps = SMS * 8
            print(f"{rows:6d} {topk:5d} {tl.median_ms:8.3f} {tn.median_ms:8.3f} {t7.median_ms:8.3f} "
                  f"{t7n.median_ms:8.3f} {st[6] / warps / ghz:8.1f} {st[7] / warps / ghz:8.1f} "
                  f"{st[5] / warps / ghz:8.1f}  {'same' if same else 'DIFFER'}", flush=True)


def grid_sweep():
    grids = [g for g in (SMS, 96, 64, 48, 32, 24, 16) if g <= SMS]
    print(f"{'rows':>6} {'topk':>5} {'native':>8} " + " ".join(f"{'g' + str(g):>8}" for g in grids) + "  sets")
    for rows in rows_list:
        for topk in (512, 1024, 2048):
            w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist=dist, seed=3, device="cuda")
            nat = torch.full((rows, topk), -3, dtype=torch.int32, device="cuda")
            tn = time_fn(lambda: ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, nat))
            ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(7, topk, 0), dtype=torch.uint8, device="cuda")
            same, times = True, []
            for g in grids:
                os.environ["MQA_TOPK_FUSED_GRID"] = str(g)
                out = torch.full_like(nat, -5)
                t = time_fn(lambda: ext.fused_mqa_topk_probe(7, w.q, w.k, w.scales, w.weights, w.starts, w.ends,
                                                             out, ws))
                del os.environ["MQA_TOPK_FUSED_GRID"]
                times.append(t.median_ms)
                same = same and torch.equal(sets(out), sets(nat))
            print(f"{rows:6d} {topk:5d} {tn.median_ms:8.3f} " + " ".join(f"{t:8.3f}" for t in times)
                  + f"  {'same' if same else 'DIFFER'}", flush=True)


if BREAKDOWN:
    breakdown()
    sys.exit(0)
if GRID:
    grid_sweep()
    sys.exit(0)
print(f"{'rows':>6} {'topk':>5} {'native':>8} {'whole':>8} " + " ".join(f"{'v' + str(v):>8}" for v in VARIANTS)
      + f" {'v7/nat':>7} {'v10/nat':>7} {'rule':>6} {'redone':>6}  sets")
for rows in rows_list:
    for topk in (512, 1024, 2048):
        w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist=dist, seed=3, device="cuda")
        base = torch.full((rows, topk), -7, dtype=torch.int32, device="cuda")
        nat = torch.full_like(base, -3)
        tn = time_fn(lambda: ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, nat))
        os.environ["MQA_TOPK_FUSED_SPLIT"] = "0"
        tf = time_fn(lambda: ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, base))
        del os.environ["MQA_TOPK_FUSED_SPLIT"]
        same = torch.equal(sets(base), sets(nat))
        times = []
        for v in VARIANTS:
            out = torch.full_like(base, -5)
            ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(v, topk, 0), dtype=torch.uint8, device="cuda")
            t = time_fn(lambda: ext.fused_mqa_topk_probe(v, w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, ws))
            times.append(t.median_ms)
            same = same and torch.equal(sets(out), sets(base))
        os.environ["MQA_TOPK_FUSED_PROBE"] = "2"
        ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(9, topk, 0), dtype=torch.uint8, device="cuda")
        out = torch.full_like(base, -5)
        ext.fused_mqa_topk_probe(9, w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, ws)
        torch.cuda.synchronize()
        del os.environ["MQA_TOPK_FUSED_PROBE"]
        redone = ws[8:128].view(torch.int64)[8].item()
        print(f"{rows:6d} {topk:5d} {tn.median_ms:8.3f} {tf.median_ms:8.3f} "
              + " ".join(f"{t:8.3f}" for t in times)
              + f" {times[0] / tn.median_ms:7.2f} {times[-1] / tn.median_ms:7.2f} {'split' if rule(rows) else 'whole':>6}"
              f" {redone:6d}  "
              f"{'same' if same else 'DIFFER'}", flush=True)
