"""Times the development variants of the logits kernel (MQA_TOPK_DEV_PROBES=1):
0 the v1 kernel, whose main loop the fused kernel shares (8 rows, 2 math
warpgroups + producer, 8 stages; the dense op's kernel until 2026-12-02, now
variant 23), 1 no epilogue
arithmetic, 2 no MMA, 3 six stages, 4 three math warpgroups with the TMA issued
inline (no producer warpgroup), 5 the same without epilogue arithmetic.
6-16 are the issue-10 structures (sm90_fp8_mqa_logits_v2.cuh, docs/LOGITS.md):
4 rows x 4 math warpgroups + producer (640 threads) with setmaxnreg 112/32 at
3/4/5 stages (6/7/8), with direct st.global stores (9), without epilogue (10);
2-CTA clusters with the K tiles multicast (11, 12 without epilogue, 15 with
direct stores; 13 the 8-row default so clustered); the 8-row default with direct
stores (14); 4 rows x 4 math warpgroups without setmaxnreg (16).
17-22: 8-row blocks on 4 math warpgroups at N = 128 (two row groups x two key
groups, 128-key tiles; setmaxnreg 112): TMA store with the weights read per tile
(17) or kept in registers per block (18), direct stores + register weights
(19), 6 stages (22), no epilogue (21); 20 is the 4-row structure with register
weights and direct stores (DeepGEMM's, point for point, with our epilogue).
23-25: the lean tile path (descriptor low words in uniform registers, the
output row pointer per block) on 19 (23), on 20 (24), and 23 with 9 stages (25).
26-27: ping-pong: two math warpgroups (rows 0-3 / 4-7 of the 8-row block,
64-key tiles), each with two accumulator sets, issuing the next tile's MMA
before the epilogue of the current one; 12 / 16 stages of 64 keys; 28 is 26
without setmaxnreg (a diagnostic: 26 and 27 hung on the device, 2026-12-02).
29-30: 23 with work shares that count every block as 2 / 4 extra tiles (its Q
load and setup), so the CTAs whose shares cross many short causal blocks (R =
8192 at 8K keys: up to 60 blocks in the first share) get fewer tiles.
Every variant but the no-epilogue ones must write logits bitwise equal to
variant 0 (same MMA per element, same epilogue order); that is checked first, on
fresh random inputs with a NaN-poisoned output, including random ranges and
awkward sizes, inside each row's [start, end) (outside it the tile size and the
cluster's span change what is written). A mismatch is reported, the timings
still run, and the script exits 1 at the end. Arguments, if any, restrict the
run to those variants (plus 0): e.g. `logits_variants.py 6 7 8 9 10 14 16`.
The cluster variants (11-13, 15) run last."""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import cold_time, make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402

ext = ops._native()
# Optional arguments: the variants to check and time (0, the reference, always runs).
ONLY = {int(a) for a in sys.argv[1:]}
CHECKED = tuple(v for v in (3, 4, 6, 7, 8, 9, 16, 14, 17, 18, 19, 20, 22, 23, 24, 25, 29, 30, 26, 27, 28, 11, 13, 15) if not ONLY or v in ONLY)
ok = True
for rows, keys, layout in ((67, 1000, "causal"), (1023, 20001, "random"), (300, 70000, "random"), (2048, 65536, "causal"),
                           (5, 1, "random"), (13, 3000, "random")):
    q, k, scales, w, starts, ends = make(rows, keys, 5, layout)
    pitch = -(-keys // 4) * 4
    outs = {}
    for v in (0, *CHECKED):
        out = torch.full((rows, pitch), float("nan"), device="cuda")
        try:
            ext.mqa_logits_probe(v, q, k, scales, w, starts, ends, out)
            torch.cuda.synchronize()
        except RuntimeError as e:
            print(f"variant {v}: launch failed: {e}", flush=True)
            ok = False
            continue
        outs[v] = torch.nan_to_num(out, nan=7.0)
    col = torch.arange(pitch, device="cuda")[None]
    inside = (col >= starts[:, None].long()) & (col < ends[:, None].long())  # the contract's region
    for v in CHECKED:
        if v not in outs:
            continue
        a, b = outs[0][inside], outs[v][inside]
        same = torch.equal(a, b) and not torch.isnan(outs[v][inside]).any()
        ok &= same
        extra = "" if same else f" (max |diff| {(a - b).abs().max().item():.3e}, {(a != b).sum().item()} of {a.numel()})"
        print(f"variant {v} vs 0, rows={rows} keys={keys} {layout}: bitwise {'equal' if same else 'DIFFERENT'}{extra}",
              flush=True)
names = {0: "v1", 1: "no-epilogue", 3: "stages=6", 4: "inline-3wg", 5: "inline-3wg-no-epi",
         6: "r4-4wg-reg112-s3", 7: "r4-4wg-reg112-s4", 8: "r4-4wg-reg112-s5", 9: "r4-4wg-s4-stg",
         10: "r4-4wg-s4-no-epi", 16: "r4-4wg-s4-noreg", 14: "r8-2wg-s8-stg",
         17: "r8-4wg-s8", 18: "r8-4wg-s8-regw", 19: "r8-4wg-s8-regw-stg", 20: "r4-4wg-s4-regw-stg",
         21: "r8-4wg-s8-no-epi", 22: "r8-4wg-s6-regw", 23: "r8-4wg-s8-lean(op)", 24: "r4-4wg-s4-lean",
         25: "r8-4wg-s9-lean", 26: "r8-2wg-pingpong-s12", 27: "r8-2wg-pingpong-s16",
         28: "r8-2wg-pingpong-noreg", 29: "r8-4wg-lean-cost2", 30: "r8-4wg-lean-cost4",
         11: "r4-cl2-mcast-s4", 12: "r4-cl2-s4-no-epi", 13: "r8-cl2-mcast-s8", 15: "r4-cl2-s4-stg"}
names = {v: n for v, n in names.items() if not ONLY or v in ONLY or v == 0}
for rows, keys in ((8192, 65536), (8192, 8192), (1024, 8192), (1024, 131072)):
    q, k, scales, w, starts, ends = make(rows, keys, 7)
    out = torch.empty((rows, keys), device="cuda")
    pairs = (ends - starts).sum().item()
    for v, name in names.items():
        try:
            ms = cold_time(lambda: ext.mqa_logits_probe(v, q, k, scales, w, starts, ends, out))
        except RuntimeError as e:
            print(f"R={rows} N={keys} {name:>18}: failed: {e}", flush=True)
            ok = False
            continue
        print(f"R={rows} N={keys} {name:>18}: {ms:.3f} ms  {8192 * pairs / ms / 1e12:.3f} PF/s", flush=True)
sys.exit(0 if ok else 1)
