"""verify.py at its edges: the validity layer's boundaries (padding values,
index n, counts), the tolerance of layer 2 pinned to its formula and to
``viol <= 1`` exactly, the exact-set diagnostic's rate, and the bitwise-logits
flag. Every expected value is computed here independently of verify.py
(from the reference's logits and a float64 magnitude bound written out below).
Each test's docstring names the bug class it guards against."""
from __future__ import annotations

import math

import pytest
import torch

from mqa_topk_cli.paths import PathImpl, get_path
from mqa_topk_cli.reference import assemble_reference_logits, reference_mqa_topk
from mqa_topk_cli.verify import DEFAULT_TOL_REL, SENTINEL, verify_case, verify_many
from mqa_topk_cli.workloads import Workload, make_workload


class Edit(PathImpl):
    """The reference output, then ``edit(w, out)`` (a known-wrong path); it
    claims the tie rule and exposes the reference logits when told to."""

    name = "edit"

    def __init__(self, edit, ties=False, logits=False):
        self.edit = edit
        self.deterministic_ties = ties
        self.expose = logits
        self.ref = {}

    def run(self, w, output):
        if id(w) not in self.ref:
            self.ref[id(w)] = (w, reference_mqa_topk(w))
        output.copy_(self.ref[id(w)][1])
        self.edit(w, output)

    def logits(self, w):
        return assemble_reference_logits(w) if self.expose else None


@pytest.fixture(scope="module")
def short():
    """Rows of n = 0, 1, k-1, k, k+1 and random lengths (unaligned starts)."""
    return make_workload("full", rows=16, keys=1200, topk=512, dist="short_rows", seed=2)


def _n(w):
    return (w.ends - w.starts).tolist()


def _row_with(w, pred):
    return next(r for r, n in enumerate(_n(w)) if pred(n))


# --------------------------------------------------------------------------- layer 1: validity

@pytest.mark.parametrize("pad", [-2, -3, -(2**31)])
def test_padding_with_a_negative_value_other_than_minus_one_is_invalid(short, pad):
    """Bug class: the validity check treating every negative entry as padding."""
    def edit(w, out):
        out[out == -1] = pad

    r = verify_case(short, Edit(edit), reruns=0)
    short_rows = sum(1 for n in _n(short) if n < short.topk)
    assert not r.passed and r.invalid_rows == short_rows and r.valid_rows == short.rows - short_rows
    assert f"index {pad} outside [0, n=" in " | ".join(r.errors)


def test_padding_with_minus_one_in_any_position_is_valid(short):
    """Bug class: requiring the -1 padding at the end (the output is unordered)."""
    def edit(w, out):
        out.copy_(torch.flip(out, [1]))

    r = verify_case(short, Edit(edit), reruns=0)
    assert r.passed and r.invalid_rows == 0, r.errors


def test_index_n_is_invalid_and_n_minus_1_is_valid(short):
    """Bug class: an off-by-one in the range check (``<= n`` instead of ``< n``):
    a row of n < k keys outputs 0..n-1; putting n in place of n-1 must make the row invalid."""
    r0 = _row_with(short, lambda n: 2 <= n < short.topk)
    n0 = _n(short)[r0]

    def edit(w, out):
        row = out[r0]
        row[row == n0 - 1] = n0

    ok = verify_case(short, "reference", reruns=0)
    assert ok.passed and bool((reference_mqa_topk(short)[r0] == n0 - 1).any())  # n-1 is chosen and valid
    r = verify_case(short, Edit(edit), reruns=0)
    assert not r.passed and r.invalid_rows == 1
    assert r.errors[0] == f"row {r0}: invalid: index {n0} outside [0, n={n0})"


def test_index_0_is_valid_and_minus_one_relative_is_invalid(short):
    """Bug class: ``> 0`` instead of ``>= 0`` (index 0 is the row's first key)."""
    r0 = _row_with(short, lambda n: n == 1)
    assert reference_mqa_topk(short)[r0].tolist() == [0] + [-1] * (short.topk - 1)

    def edit(w, out):
        out[r0, 1] = -5

    r = verify_case(short, Edit(edit), reruns=0)
    assert r.invalid_rows == 1 and f"row {r0}: invalid: index -5 outside [0, n=1)" in r.errors


