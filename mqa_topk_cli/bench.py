"""Benchmark sweeps: time paths on workloads with ``timing.time_fn`` and
report median/p20/p80 ms, effective TFLOP/s and the speedup over the dense
path. A case or path that fails is labelled (``OOM``, ``unavailable: ...``,
``error: ...``) and the sweep goes on.

Three ops can be timed:

- ``mqa_topk``: the whole path (logits + top-k), ``PathImpl.prepare(w)``;
- ``logits``: the logits alone (``PathImpl.logits``; native = the logits
  kernel's launcher), plus the fp8 GEMM ceiling (``torch._scaled_mm`` 8192^3)
  measured in the same run;
- ``topk``: the top-k alone on logits computed once outside the timing (or
  random logits): ``native`` = the top-k kernel's launcher, ``torch`` =
  ``torch.topk`` on the same logits masked to ``[start, end)`` with ``-inf``.

For the native kernels alone (``logits``, ``topk``) the Python contract
checks of the op run once before timing; the timed call is the C++ launcher
(its own shape/dtype checks included) on preallocated buffers, as kernel
benchmarks elsewhere are timed. The whole op (``mqa_topk``) is timed as a user
calls it, checks included (no host sync: ranges are checked on the device;
``scripts/op_overhead.py`` compares an op with its bare launcher).
"""
from __future__ import annotations

import gc
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from . import checks
from .checks import DEFAULT_HEADS
from .errors import MqaTopkError, Unavailable, UsageError
from .timing import time_fn

#: FLOP per visible (row, key) pair at the default 32 heads: 2 * 32 * 128
#: (SPEC §1). A result's TFLOP/s counts 2 * H * 128 per pair at its own heads
#: H (``flop_per_pair``), as DeepGEMM counts its logits.
FLOP_PER_PAIR = 2 * DEFAULT_HEADS * 128


def flop_per_pair(heads: int) -> int:
    """2 * heads * 128: FLOP per visible (row, key) pair at ``heads`` heads."""
    return 2 * int(heads) * 128


#: The headline case (SPEC §1): the default of ``mqa-topk bench``.
HEADLINE = {
    "name": "headline",
    "layout": "causal",
    "rows": 8192,
    "keys": 65536,
    "topk": 2048,
    "dist": "gaussian",
    "seed": 0,
    "heads": DEFAULT_HEADS,
}
OPS = ("mqa_topk", "logits", "topk")
#: Dense paths in order of preference as the speedup baseline (the engine's
#: dense path where ours does not build, e.g. on SM100).
DENSE_BASELINES = ("native", "engine-dense", "torch")
GEMM_CEILING_N = 8192

ProgressFn = Callable[[int, int, str], None]


@dataclass
class BenchResult:
    """One timed (case, path). Times in ms; ``tflops`` is effective
    (2 * heads * 128 * visible pairs / median time: 8192 FLOP per pair at 32
    heads, 16384 at 64); ``g_logits_per_s`` (top-k op) is
    visible logits / median time; ``speedup`` is baseline median / this median."""

    case: str
    op: str
    path: str
    layout: str
    rows: int
    keys: int
    topk: int
    dist: str
    seed: int
    heads: int = DEFAULT_HEADS
    visible_pairs: int = 0
    median_ms: float = math.nan
    p20_ms: float = math.nan
    p80_ms: float = math.nan
    mean_ms: float = math.nan
    min_ms: float = math.nan
    reps: int = 0
    tflops: float = math.nan
    g_logits_per_s: float = math.nan
    speedup: float = math.nan
    baseline: str = ""
    status: str = "ok"
    method: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def status_of(exc: BaseException) -> str:
    """One-line status label of a failed case."""
    oom = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t)
    if oom and isinstance(exc, oom):
        return "OOM"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, Unavailable):
        return f"unavailable: {text}"
    if isinstance(exc, MqaTopkError):
        return f"error: {text}"
    if "out of memory" in text.lower():
        return "OOM"
    return f"error: {type(exc).__name__}: {text}"


