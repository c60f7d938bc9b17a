"""verify.py: accepts correct paths, rejects each known-wrong implementation
(SPEC §4) with a concrete message, and shares the reference across paths."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mqa_topk_cli import verify as verify_mod
from mqa_topk_cli.errors import UsageError
from mqa_topk_cli.paths import PATHS, PathImpl, available_paths, get_path
from mqa_topk_cli.reference import assemble_reference_logits, reference_logits, reference_mqa_topk, reference_topk
from mqa_topk_cli.verify import DEFAULT_TOL_REL, SENTINEL, VerifyResult, verify_case, verify_many
from mqa_topk_cli.workloads import Workload, make_workload

# --------------------------------------------------------------------------- workloads


@pytest.fixture
def gauss(make):
    return make(layout="causal", rows=13, keys=700, topk=512, dist="gaussian", seed=0)


@pytest.fixture
def ties(make):
    return make(layout="causal", rows=8, keys=2000, topk=512, dist="ties", seed=1)


@pytest.fixture
def short(make):
    return make(layout="full", rows=16, keys=1200, topk=512, dist="short_rows", seed=2)


@pytest.fixture
def ragged(make):
    return make(layout="ragged", rows=20, keys=3000, topk=512, dist="gaussian", seed=3, requests=3,
                unaligned_starts=True)


@pytest.fixture(scope="module")
def separated():
    """Distinct logits with a wide gap at the k-th value (non-tie data where
    the (k+1)-th is measurably worse than the k-th): all keys share one k row;
    scales are 2 + s/4096 for the 512 highest keys and 1 + s/4096 below."""
    rows, keys, topk = 4, 700, 512
    g = torch.Generator().manual_seed(0)
    t = (torch.randint(0, 2, (128,), generator=g) * 2 - 1).float()
    q = ((0.5 + torch.rand(rows, 32, 1, generator=g)) * t).to(torch.float8_e4m3fn)
    k = t.expand(keys, 128).contiguous().to(torch.float8_e4m3fn)
    s = torch.arange(keys, dtype=torch.float32)
    scales = torch.where(s >= keys - topk, 2.0, 1.0) + s / 4096
    weights = torch.rand(rows, 32, generator=g) / 32 + 1 / 64
    starts = torch.zeros(rows, dtype=torch.int32)
    ends = torch.full((rows,), keys, dtype=torch.int32)
    w = Workload(q, k, scales, weights, starts, ends, topk, name="separated")
    w.validate()
    return w


# --------------------------------------------------------------------------- wrong paths

class Wrapped(PathImpl):
    """The reference output, then ``corrupt(w, out)``: a known-wrong path."""

    name = "wrong"
    deterministic_ties = False
    expose_logits = False

    def __init__(self):
        self._cache = {}
        self.calls = 0

    def ref(self, w):
        key = id(w)
        if key not in self._cache:
            self._cache[key] = (w, reference_mqa_topk(w))
        return self._cache[key][1]

    def run(self, w, output):
        self.calls += 1
        output.copy_(self.ref(w))
        self.corrupt(w, output)

    def corrupt(self, w, out):
        pass

    def logits(self, w):
        return assemble_reference_logits(w) if self.expose_logits else None


def _first_full_row(w) -> int:
    n = (w.ends - w.starts).tolist()
    return next(r for r, x in enumerate(n) if x > w.topk)


class DropsIndex(Wrapped):
    def corrupt(self, w, out):
        out[_first_full_row(w), 5] = -1


class DuplicatesIndex(Wrapped):
    def corrupt(self, w, out):
        r = _first_full_row(w)
        out[r, 1] = out[r, 0]


class AbsoluteIndices(Wrapped):
    def corrupt(self, w, out):
        out.copy_(torch.where(out >= 0, out + w.starts[:, None], out))


class IgnoresEnds(Wrapped):
    """Top-k over [start, keys) instead of [start, end)."""

    def run(self, w, output):
        ends = torch.full_like(w.ends, w.keys)
        logits = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, ends)
        output.copy_(reference_topk(logits, w.starts, ends, w.topk))


class ZeroPadding(Wrapped):
    def corrupt(self, w, out):
        out[out == -1] = 0


class NoWrite(Wrapped):
    def run(self, w, output):
        pass


class HalfWrite(Wrapped):
    def run(self, w, output):
        output[: w.rows // 2].copy_(self.ref(w)[: w.rows // 2])


class RandomTies(Wrapped):
    """The right values, but ties at the k-th value taken at random."""

    deterministic_ties = True

    def corrupt(self, w, out):
        logits = assemble_reference_logits(w)
        g = torch.Generator().manual_seed(self.calls)
        for r in range(w.rows):
            s, e = int(w.starts[r]), int(w.ends[r])
            row = logits[r, s:e]
            if row.numel() <= w.topk:
                continue
            kth = row.topk(w.topk).values[-1]
            above = torch.nonzero(row > kth).flatten()
            tied = torch.nonzero(row == kth).flatten()
            pick = tied[torch.randperm(tied.numel(), generator=g)[: w.topk - above.numel()]]
            out[r] = torch.cat([above, pick]).to(torch.int32)


class RandomTiesWithLogits(RandomTies):
    expose_logits = True


class NextInsteadOfKth(Wrapped):
    """Picks the (k+1)-th key instead of the k-th in every row with n > k."""

    def corrupt(self, w, out):
        logits = assemble_reference_logits(w)
        longer = reference_topk(logits, w.starts, w.ends, 2048)
        for r in range(w.rows):
            if int(w.ends[r] - w.starts[r]) > w.topk:
                out[r, w.topk - 1] = longer[r, w.topk]


class NextInsteadOfKthWithLogits(NextInsteadOfKth):
    deterministic_ties = True
    expose_logits = True


class LowestInsteadOfKth(Wrapped):
    """Picks the row's lowest-valued key instead of its k-th."""

    def corrupt(self, w, out):
        logits = assemble_reference_logits(w)
        for r in range(w.rows):
            s, e = int(w.starts[r]), int(w.ends[r])
            if e - s > w.topk:
                out[r, w.topk - 1] = int(torch.argmin(logits[r, s:e]))