@pytest.mark.parametrize("which", ["k-1", "k", "k+1"])
def test_one_entry_too_few_is_invalid(short, which):
    """Bug class: a count check off by one (rows of n = k-1, k, k+1: each must
    hold exactly min(k, n) entries; one -1 too many is a dropped index)."""
    k = short.topk
    n0 = {"k-1": k - 1, "k": k, "k+1": k + 1}[which]
    r0 = _row_with(short, lambda n: n == n0)

    def edit(w, out):
        out[r0, 3] = -1

    r = verify_case(short, Edit(edit), reruns=0)
    need = min(k, n0)
    assert r.invalid_rows == 1 and r.errors[0] == (
        f"row {r0}: invalid: {need - 1} valid entries, expected min(topk, n) = {need} (n={n0}); the rest must be -1")


def test_a_duplicate_in_a_padding_slot_is_invalid(short):
    """Bug class: a duplicate check that skips the padding slots (a row of n < k
    with every key chosen has no in-range value left but a repeat)."""
    r0 = _row_with(short, lambda n: 2 <= n < short.topk)

    def edit(w, out):
        out[r0][out[r0] == -1] = 1

    r = verify_case(short, Edit(edit), reruns=0)
    assert r.invalid_rows == 1 and r.errors[0] == f"row {r0}: invalid: index 1 appears more than once"


def test_sentinel_left_in_one_entry_is_invalid(short):
    """Bug class: a poison check that only looks at whole rows."""
    r0 = _row_with(short, lambda n: n > short.topk)

    def edit(w, out):
        out[r0, 7] = SENTINEL

    r = verify_case(short, Edit(edit), reruns=0)
    assert r.invalid_rows == 1 and r.errors[0] == (f"row {r0}: invalid: entry 7 still holds the poison value "
                                                   f"{SENTINEL} (never written)")


# --------------------------------------------------------------------------- layer 2: the tolerance

@pytest.fixture(scope="module")
def separated():
    """All keys share one k row, so logit(s) = scales[s] * c_r with c_r > 0:
    distinct values, the k-th and (k+1)-th apart by a known amount."""
    rows, keys, topk = 3, 700, 512
    g = torch.Generator().manual_seed(5)
    t = (torch.randint(0, 2, (128,), generator=g) * 2 - 1).float()
    q = ((0.5 + torch.rand(rows, 32, 1, generator=g)) * t).to(torch.float8_e4m3fn)
    k = t.expand(keys, 128).contiguous().to(torch.float8_e4m3fn)
    s = torch.arange(keys, dtype=torch.float32)
    scales = 1.0 + s / 256  # rising: the top-k are the last 512 keys, neighbours ~4 tolerances apart
    weights = torch.rand(rows, 32, generator=g) / 32 + 1 / 64
    w = Workload(q, k, scales, weights, torch.zeros(rows, dtype=torch.int32),
                 torch.full((rows,), keys, dtype=torch.int32), topk, name="separated")
    w.validate()
    return w


def _magnitude_bound(w) -> list[float]:
    """M_r = max_s scales[s] ||k_s|| * sum_h |w_rh| ||q_rh|| over the row's keys, in Python float64."""
    q = w.q.double()
    k = w.k.double()
    out = []
    for r in range(w.rows):
        a = sum(abs(float(w.weights[r, h])) * float(q[r, h].norm()) for h in range(32))
        s, e = int(w.starts[r]), int(w.ends[r])
        kmax = max(float(w.scales[j]) * float(k[j].norm()) for j in range(s, e)) if e > s else 0.0
        out.append(a * kmax)
    return out


class KPlusOne(Edit):
    """Chooses key start + (n - k - 1) (the (k+1)-th) instead of start + (n - k) (the k-th)."""

    def __init__(self):
        def edit(w, out):
            for r in range(w.rows):
                n = int(w.ends[r] - w.starts[r])
                out[r][out[r] == n - w.topk] = n - w.topk - 1
        super().__init__(edit)


