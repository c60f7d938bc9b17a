"""Development check of the kernels at 16, 32 and 64 heads, through the native
extension directly (the Python contract may still be 32-head only): logits
against a float64 reference, every fused kernel's sets against the exact sets
of the dense kernel's logits, poisoned outputs, bitwise reruns; then a timing
of the headline shape (causal 8192 x 65536, top-2048) per heads: logits alone,
native dense (logits + top-k) and fused, cold L2, medians.

    python3 dev/heads_check.py [--no-time]
"""
from __future__ import annotations

import sys
import time

import torch

sys.path.insert(0, "tests")
from mqa_topk_cli import ops, timing  # noqa: E402
from test_gpu_topk import assert_exact  # noqa: E402

FP8 = torch.float8_e4m3fn
KERNELS = {"whole": 0, "split": 1, "staged": 2, "hybrid": 3}


def make(rows, keys, heads, layout, seed, dist="gaussian"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(rows, heads, 128, device="cuda", generator=g) * 0.5).to(FP8)
    k = (torch.randn(keys, 128, device="cuda", generator=g) * 0.5).to(FP8)
    scales = torch.rand(keys, device="cuda", generator=g) * 0.5 + 0.75
    w = torch.randn(rows, heads, device="cuda", generator=g) / heads
    if dist == "ties":  # few distinct values: huge tie classes
        q = torch.ones(rows, heads, 128, device="cuda").to(FP8)
        k = (torch.randint(0, 3, (keys, 128), device="cuda", generator=g).float() * 0.25).to(FP8)
        scales = torch.ones(keys, device="cuda")
    if dist == "zero_weights":
        w = torch.zeros(rows, heads, device="cuda")
    if layout == "causal":
        ends = torch.arange(keys - rows + 1, keys + 1, device="cuda", dtype=torch.int32).clamp(min=0)
        starts = torch.zeros(rows, device="cuda", dtype=torch.int32)
    else:  # ragged
        a = torch.randint(0, keys, (rows,), device="cuda", generator=g)
        b = torch.randint(0, keys + 1, (rows,), device="cuda", generator=g)
        starts, ends = torch.minimum(a, b).to(torch.int32), torch.maximum(a, b).to(torch.int32)
    return q, k, scales, w.contiguous(), starts, ends


def ref_logits(q, k, scales, w, starts, ends):
    rows, heads, _ = q.shape
    out = torch.empty(rows, k.shape[0], dtype=torch.float64, device="cuda")
    bound = torch.empty_like(out)
    kf = k.to(torch.float64)
    for a in range(0, rows, 64):
        b = min(rows, a + 64)
        d = torch.einsum("rhd,sd->rhs", q[a:b].to(torch.float64), kf)
        ww = w[a:b].to(torch.float64)[:, :, None]
        out[a:b] = (ww * d.clamp(min=0)).sum(1) * scales.to(torch.float64)
        bound[a:b] = (ww.abs() * d.abs()).sum(1) * scales.to(torch.float64)
    col = torch.arange(k.shape[0], device="cuda")
    inside = (col >= starts[:, None].long()) & (col < ends[:, None].long())
    return out, bound, inside


def native_logits(ext, q, k, scales, w, starts, ends, poison=float("nan")):
    rows, keys = q.shape[0], k.shape[0]
    ld = ops._pitch(keys)  # the op's logits row pitch
    lg = torch.full((rows, ld), poison, device="cuda")
    ext.mqa_logits(q, k, scales, w, starts, ends, lg)
    return lg[:, :keys]


def fused(ext, q, k, scales, w, starts, ends, topk, kernel, poison):
    out = torch.full((q.shape[0], topk), poison, dtype=torch.int32, device="cuda")
    ws = torch.empty(ext.fused_mqa_topk_workspace_bytes(topk, 0), dtype=torch.uint8, device="cuda")
    name = ext.fused_mqa_topk(q, k, scales, w, starts, ends, out, ws, kernel)
    return out, name


def runs(kernel, rows, keys, sms):
    nb = (rows + 7) // 8
    if kernel == "staged":
        return keys <= 1 << 19 and nb <= sms
    if kernel == "hybrid":
        return keys <= 1 << 19 and nb > sms and nb % sms in (1, 2)
    return True


