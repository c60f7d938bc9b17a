"""Diagnostics of the v3 fused kernel (dev variants 12-19; tools/v3check does the same without torch) on small shapes:
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
variants = [int(v) for v in sys.argv[1:] if not v.startswith("--")] or [16, 19, 15, 12]
DUMP_ONLY = "--dump-only" in sys.argv
cases = [dict(layout="causal", rows=67, keys=1000, dist="gaussian"),  # 8 tiles: no gate, no check, no compaction
         dict(layout="causal", rows=67, keys=5001, dist="gaussian"),
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


for kw in ([] if DUMP_ONLY else cases):
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

# ---- the segments of one block, entry by entry (MQA_TOPK_FUSED_PROBE=3: the
# selectors dump each row's segment counts instead of selecting) ----
import numpy as np  # noqa: E402


def okey_to_float(kk):
    """The inverse of fused_select.cuh's order_key: a key >= 2^31 is a value >= 0
    (sign bit flipped), a smaller one the two's complement of a negative value's bits."""
    k = np.asarray(kk, dtype=np.uint32)
    neg = (k & 0x80000000) == 0
    u = np.where(neg, (~k + np.uint32(1)).astype(np.uint32), k & np.uint32(0x7fffffff)).astype(np.uint32)
    return u.view(np.float32)


for variant in variants:
    for name, env, nkeys in (("default", {}, 5001), ("8 tiles (no gate, no check)", {}, 1000)):
        w = make_workload("causal", rows=8, keys=nkeys, topk=512, dist="gaussian", seed=11, device="cuda")
        logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends).cpu()
        os.environ.update({"MQA_TOPK_FUSED_PROBE": "3", "MQA_TOPK_FUSED_GRID": "1", **env})
        ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(variant, 512, 0), dtype=torch.uint8, device="cuda")
        ws.random_(0, 255)
        out = torch.full((8, 512), -7, dtype=torch.int32, device="cuda")
        ext.fused_mqa_topk_probe(variant, w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, ws)
        torch.cuda.synchronize()
        for kk in ("MQA_TOPK_FUSED_PROBE", "MQA_TOPK_FUSED_GRID", *env):
            os.environ.pop(kk, None)
        o = out.cpu().numpy()
        words = ws[128:].view(torch.int32).cpu().numpy().view(np.uint32)
        cap = ((512 + 1920) // 4 + 3) & ~3
        for r in range(8):
            cnts = o[r, :8]
            set_off = int(o[r, 10])
            bad_val = bad_idx = total = 0
            seen = []
            bad_per_seg = []
            for sg in range(8):
                base = set_off + (r * 8 + sg) * 2 * cap
                keys_ = words[base: base + cnts[sg]]
                idx = words[base + cap: base + cap + cnts[sg]].astype(np.int64)
                total += int(cnts[sg])
                ok_idx = (idx >= int(w.starts[r])) & (idx < int(w.ends[r]))
                bad_idx += int((~ok_idx).sum())
                vals = okey_to_float(keys_)
                ref = logits[r].numpy()[np.clip(idx, 0, logits.shape[1] - 1)]
                bad = (vals != ref) & ok_idx
                bad_val += int(bad.sum())
                bad_tiles = sorted(set((idx[bad] // 128).tolist()))
                bad_per_seg.append((int(bad.sum()), bad_tiles[:6]))
                if bad.any() and r in (0, 4) and sg < 3:
                    pos = np.nonzero(bad)[0][:4]
                    lg = logits.numpy()
                    for j in pos:
                        i, v = int(idx[j]), float(vals[j])
                        rows_same = [int(rr) for rr in range(8) if lg[rr, i] == v]
                        keys_same = np.nonzero(lg[r] == v)[0][:3].tolist()
                        print(f"  bad row {r} seg {sg} slot {int(j)}: key {i} (tile {i // 128}), fused {v!r} "
                              f"dense {float(ref[j])!r}; that value is the dense logit of rows {rows_same} at this key, "
                              f"of this row at keys {keys_same}", flush=True)
                # which warp's keys: (idx mod 128) // 16 should be the segment's (kg * 4 + w)
                seen.append(sorted(set(((idx % 128) // 16).tolist()))[:4])
            print(f"probe-3 {name} v{variant} row {r}: counts {cnts.tolist()} total {total}, gate key {o[r, 8]:#x} "
                  f"ns {o[r, 11]} pubs {o[r, 12]}: entries with a bad index {bad_idx}, with a value unlike the dense "
                  f"logit {bad_val}; key slices per segment {seen}; bad (count, tiles) per segment "
                  f"(segment = 4 kg + warp: 0-3 the selector warpgroup) {bad_per_seg}", flush=True)

# ---- probe 4: does every stage a warp reads hold the tile the warp expects? ----
# (the producer records each fill's first key in the workspace header; every
# consumer warp compares it with its own walk; mismatches counted per row group)
for variant in variants:
    for kw in (dict(layout="causal", rows=8, keys=5001, dist="gaussian"),
               dict(layout="causal", rows=67, keys=5001, dist="gaussian"),
               dict(layout="causal", rows=1024, keys=20000, dist="gaussian")):
        w = make_workload(device="cuda", seed=11, topk=512, **kw)
        os.environ["MQA_TOPK_FUSED_PROBE"] = "4"
        ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(variant, 512, 0), dtype=torch.uint8, device="cuda")
        out = torch.full((w.rows, 512), -7, dtype=torch.int32, device="cuda")
        ext.fused_mqa_topk_probe(variant, w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, ws)
        torch.cuda.synchronize()
        os.environ.pop("MQA_TOPK_FUSED_PROBE")
        hdr = ws[:128].view(torch.int32).cpu().tolist()
        print(f"probe-4 v{variant} {kw['rows']}x{kw['keys']}: stage/tile mismatches seen by warps, row group 0 "
              f"{hdr[24]}, row group 1 {hdr[25]}", flush=True)