class ShufflesOrder(Wrapped):
    """The right set, in a different order on every run."""

    def corrupt(self, w, out):
        g = torch.Generator().manual_seed(self.calls)
        perm = torch.argsort(torch.rand(out.shape, generator=g), dim=1)
        out.copy_(out.gather(1, perm))


class MutatesWeights(Wrapped):
    def corrupt(self, w, out):
        w.weights[0, 0] += 1.0


class MutatesQ(Wrapped):
    def corrupt(self, w, out):
        w.q.view(torch.uint8)[0, 0, 0] ^= 1


class Raises(Wrapped):
    def run(self, w, output):
        raise RuntimeError("kernel exploded")


def _clone(w):
    return dataclasses.replace(w, **{f: t.clone() for f, t in w.tensors().items()})


def _rejects(w, path, *needles, **kw) -> VerifyResult:
    r = verify_case(w, path, **kw)
    assert not r.passed, r
    assert r.errors, r
    text = " | ".join(r.errors)
    for n in needles:
        assert n in text, text
    return r


# --------------------------------------------------------------------------- accepts

@pytest.mark.parametrize("path", ["reference", "torch"])
@pytest.mark.parametrize("fixture", ["gauss", "ties", "short", "ragged"])
def test_accepts_correct_paths(path, fixture, request):
    w = request.getfixturevalue(fixture)
    r = verify_case(w, path, reruns=1)
    assert r.passed, r.errors
    assert r.status == "ok" and r.valid_rows == w.rows and r.invalid_rows == 0
    assert r.tie_equivalent_rows == w.rows and r.deterministic and r.inputs_unchanged
    assert 0.0 <= r.max_violation <= 1.0
    assert r.tie_rule == ("own logits" if path == "reference" else "not claimed")
    assert r.runs == 2


@pytest.mark.parametrize("kw", [
    dict(layout="causal", rows=1, keys=1, topk=512, dist="gaussian"),
    dict(layout="full", rows=5, keys=17, topk=2048, dist="zero_weights"),
    dict(layout="causal", rows=9, keys=900, topk=512, dist="relu_saturated"),
    dict(layout="causal", rows=9, keys=900, topk=512, dist="negative_weights"),
    dict(layout="ragged", rows=9, keys=1500, topk=1024, dist="dsa", requests=2),
    dict(layout="full", rows=6, keys=1100, topk=512, dist="ties", tie_mode="whole"),
    dict(layout="causal", rows=6, keys=1000, topk=512, dist="rising"),
])
def test_accepts_reference_and_torch_on_edge_workloads(make, kw):
    w = make(seed=4, **kw)
    for r in verify_many([w], ["reference", "torch"], reruns=1):
        assert r.passed, (r.path, r.errors)