def check(ext, heads, fails):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [(67, 5001, "causal", "gaussian"), (300, 20000, "ragged", "gaussian"), (64, 9000, "causal", "ties"),
             (90, 7000, "ragged", "zero_weights"), (8 * (sms + 1) + 3, 6000, "causal", "gaussian"),
             (8 * 2 * sms + 5, 4000, "ragged", "gaussian")]
    for ci, (rows, keys, layout, dist) in enumerate(cases):
        q, k, scales, w, starts, ends = make(rows, keys, heads, layout, 100 + ci, dist)
        lg = native_logits(ext, q, k, scales, w, starts, ends)
        lg2 = native_logits(ext, q, k, scales, w, starts, ends, poison=-5.0)
        ref, bound, inside = ref_logits(q, k, scales, w, starts, ends)
        what = f"H={heads} {rows}x{keys} {layout} {dist}"
        err = ((lg.double() - ref).abs() - 2e-3 * bound - 1e-30).masked_fill(~inside, -1).max().item()
        if err > 0 or not torch.equal(torch.where(inside, lg, 0), torch.where(inside, lg2, 0)):
            fails.append(f"{what}: logits off the reference (excess {err:.3g}) or reruns differ")
            continue
        if not bool(torch.isneginf(lg[~inside & ~torch.isnan(lg)]).all()):
            fails.append(f"{what}: a logit outside its row's range is not -inf")
        for topk in (512, 2048):
            sets = []
            for kn in [None, *KERNELS]:
                if kn is not None and not runs(kn, rows, keys, sms):
                    continue
                kid = -1 if kn is None else KERNELS[kn]
                try:
                    o1, name = fused(ext, q, k, scales, w, starts, ends, topk, kid, -7)
                    o2, _ = fused(ext, q, k, scales, w, starts, ends, topk, kid, -3)
                    torch.cuda.synchronize()
                    assert torch.equal(o1, o2), "reruns differ"
                    assert_exact(o1, lg.contiguous(), starts, ends, topk, "")
                    sets.append(o1)
                    print(f"ok {what} topk={topk} kernel={kn or 'auto:' + name}", flush=True)
                except Exception as e:  # noqa: BLE001 (report every failure)
                    fails.append(f"{what} topk={topk} kernel={kn}: {str(e)[:300]}")
    return fails


def bench(ext, heads, rows=8192, keys=65536, topk=2048):
    q, k, scales, w, starts, ends = make(rows, keys, heads, "causal", 7)
    ld = keys
    lg = torch.empty(rows, ld, device="cuda")
    out = torch.empty(rows, topk, dtype=torch.int32, device="cuda")
    ws = torch.empty(ext.fused_mqa_topk_workspace_bytes(topk, 0), dtype=torch.uint8, device="cuda")
    t_l = timing.time_fn(lambda: ext.mqa_logits(q, k, scales, w, starts, ends, lg))
    t_d = timing.time_fn(lambda: (ext.mqa_logits(q, k, scales, w, starts, ends, lg),
                                  ext.topk_per_row(lg, starts, ends, out)))
    t_f = timing.time_fn(lambda: ext.fused_mqa_topk(q, k, scales, w, starts, ends, out, ws, -1))
    pairs = float(((ends - starts).clamp(min=0)).sum())
    pf = 2 * heads * 128 * pairs / (t_l.median_ms * 1e-3) / 1e15
    print(f"H={heads} headline: logits {t_l.median_ms:.3f} ms ({pf:.2f} PFLOP/s), dense {t_d.median_ms:.3f}, "
          f"fused {t_f.median_ms:.3f}, fused/logits {t_f.median_ms / t_l.median_ms:.3f}, "
          f"dense/fused {t_d.median_ms / t_f.median_ms:.3f}", flush=True)


def main():
    ext = ops._native()
    fails = []
    for heads in (64, 16, 32):
        t0 = time.time()
        check(ext, heads, fails)
        print(f"H={heads}: checked in {time.time() - t0:.0f} s", flush=True)
    for f in fails:
        print("FAIL", f)
    print(f"{len(fails)} failures")
    if "--no-time" not in sys.argv:
        for heads in (32, 64, 16):
            bench(ext, heads)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
