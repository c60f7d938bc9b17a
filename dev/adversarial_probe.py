"""Development probe of the fused kernel on the adversarial inputs
(configs/adversarial.toml, the headline shape): per case, the block kernels'
rare-path counts (the workspace header's diagnostics, fused/common.cuh: rows
redone, row compactions, one-warp block-end selects, exact gates and those
cut by index;
the share of the math warps' cycles spent in the compaction checks, the gates
and the block ends), the size of
each row's tie class at its k-th value (from the dense logits), and fused /
native dense time (cold L2, medians), for the chosen kernel and the split
kernel. It builds its own extension (the sources and flags of
mqa_topk_cli.jit plus -DMQA_TOPK_FUSED_DIAGNOSTICS, in its own cache folder),
so its times are of the kernels with the counting atomics.

    python3 dev/adversarial_probe.py [--config adversarial] [--rows R]
"""
from __future__ import annotations

import argparse

import torch

from mqa_topk_cli import jit, ops, resources, timing, workloads


def tie_stats(lg: torch.Tensor, starts, ends, topk: int, sample: int = 256):
    """Median and max over `sample` rows with n > k of the number of the row's
    logits equal to its k-th largest value, and the share of rows with n > k."""
    n = (ends - starts).long()
    long_rows = torch.nonzero(n > topk).flatten()
    if long_rows.numel() == 0:
        return 0, 0, 0.0
    pick = long_rows[torch.linspace(0, long_rows.numel() - 1, min(sample, long_rows.numel())).long()]
    sizes = []
    for r in pick.tolist():
        row = lg[r, int(starts[r]):int(ends[r])]
        kth = torch.topk(row, topk).values[-1]
        sizes.append(int((row == kth).sum()))
    s = torch.tensor(sizes)
    return int(s.median()), int(s.max()), long_rows.numel() / max(1, lg.shape[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="adversarial")
    ap.add_argument("--rows", type=int, default=None, help="override the cases' rows")
    a = ap.parse_args()
    ext = jit.load_with_define("diag", "MQA_TOPK_FUSED_DIAGNOSTICS")  # (fused/common.cuh)
    cases = workloads.load_workload_config(resources.config_path(a.config))
    for c in cases:
        c = dict(c)
        if a.rows:
            c["rows"] = a.rows
        w = workloads.make_workload(c.get("layout", "causal"), c["rows"], c["keys"], c["topk"], c.get("dist", "gaussian"),
                                    c.get("seed", 0), device="cuda",
                                    **{k: v for k, v in c.items() if k in workloads.OPTIONS})
        rows, keys, topk = w.rows, w.keys, w.topk
        ld = ops._pitch(keys)  # the op's logits row pitch
        lg = torch.empty(rows, ld, device="cuda")
        out = torch.empty(rows, topk, dtype=torch.int32, device="cuda")
        ws = torch.zeros(ext.fused_mqa_topk_workspace_bytes(topk, 0), dtype=torch.uint8, device="cuda")
        args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        ext.mqa_logits(*args, lg)
        med, mx, share = tie_stats(lg[:, :keys], w.starts, w.ends, topk)
        t_d = timing.time_fn(lambda: (ext.mqa_logits(*args, lg), ext.topk_per_row(lg, w.starts, w.ends, out)))
        line = [f"{c['name']:<18} tie class at k-th: median {med} max {mx} (rows n>k {share:.2f})",
                f"dense {t_d.median_ms:.3f} ms"]
        for kernel in (-1, 1):
            name = ext.fused_mqa_topk(*args, out, ws, kernel)
            torch.cuda.synchronize()
            h = ws[:32].view(torch.int32).tolist()
            cyc = ws[32:64].view(torch.int64).tolist()  # check, gate, end, math: cycles summed over math warps
            share = " ".join(f"{n} {100 * c / max(1, cyc[3]):.1f}%" for n, c in zip(("check", "gate", "end"), cyc))
            t_f = timing.time_fn(lambda: ext.fused_mqa_topk(*args, out, ws, kernel))
            line.append(f"{name}: {t_f.median_ms:.3f} ms ({t_f.median_ms / t_d.median_ms:.2f}x) redone {h[1]} compactions {h[2]} "
                        f"one-warp ends {h[3]} exact-gates {h[4]} (cut by index {h[5]}); math-warp time in {share}")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
