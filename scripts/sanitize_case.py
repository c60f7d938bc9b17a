"""Small cases of every native op (the fused one included), for compute-sanitizer (memcheck): logits
with causal and random ranges (awkward sizes, short and long blocks), the top-k on short and long
rows with a padded row stride, and the dense path end to end."""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402

# (64 x 20000 causal and 300 x 70000 random: blocks of >= 32 tiles, the dense
# kernel's permuted-Q path and its multi-block shares.)
for rows, keys, layout in ((67, 1000, "causal"), (37, 3001, "random"), (5, 1, "random"), (64, 20000, "causal"),
                           (300, 70000, "random")):
    q, k, scales, w, starts, ends = make(rows, keys, 11, layout)
    logits = ops.mqa_logits(q, k, scales, w, starts, ends)
    for topk in (512, 2048):
        out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
        ops.top_k_per_row_prefill(logits, starts, ends, out)
        ops.dense_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
        if hasattr(ops._native(), "fused_mqa_topk"):
            ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
# The fused kernel on rows long enough to compact its candidate buffers; the
# split kernel on 1064 rows (133 blocks on 132 SMs), and with the gate target
# at k/2 (too few candidates pass the pieces' gates: rows redone).
if hasattr(ops._native(), "fused_mqa_topk"):
    import os
    q, k, scales, w, starts, ends = make(16, 20000, 12, "causal")
    out = torch.empty((16, 512), dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    q, k, scales, w, starts, ends = make(1064, 3000, 13, "causal")
    out = torch.empty((1064, 512), dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    os.environ["MQA_TOPK_FUSED_TARGET"] = "256"
    q, k, scales, w, starts, ends = make(24, 30000, 14, "causal")
    out = torch.empty((24, 512), dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    del os.environ["MQA_TOPK_FUSED_TARGET"]
    # Whole blocks (the v3 kernel, the op's kernel at large row counts): causal
    # and random ranges, a row compacted many times, and a low gate target (redos).
    os.environ["MQA_TOPK_FUSED_SPLIT"] = "0"
    for rows, keys, layout, topk, target in ((67, 5001, "causal", 512, None), (37, 3001, "random", 2048, None),
                                             (16, 40000, "causal", 2048, None), (24, 30000, "causal", 512, "256")):
        if target:
            os.environ["MQA_TOPK_FUSED_TARGET"] = target
        q, k, scales, w, starts, ends = make(rows, keys, 16, layout)
        out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
        os.environ.pop("MQA_TOPK_FUSED_TARGET", None)
    del os.environ["MQA_TOPK_FUSED_SPLIT"]
    # The split kernel on few row blocks (64 rows: 128 CTAs, 16 pieces per block).
    os.environ["MQA_TOPK_FUSED_SPLIT"] = "1"
    q, k, scales, w, starts, ends = make(64, 20000, 16, "causal")
    out = torch.empty((64, 2048), dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    # The lean-loop split kernel (the default above SMs / 4 row blocks; one
    # configuration per topk): random ranges, causal rows, a low gate target (redos).
    os.environ["MQA_TOPK_FUSED_SPLIT_LARGE"] = "1"
    for rows, keys, layout, topk, target in ((600, 4000, "random", 1024, None), (300, 9000, "causal", 2048, None),
                                             (400, 12000, "causal", 1024, "256")):
        if target:
            os.environ["MQA_TOPK_FUSED_TARGET"] = target
        q, k, scales, w, starts, ends = make(rows, keys, 17, layout)
        out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
        os.environ.pop("MQA_TOPK_FUSED_TARGET", None)
    del os.environ["MQA_TOPK_FUSED_SPLIT_LARGE"]
    # The partial-wave share rule (session 26, MQA_TOPK_FUSED_SHARE_RULE): one block past a
    # wave in 4-tile shares (random ranges: slices past rows' ends, empty slices), 197 blocks.
    for rule, rows, keys, layout, topk in (("4", 1064, 20000, "random", 2048), ("8", 1576, 6000, "causal", 512),
                                           ("16", 2120, 5000, "random", 1024)):
        os.environ["MQA_TOPK_FUSED_SHARE_RULE"] = rule
        q, k, scales, w, starts, ends = make(rows, keys, 18, layout)
        out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    del os.environ["MQA_TOPK_FUSED_SHARE_RULE"]
    del os.environ["MQA_TOPK_FUSED_SPLIT"]
    # The hybrid kernel (session 26): one extra block (random ranges: empty slices), an extra block of one
    # row, two extra blocks.
    os.environ["MQA_TOPK_FUSED_HYBRID"] = "1"
    for rows, keys, layout, topk in ((1064, 20000, "random", 2048), (1057, 5000, "causal", 512),
                                     (1072, 3000, "random", 1024)):
        q, k, scales, w, starts, ends = make(rows, keys, 19, layout)
        out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    del os.environ["MQA_TOPK_FUSED_HYBRID"]
    # The staged kernel (issue 12, session 22): 16 / 4 / 2 / 1 pieces per block, random and causal
    # ranges, one row, rows of n <= topk, all-equal logits (the class too large to stage).
    # Its variants (109: the epilogue's histograms and the lean pass; 113: 109 with each thread's own
    # staging slots; 117, the op's: 113 with the pass's loads a round ahead; 119 / 121: 113's / 117's
    # pass on shares of every SM, also past one wave of row blocks; 123 / 125: 117 with the next row
    # prefetched / and its bins summed; 97-107, 111 and 115 were retired).
    os.environ["MQA_TOPK_FUSED_STAGED"] = "1"
    for variant in ("109", "113", "117", "119", "121", "123", "125"):
        os.environ["MQA_TOPK_FUSED_STAGED_VARIANT"] = variant
        for rows, keys, layout, topk in ((67, 1000, "causal", 512), (37, 3001, "random", 2048),
                                         (1, 5000, "causal", 1024), (64, 20000, "causal", 2048),
                                         (256, 9000, "random", 512), (520, 3000, "causal", 1024),
                                         (1056, 2100, "random", 2048), (1100, 2100, "random", 512)):
            q, k, scales, w, starts, ends = make(rows, keys, 18, layout)
            out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
            ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
            if rows == 64:
                out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
                ops.fused_mqa_topk_prefill(torch.zeros_like(q), k, scales, w, starts, ends, out)
    del os.environ["MQA_TOPK_FUSED_STAGED"], os.environ["MQA_TOPK_FUSED_STAGED_VARIANT"]
    # The op's own dispatch (session 25): the staged default up to SMs / 2 row blocks, the split
    # kernels past it where the last wave is poorly filled.
    for rows, keys, layout, topk in ((500, 3000, "causal", 2048), (700, 3000, "random", 1024),
                                     (1064, 2100, "causal", 512)):
        q, k, scales, w, starts, ends = make(rows, keys, 19, layout)
        out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(q, k, scales, w, starts, ends, out)
    # Dev variant 10 (MQA_TOPK_DEV_PROBES=1 builds): shares that follow the blocks.
    ext = ops._native()
    if hasattr(ext, "fused_mqa_topk_probe"):
        for rows, keys, topk in ((64, 40000, 512), (20, 30000, 2048)):
            q, k, scales, w, starts, ends = make(rows, keys, 15, "causal")
            out = torch.empty((rows, topk), dtype=torch.int32, device="cuda")
            ws = torch.empty(ext.fused_mqa_topk_probe_workspace_bytes(10, topk, 0), dtype=torch.uint8, device="cuda")
            ext.fused_mqa_topk_probe(10, q, k, scales, w, starts, ends, out, ws)
g = torch.Generator(device="cuda").manual_seed(3)
wide = torch.randn(9, 40003, device="cuda", generator=g)[:, 3:40001]  # row stride > width, unaligned rows
starts = torch.tensor([0, 1, 5, 100, 0, 39990, 7, 0, 2], dtype=torch.int32, device="cuda")
ends = torch.tensor([39998, 2000, 5, 30000, 600, 39998, 39990, 2048, 2050], dtype=torch.int32, device="cuda")
out = torch.empty((9, 2048), dtype=torch.int32, device="cuda")
ops.top_k_per_row_prefill(wide, starts, ends, out)
torch.cuda.synchronize()
print("sanitize cases ran")