def _independent_rate_and_bitwise(w):
    """(exact-set rate, bitwise-logits flag) of torch vs reference, counted here."""
    out = torch.empty((w.rows, w.topk), dtype=torch.int32)
    get_path("torch").run(w, out)
    ref = reference_mqa_topk(w)
    rate = float((torch.sort(out, 1).values == torch.sort(ref, 1).values).all(1).sum()) / w.rows
    col = torch.arange(w.keys)
    inside = (col >= w.starts[:, None]) & (col < w.ends[:, None])
    tl = get_path("torch").logits(w)
    return rate, None if tl is None else bool(torch.equal(tl[inside], assemble_reference_logits(w)[inside]))


def test_exact_set_diagnostic_and_bitwise_logits(gauss, ties):
    """Bug class: a diagnostic rate or bitwise flag not computed from the paths' outputs."""
    r = verify_case(gauss, "torch", other="reference", reruns=0)
    assert r.passed and r.other == "reference" and r.exact_set_rate == 1.0
    assert (r.exact_set_rate, r.bitwise_logits) == _independent_rate_and_bitwise(gauss)
    assert "determinism not checked (reruns=0)" in r.notes
    # torch.topk takes ties in no particular order: allowed, but the sets differ
    t = verify_case(ties, "torch", other="reference", reruns=0)
    want = _independent_rate_and_bitwise(ties)
    assert t.passed and (t.exact_set_rate, t.bitwise_logits) == want and want[0] < 1.0
    assert verify_case(gauss, "reference").exact_set_rate is None


def test_unavailable_path_is_labelled(gauss):
    if torch.cuda.is_available():
        pytest.skip("CPU-only check")
    r = verify_case(gauss, "native")
    assert not r.passed and r.status.startswith("unavailable") and "CUDA" in r.errors[0]
    assert "native" not in available_paths("cpu") and {"reference", "torch"} <= set(available_paths("cpu"))
    assert "fused" in PATHS and get_path("fused").unavailable_reason("cpu")


def test_get_path_lists_valid_names():
    with pytest.raises(UsageError, match="valid paths: reference, torch, native, fused"):
        get_path("cublas")
    assert get_path(PATHS["torch"]) is PATHS["torch"]


# --------------------------------------------------------------------------- rejects

def test_rejects_dropped_index(gauss):
    r = _rejects(gauss, DropsIndex(), "511 valid entries, expected min(topk, n) = 512")
    assert r.invalid_rows == 1 and r.valid_rows == gauss.rows - 1


def test_rejects_duplicate_index(gauss):
    r = _rejects(gauss, DuplicatesIndex(), "appears more than once")
    assert r.invalid_rows == 1


def test_rejects_absolute_indices(ragged):
    r = _rejects(ragged, AbsoluteIndices(), "outside [0, n=")
    assert r.invalid_rows > 0


def test_rejects_ignoring_ends(gauss):
    r = _rejects(gauss, IgnoresEnds(), "outside [0, n=")
    assert r.invalid_rows > 0


def test_rejects_zero_padding(short):
    r = _rejects(short, ZeroPadding())
    assert r.invalid_rows >= 4  # the n=0, n=1, n=k-1 and random short rows


def test_rejects_unwritten_output(gauss):
    r = _rejects(gauss, NoWrite(), f"poison value {SENTINEL}")
    assert r.invalid_rows == gauss.rows
    h = _rejects(gauss, HalfWrite(), "never written")
    assert h.invalid_rows == gauss.rows - gauss.rows // 2


def test_rejects_random_ties_without_logits(ties):
    r = _rejects(ties, RandomTies(), "tie rule violated", "bitwise duplicate")
    # values are right, so only the tie layer catches it
    assert r.invalid_rows == 0 and r.tie_equivalent_rows == ties.rows and r.tie_rule == "duplicate keys"
    assert r.tie_rule_violations > 0


