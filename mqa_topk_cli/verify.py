"""Layered verification of a path's output on a workload (SPEC §4).

Per workload and path:

0. **Poison and inputs.** The output is filled with ``SENTINEL`` (0x7FFFFFFF)
   before the first run and with random garbage before each rerun; the six
   inputs are cloned before and compared bitwise after all runs.
1. **Validity, per row:** exactly ``min(topk, n_r)`` entries in ``[0, n_r)``,
   the rest ``-1`` (in any position: the output is unordered), no duplicates,
   no sentinel left.
2. **Tie-aware optimality** against the independent reference logits
   (``reference.py``, fp32 or fp64): the reference logits at the chosen keys,
   sorted, equal the reference's own top-k values, position by position,
   within ``tol_r = tol_rel * M_r`` (see ``DEFAULT_TOL_REL`` and
   ``magnitude_bound``). ``max_violation`` is the largest ``|diff| / tol_r``.
3. **Tie-break rule** (paths with ``deterministic_ties``): when the path
   exposes its own logits, the chosen set must *equal* the exact top-k by
   (value desc, index asc) of those logits. When it does not, the rule is
   checked where it is decidable without them: keys that are exact duplicates
   (bitwise-identical k row and scale) have bitwise-identical logits in any
   implementation, so within each duplicate group of a row the chosen members
   must be the lowest-indexed ones.
4. **Exact-set agreement** with ``other`` (a diagnostic rate); required to be
   1.0 when both paths have the tie rule and expose bitwise-equal logits.
5. **Determinism:** every rerun's output array equals the first one. A path
   that does not promise it (``deterministic_output = False``: the serving
   engine's top-k takes ties in atomic order) may differ between runs; then
   every run that differs is checked on its own by layers 1-2, and only a
   run failing those fails the path.

Everything is vectorised per chunk of rows; Python loops only format the
first few failures. ``verify_many`` runs all paths of a workload, then streams
the reference once for all of them.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from .checks import DEFAULT_HEADS, MAX_TOL_REL, check_memory
from .errors import Unavailable
from .paths import PathImpl, get_path
from .reference import ieee_fp32_matmul, reference_logits, reference_topk

#: Relative tolerance of layer 2, in units of the row's magnitude bound M_r.
#:
#: Why 2**-12. Every fp8 x fp8 product is exact in fp32, so a path's logit
#: differs from the exact value only by how its sums are rounded. Bounds:
#:
#: * fp32 accumulation in any order (the reference, the torch path on CPU):
#:   the 128-term dot and the H-term head sum add at most
#:   ``(128 + H) * 2**-24 * M_r``: ``2**-16.7 * M_r`` at 32 heads, ``2**-16.4``
#:   at 64, and typically ``~sqrt(128 + H) * 2**-24 * M_r ~ 2**-20 * M_r``
#:   (M_r bounds the sums of absolute values, see ``magnitude_bound``).
#: * Hopper FP8 tensor cores (wgmma: the native/fused kernels and cuBLAS's
#:   ``_scaled_mm``) keep fewer mantissa bits in their internal accumulation
#:   of the 128-long dot. Measured on the H200 (2026-11-29): the native logits
#:   kernel's largest error over 7 shapes was 2.4e-5 * M_r (2**-15.3), and the
#:   largest layer-2 deviation over all 30 cases of configs/verify.toml, native
#:   and torch paths, was 7.6e-5 * M_r (2**-13.7, the "rising" workloads).
#:
#: 2**-12 keeps a factor 3.2 of margin over the worst measured deviation and
#: sits 2**4.7 above the fp32 worst case. A path whose sorted chosen values
#: are off by more than this picked a key whose logit is wrong by more than
#: any rounding explains.
DEFAULT_TOL_REL = 2.0 ** -12
#: Written into the output before the first run; never a valid entry.
SENTINEL = 0x7FFFFFFF
#: Concrete failure messages kept per result.
MAX_ERRORS = 10
#: Bound on the per-chunk intermediates of the checks.
CHUNK_BYTES = 512 << 20


@dataclass
class VerifyResult:
    case: str
    path: str
    rows: int
    keys: int
    topk: int
    heads: int = DEFAULT_HEADS
    valid_rows: int = 0
    invalid_rows: int = 0
    tie_equivalent_rows: int = 0
    exact_set_rate: float | None = None
    bitwise_logits: bool | None = None
    deterministic: bool = False
    inputs_unchanged: bool = False
    max_violation: float = 0.0
    errors: list[str] = field(default_factory=list)
    passed: bool = False
    other: str | None = None
    #: How layer 3 was judged: "own logits", "duplicate keys", "no duplicate keys", "not claimed".
    tie_rule: str = "not claimed"
    tie_rule_violations: int = 0
    #: Reruns (of a path without identical reruns) that failed layers 1-2.
    rerun_failures: int = 0
    tol_rel: float = DEFAULT_TOL_REL
    precision: str = "fp32"
    runs: int = 0
    #: "ok", "unavailable: ..." or "error: ..." (the path raised).
    status: str = "ok"
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: The recorded workload file the case came from, if any.
    file: str | None = None

    def add_error(self, msg: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)


# --------------------------------------------------------------------------- helpers

def _bits(t: torch.Tensor) -> torch.Tensor:
    """A bitwise view (uint8) of a tensor, for exact comparisons of any dtype."""
    t = t.contiguous()
    return t.view(torch.uint8) if t.element_size() == 1 else t.reshape(-1).view(torch.uint8)


def _snapshot(w) -> dict:
    return {f: (t, t.detach().clone()) for f, t in w.tensors().items()}


def _changed_inputs(w, snap: dict) -> list[str]:
    bad = []
    for f, (orig, copy) in snap.items():
        cur = getattr(w, f)
        if cur is not orig:
            bad.append(f"{f} (the workload's tensor was replaced)")
        elif not torch.equal(_bits(orig), _bits(copy)):
            n = int((_bits(orig) != _bits(copy)).sum())
            bad.append(f"{f} ({n} bytes changed)")
    return bad


def magnitude_bound(w, r0: int, r1: int, lo: int, hi: int, kn: torch.Tensor) -> torch.Tensor:
    """M_r (float64 ``[r1 - r0]``) = max over the row's visible keys s of
    ``scales[s] * sum_h |w[r,h]| * ||q[r,h]||_2 * ||k[s]||_2``: by Cauchy-Schwarz
    a bound on the sum of |terms| behind any logit of the row, hence the scale
    of its rounding error. ``kn = scales * ||k||`` (float64 ``[keys]``)."""
    qn = w.q[r0:r1].to(torch.float32).norm(dim=2).to(torch.float64)  # [rc, 32]
    a = (w.weights[r0:r1].to(torch.float64).abs() * qn).sum(1)  # [rc]
    if hi <= lo:
        return torch.zeros(r1 - r0, dtype=torch.float64, device=w.device)
    col = torch.arange(lo, hi, device=w.device)
    s = w.starts[r0:r1].to(torch.int64)[:, None]
    e = w.ends[r0:r1].to(torch.int64)[:, None]
    kmax = torch.where((col >= s) & (col < e), kn[lo:hi], torch.zeros((), dtype=torch.float64,
                                                                        device=w.device)).amax(1)
    return a * kmax


def _key_norms(w) -> torch.Tensor:
    return w.scales.to(torch.float64) * w.k.to(torch.float32).norm(dim=1).to(torch.float64)


def _duplicate_groups(w) -> torch.Tensor | None:
    """Per key, the id of its duplicate group (keys with bitwise-identical k
    row and scale), or -1 for keys without a duplicate; None when no key has one."""
    if w.keys < 2:
        return None
    sig = torch.cat([w.k.contiguous().view(torch.uint8), w.scales.contiguous().view(torch.uint8).view(-1, 4)], 1)
    _, inv, counts = torch.unique(sig, dim=0, return_inverse=True, return_counts=True)
    dup = counts[inv] > 1
    if not bool(dup.any()):
        return None
    return torch.where(dup, inv, torch.full_like(inv, -1))


def _row_chunk(rows: int, width: int) -> int:
    return max(1, min(rows, CHUNK_BYTES // (32 * max(width, 1))))


def _row_problem(row: list[int], n: int, topk: int) -> str:
    """A concrete description of why an output row is invalid."""
    need = min(topk, n)
    if SENTINEL in row:
        return f"entry {row.index(SENTINEL)} still holds the poison value {SENTINEL} (never written)"
    bad = [x for x in row if x != -1 and not 0 <= x < n]
    if bad:
        return f"index {bad[0]} outside [0, n={n})" + (f" ({len(bad)} such entries)" if len(bad) > 1 else "")
    valid = [x for x in row if x != -1]
    seen, dup = set(), None
    for x in valid:
        if x in seen:
            dup = x
            break
        seen.add(x)
    if dup is not None:
        return f"index {dup} appears more than once"
    if len(valid) != need:
        return f"{len(valid)} valid entries, expected min(topk, n) = {need} (n={n}); the rest must be -1"
    return "invalid row"  # pragma: no cover


def _fmt_rows(rows: torch.Tensor, limit: int = 8) -> str:
    r = rows[:limit].tolist()
    return ", ".join(map(str, r)) + (", ..." if rows.numel() > limit else "")


# --------------------------------------------------------------------------- running

@dataclass
class _Run:
    path: PathImpl
    result: VerifyResult
    outputs: list = field(default_factory=list)
    logits: torch.Tensor | None = None
    logits_done: bool = False
    dup_violations: int = 0
    set_mismatch_rows: int = 0
    own_nan: bool = False

    def own_logits(self, w):
        if not self.logits_done:
            self.logits_done = True
            self.logits = self.path.logits(w)
        return self.logits


def _poison(out: torch.Tensor, i: int) -> None:
    if i == 0:
        out.fill_(SENTINEL)
    else:
        g = torch.Generator(device=out.device)
        g.manual_seed(1000 + i)
        out.copy_(torch.randint(-(2**31), 2**31 - 1, out.shape, generator=g, device=out.device, dtype=torch.int64))


def _execute(p: PathImpl, w, runs: int, res: VerifyResult) -> list[torch.Tensor]:
    """Runs ``p`` ``runs`` times on poisoned outputs; fills res.status/errors on failure."""
    # every run's output is kept (determinism): room for all of them, checked before allocating
    check_memory(runs * w.rows * int(w.topk) * 4, w.device, "--reruns",
                 f"keeping {runs} outputs [{w.rows}, {int(w.topk)}] for the determinism check")
    outs = []
    for i in range(runs):
        out = torch.empty((w.rows, int(w.topk)), dtype=torch.int32, device=w.device)
        _poison(out, i)
        p.run(w, out)
        outs.append(out)
    if w.device.type == "cuda":
        torch.cuda.synchronize(w.device)
    return outs


def _start(p: PathImpl, w, case: str, reruns: int, precision: str, tol_rel: float) -> _Run:
    res = VerifyResult(case=case, path=p.name, rows=w.rows, keys=w.keys, topk=int(w.topk), heads=w.heads,
                       tol_rel=tol_rel, precision=precision)
    run = _Run(p, res)
    t0 = time.perf_counter()
    reason = p.unavailable_reason(w.device)
    if reason:
        res.status = f"unavailable: {reason}"
        res.errors.append(reason)
        return run
    snap = _snapshot(w)
    try:
        run.outputs = _execute(p, w, 1 + max(0, reruns), res)
        res.runs = len(run.outputs)
        if p.deterministic_ties:
            run.own_logits(w)
    except Exception as e:  # a crashing path is a labelled failure, not a crash of verify
        kind = "unavailable" if isinstance(e, Unavailable) else "error"
        res.status = f"{kind}: {type(e).__name__}: {e}"
        res.errors.append(f"the path raised {type(e).__name__}: {e}")
    changed = _changed_inputs(w, snap)
    res.inputs_unchanged = not changed
    if changed:
        res.add_error("inputs modified by the path: " + ", ".join(changed))
    del snap
    # Layer 5: determinism, output arrays compared as a whole.
    res.deterministic = True
    for i, out in enumerate(run.outputs[1:], start=1):
        if not torch.equal(out, run.outputs[0]):
            res.deterministic = False
            rows = torch.nonzero((out != run.outputs[0]).any(1)).flatten()
            if not p.deterministic_output:
                res.notes.append(f"run {i} differs from run 0 in {rows.numel()} rows; the path does not promise "
                                 f"identical reruns, so each run is checked on its own")
                continue
            res.add_error(f"not deterministic: run {i} differs from run 0 in {rows.numel()} rows "
                          f"(first: {_fmt_rows(rows)})")
            break
    if res.runs == 1 and res.status == "ok":
        res.notes.append("determinism not checked (reruns=0)")
    res.seconds = time.perf_counter() - t0
    return run


# --------------------------------------------------------------------------- evaluation

def _evaluate(w, runs: list[_Run], other_run: _Run | None, precision: str, ref_cache) -> None:
    """Layers 1-4 for every run with outputs, streaming the reference once."""
    live = [r for r in runs if r.outputs]
    if not live:
        return
    t0 = time.perf_counter()
    topk = int(w.topk)
    rows, dev = w.rows, w.device
    kn = _key_norms(w)
    groups = None
    if any(r.path.deterministic_ties and r.logits is None for r in live):
        groups = _duplicate_groups(w)
    st_all = w.starts.to(torch.int64)
    en_all = w.ends.to(torch.int64)
    for r in live:
        r.result.tie_rule = ("own logits" if r.logits is not None else
                             ("duplicate keys" if groups is not None else "no duplicate keys")) \
            if r.path.deterministic_ties else "not claimed"
        r.result.max_violation = 0.0
    # Bitwise logits with `other` (inside the ranges), when both expose them.
    other_logits = other_run.own_logits(w) if other_run is not None and other_run.outputs else None
    bitwise = {}
    for r in live:
        if other_run is None or r.path.name == other_run.path.name:
            continue
        mine = r.own_logits(w)
        if mine is None or other_logits is None:
            r.result.bitwise_logits = None
        else:
            bitwise[id(r)] = True
    cached = None
    key = (id(w), precision)
    if ref_cache is not None and key in ref_cache and ref_cache[key]["w"] is w:
        cached = ref_cache[key]["chunks"]
    store = [] if ref_cache is not None and cached is None else None
    st_cpu = w.starts.to("cpu", torch.int64)
    en_cpu = w.ends.to("cpu", torch.int64)
    rc = _row_chunk(rows, w.keys)
    chunks = cached if cached is not None else []
    if cached is None:
        for a in range(0, rows, rc):
            b = min(rows, a + rc)
            lo, hi = int(st_cpu[a:b].min()), int(en_cpu[a:b].max())
            chunks.append((a, b, lo, max(lo, hi), None))
    stored_bytes = 0
    for ci, (a, b, lo, hi, ref_data) in enumerate(chunks):
        nr, width = b - a, hi - lo
        s, e = st_all[a:b, None], en_all[a:b, None]
        n = (e - s).squeeze(1)
        need = torch.clamp(n, max=topk)
        if ref_data is None:
            rl = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision=precision,
                                  rows=slice(a, b), key_range=(lo, hi))
            ridx = reference_topk(rl, w.starts[a:b] - lo, w.ends[a:b] - lo, topk)
            ref_vals = rl.gather(1, torch.clamp(ridx.to(torch.int64) + (s - lo), 0, max(width - 1, 0))) \
                if width else torch.zeros((nr, topk), dtype=rl.dtype, device=dev)
            bound = magnitude_bound(w, a, b, lo, hi, kn)
            ref_data = (rl, ref_vals, bound)
            if store is not None:
                stored_bytes += rl.numel() * rl.element_size()
                if stored_bytes <= 2 * CHUNK_BYTES:
                    store.append((a, b, lo, hi, ref_data))
                else:
                    store = None
        rl, ref_vals, bound = ref_data
        col = torch.arange(lo, hi, device=dev)
        inside = (col >= s) & (col < e)
        pos = torch.arange(topk, device=dev)
        inneed = pos < need[:, None]
        other_sets = None
        if other_run is not None and other_run.outputs:
            other_sets = torch.sort(other_run.outputs[0][a:b], dim=1).values
        for run in live:
            res = run.result
            out = run.outputs[0][a:b].to(torch.int64)
            # Layer 1: validity.
            is_valid = (out >= 0) & (out < n[:, None])
            stray = ~is_valid & (out != -1)
            cnt = is_valid.sum(1)
            srt = torch.sort(torch.where(is_valid, out, torch.full_like(out, -1)), dim=1).values
            dup = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(1) if topk > 1 else \
                torch.zeros(nr, dtype=torch.bool, device=dev)
            row_ok = ~stray.any(1) & (cnt == need) & ~dup
            nbad = int((~row_ok).sum())
            res.invalid_rows += nbad
            res.valid_rows += nr - nbad
            if nbad:
                for rr in torch.nonzero(~row_ok).flatten()[: max(0, MAX_ERRORS - len(res.errors))].tolist():
                    res.add_error(f"row {a + rr}: invalid: {_row_problem(run.outputs[0][a + rr].tolist(), int(n[rr]), topk)}")
            # Layer 2: values at the chosen keys vs the reference top-k values.
            absidx = torch.clamp(out + (s - lo), 0, max(width - 1, 0))
            if width:
                got = torch.where(is_valid, rl.gather(1, absidx), torch.full((), float("-inf"), dtype=rl.dtype,
                                                                             device=dev))
            else:
                got = torch.full((nr, topk), float("-inf"), dtype=rl.dtype, device=dev)
            got = torch.sort(got, dim=1, descending=True).values
            # Equal values differ by 0, equal infinities included (an fp32 logit can overflow: inf - inf
            # is NaN); a NaN on either side, or unequal infinities, is an infinite difference.
            diff = torch.where(inneed & (got != ref_vals), (got - ref_vals).abs(),
                               torch.zeros((), dtype=rl.dtype, device=dev))
            diff = torch.nan_to_num(diff, nan=float("inf"), posinf=float("inf"))
            worst = diff.amax(1).to(torch.float64) if topk else torch.zeros(nr, dtype=torch.float64, device=dev)
            tol = res.tol_rel * bound
            viol = torch.where(worst == 0, torch.zeros_like(worst),
                               torch.where(tol > 0, worst / torch.where(tol > 0, tol, torch.ones_like(tol)),
                                           torch.full_like(worst, float("inf"))))
            viol_valid = torch.where(row_ok, viol, torch.zeros_like(viol))
            if nr:
                res.max_violation = max(res.max_violation, float(viol_valid.max()))
            opt_ok = row_ok & (viol <= 1.0)
            res.tie_equivalent_rows += int(opt_ok.sum())
            bad_opt = torch.nonzero(row_ok & ~opt_ok).flatten()
            for rr in bad_opt[: max(0, MAX_ERRORS - len(res.errors))].tolist():
                j = int(torch.nonzero(diff[rr] == diff[rr].max()).flatten()[0])
                res.add_error(f"row {a + rr}: not the top-k: sorted position {j} has reference logit "
                              f"{float(got[rr, j]):.9g}, the reference's top-k value there is "
                              f"{float(ref_vals[rr, j]):.9g} (|diff| = {float(diff[rr, j]):.3g}, "
                              f"{float(viol[rr]):.3g}x the tolerance {float(tol[rr]):.3g})")
            # Layer 3: tie-break rule.
            if run.path.deterministic_ties and width:
                if run.logits is not None:
                    _check_own_logits(w, run, a, b, lo, hi, out, row_ok, inside)
                elif groups is not None:
                    _check_duplicates(run, a, lo, hi, out, is_valid, inside, groups, s)
            # Layer 4: exact sets vs other.
            if other_sets is not None and run.path.name != other_run.path.name:
                mine = torch.sort(run.outputs[0][a:b], dim=1).values
                same = (mine == other_sets).all(1)
                run.set_mismatch_rows += int((~same).sum())
                if id(run) in bitwise:
                    pl = run.logits[a:b, lo:hi]
                    ol = other_logits[a:b, lo:hi]
                    eq = (pl == ol) | (torch.isnan(pl) & torch.isnan(ol)) | ~inside
                    if not bool(eq.all()):
                        bitwise[id(run)] = False
                    elif run.path.deterministic_ties and other_run.path.deterministic_ties and not bool(same.all()):
                        rows_bad = torch.nonzero(~same).flatten() + a
                        res.add_error(f"index sets differ from {other_run.path.name} in {rows_bad.numel()} rows "
                                      f"(first: {_fmt_rows(rows_bad)}) although both paths' logits are bitwise "
                                      f"equal there and both claim the tie rule")
                        res.tie_rule_violations += int(rows_bad.numel())
        del rl, ref_vals, bound, ref_data
    if store is not None:
        ref_cache[key] = {"w": w, "chunks": store}
    elapsed = time.perf_counter() - t0
    for run in live:
        res = run.result
        res.seconds += elapsed / len(live)
        if other_run is not None and run.path.name != other_run.path.name:
            res.other = other_run.path.name
            if other_run.outputs:
                res.exact_set_rate = 1.0 - run.set_mismatch_rows / rows if rows else 1.0
            else:
                res.notes.append(f"other path {other_run.path.name}: {other_run.result.status}")
            if id(run) in bitwise:
                res.bitwise_logits = bitwise[id(run)]
        if run.own_nan:
            res.add_error("the path's own logits hold NaN inside [start, end)")


def _check_own_logits(w, run: _Run, a, b, lo, hi, out, row_ok, inside) -> None:
    """Layer 3 with the path's logits: chosen set == exact top-k of them."""
    res = run.result
    topk = int(w.topk)
    pl = run.logits[a:b, lo:hi].to(torch.float32)
    if bool((torch.isnan(pl) & inside).any()):
        run.own_nan = True
        res.tie_rule_violations += 1
        return
    exp = reference_topk(pl, w.starts[a:b] - lo, w.ends[a:b] - lo, topk).to(torch.int64)
    mine = torch.sort(out, dim=1).values
    same = (mine == torch.sort(exp, dim=1).values).all(1)
    bad = torch.nonzero(row_ok & ~same).flatten()
    res.tie_rule_violations += int(bad.numel())
    for rr in bad[: max(0, MAX_ERRORS - len(res.errors))].tolist():
        s = int(w.starts[a + rr])
        chosen = set(out[rr].tolist()) - {-1}
        want = set(exp[rr].tolist()) - {-1}
        extra = min(chosen - want)
        missing = min(want - chosen)
        ve = float(pl[rr, extra + s - lo])
        vm = float(pl[rr, missing + s - lo])
        why = "tie: the lower index must win" if ve == vm else "a smaller logit was chosen"
        res.add_error(f"row {a + rr}: the set is not the exact top-k of the path's own logits: chose {extra} "
                      f"(logit {ve:.9g}) over {missing} (logit {vm:.9g}); {why}")


