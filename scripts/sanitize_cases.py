"""Small cases of every native op and every fused kernel, for compute-sanitizer
(memcheck): awkward sizes, causal and random ranges, short and long blocks,
rows compacted many times, rows redone, empty slices of split blocks, the
staged kernel's pieces and owners, the hybrid kernel's extra blocks, the
top-k with a padded row stride, the dense path end to end, and every op and
fused kernel at 64 and 16 heads.

    compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitize_cases.py
"""
import torch

from mqa_topk_cli import ops
from mqa_topk_cli.workloads import make_workload


def case(rows, keys, layout, seed, topk=512, dist="gaussian", heads=32):
    if layout == "random":  # (packed requests with unaligned starts; every row sees the one key of a tiny call)
        layout = "ragged" if rows <= keys else "full"
    extra = {"unaligned_starts": True} if layout == "ragged" else {}
    w = make_workload(layout, rows=rows, keys=keys, topk=topk, dist=dist, seed=seed, device="cuda", heads=heads,
                      **extra)
    return w, torch.empty((rows, topk), dtype=torch.int32, device="cuda")


def fused(w, out, kernel=None):
    ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, kernel=kernel)


# The dense ops (blocks of >= 32 tiles: the logits kernel's permuted-Q path and its multi-block shares).
for rows, keys, layout in ((67, 1000, "causal"), (37, 3001, "random"), (5, 1, "random"), (64, 20000, "causal"),
                           (300, 70000, "random")):
    for topk in (512, 2048):
        w, out = case(rows, keys, layout, 11, topk)
        logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        ops.top_k_per_row_prefill(logits, w.starts, w.ends, out)
        ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
        fused(w, out)
# Whole and split blocks on any shape: causal and random ranges, a row compacted many times
# (relu-saturated, whole-row ties), few row blocks (many pieces per block), rows past one wave.
for rows, keys, layout, topk, dist in ((67, 5001, "causal", 512, "gaussian"), (37, 3001, "random", 2048, "gaussian"),
                                       (16, 40000, "causal", 2048, "relu_saturated"), (24, 30000, "causal", 512, "ties"),
                                       (64, 20000, "causal", 2048, "gaussian"), (600, 4000, "random", 1024, "dsa"),
                                       (1064, 3000, "causal", 512, "gaussian"), (1576, 6000, "random", 2048, "rising")):
    w, out = case(rows, keys, layout, 16, topk, dist)
    for kernel in ("whole", "split"):
        fused(w, out, kernel)
# Every gate unsafe (the sample tiles scaled up): every row redone, whole and split.
w, out = case(20, 40000, "causal", 13, 512)
w.scales[::3] *= 1000.0
for kernel in ("whole", "split"):
    fused(w, out, kernel)
# The staged kernel: 16 / 4 / 2 / 1 pieces per block, random and causal ranges, one row, rows of
# n <= topk, all-equal logits (the class too large to stage).
for rows, keys, layout, topk in ((67, 1000, "causal", 512), (37, 3001, "random", 2048), (1, 5000, "causal", 1024),
                                 (64, 20000, "causal", 2048), (256, 9000, "random", 512), (520, 3000, "causal", 1024),
                                 (1056, 2100, "random", 2048)):
    w, out = case(rows, keys, layout, 18, topk)
    fused(w, out, "staged")
    if rows == 64:
        w.q.view(torch.uint8).zero_()
        fused(w, out, "staged")
# The hybrid kernel: one extra block (random ranges: empty slices), an extra block of one row, two extra blocks.
n = torch.cuda.get_device_properties(0).multi_processor_count
for rows, keys, layout, topk in ((8 * n + 8, 20000, "random", 2048), (8 * n + 1, 5000, "causal", 512),
                                 (8 * n + 16, 3000, "random", 1024)):
    w, out = case(rows, keys, layout, 19, topk)
    fused(w, out, "hybrid")
# The top-k on a row stride wider than the row, unaligned rows.
g = torch.Generator(device="cuda").manual_seed(3)
wide = torch.randn(9, 40003, device="cuda", generator=g)[:, 3:40001]
starts = torch.tensor([0, 1, 5, 100, 0, 39990, 7, 0, 2], dtype=torch.int32, device="cuda")
ends = torch.tensor([39998, 2000, 5, 30000, 600, 39998, 39990, 2048, 2050], dtype=torch.int32, device="cuda")
out = torch.empty((9, 2048), dtype=torch.int32, device="cuda")
ops.top_k_per_row_prefill(wide, starts, ends, out)
# 64 heads (two head passes per tile) and 16 (padded to 32 zero heads): the dense ops and every fused kernel.
for heads in (64, 16):
    for rows, keys, layout, topk, dist, kernels in (
            (67, 5001, "causal", 512, "gaussian", (None, "whole", "split")),
            (37, 3001, "random", 2048, "ties", ("whole", "split")),
            (64, 20000, "causal", 2048, "gaussian", ("staged",)),
            (8 * n + 8, 3000, "random", 1024, "gaussian", ("hybrid",))):
        w, out = case(rows, keys, layout, 23, topk, dist, heads)
        logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
        for kernel in kernels:
            fused(w, out, kernel)
torch.cuda.synchronize()
print("sanitize cases ran")