def test_max_violation_is_the_diff_over_tol_rel_times_the_magnitude_bound(separated):
    """Bug class: a tolerance scaled by a constant (10x looser passes wrong
    kernels), computed from the wrong bound, or the violation not in units of it."""
    w = separated
    logits = assemble_reference_logits(w).double()
    bound = _magnitude_bound(w)
    want = max(float(logits[r, 700 - 512] - logits[r, 700 - 513]) / (DEFAULT_TOL_REL * bound[r])
               for r in range(w.rows))
    assert 2 < want < 50  # the workload puts the wrong key a few tolerances away
    r = verify_case(w, KPlusOne(), reruns=0)
    assert r.max_violation == pytest.approx(want, rel=1e-6)
    assert not r.passed and r.tie_equivalent_rows == 0 and r.invalid_rows == 0
    # the same path passes under a tolerance just above its violation, and fails just below
    assert verify_case(w, KPlusOne(), reruns=0, tol_rel=DEFAULT_TOL_REL * want * (1 + 1e-6)).passed
    tight = verify_case(w, KPlusOne(), reruns=0, tol_rel=DEFAULT_TOL_REL * want * (1 - 1e-6))
    assert not tight.passed and tight.tie_equivalent_rows == w.rows - 1


def test_a_violation_of_exactly_one_tolerance_passes():
    """Bug class: ``viol < 1`` instead of ``viol <= 1`` (the bound is inclusive).
    Every quantity is exact in binary: q and k have one non-zero channel, so
    the logit of key s is k[s, 0] (weights 1/32, scales 1) and M_r = 4 * 1 = 4;
    keys 0..187 hold 3.75 and keys 188..699 hold 4.0 (both exact in fp8).
    Choosing key 187 instead of 188 puts 3.75 where the reference's k-th value
    is 4.0: |diff| = 1/4, and with tol_rel = 1/16 (the largest the tool
    accepts) the tolerance is 4/16 = 1/4: a violation of exactly 1."""
    rows, keys, topk = 2, 700, 512
    q = torch.zeros(rows, 32, 128)
    q[:, :, 0] = 1.0
    k = torch.zeros(keys, 128)
    k[:, 0] = torch.where(torch.arange(keys) >= keys - topk, 4.0, 3.75)
    w = Workload(q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn), torch.ones(keys), torch.full((rows, 32), 1 / 32),
                 torch.zeros(rows, dtype=torch.int32), torch.full((rows,), keys, dtype=torch.int32), topk, name="exact")
    w.validate()
    at = verify_case(w, KPlusOne(), reruns=0, tol_rel=1 / 16)
    assert at.max_violation == 1.0 and at.passed and at.tie_equivalent_rows == rows
    past = verify_case(w, KPlusOne(), reruns=0, tol_rel=math.nextafter(1 / 16, 0.0))
    assert past.max_violation > 1.0 and not past.passed and past.tie_equivalent_rows == 0
    assert verify_case(w, KPlusOne(), reruns=0, tol_rel=1 / 32).max_violation == 2.0
    assert verify_case(w, KPlusOne(), reruns=0).max_violation == 0.25 / (DEFAULT_TOL_REL * 4.0)


def test_rows_whose_bound_is_zero_need_exact_values():
    """Bug class: a zero tolerance (all weights zero: M_r = 0) treated as
    "anything goes" or dividing by zero; equal values there pass."""
    w = make_workload("full", rows=3, keys=600, topk=512, dist="zero_weights", seed=0)
    r = verify_case(w, "reference", reruns=0)
    assert r.passed and r.max_violation == 0.0


# --------------------------------------------------------------------------- layer 4: the exact-set diagnostic