def _check_duplicates(run: _Run, a, lo, hi, out, is_valid, inside, groups, s) -> None:
    """Layer 3 without logits: in each row, the chosen members of every
    duplicate-key group (bitwise-equal logits everywhere) are its lowest ones."""
    res = run.result
    nr, width = out.shape[0], hi - lo
    dev = out.device
    g = groups[lo:hi]
    member = inside & (g >= 0)
    if not bool(member.any()):
        return
    chosen = torch.zeros((nr, width + 1), dtype=torch.bool, device=dev)  # last column: sink for invalid entries
    absidx = torch.where(is_valid, out + (s - lo), torch.full_like(out, width))
    chosen.scatter_(1, absidx, torch.ones_like(is_valid))
    chosen = chosen[:, :width]
    gu, gl = torch.unique(g[g >= 0], return_inverse=True)
    local = torch.full((width,), -1, dtype=torch.int64, device=dev)
    local[g >= 0] = gl
    ng = int(gu.numel())
    col = torch.arange(width, device=dev).expand(nr, width)
    slot = torch.arange(nr, device=dev)[:, None] * ng + local[None, :]
    maxc = torch.full((nr * ng,), -1, dtype=torch.int64, device=dev)
    sel = member & chosen
    maxc.scatter_reduce_(0, slot[sel], col[sel], reduce="amax")
    minu = torch.full((nr * ng,), width, dtype=torch.int64, device=dev)
    sel = member & ~chosen
    minu.scatter_reduce_(0, slot[sel], col[sel], reduce="amin")
    viol = (minu < maxc).view(nr, ng)
    bad_rows = torch.nonzero(viol.any(1)).flatten()
    res.tie_rule_violations += int(bad_rows.numel())
    for rr in bad_rows[: max(0, MAX_ERRORS - len(res.errors))].tolist():
        gi = int(torch.nonzero(viol[rr]).flatten()[0])
        st = int(s[rr])
        hi_c = int(maxc[rr * ng + gi]) + lo - st
        lo_u = int(minu[rr * ng + gi]) + lo - st
        res.add_error(f"row {a + rr}: tie rule violated: chose key {hi_c} but not the lower key {lo_u}, a bitwise "
                      f"duplicate (same k row and scale, so equal logits in any implementation)")


