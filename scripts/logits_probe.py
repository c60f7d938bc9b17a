"""Device probe of the native logits kernel alone (no CLI needed): correctness
against an fp64 reference on fresh random inputs with a poisoned output, the
error relative to the magnitude bound, rerun determinism, then cold-L2 timings
of the causal grid beside the fp8 GEMM ceiling. Used while developing the
kernel; the numbers that count come from `mqa-topk bench --op logits`."""
import sys
import time

import torch

from mqa_topk_cli import ops


def make(rows, keys, seed, layout="causal", device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = (torch.randn(rows, 32, 128, generator=g) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(keys, 128, generator=g) * 2).to(torch.float8_e4m3fn)
    scales = torch.rand(keys, generator=g) + 0.5
    w = torch.randn(rows, 32, generator=g) / 8
    if layout == "causal":
        starts = torch.zeros(rows, dtype=torch.int32)
        ends = torch.arange(keys - rows + 1, keys + 1, dtype=torch.int32)
    else:  # random ranges
        a = torch.randint(0, keys + 1, (rows,), generator=g)
        b = torch.randint(0, keys + 1, (rows,), generator=g)
        starts, ends = torch.minimum(a, b).to(torch.int32), torch.maximum(a, b).to(torch.int32)
    return [t.to(device) for t in (q, k, scales, w, starts, ends)]


def make_causal(rows, keys, dist=None, seed=5):
    """Causal inputs of the fused scripts: a workloads.DISTS distribution when
    `dist` is given (top-2048 generator), else make's gaussian."""
    if dist:
        from mqa_topk_cli.workloads import make_workload

        wl = make_workload("causal", rows=rows, keys=keys, topk=2048, dist=dist, seed=seed, device="cuda")
        return [wl.q, wl.k, wl.scales, wl.weights, wl.starts, wl.ends]
    return make(rows, keys, seed, "causal")


def ref64(q, k, scales, w, starts, ends):
    qf = q.to(torch.float64)
    kf = k.to(torch.float64)
    dots = torch.einsum("rhd,sd->rhs", qf, kf)
    logits = (torch.relu(dots) * w.to(torch.float64)[:, :, None]).sum(1) * scales.to(torch.float64)[None]
    mag = (torch.linalg.vector_norm(qf, dim=2) * w.abs().to(torch.float64)).sum(1)[:, None] * \
        (torch.linalg.vector_norm(kf, dim=1) * scales.to(torch.float64))[None]
    return logits, mag


def check(rows, keys, seed, layout):
    q, k, scales, w, starts, ends = make(rows, keys, seed, layout)
    ext = ops._native()
    pitch = -(-keys // 4) * 4
    out = torch.full((rows, pitch), float("nan"), device="cuda")
    ext.mqa_logits(q, k, scales, w, starts, ends, out)
    out2 = torch.full((rows, pitch), float("nan"), device="cuda")
    ext.mqa_logits(q, k, scales, w, starts, ends, out2)
    torch.cuda.synchronize()
    ref, mag = ref64(q, k, scales, w, starts, ends)
    col = torch.arange(keys, device="cuda")[None]
    inside = (col >= starts[:, None].long()) & (col < ends[:, None].long())
    got = out[:, :keys].to(torch.float64)
    bad_nan = (inside & torch.isnan(got)).sum().item()
    err = ((got - ref).abs() / mag.clamp_min(1e-30))[inside]
    maxrel = err.max().item() if err.numel() else 0.0
    same = torch.equal(torch.nan_to_num(out, nan=7.0), torch.nan_to_num(out2, nan=7.0))
    # outside [start,end) within the block span must be -inf (or unwritten NaN outside the span)
    outside_vals = got[~inside & ~torch.isnan(got)]
    outside_ok = bool(torch.isinf(outside_vals).all() and (outside_vals < 0).all()) if outside_vals.numel() else True
    ok = bad_nan == 0 and maxrel <= 2 ** -10 and same and outside_ok
    print(f"check rows={rows} keys={keys} {layout}: unwritten-in-range={bad_nan} max_err/mag={maxrel:.3e} "
          f"rerun_bitwise={same} outside_-inf={outside_ok} -> {'OK' if ok else 'FAIL'}", flush=True)
    return ok


def cold_time(fn, reps=20):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ok = True
    for rows, keys, seed, layout in [(4, 256, 0, "causal"), (67, 1000, 1, "causal"), (256, 4096, 2, "random"),
                                     (1023, 2049, 3, "random"), (512, 8192, 4, "causal"), (5, 1, 5, "random"),
                                     (300, 70000, 6, "random")]:
        ok &= check(rows, keys, seed, layout)
    m = 8192
    a = torch.randn(m, m, device="cuda").to(torch.float8_e4m3fn)
    bm = torch.randn(m, m, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    t = cold_time(lambda: torch._scaled_mm(a, bm, one, one, out_dtype=torch.bfloat16), reps=10)
    print(f"fp8 GEMM ceiling (scaled_mm 8192^3): {2 * m ** 3 / t / 1e9:.0f} TFLOP/s", flush=True)
    del a, bm
    ext = ops._native()
    print(f"{'R':>6} {'N':>7} {'ms':>8} {'PF/s':>6}")
    for rows in (1024, 8192):
        for keys in (8192, 16384, 32768, 65536, 131072):
            q, k, scales, w, starts, ends = make(rows, keys, 7)
            out = torch.empty((rows, keys), device="cuda")
            ms = cold_time(lambda: ext.mqa_logits(q, k, scales, w, starts, ends, out))
            pairs = (ends - starts).sum().item()
            print(f"{rows:>6} {keys:>7} {ms:>8.3f} {8192 * pairs / ms / 1e12:>6.3f}", flush=True)
            del q, k, out
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