def test_rejects_random_ties_with_own_logits(ties):
    r = _rejects(ties, RandomTiesWithLogits(), "not the exact top-k of the path's own logits",
                 "the lower index must win")
    assert r.invalid_rows == 0 and r.tie_rule == "own logits"


def test_random_ties_are_allowed_when_the_path_does_not_claim_the_rule(ties):
    class Unclaimed(RandomTies):
        deterministic_ties = False

    r = verify_case(ties, Unclaimed(), reruns=0)
    assert r.passed and r.tie_rule == "not claimed"


def test_paths_with_equal_logits_must_agree_exactly(ties):
    r = _rejects(ties, RandomTiesWithLogits(), "although both paths' logits are bitwise equal",
                 other="reference", reruns=0)
    assert r.bitwise_logits is True and r.exact_set_rate < 1.0


def test_rejects_next_instead_of_kth_on_separated_values(separated):
    r = _rejects(separated, NextInsteadOfKth(), "not the top-k")
    assert r.invalid_rows == 0 and r.tie_equivalent_rows == 0 and r.max_violation > 10
    # the violation is reported in units of the tolerance
    loose = verify_case(separated, NextInsteadOfKth(), tol_rel=DEFAULT_TOL_REL * 4)
    assert loose.max_violation == pytest.approx(r.max_violation / 4, rel=1e-6)


def test_rejects_next_instead_of_kth_by_own_logits(gauss):
    r = _rejects(gauss, NextInsteadOfKthWithLogits(), "a smaller logit was chosen")
    assert r.tie_rule_violations > 0


def test_rejects_a_clearly_wrong_value_on_gaussian_data(gauss):
    r = _rejects(gauss, LowestInsteadOfKth(), "not the top-k")
    assert r.max_violation > 1


def test_rejects_nondeterministic_order(gauss):
    r = _rejects(gauss, ShufflesOrder(), "not deterministic: run 1 differs from run 0")
    assert not r.deterministic and r.invalid_rows == 0 and r.tie_equivalent_rows == gauss.rows


@pytest.mark.parametrize("cls,field", [(MutatesWeights, "weights"), (MutatesQ, "q")])
def test_rejects_input_mutation(gauss, cls, field):
    w = _clone(gauss)
    r = _rejects(w, cls(), "inputs modified by the path", field)
    assert not r.inputs_unchanged


def test_a_raising_path_is_a_labelled_failure(gauss):
    r = _rejects(gauss, Raises(), "kernel exploded")
    assert r.status.startswith("error")


def _overflowing():
    """Logits that overflow fp32 (SPEC inputs are finite; the sums are not):
    every key shares one k row and every q head is a positive multiple of it
    (all dots > 0); keys 10 and 600 have the scale 3e38, so their fp32
    reference logit is +inf in rows with positive weights and -inf in row 2,
    whose weights are negative. Row 0 sees every key (both +inf keys are in
    its top-512), row 1 keys [0, 600) (only key 10 is +inf), row 2 keys
    [5, 25) (n = 20 <= topk: all 20, -inf key 10 included, must be chosen)."""
    rows, keys, topk = 3, 700, 512
    g = torch.Generator().manual_seed(7)
    t = (torch.randint(0, 2, (128,), generator=g) * 2 - 1).float()
    q = ((0.5 + torch.rand(rows, 32, 1, generator=g)) * t).to(torch.float8_e4m3fn)
    k = t.expand(keys, 128).contiguous().to(torch.float8_e4m3fn)
    scales = 1 + torch.arange(keys, dtype=torch.float32) / 4096
    scales[[10, 600]] = 3e38
    weights = torch.rand(rows, 32, generator=g) / 32 + 1 / 64
    weights[2] = -weights[2]
    starts = torch.tensor([0, 0, 5], dtype=torch.int32)
    ends = torch.tensor([700, 600, 25], dtype=torch.int32)
    w = Workload(q, k, scales, weights, starts, ends, topk, name="overflow")
    w.validate()
    return w


class MissesInfKey(Wrapped):
    """Row 0 swaps its +inf key 600 for the best key outside its top-512."""

    def corrupt(self, w, out):
        logits = assemble_reference_logits(w)
        nxt = int(reference_topk(logits, w.starts, w.ends, 1024)[0, w.topk])
        row = out[0].tolist()
        out[0, row.index(600)] = nxt