def _check_reruns(w, runs: list[_Run], precision: str, ref_cache) -> None:
    """Layers 1-2 for every rerun that differs from run 0, for paths that do
    not promise identical reruns (each run must be a valid, tie-equivalent answer)."""
    for run in runs:
        if run.path.deterministic_output or len(run.outputs) < 2:
            continue
        res = run.result
        for i, out in enumerate(run.outputs[1:], start=1):
            if torch.equal(out, run.outputs[0]):
                continue
            sub = _Run(run.path, VerifyResult(case=res.case, path=res.path, rows=res.rows, keys=res.keys,
                                              topk=res.topk, heads=res.heads, tol_rel=res.tol_rel,
                                              precision=precision),
                       outputs=[out], logits_done=True)
            _evaluate(w, [sub], None, precision, ref_cache)
            res.max_violation = max(res.max_violation, sub.result.max_violation)
            if sub.result.tie_equivalent_rows != sub.result.rows:
                res.rerun_failures += 1
                for e in sub.result.errors:
                    res.add_error(f"run {i}: {e}")


def _finish(run: _Run) -> VerifyResult:
    res = run.result
    if res.status == "ok":
        res.passed = (res.invalid_rows == 0 and res.tie_equivalent_rows == res.rows
                      and (res.deterministic or not run.path.deterministic_output) and res.rerun_failures == 0
                      and res.inputs_unchanged and res.tie_rule_violations == 0 and not run.own_nan)
    else:
        res.passed = False
    if not res.passed and not res.errors:  # pragma: no cover - every failure above leaves a message
        res.errors.append("failed")
    return res