def test_exact_set_rate_is_the_fraction_of_rows_with_equal_sets():
    """Bug class: a rate computed over the wrong count (rows, entries, or
    inverted); pinned exactly: 3 of 8 rows take a different tied key."""
    w = make_workload("causal", rows=8, keys=2000, topk=512, dist="ties", seed=1)
    logits = assemble_reference_logits(w)
    ref = reference_mqa_topk(w)
    swaps = {}
    for r in (1, 4, 6):
        row = logits[r, : int(w.ends[r])]
        kth = row[ref[r, -1].long()]
        tied = torch.nonzero(row == kth).flatten().tolist()
        chosen = set(ref[r].tolist())
        swaps[r] = (max(set(tied) & chosen), min(set(tied) - chosen))  # a chosen tie for an unchosen one

    def edit(w, out):
        for r, (a, b) in swaps.items():
            out[r][out[r] == a] = b

    res = verify_many([w], [Edit(edit), "reference"], reruns=0)
    assert res[0].exact_set_rate == 1 - 3 / 8 and res[1].exact_set_rate == 1 - 3 / 8
    assert res[0].passed  # the edit does not claim the tie rule: values are right
    claimed = verify_case(w, Edit(edit, ties=True, logits=True), other="reference", reruns=0)
    assert claimed.exact_set_rate == 1 - 3 / 8 and claimed.bitwise_logits is True
    assert not claimed.passed and "in 3 rows (first: 1, 4, 6)" in " | ".join(claimed.errors)


def test_torch_vs_reference_rate_and_bitwise_flag_match_an_independent_count():
    """Bug class: an exact-set rate or bitwise-logits flag that is not computed
    from the paths' outputs (asserted only to be in [0, 1] or a bool before)."""
    w = make_workload("causal", rows=8, keys=2000, topk=512, dist="ties", seed=1)
    torch_path = get_path("torch")
    out = torch.empty((w.rows, w.topk), dtype=torch.int32)
    torch_path.run(w, out)
    ref = reference_mqa_topk(w)
    same = (torch.sort(out, 1).values == torch.sort(ref, 1).values).all(1)
    want_rate = float(same.sum()) / w.rows
    assert want_rate < 1.0  # torch.topk takes the ties in its own order here
    tl = torch_path.logits(w)
    rl = assemble_reference_logits(w)
    col = torch.arange(w.keys)
    inside = (col >= w.starts[:, None]) & (col < w.ends[:, None])
    want_bitwise = None if tl is None else bool(torch.equal(tl[inside], rl[inside]))
    r = verify_case(w, "torch", other="reference", reruns=0)
    assert r.passed and r.exact_set_rate == want_rate and r.bitwise_logits is want_bitwise
    assert verify_case(w, "reference", reruns=0).exact_set_rate is None


# --------------------------------------------------------------------------- layer 3 details, NaN, failures

def _tie_swaps(w, rows):
    """Per row: (a chosen key tied at the k-th value, an unchosen one tied with it), relative indices."""
    logits = assemble_reference_logits(w)
    ref = reference_mqa_topk(w)
    out = {}
    for r in rows:
        s, e = int(w.starts[r]), int(w.ends[r])
        row = logits[r, s:e]
        kth = row[ref[r, -1].long()]
        tied = set(torch.nonzero(row == kth).flatten().tolist())
        chosen = set(ref[r].tolist())
        out[r] = (max(tied & chosen), min(tied - chosen))
    return out


def test_tie_rule_violations_add_up_over_row_chunks(monkeypatch):
    """Bug class: a per-chunk counter overwritten instead of accumulated (only
    the last chunk's violations reported)."""
    import mqa_topk_cli.verify as vm

    w = make_workload("causal", rows=8, keys=2000, topk=512, dist="ties", seed=1)
    swaps = _tie_swaps(w, (1, 4, 6))

    def edit(w, out):
        for r, (a, b) in swaps.items():
            out[r][out[r] == a] = b

    whole = verify_case(w, Edit(edit, ties=True, logits=True), reruns=0)
    monkeypatch.setattr(vm, "CHUNK_BYTES", 32 * 2000 * 3)  # 3 rows per chunk: rows 1 | 4 | 6 in three chunks
    chunked = verify_case(w, Edit(edit, ties=True, logits=True), reruns=0)
    for r in (whole, chunked):
        assert r.tie_rule_violations == 3 and not r.passed and r.invalid_rows == 0