def _free(device, *, failed: bool = False) -> None:
    """Releases what a step left behind before the next one. On a GPU: a full
    collection, then the caching allocator's unused blocks (the next path gets
    the memory this one held). On a CPU refcounting frees the tensors as they
    are dropped; only a failure, whose traceback may hold tensors in a
    reference cycle, calls the collector (~0.1 s with torch loaded: a sweep of
    small CPU cases would otherwise spend most of its time there)."""
    cuda = torch.device(device).type == "cuda"
    if cuda or failed:
        gc.collect()
    if cuda and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _case_fields(case) -> dict:
    """Name/layout/shape of a case dict or Workload, for labelling."""
    if isinstance(case, dict):
        try:
            from .workloads import case_heads_topk

            heads, _ = case_heads_topk(case) if "file" not in case else (DEFAULT_HEADS, None)
        except MqaTopkError:  # a bad heads or model: the case fails when it is built, labelled
            heads = DEFAULT_HEADS
        return {
            "case": str(case.get("name") or _auto_name(case, heads)),
            "layout": str(case.get("layout", "causal")),
            "rows": int(case.get("rows", 0) or 0),
            "keys": int(case.get("keys", 0) or 0),
            "topk": int(case.get("topk", 0) or 0),
            "dist": str(case.get("dist", "gaussian")),
            "seed": int(case.get("seed", 0) or 0),
            "heads": int(heads),
        }
    w = case
    return {
        "case": str(getattr(w, "name", None) or "workload"),
        "layout": str(getattr(w, "layout", "") or (getattr(w, "name", "") or "")),
        "rows": int(w.rows),
        "keys": int(w.keys),
        "topk": int(w.topk),
        "dist": str(getattr(w, "dist", "") or ""),
        "seed": int(getattr(w, "seed", 0) or 0),
        "heads": int(w.heads),
    }


def _auto_name(case: dict, heads: int = DEFAULT_HEADS) -> str:
    """As a config names a case without a name (workloads): layout-dist-rR-kK-tT, then -hH when H != 32."""
    suffix = f"-h{heads}" if heads != DEFAULT_HEADS else ""
    return (f"{case.get('layout', 'causal')}-{case.get('dist', 'gaussian')}-r{case.get('rows')}-k{case.get('keys')}"
            f"-t{case.get('topk')}{suffix}")


def _materialize(case, device):
    from . import workloads

    if isinstance(case, dict):
        return workloads.workload_from_case(case, device)
    w = case
    if str(w.device) != str(torch.device(device)):
        w = w.to(device)
    return w


def _fill(res: BenchResult, timing) -> None:
    for k, v in timing.as_dict().items():
        setattr(res, k, v)


def _apply_speedups(results: list[BenchResult]) -> None:
    """Speedup of each ok result over the dense baseline of its case and op:
    ``native`` when it was timed ok, else ``engine-dense``, else ``torch``."""
    groups: dict[tuple, list[BenchResult]] = {}
    for r in results:
        groups.setdefault((r.case, r.op), []).append(r)
    for group in groups.values():
        base = None
        for name in DENSE_BASELINES:
            base = next((r for r in group if r.path == name and r.ok and r.median_ms > 0), None)
            if base:
                break
        if base is None:
            continue
        for r in group:
            if r.ok and r.median_ms > 0:
                r.speedup = base.median_ms / r.median_ms
                r.baseline = base.path


def check_external_paths(names, device) -> None:
    """``Unavailable`` (one line, the same words as verify and crossover) for
    the first external path of ``names`` that cannot run on ``device``;
    built-in paths are labelled per case in the table instead."""
    from .errors import path_unavailable
    from .external import lookup

    for n in names:
        ext = lookup(n)
        reason = ext.unavailable_reason(device) if ext is not None else None
        if reason:
            raise path_unavailable(n, device, reason)


def _time_path(w, name: str, op: str, device, timing_kw: dict, topk_inputs=None):
    """(timing, note) for one path on workload ``w``; raises on failure."""
    from . import paths

    p = paths.get_path(name)
    reason = p.unavailable_reason(device)
    if reason:
        raise Unavailable(reason)
    if op == "mqa_topk":
        fn = p.prepare(w)
        try:
            return time_fn(fn, device=device, **timing_kw)
        finally:
            del fn
    if op == "logits":
        own = p.prepare_logits(w)  # an external path's own logits op (raises Unavailable when it has none)
        if own is not None:
            return time_fn(own, device=device, **timing_kw)
        first = p.logits(w)
        if first is None:
            raise Unavailable(f"the {name} path has no separate logits")
        if name == "native":
            from . import ops

            ext, buf = ops._native(), first.as_strided((w.rows, first.stride(0)), (first.stride(0), 1))
            args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends, buf)
            del first
            return time_fn(lambda: ext.mqa_logits(*args), device=device, **timing_kw)
        del first
        return time_fn(lambda: p.logits(w), device=device, **timing_kw)
    if op == "topk":
        logits, masked, out = topk_inputs
        own = p.prepare_topk(w, logits, out)  # an external path's own top-k op
        if own is not None:
            return time_fn(own, device=device, **timing_kw)
        if name == "native":
            from . import ops

            ops.top_k_per_row_prefill(logits, w.starts, w.ends, out)  # checks once, outside the timing
            ext = ops._native()
            return time_fn(lambda: ext.topk_per_row(logits, w.starts, w.ends, out), device=device, **timing_kw)
        if name == "torch":
            k = min(int(w.topk), masked.shape[1])
            if k == 0:
                raise Unavailable("no keys to select from")
            return time_fn(lambda: torch.topk(masked, k, dim=1, sorted=False), device=device, **timing_kw)
        raise Unavailable(f"the {name} path has no separate top-k (use native or torch)")
    raise UsageError(f"op: must be one of {', '.join(OPS)}, got {op!r}")