# --------------------------------------------------------------------------- API

def failed_case(case: str, path: str, exc: BaseException, *, rows: int = 0, keys: int = 0, topk: int = 0,
                file: str | None = None, heads: int | None = None) -> VerifyResult:
    """The result of a (case, path) whose workload could not be built or
    loaded: labelled (``status`` as ``bench`` labels its failures) and failed,
    so that the other cases go on."""
    from .bench import status_of

    status = status_of(exc)
    return VerifyResult(case=case, path=getattr(path, "name", str(path)), rows=int(rows or 0), keys=int(keys or 0),
                        topk=int(topk or 0), heads=int(heads or DEFAULT_HEADS), status=status,
                        errors=[f"the case could not run: {status}"], passed=False, file=file)


def _resolve(path) -> PathImpl:
    return path if isinstance(path, PathImpl) else get_path(path)


def _verify_workload(w, paths: list, *, other=None, reruns: int = 2, precision: str = "fp32",
                     tol_rel: float | None = None, ref_cache=None) -> list[VerifyResult]:
    if precision not in ("fp32", "fp64"):
        raise ValueError(f"precision: must be 'fp32' or 'fp64', got {precision!r}")
    tol = DEFAULT_TOL_REL if tol_rel is None else float(tol_rel)
    if not (math.isfinite(tol) and 0 < tol <= MAX_TOL_REL):  # NaN or inf would make layer 2 vacuous
        raise ValueError(f"tol_rel: must be a finite number in (0, {MAX_TOL_REL:g}], got {tol_rel!r}")
    case = w.name or "workload"
    impls = [_resolve(p) for p in paths]
    with ieee_fp32_matmul():
        runs = [_start(p, w, case, reruns, precision, tol) for p in impls]
        other_run = None
        if other is not None:
            op = _resolve(other)
            other_run = next((r for r in runs if r.path.name == op.name), None)
            if other_run is None:
                other_run = _start(op, w, case, 0, precision, tol)
        _evaluate(w, runs, other_run, precision, ref_cache)
        _check_reruns(w, runs, precision, ref_cache)
    return [_finish(r) for r in runs]