def test_tie_message_names_the_keys_and_their_logits_on_rows_not_starting_at_0():
    """Bug class: a diagnostic reading the logit of the wrong key (start offset lost)."""
    w = make_workload("causal", rows=4, keys=2000, topk=512, dist="ties", seed=3, unaligned_starts=True)
    r0 = next(r for r in range(w.rows) if int(w.starts[r]) > 0 and int(w.ends[r] - w.starts[r]) > w.topk)
    (a, b), = _tie_swaps(w, (r0,)).values()
    s = int(w.starts[r0])
    logits = assemble_reference_logits(w)
    kth = float(logits[r0, s + a])

    def edit(w, out):
        out[r0][out[r0] == a] = b

    r = verify_case(w, Edit(edit, ties=True, logits=True), reruns=0)
    assert r.errors == [f"row {r0}: the set is not the exact top-k of the path's own logits: chose {b} "
                        f"(logit {kth:.9g}) over {a} (logit {kth:.9g}); tie: the lower index must win"]


def test_nan_in_one_paths_own_logits_is_not_bitwise_equal():
    """Bug class: treating NaN against a number as equal in the bitwise-logits comparison."""
    w = make_workload("full", rows=3, keys=700, topk=512, seed=0)

    class NanLogits(Edit):
        def logits(self, w):
            lg = assemble_reference_logits(w)
            lg[1, 5] = float("nan")
            return lg

    r = verify_case(w, NanLogits(lambda w, out: None, ties=True), other="reference", reruns=0)
    assert r.bitwise_logits is False and r.passed is False
    assert "the path's own logits hold NaN inside [start, end)" in r.errors


def test_a_failed_result_says_passed_false():
    """Bug class: ``passed`` left as None (falsy but not False) for a path that raised."""
    class Boom(Edit):
        def run(self, w, output):
            raise RuntimeError("boom")

    w = make_workload("full", rows=2, keys=600, topk=512, seed=0)
    r = verify_case(w, Boom(None), reruns=0)
    assert r.passed is False and r.status == "error: RuntimeError: boom"
    ok = verify_case(w, "reference", reruns=0)
    assert ok.passed is True


def test_a_correct_path_claiming_the_tie_rule_without_logits_passes():
    """Bug class: the duplicate-key tie check flagging a correct set (it must
    compare the chosen members of a group with the unchosen ones)."""
    w = make_workload("causal", rows=8, keys=2000, topk=512, dist="ties", seed=1)
    r = verify_case(w, Edit(lambda w, out: None, ties=True), reruns=0)
    assert r.passed and r.tie_rule == "duplicate keys" and r.tie_rule_violations == 0, r.errors


def test_rows_that_see_no_keys_verify():
    """Bug class: a crash (or a false failure) on a chunk whose rows all see no key."""
    w0 = make_workload("full", rows=3, keys=600, topk=512, seed=0)
    w = Workload(w0.q, w0.k, w0.scales, w0.weights, torch.tensor([5, 5, 9], dtype=torch.int32),
                 torch.tensor([5, 5, 9], dtype=torch.int32), 512)
    r = verify_case(w, "reference", reruns=1)
    assert r.passed and r.valid_rows == 3 and r.max_violation == 0.0, r.errors
    bad = verify_case(w, Edit(lambda w, out: out.__setitem__((1, 0), 0)), reruns=0)
    assert bad.invalid_rows == 1 and bad.errors[0] == "row 1: invalid: index 0 outside [0, n=0)"