def test_infinite_reference_logits_are_compared_as_values():
    """Bug class: layer 2 subtracting equal infinities (inf - inf = NaN, read
    as an infinite violation) rejected a correct selection whose chosen keys
    have an infinite reference logit, while a selection that misses an
    infinite key must still be rejected with an infinite violation."""
    w = _overflowing()
    rl = assemble_reference_logits(w)
    assert rl[0, 10] == rl[0, 600] == rl[1, 10] == float("inf") and rl[2, 10] == float("-inf")
    ref = reference_mqa_topk(w)
    assert {10, 600} <= set(ref[0].tolist()) and 10 in ref[1].tolist() and 600 not in ref[1].tolist()
    assert sorted(ref[2].tolist()[:20]) == list(range(20)) and 5 in ref[2].tolist()  # key 10 = index 5
    for path in ("reference", Wrapped()):
        r = verify_case(w, path, reruns=1)
        assert r.passed, r.errors
        assert r.tie_equivalent_rows == w.rows and r.max_violation == 0.0
    bad = _rejects(w, MissesInfKey(), "row 0: not the top-k: sorted position 1", "|diff| = inf")
    assert bad.invalid_rows == 0 and bad.tie_equivalent_rows == w.rows - 1
    assert bad.max_violation == float("inf")


def test_default_tolerance_is_the_documented_constant():
    assert DEFAULT_TOL_REL == 2.0 ** -12
    with pytest.raises(ValueError, match="tol_rel"):
        verify_case(make_workload("causal", rows=1, keys=1, topk=512), "reference", tol_rel=0.0)


# --------------------------------------------------------------------------- shared reference

def test_verify_many_computes_the_reference_once(gauss, monkeypatch):
    calls = []
    real = verify_mod.reference_logits

    def counting(*a, **kw):
        calls.append(kw.get("rows"))
        return real(*a, **kw)

    monkeypatch.setattr(verify_mod, "reference_logits", counting)
    res = verify_many([gauss], ["reference", "torch"], reruns=0)
    assert [r.path for r in res] == ["reference", "torch"] and all(r.passed for r in res)
    assert len(calls) == 1  # one chunk, shared by both paths
    assert res[0].other == "torch" and res[1].other == "reference"
    assert res[0].exact_set_rate == 1.0 and res[1].exact_set_rate == 1.0
    calls.clear()
    cache = {}
    verify_case(gauss, "torch", reruns=0, ref_cache=cache)
    verify_case(gauss, "reference", reruns=0, ref_cache=cache)
    assert len(calls) == 1


def test_verify_many_builds_cases_and_reports_progress():
    seen = []
    case = {"name": "c", "layout": "full", "rows": 3, "keys": 600, "topk": 512, "dist": "gaussian", "seed": 1}
    res = verify_many([case], ["torch"], on_result=seen.append)
    assert len(res) == 1 and res[0].case == "c" and res[0].passed and seen == res


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("kw", [
    dict(layout="causal", rows=67, keys=5001, topk=512, dist="gaussian"),
    dict(layout="causal", rows=64, keys=4096, topk=2048, dist="ties"),
    dict(layout="full", rows=40, keys=3000, topk=1024, dist="short_rows"),
    dict(layout="ragged", rows=100, keys=9001, topk=2048, dist="dsa", unaligned_starts=True),
])
@pytest.mark.parametrize("heads", [16, 32, 64])
def test_gpu_torch_path_vs_reference(kw, heads):
    w = make_workload(device="cuda", seed=0, heads=heads, **kw)
    r = verify_case(w, "torch", other="reference")
    assert r.passed, r.errors