def verify_case(w, path, *, other: str | None = None, reruns: int = 2, precision: str = "fp32",
                tol_rel: float | None = None, ref_cache=None) -> VerifyResult:
    """Verifies ``path`` (a name or a ``PathImpl``) on workload ``w``: runs it
    ``1 + reruns`` times and applies the layers of the module docstring.
    ``other``: a second path whose index sets are compared (diagnostic).
    ``ref_cache``: a dict shared between calls on the same workload to reuse
    the reference logits (kept when they fit in about 1 GiB). A path that
    cannot run here gives ``status='unavailable: ...'`` and ``passed=False``."""
    return _verify_workload(w, [path], other=other, reruns=reruns, precision=precision, tol_rel=tol_rel,
                            ref_cache=ref_cache)[0]


def verify_many(cases, paths, *, other: str | None = None, reruns: int = 2, precision: str = "fp32",
                tol_rel: float | None = None, device="cpu", on_result=None) -> list[VerifyResult]:
    """Verifies every path on every case (a ``Workload`` or a config case
    dict, built on ``device``); the reference is computed once per workload
    and shared by its paths. ``other`` defaults to the second path when two
    are given. ``on_result(result)`` is called as results arrive."""
    from .workloads import workload_from_case

    paths = list(paths)
    if other is None and len(paths) == 2:
        other = paths[1]
    results = []
    for case in cases:
        try:
            w = workload_from_case(case, device) if isinstance(case, dict) else case
        except Exception as e:  # labelled, the other cases go on
            got = [failed_case(str(case.get("name") or "case"), p, e, rows=case.get("rows"), keys=case.get("keys"),
                               topk=case.get("topk"), file=case.get("file")) for p in paths]
            for r in got:
                if on_result is not None:
                    on_result(r)
            results.extend(got)
            continue
        got = _verify_workload(w, paths, other=other, reruns=reruns, precision=precision, tol_rel=tol_rel)
        if other is not None and len(paths) == 2:
            # the second path is compared with the first
            first = got[0]
            got[1].other = first.path if got[1].other is None else got[1].other
            if got[1].exact_set_rate is None and first.exact_set_rate is not None:
                got[1].exact_set_rate = first.exact_set_rate
                got[1].bitwise_logits = first.bitwise_logits
        for r in got:
            if isinstance(case, dict) and case.get("file"):
                r.file = str(case["file"])
            if on_result is not None:
                on_result(r)
        results.extend(got)
        del w
    return results


__all__ = ["VerifyResult", "verify_case", "verify_many", "failed_case", "DEFAULT_TOL_REL", "SENTINEL", "magnitude_bound"]