def test_reference_cache_is_per_workload_and_precision(monkeypatch):
    """Bug class: a reference cache keyed too coarsely (fp32 logits reused for an fp64 check)."""
    import mqa_topk_cli.verify as vm

    w = make_workload("full", rows=3, keys=600, topk=512, seed=0)
    calls = []
    real = vm.reference_logits
    monkeypatch.setattr(vm, "reference_logits", lambda *a, **kw: calls.append(kw["precision"]) or real(*a, **kw))
    cache = {}
    verify_case(w, "torch", reruns=0, ref_cache=cache)
    verify_case(w, "torch", reruns=0, ref_cache=cache)
    assert calls == ["fp32"]
    r = verify_case(w, "torch", reruns=0, ref_cache=cache, precision="fp64")
    assert calls == ["fp32", "fp64"] and r.precision == "fp64" and r.passed
    w2 = make_workload("full", rows=3, keys=600, topk=512, seed=1)
    verify_case(w2, "torch", reruns=0, ref_cache=cache)
    assert calls == ["fp32", "fp64", "fp32"]


def test_status_notes_and_seconds():
    """Bug class: a wrong status label, a note on a run that did rerun, or a negative/huge duration."""
    import time

    from mqa_topk_cli.errors import Unavailable

    class Gone(Edit):
        def run(self, w, output):
            raise Unavailable("no kernel here")

    w = make_workload("full", rows=2, keys=600, topk=512, seed=0)
    r = verify_case(w, Gone(None), reruns=0)
    assert r.status == "unavailable: Unavailable: no kernel here" and r.passed is False
    t0 = time.perf_counter()
    r = verify_case(w, "reference", reruns=1)
    assert r.notes == [] and r.runs == 2 and 0 < r.seconds <= time.perf_counter() - t0
    assert verify_case(w, "reference", reruns=0).notes == ["determinism not checked (reruns=0)"]


def test_smaller_logit_message_reads_the_right_keys_on_offset_rows():
    """Bug class: a diagnostic reading the logit at the wrong column when the
    chunk's key span starts past 0 (distinct values, so any wrong column shows)."""
    w = make_workload("causal", rows=4, keys=1200, topk=512, dist="gaussian", seed=5, unaligned_starts=True)
    logits = assemble_reference_logits(w)
    ref = reference_mqa_topk(w)
    r0 = max(range(w.rows), key=lambda r: int(w.starts[r]))  # the row starting furthest from the chunk's start
    s = int(w.starts[r0])
    order = torch.sort(logits[r0, s:int(w.ends[r0])], descending=True, stable=True).indices
    a, b = int(order[w.topk - 1]), int(order[w.topk])  # the k-th and the (k+1)-th key
    assert set(ref[r0].tolist()) == set(order[:w.topk].tolist())

    def edit(w, out):
        out[r0][out[r0] == a] = b

    r = verify_case(w, Edit(edit, ties=True, logits=True), reruns=0)
    va, vb = float(logits[r0, s + a]), float(logits[r0, s + b])
    assert va > vb
    msg = (f"row {r0}: the set is not the exact top-k of the path's own logits: chose {b} (logit {vb:.9g}) "
           f"over {a} (logit {va:.9g}); a smaller logit was chosen")
    assert msg in r.errors and r.keys == w.keys and r.rows == w.rows and r.topk == w.topk


def test_chunked_evaluation_reports_absolute_rows_and_refills_a_full_cache(monkeypatch):
    """Bug class: row numbers relative to the chunk in messages, or a reference
    cache that, once over its budget, is kept as an empty entry (a later call
    would then check nothing)."""
    import mqa_topk_cli.verify as vm

    w = make_workload("full", rows=20, keys=700, topk=512, dist="gaussian", seed=2)
    order = torch.sort(assemble_reference_logits(w)[4], descending=True, stable=True).indices

    def edit(w, out):
        out[4][out[4] == int(order[511])] = int(order[600])

    # one row per chunk; the cache keeps up to 2 * CHUNK_BYTES of reference logits: 16 of the 20 rows
    monkeypatch.setattr(vm, "CHUNK_BYTES", 32 * 700)
    cache = {}
    for _ in range(2):
        r = verify_case(w, Edit(edit), reruns=0, ref_cache=cache)
        assert not r.passed and r.tie_equivalent_rows == 19 and r.valid_rows == 20
        assert r.errors[0].startswith("row 4: not the top-k: sorted position 511")
    assert cache == {} or all(v["chunks"] for v in cache.values())