def _topk_inputs(w, device, random_logits: bool, seed: int):
    """Logits of ``w`` computed once (or random), their -inf-masked copy for
    torch.topk, and an output buffer."""
    rows, keys = int(w.rows), int(w.keys)
    # logits, their masked copy and the mask: checked before allocating them
    checks.check_memory(9 * rows * keys, device, "rows", f"--op topk on {rows} rows x {keys} keys (dense logits)")
    if random_logits:
        g = torch.Generator(device=torch.device(device))
        g.manual_seed(int(seed))
        logits = torch.randn((rows, keys), generator=g, device=device, dtype=torch.float32)
    else:
        from . import paths

        logits = None
        for name in ("native", "torch", "reference"):
            try:
                p = paths.get_path(name)
            except Exception:
                continue
            if p.unavailable_reason(device) is None:
                logits = p.logits(w)
                if logits is not None:
                    break
        if logits is None:
            raise Unavailable("no path can compute the logits of this workload here")
        logits = logits.to(device=device, dtype=torch.float32)
    col = torch.arange(logits.shape[1], device=logits.device)
    inside = (col[None, :] >= w.starts.to(logits.device, torch.int64)[:, None]) & (
        col[None, :] < w.ends.to(logits.device, torch.int64)[:, None]
    )
    masked = torch.where(inside, logits, torch.full_like(logits, float("-inf")))
    del inside
    out = torch.empty((rows, int(w.topk)), dtype=torch.int32, device=logits.device)
    return logits, masked, out


