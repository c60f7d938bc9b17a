"""Development measurement of where the dense logits kernel's time goes at the
headline (causal 8192 x 65536, 32 heads): the shipped kernel, the same loop
without the epilogue's arithmetic (-DMQA_TOPK_LOGITS_MMA_ONLY: MMAs, scale
reads, stores and stage releases only; its logits are wrong) and the fp8 GEMM
ceiling (torch._scaled_mm 8192^3), interleaved three times in one process
(cold L2, medians). PFLOP/s with FLOP = 2 x heads x 128 x visible pairs.

    python3 dev/logits_bound.py
"""
from __future__ import annotations

import torch

from mqa_topk_cli import bench, jit, ops, timing
from mqa_topk_cli.workloads import make_workload


def main():
    h = bench.HEADLINE
    rows, keys = h["rows"], h["keys"]
    w = make_workload(h["layout"], rows=rows, keys=keys, topk=h["topk"], dist=h["dist"], seed=h["seed"], device="cuda")
    pairs = int((w.ends - w.starts).clamp(min=0).sum())
    flop = float(bench.flop_per_pair(h["heads"])) * pairs
    ld = ops._pitch(keys)  # the op's logits row pitch
    lg = torch.empty(rows, ld, device="cuda")
    args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    mma_only_build = ("mma_only", "MQA_TOPK_LOGITS_MMA_ONLY")
    jit.build_variants({"shipped": None, mma_only_build[0]: mma_only_build[1]})  # (both at once)
    shipped = jit.load_extension()
    mma_only = jit.load_with_define(*mma_only_build)
    runs = {"shipped": lambda: shipped.mqa_logits(*args, lg), "mma-only": lambda: mma_only.mqa_logits(*args, lg)}
    for rep in range(3):
        line = []
        for name, fn in runs.items():
            t = timing.time_fn(fn)
            line.append(f"{name} {t.median_ms:.3f} ms {flop / t.median_ms / 1e12:.3f} PF/s")
        c = bench.fp8_gemm_ceiling("cuda")
        line.append(f"ceiling {c.tflops / 1000:.3f} PF/s")
        print(f"[{rep}] " + " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