def _native_or_skip():
    reason = get_path("native").unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [
    dict(layout="causal", rows=67, keys=5001, topk=512, dist="gaussian"),
    dict(layout="causal", rows=64, keys=4096, topk=2048, dist="ties"),
    dict(layout="full", rows=40, keys=3000, topk=1024, dist="short_rows"),
    dict(layout="ragged", rows=100, keys=9001, topk=2048, dist="zero_weights", unaligned_starts=True),
])
@pytest.mark.parametrize("heads", [16, 32, 64])
def test_gpu_native_path_verifies(kw, heads):
    _native_or_skip()
    w = make_workload(device="cuda", seed=1, heads=heads, **kw)
    r = verify_case(w, "native", other="torch")
    assert r.passed, r.errors
    assert r.tie_rule == "own logits"


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [16, 32, 64])
def test_gpu_native_logits_within_tolerance_and_bitwise_stable(heads):
    """The dense logits at H heads against the float64 reference over all H
    heads (a kernel that drops heads is off by far more than the tolerance)."""
    _native_or_skip()
    from mqa_topk_cli import ops

    w = make_workload("ragged", rows=77, keys=6007, topk=512, dist="dsa", seed=2, device="cuda", unaligned_starts=True,
                      heads=heads)
    a = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    b = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    ref = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision="fp64")
    col = torch.arange(w.keys, device="cuda")
    inside = (col >= w.starts[:, None]) & (col < w.ends[:, None])
    assert torch.equal(a[inside], b[inside])
    bound = verify_mod.magnitude_bound(w, 0, w.rows, 0, w.keys, verify_mod._key_norms(w))
    err = torch.where(inside, (a.double() - ref).abs(), torch.zeros((), dtype=torch.float64, device="cuda"))
    assert bool((err.amax(1) <= DEFAULT_TOL_REL * bound).all())


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [
    dict(layout="ragged", rows=77, keys=6007, unaligned_starts=True),
    dict(layout="causal", rows=1029, keys=3001),
    dict(layout="full", rows=13, keys=130),
])
@pytest.mark.parametrize("heads", [16, 32, 64])
def test_gpu_native_logits_write_only_their_contract_region(kw, heads):
    """The dense logits kernel's output contract on a poisoned buffer whose row
    pitch runs 8 columns past the keys: inside each row's [start, end) the
    logit (bitwise ops.mqa_logits'), in the rest of its 8-row block's span
    [min start rounded down to 16, max end) -inf, and no column at or past
    `keys` written (direct stores must clip exactly where the TMA store did)."""
    _native_or_skip()
    from mqa_topk_cli import ops

    w = make_workload(topk=512, dist="gaussian", seed=4, device="cuda", heads=heads, **kw)
    pitch = -(-(w.keys + 8) // 4) * 4
    out = torch.full((w.rows, pitch), float("nan"), device="cuda")
    ops._native().mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
    torch.cuda.synchronize()
    assert torch.isnan(out[:, w.keys:]).all(), "a column at or past keys was written"
    col = torch.arange(w.keys, device="cuda")
    s, e = w.starts.long(), w.ends.long()
    inside = (col >= s[:, None]) & (col < e[:, None])
    ref = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    assert torch.equal(out[:, :w.keys][inside], ref[inside])
    assert torch.isfinite(out[:, :w.keys][inside]).all()
    # The block span: rows of a block with an empty range do not widen it.
    nb = -(-w.rows // 8)
    pad = nb * 8 - w.rows
    se = torch.cat([s, torch.zeros(pad, dtype=torch.long, device="cuda")]).view(nb, 8)
    ee = torch.cat([e, torch.zeros(pad, dtype=torch.long, device="cuda")]).view(nb, 8)
    nonempty = ee > se
    big = torch.iinfo(torch.long).max
    lo = torch.where(nonempty, se, torch.full_like(se, big)).amin(1)
    hi = torch.where(nonempty, ee, torch.zeros_like(ee)).amax(1)
    lo = torch.where(lo == big, torch.zeros_like(lo), (lo // 16) * 16)
    lo_r, hi_r = lo.repeat_interleave(8)[:w.rows], hi.repeat_interleave(8)[:w.rows]
    span = (col >= lo_r[:, None]) & (col < hi_r[:, None]) & ~inside
    got = out[:, :w.keys][span]
    assert bool((got == float("-inf")).all()), f"{int((got != float('-inf')).sum())} span entries are not -inf"


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [16, 32, 64])
def test_gpu_fused_matches_native_when_built(heads):
    reason = get_path("fused").unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)
    w = make_workload("causal", rows=64, keys=8192, topk=2048, dist="ties", seed=3, device="cuda", heads=heads)
    r = verify_case(w, "fused", other="native")
    assert r.passed, r.errors