def fp8_gemm_ceiling(device, *, n: int = GEMM_CEILING_N, reps=None, warmup: float = 25.0,
                     cold_l2: bool = True, graph: bool = False) -> BenchResult:
    """The fp8 GEMM ceiling of this GPU, measured now: ``torch._scaled_mm``
    n x n x n, e4m3 -> bf16, unit scales, random (non-zero) inputs."""
    res = BenchResult(case=f"fp8-gemm-ceiling ({n}^3)", op="gemm", path="torch._scaled_mm", layout="-",
                      rows=n, keys=n, topk=0, dist="gaussian", seed=0)
    dev = torch.device(device)
    if dev.type != "cuda":
        res.status = "unavailable: the fp8 GEMM ceiling needs a CUDA GPU"
        return res
    try:
        g = torch.Generator(device=dev)
        g.manual_seed(0)
        a = torch.randn((n, n), generator=g, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn((n, n), generator=g, device=dev).to(torch.float8_e4m3fn).t()  # column-major operand
        one = torch.ones((), device=dev, dtype=torch.float32)

        def gemm():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        t = time_fn(gemm, device=dev, warmup=warmup, reps=reps, cold_l2=cold_l2, graph=graph)
        _fill(res, t)
        res.tflops = 2.0 * n ** 3 / (t.median_ms * 1e-3) / 1e12
    except Exception as e:  # noqa: BLE001 -- labelled, the run goes on
        res.status = status_of(e)
    finally:
        _free(device, failed=not res.ok)
    return res


def run_bench(
    cases: Sequence,
    paths: Sequence[str],
    *,
    device="cuda",
    reps: int | None = None,
    warmup: float = 25.0,
    cold_l2: bool = True,
    graph: bool = False,
    progress: ProgressFn | None = None,
    op: str = "mqa_topk",
    random_logits: bool = False,
    gemm_ceiling: bool = True,
) -> list[BenchResult]:
    """Time every path on every case. ``cases``: case dicts (as in
    ``configs/bench.toml``: name, layout, rows, keys, topk, dist, seed and
    generator options, see ``workloads.load_workload_config``) or ``Workload``
    objects. ``progress(done, total, label)`` is
    called after each step. Failures are labelled in ``status``; nothing here
    raises for a single failing case."""
    if op not in OPS:
        raise UsageError(f"op: must be one of {', '.join(OPS)}, got {op!r}")
    paths = list(paths)
    if not paths:
        raise UsageError("paths: name at least one path")
    timing_kw = dict(reps=reps, warmup=warmup, cold_l2=cold_l2, graph=graph)
    results: list[BenchResult] = []
    total = len(cases) * len(paths) + (1 if op == "logits" and gemm_ceiling else 0)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, label)

    if op == "logits" and gemm_ceiling:
        results.append(fp8_gemm_ceiling(device, reps=reps, warmup=warmup, cold_l2=cold_l2, graph=graph))
        tick("fp8 GEMM ceiling")

    for case in cases:
        info = _case_fields(case)
        w = None
        case_status = None
        topk_inputs = None
        try:
            w = _materialize(case, device)
            # the shape as built: a case naming a recorded file (or ragged lengths) does not give it
            info.update(rows=int(w.rows), keys=int(w.keys), topk=int(w.topk), heads=int(w.heads))
            if isinstance(case, dict) and "file" in case:
                info.update(layout=str(w.layout or "recorded"), dist=str(w.dist or ""), seed=int(w.seed or 0))
            info["visible_pairs"] = int(w.visible_pairs)
            if op == "topk":
                topk_inputs = _topk_inputs(w, device, random_logits, info["seed"])
        except Exception as e:  # noqa: BLE001 -- labelled, the sweep goes on
            case_status = status_of(e)
            w = None
            _free(device, failed=True)
        for name in paths:
            res = BenchResult(op=op, path=name, **info)
            if case_status is not None:
                res.status = case_status
            else:
                try:
                    t = _time_path(w, name, op, device, timing_kw, topk_inputs)
                    _fill(res, t)
                    sec = res.median_ms * 1e-3
                    if sec > 0:
                        if op == "topk":
                            res.g_logits_per_s = res.visible_pairs / sec / 1e9
                        else:
                            res.tflops = flop_per_pair(res.heads) * res.visible_pairs / sec / 1e12
                except Exception as e:  # noqa: BLE001 -- labelled, the sweep goes on
                    res.status = status_of(e)
                finally:
                    _free(device, failed=not res.ok)
            results.append(res)
            tick(f"{info['case']} / {name}: {res.status}")
        del w, topk_inputs
        _free(device)
    _apply_speedups(results)
    return results


# ---------------------------------------------------------------- output


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def as_records(results: Iterable) -> list[dict]:
    """Dataclass results (or dicts) as plain dicts."""
    out = []
    for r in results:
        if isinstance(r, dict):
            out.append(dict(r))
        elif hasattr(r, "__dataclass_fields__"):
            out.append({f.name: getattr(r, f.name) for f in fields(r)})
        else:
            out.append(dict(vars(r)))
    return out


def results_frame(results: Iterable):
    import pandas as pd

    return pd.DataFrame(as_records(results))


def write_results(path, results: Iterable, env: dict, *, extra: dict | None = None, option: str = "--out") -> Path:
    """Write results with the environment stamped in.

    ``.json``: ``{"environment": env, "results": [...], **extra}`` (NaN -> null).
    ``.csv``: one row per result; the environment as extra columns prefixed
    ``env_`` (clocks spread out), so files from several runs concatenate.
    """
    from .envinfo import flat_environment

    p = checks.check_output_file(path, option, checks.TABLE_SUFFIXES)
    records = as_records(results)
    suffix = p.suffix.lower()
    try:
        if suffix == ".json":
            doc = {"environment": env, "results": records}
            if extra:
                doc.update(extra)
            p.write_text(json.dumps(_jsonable(doc), indent=2) + "\n")
        else:
            import pandas as pd

            df = pd.DataFrame(records)
            for k, v in flat_environment(env).items():
                df[f"env_{k}"] = v if not isinstance(v, (dict, list)) else json.dumps(v)
            df.to_csv(p, index=False)
    except OSError as e:
        raise UsageError(f"{option} {p}: cannot write ({e.strerror or e})") from None
    checks.output_written(p)
    return p


def bench_result_from_dict(d: dict) -> BenchResult:
    names = {f.name for f in fields(BenchResult)}
    return BenchResult(**{k: v for k, v in d.items() if k in names})


__all__ = [
    "BenchResult", "HEADLINE", "OPS", "FLOP_PER_PAIR", "flop_per_pair", "run_bench", "fp8_gemm_ceiling", "status_of",
    "write_results", "results_frame", "as_records",
]
