"""The one timing function of the tool (SPEC §5). Every path, every sweep and
every benchmark goes through ``time_fn``.

Methodology (CUDA):

1. **First call excluded.** ``fn`` is called once and the device synchronised,
   so JIT builds, lazy module loading, allocator growth and autotuning never
   land in a sample.
2. **Warm-up budgeted by time.** ``fn`` is then run until ``warmup`` ms of
   wall time have passed (at least once more when ``warmup > 0``). The mean of
   the warm-up calls sizes ``reps`` when it is not given (``budget_ms`` of timed
   work, clamped to ``[min_reps, max_reps]``).
3. **Cold L2.** Before each timed call a flush buffer of at least twice the L2
   size is zeroed by a kernel (``Tensor.zero_``), *outside* the event pair, so
   every sample starts with nothing of the inputs in L2 (the state a prefill
   chunk meets in a real model, after the attention of the previous layer).
   Alternatively ``rotate`` cycles through copies of the inputs whose total
   size exceeds the L2.
4. **Per-iteration CUDA events.** Each sample is the elapsed time between a
   start and an end event recorded on the current stream right around the
   call. The loop never synchronises; one ``synchronize`` after the loop reads
   all events. Host launch overhead only shows when the GPU runs dry.
5. **Robust statistics.** The reported figure is the **median**; p20 and p80
   give the spread; mean and min are kept for reference, never as the headline.
6. **Optional CUDA-graph replay** (``graph=True``): ``fn`` is captured once
   (after the warm-up) and each sample replays the graph, which removes the
   launch overhead of multi-kernel paths. A path that synchronises with the
   host cannot be captured; that is reported as ``Unavailable``, not hidden.

CPU fallback (no CUDA, or ``device="cpu"``): ``time.perf_counter`` around each
call, the same warm-up and statistics, no L2 flush (so that the tool and its
tests run on any machine with tiny shapes). CPU timings are for trying the tool
only; they say nothing about the kernels.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from . import checks
from .errors import Unavailable, UsageError

#: Flush size when the L2 size cannot be read: 2x the 60 MiB of an H200, rounded up.
_FALLBACK_FLUSH_BYTES = 128 << 20


@dataclass
class Timing:
    """Statistics of one ``time_fn`` run, in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    min_ms: float
    reps: int
    method: str
    samples_ms: list[float] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {
            "median_ms": self.median_ms,
            "p20_ms": self.p20_ms,
            "p80_ms": self.p80_ms,
            "mean_ms": self.mean_ms,
            "min_ms": self.min_ms,
            "reps": self.reps,
            "method": self.method,
        }


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (q in [0, 1])."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo] * (1.0 - frac) + sorted_values[hi] * frac)


def summarize(samples_ms: Sequence[float], method: str) -> Timing:
    """Median, p20, p80, mean and min of the samples."""
    if not samples_ms:
        raise ValueError("summarize: no samples")
    s = sorted(float(x) for x in samples_ms)
    return Timing(
        median_ms=quantile(s, 0.5),
        p20_ms=quantile(s, 0.2),
        p80_ms=quantile(s, 0.8),
        mean_ms=sum(s) / len(s),
        min_ms=s[0],
        reps=len(s),
        method=method,
        samples_ms=list(samples_ms),
    )


def _resolve_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    d = torch.device(device)
    if d.type == "cuda" and not torch.cuda.is_available():
        raise Unavailable("no CUDA GPU found (needs an sm_90 Hopper GPU); use --device cpu with tiny shapes to try the tool")
    if d.type not in ("cuda", "cpu"):
        raise UsageError(f"device: only cuda and cpu are supported, got {d}")
    return d


def _auto_reps(per_call_ms: float, budget_ms: float, min_reps: int, max_reps: int) -> int:
    if per_call_ms <= 0 or not math.isfinite(per_call_ms):
        return max_reps
    return int(max(min_reps, min(max_reps, math.ceil(budget_ms / per_call_ms))))