def test_duplicate_key_tie_check_on_rows_starting_past_0():
    """Bug class: the duplicate-key check misaligning columns when the chunk's
    key span starts past 0."""
    w = make_workload("causal", rows=4, keys=2000, topk=512, dist="ties", seed=3, unaligned_starts=True)
    assert int(w.starts.min()) > 0
    assert verify_case(w, Edit(lambda w, out: None, ties=True), reruns=0).passed
    (a, b), = _tie_swaps(w, (2,)).values()

    def edit(w, out):
        out[2][out[2] == a] = b

    r = verify_case(w, Edit(edit, ties=True), reruns=0)
    assert r.tie_rule_violations == 1 and r.errors == [
        f"row 2: tie rule violated: chose key {b} but not the lower key {a}, a bitwise duplicate "
        f"(same k row and scale, so equal logits in any implementation)"]


def test_a_pair_of_duplicate_keys_is_a_group():
    """Bug class: duplicate groups of two keys not recognised (only larger ones):
    key 599 is made a copy of the row's k-th key, so it ties with it and must lose."""
    w0 = make_workload("full", rows=1, keys=600, topk=512, dist="gaussian", seed=4)
    logits = assemble_reference_logits(w0)[0, :599]
    kth = int(torch.sort(logits, descending=True, stable=True).indices[511])
    k, scales = w0.k.clone(), w0.scales.clone()
    k[599], scales[599] = k[kth], scales[kth]
    w = Workload(w0.q, k, scales, w0.weights, w0.starts, w0.ends, 512)
    ref = reference_mqa_topk(w)[0].tolist()
    assert kth in ref and 599 not in ref

    def edit(w, out):
        out[0][out[0] == kth] = 599

    r = verify_case(w, Edit(edit, ties=True), reruns=0)
    assert r.tie_rule == "duplicate keys" and r.tie_rule_violations == 1 and not r.passed
    assert f"chose key 599 but not the lower key {kth}" in r.errors[0]



def test_row_problem_counts_several_bad_entries_and_rerun_diffs_count_rows():
    """Bug class: diagnostics that hide how much is wrong (one of several bad
    entries reported as if alone; a rerun diff counted against the wrong run)."""
    w = make_workload("full", rows=3, keys=600, topk=512, seed=0)

    def two_out_of_range(w, out):
        out[1, 0], out[1, 1] = 600, 601

    r = verify_case(w, Edit(two_out_of_range), reruns=0)
    assert r.errors[0] == "row 1: invalid: index 600 outside [0, n=600) (2 such entries)"

    class Shuffles(Edit):
        calls = 0

        def run(self, w, output):
            super().run(w, output)
            Shuffles.calls += 1
            if Shuffles.calls > 1:  # reruns differ from the first run in rows 0 and 2
                output[[0, 2]] = torch.flip(output[[0, 2]], [1])

    r = verify_case(w, Shuffles(lambda w, out: None), reruns=2)
    assert not r.deterministic and "not deterministic: run 1 differs from run 0 in 2 rows (first: 0, 2)" in r.errors


# --------------------------------------------------------------------------- survivor classes of the seed-13 run

def test_a_replaced_input_tensor_is_named():
    """Bug class: a path that swaps a workload tensor for another object (instead
    of writing into it) not reported, or reported without a message."""
    w = make_workload("causal", rows=4, keys=600, topk=512, seed=3)

    def swap(w, out):
        w.weights = w.weights.clone()

    r = verify_case(w, Edit(swap), reruns=0)
    assert not r.passed and not r.inputs_unchanged
    assert "inputs modified by the path: weights (the workload's tensor was replaced)" in r.errors


def test_every_differing_rerun_of_a_path_without_identical_reruns_is_checked():
    """Bug class: the rerun check stopping at the first rerun equal to run 0
    (``break`` for ``continue``), so a later wrong rerun goes unchecked."""
    w = make_workload("causal", rows=4, keys=600, topk=512, seed=3)
    calls = []

    def third_run_drops_an_index(w, out):
        calls.append(1)
        if len(calls) == 3:
            out[0, 3] = -1

    p = Edit(third_run_drops_an_index)
    p.deterministic_output = False
    r = verify_case(w, p, reruns=2)
    assert len(calls) == 3 and not r.passed and r.rerun_failures == 1
    assert any(e.startswith("run 2: row 0: invalid: 511 valid entries") for e in r.errors), r.errors


def test_a_chunk_whose_rows_see_no_keys_is_checked():
    """Bug class: the branch for a row chunk with no visible key (every row
    n = 0, width 0) crashing or accepting a non-empty row."""
    w = make_workload("causal", rows=3, keys=8, topk=512, seed=0)
    w.starts = torch.full((3,), 5, dtype=torch.int32)
    w.ends = w.starts.clone()
    w.validate()
    assert verify_case(w, "reference", reruns=0).passed
    bad = verify_case(w, Edit(lambda w, out: out[1].__setitem__(0, 0)), reruns=0)
    assert not bad.passed and bad.invalid_rows == 1
    assert bad.errors == ["row 1: invalid: index 0 outside [0, n=0)"]


def test_an_unavailable_path_is_not_run():
    """Bug class: a path whose unavailable_reason says it cannot run here is
    run anyway (its result then judged as if it could)."""
    w = make_workload("causal", rows=2, keys=600, topk=512, seed=3)
    calls = []
    p = Edit(lambda w, out: calls.append(1))
    p.unavailable_reason = lambda device: "edit: needs a unicorn"
    r = verify_case(w, p)
    assert calls == [] and not r.passed
    assert r.status == "unavailable: edit: needs a unicorn" and r.errors == ["edit: needs a unicorn"]


def test_a_case_that_cannot_be_built_keeps_its_shape_in_the_result():
    """Bug class: the labelled failure of an unbuildable case losing its rows/keys/topk."""
    case = {"name": "bad", "layout": "causal", "rows": 4, "keys": 600, "topk": 1024, "dist": "no-such-dist"}
    (r,) = verify_many([case], ["reference"])
    assert not r.passed and (r.case, r.rows, r.keys, r.topk) == ("bad", 4, 600, 1024)


def test_errors_are_capped_at_max_errors():
    """Bug class: an off-by-one in the cap on kept failure messages. The row
    loops stop at the cap themselves; the messages of a failed rerun (a path
    without identical reruns) come after them and go through the cap alone."""
    from mqa_topk_cli.verify import MAX_ERRORS

    w = make_workload("causal", rows=MAX_ERRORS + 3, keys=600, topk=512, seed=3)
    calls = []

    def bad_first_entry(w, out):
        calls.append(1)
        out[:, 0].fill_(-6 - len(calls))  # -7 in run 0, -8 in run 1: the runs differ

    p = Edit(bad_first_entry)
    p.deterministic_output = False
    r = verify_case(w, p, reruns=1)
    assert r.invalid_rows == w.rows and r.rerun_failures == 1 and MAX_ERRORS == 10
    assert r.errors == [f"row {i}: invalid: index -7 outside [0, n={n})" for i, n in enumerate(_n(w))][:MAX_ERRORS]


@pytest.mark.parametrize("slack,kept", [(0, True), (-4, False)])
def test_the_reference_cache_keeps_at_most_twice_chunk_bytes(monkeypatch, slack, kept):
    """Bug class: the reference cache's memory bound (2 * CHUNK_BYTES of stored
    logits) off, so a cache larger than documented is kept. One row per chunk
    here: the stored logits are 4 bytes per visible key, in all 4 * sum(n)."""
    import mqa_topk_cli.verify as verify_mod

    w = make_workload("causal", rows=6, keys=600, topk=512, seed=3)
    total = 4 * sum(_n(w))
    monkeypatch.setattr(verify_mod, "CHUNK_BYTES", (total + slack) // 2)  # total == 2x, or 2 bytes over it
    assert verify_mod._row_chunk(w.rows, w.keys) == 1
    cache = {}
    assert verify_case(w, "reference", reruns=0, ref_cache=cache).passed
    assert (len(cache) == 1) is kept