def flush_bytes(device: torch.device) -> int:
    """Bytes of the L2 flush buffer: twice the L2 size of ``device``."""
    try:
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    except Exception:
        l2 = 0
    return 2 * l2 if l2 > 0 else _FALLBACK_FLUSH_BYTES


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: float = 25.0,
    reps: int | None = None,
    cold_l2: bool = True,
    graph: bool = False,
    rotate: Sequence[Callable[[], object]] | None = None,
    device=None,
    budget_ms: float = 400.0,
    min_reps: int = 10,
    max_reps: int = 100,
) -> Timing:
    """Time the zero-argument callable ``fn`` (see the module docstring for the
    methodology).

    warmup: warm-up budget in ms of wall time after the first (excluded) call.
    reps: timed samples; None sizes them from the warm-up (``budget_ms`` of
    timed work, within ``[min_reps, max_reps]``).
    cold_l2: zero a flush buffer of >= 2x L2 before every sample (CUDA only).
    graph: capture ``fn`` in a CUDA graph and time its replays (CUDA only).
    rotate: optional callables, each the same op on its own copy of the inputs;
    sample i calls ``rotate[i % len(rotate)]`` and the flush is skipped (the
    copies together should exceed twice the L2).
    device: where ``fn`` runs; None = CUDA when available, else CPU.
    """
    if reps is not None:
        checks.check_int(reps, "reps", 1, checks.MAX_REPS)
    warmup = checks.check_number(warmup, "warmup", lo=0.0, hi=checks.MAX_WARMUP_MS)  # NaN/inf would never end
    calls = list(rotate) if rotate else [fn]
    dev = _resolve_device(device)
    if dev.type == "cuda":
        return _time_cuda(fn, calls, dev, warmup, reps, cold_l2 and not rotate, graph, bool(rotate),
                          budget_ms, min_reps, max_reps)
    return _time_cpu(fn, calls, warmup, reps, budget_ms, min_reps, max_reps)


def _time_cpu(fn, calls, warmup, reps, budget_ms, min_reps, max_reps) -> Timing:
    fn()  # first call: excluded
    n_warm, t0 = 0, time.perf_counter()
    while warmup > 0 and (n_warm == 0 or (time.perf_counter() - t0) * 1e3 < warmup):
        calls[n_warm % len(calls)]()
        n_warm += 1
    if reps is None:
        if n_warm:
            per = (time.perf_counter() - t0) * 1e3 / n_warm
        else:
            t1 = time.perf_counter()
            fn()
            per = (time.perf_counter() - t1) * 1e3
        reps = _auto_reps(per, budget_ms, min_reps, max_reps)
    samples = []
    for i in range(int(reps)):
        call = calls[i % len(calls)]
        t1 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t1) * 1e3)
    return summarize(samples, "cpu perf_counter (no L2 flush)")


def _time_cuda(fn, calls, dev, warmup, reps, cold_l2, graph, rotated, budget_ms, min_reps, max_reps) -> Timing:
    with torch.cuda.device(dev):
        stream = torch.cuda.current_stream(dev)
        fn()  # first call: excluded (builds, lazy loading, allocator growth)
        torch.cuda.synchronize(dev)
        n_warm, t0 = 0, time.perf_counter()
        while warmup > 0 and (n_warm == 0 or (time.perf_counter() - t0) * 1e3 < warmup):
            calls[n_warm % len(calls)]()
            n_warm += 1
            if n_warm % 8 == 0:  # keep the host from queueing far ahead of the budget
                torch.cuda.synchronize(dev)
        torch.cuda.synchronize(dev)
        per = (time.perf_counter() - t0) * 1e3 / n_warm if n_warm else math.nan
        if reps is None and not n_warm:
            t1 = time.perf_counter()
            fn()
            torch.cuda.synchronize(dev)
            per = (time.perf_counter() - t1) * 1e3
        reps = int(reps) if reps is not None else _auto_reps(per, budget_ms, min_reps, max_reps)

        flush = torch.empty(flush_bytes(dev), dtype=torch.uint8, device=dev) if cold_l2 else None
        timed = calls
        if graph:
            timed = [_capture(c, dev) for c in calls]
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if flush is not None:
                flush.zero_()  # outside the event pair
            starts[i].record(stream)
            timed[i % len(timed)]()
            ends[i].record(stream)
        torch.cuda.synchronize(dev)
        samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        del flush
    parts = ["cuda events"]
    parts.append("graph replay" if graph else "eager")
    if rotated:
        parts.append(f"rotating {len(calls)} input sets")
    elif cold_l2:
        parts.append("cold L2 (2x L2 flush)")
    else:
        parts.append("warm L2")
    return summarize(samples, ", ".join(parts))


def _capture(call: Callable[[], object], dev: torch.device) -> Callable[[], None]:
    """Capture ``call`` in a CUDA graph (after a warm-up on a side stream);
    return its replay."""
    try:
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            call()
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        torch.cuda.synchronize(dev)
    except Exception as e:  # a host sync or an uncapturable op inside the path
        try:
            torch.cuda.synchronize(dev)
        except Exception:
            pass
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Unavailable(f"CUDA graph capture failed ({msg}); time it with --no-graph") from e
    return g.replay
