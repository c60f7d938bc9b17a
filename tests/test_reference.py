"""reference.py against a brute-force float64 loop on tiny shapes, and the
top-k tie rule against Python's sorted()."""
from __future__ import annotations

import math

import pytest
import torch

from mqa_topk_cli.reference import (
    assemble_reference_logits,
    ieee_fp32_matmul,
    reference_logits,
    reference_mqa_topk,
    reference_topk,
)
from mqa_topk_cli.workloads import Workload, make_workload


def brute_logits(w) -> list[list[float]]:
    """Python float64 loop: one (row, key) at a time."""
    q = w.q.to(torch.float64)
    k = w.k.to(torch.float64)
    out = []
    for r in range(w.rows):
        row = [-math.inf] * w.keys
        for s in range(int(w.starts[r]), int(w.ends[r])):
            acc = 0.0
            for h in range(w.q.shape[1]):  # every head of q (16, 32 or 64)
                acc += float(w.weights[r, h]) * max(0.0, float(q[r, h] @ k[s]))
            row[s] = float(w.scales[s]) * acc
        out.append(row)
    return out


def brute_topk(logits_row: list[float], start: int, end: int, topk: int) -> list[int]:
    order = sorted(range(start, end), key=lambda s: (-logits_row[s], s))[:topk]
    rel = [s - start for s in order]
    return rel + [-1] * (topk - len(rel))


def _tiny(dist="gaussian", layout="ragged", rows=6, keys=40, seed=0, **kw):
    return make_workload(layout, rows=rows, keys=keys, topk=512, dist=dist, seed=seed, **kw)


def _with_ranges(w, starts, ends) -> Workload:
    return Workload(w.q, w.k, w.scales, w.weights, torch.tensor(starts, dtype=torch.int32),
                    torch.tensor(ends, dtype=torch.int32), w.topk)


@pytest.mark.parametrize("dist", ["gaussian", "negative_weights", "zero_weights", "ties", "relu_saturated", "dsa"])
def test_logits_match_brute_force(dist):
    w = _tiny(dist, rows=5, keys=37, seed=2)
    w = _with_ranges(w, [0, 3, 10, 36, 20], [37, 3, 25, 37, 21])  # full, n=0, middle, n=1 at the end, n=1
    want = torch.tensor(brute_logits(w), dtype=torch.float64)
    got64 = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision="fp64")
    got32 = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    assert got64.dtype == torch.float64 and got32.dtype == torch.float32
    inside = torch.isfinite(want)
    assert torch.equal(torch.isinf(got64), ~inside) and torch.equal(torch.isinf(got32), ~inside)
    assert bool((got64[~inside] < 0).all())  # -inf, not +inf
    scale = want[inside].abs().max().clamp(min=1e-30)
    assert float((got64[inside] - want[inside]).abs().max()) <= 1e-12 * float(scale)
    # fp32: one rounding of the (near exact) value: within half an fp32 ulp of it.
    err = (got32.double()[inside] - want[inside]).abs()
    assert bool((err <= want[inside].abs() * 2.0 ** -24 + 1e-30).all())
    if dist == "negative_weights":
        assert bool((got32[inside] <= 0).all()) and bool((got32[inside] < 0).any())
    if dist == "zero_weights":
        assert bool((got32[inside] == 0).all())


@pytest.mark.parametrize("heads", [16, 64])
@pytest.mark.parametrize("dist", ["gaussian", "negative_weights", "ties", "relu_saturated"])
def test_logits_match_brute_force_at_16_and_64_heads(heads, dist):
    """Bug class: a reference pinned to 32 heads (summing the first 32 of 64,
    or reading 16-head inputs as 32): against the float64 loop over every head of q."""
    w = make_workload("ragged", rows=5, keys=37, topk=512, dist=dist, seed=3, heads=heads)
    assert tuple(w.q.shape) == (5, heads, 128) and tuple(w.weights.shape) == (5, heads) and w.heads == heads
    w = _with_ranges(w, [0, 3, 10, 36, 20], [37, 3, 25, 37, 21])
    want = torch.tensor(brute_logits(w), dtype=torch.float64)
    got64 = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision="fp64")
    got32 = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    inside = torch.isfinite(want)
    assert torch.equal(torch.isinf(got64), ~inside) and torch.equal(torch.isinf(got32), ~inside)
    scale = want[inside].abs().max().clamp(min=1e-30)
    assert float((got64[inside] - want[inside]).abs().max()) <= 1e-12 * float(scale)
    err = (got32.double()[inside] - want[inside]).abs()
    assert bool((err <= want[inside].abs() * 2.0 ** -24 + 1e-30).all())
    if dist == "relu_saturated":  # (its logits may all be 0 at 16 heads: nothing to drop)
        return
    # the heads past the first 8 / 32 count: dropping them changes the logits
    half = heads // 2
    w_half = w.weights.clone()
    w_half[:, half:] = 0
    part = reference_logits(w.q, w.k, w.scales, w_half, w.starts, w.ends, precision="fp64")
    assert not torch.equal(part[inside], got64[inside])


def test_top_k_at_64_heads_matches_brute_force():
    """Bug class: the chunked reference top-k losing heads (or rows) at 64 heads."""
    w = make_workload("causal", rows=7, keys=600, topk=512, dist="ties", seed=1, heads=64)
    logits = brute_logits(w)
    got = reference_mqa_topk(w, "fp64", row_chunk=3)
    for r in range(w.rows):
        assert got[r].tolist() == brute_topk(logits[r], int(w.starts[r]), int(w.ends[r]), 512)


def test_rows_and_key_range_slices_are_bitwise_the_full_result():
    w = _tiny("gaussian", rows=9, keys=300, seed=1)
    full = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    part = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, rows=slice(2, 7), key_range=(17, 290))
    assert torch.equal(part, full[2:7, 17:290])
    # forced key chunking (max_bytes below one row) gives the same bits
    chunked = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, max_bytes=40_000)
    assert torch.equal(chunked, full)
    with pytest.raises(ValueError, match="precision"):
        reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision="fp16")


def test_duplicate_keys_get_bitwise_equal_logits_at_awkward_sizes():
    # Identical k rows + scales must give identical logits wherever they sit
    # (a BLAS tail block must not round differently).
    w = make_workload("causal", rows=7, keys=3001, topk=512, dist="ties", seed=0, tie_mode="whole")
    logits = reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    for r in range(w.rows):
        row = logits[r, int(w.starts[r]):int(w.ends[r])]
        assert torch.unique(row).numel() == 1


def test_topk_matches_sorted_with_heavy_ties_and_short_rows():
    g = torch.Generator().manual_seed(0)
    rows, width, topk = 12, 1300, 512
    logits = torch.randint(-3, 4, (rows, width), generator=g).to(torch.float32)  # 7 values: ties everywhere
    logits[3] = 0.0  # whole row ties
    logits[4] = -torch.arange(width, dtype=torch.float32)  # strictly falling
    starts = [0, 5, 100, 0, 7, 1299, 400, 400, 0, 10, 600, 3]
    ends = [1300, 5, 611, 1300, 1300, 1300, 912, 913, 511, 523, 1111, 1290]  # n = 0, 511, 512, 513, 1 ...
    out = reference_topk(logits, torch.tensor(starts, dtype=torch.int32), torch.tensor(ends, dtype=torch.int32), topk)
    assert out.dtype == torch.int32 and out.shape == (rows, topk)
    for r in range(rows):
        assert out[r].tolist() == brute_topk(logits[r].tolist(), starts[r], ends[r], topk), r
    # the whole-row tie takes the lowest indices, in ascending order
    assert out[3].tolist() == list(range(topk))


def test_topk_with_minus_inf_inside_the_range():
    logits = torch.full((1, 600), 1.0)
    logits[0, 50:60] = float("-inf")  # -inf inside [40, 100): must still rank before the outside keys
    out = reference_topk(logits, torch.tensor([40], dtype=torch.int32), torch.tensor([100], dtype=torch.int32), 512)
    assert out[0].tolist() == brute_topk(logits[0].tolist(), 40, 100, 512)
    assert sorted(out[0, :60].tolist()) == list(range(60))


def test_topk_is_not_fooled_by_an_unstable_sort():
    # 2000 equal values then a larger one: an unstable sort would scramble the tie order.
    logits = torch.zeros((2, 2100))
    logits[:, 2050] = 5.0
    out = reference_topk(logits, torch.tensor([0, 1000], dtype=torch.int32),
                         torch.tensor([2100, 2100], dtype=torch.int32), 1024)
    assert out[0].tolist() == [2050] + list(range(1023))
    assert out[1].tolist() == [1050] + list(range(1023))


@pytest.mark.parametrize("dist", ["gaussian", "ties", "short_rows", "zero_weights"])
def test_mqa_topk_matches_brute_force_end_to_end(dist):
    w = make_workload("ragged", rows=6, keys=1400, topk=512, dist=dist, seed=4, unaligned_starts=True)
    want = brute_logits(w)
    out = reference_mqa_topk(w)
    for r in range(w.rows):
        assert out[r].tolist() == brute_topk(want[r], int(w.starts[r]), int(w.ends[r]), 512), r


def test_chunking_does_not_change_the_answer():
    w = make_workload("ragged", rows=40, keys=2000, topk=512, dist="ties", seed=3, requests=3)
    base = reference_mqa_topk(w)
    assert torch.equal(reference_mqa_topk(w, row_chunk=1), base)
    assert torch.equal(reference_mqa_topk(w, row_chunk=7, max_bytes=300_000), base)
    assert torch.equal(reference_mqa_topk(w, precision="fp64"), base)
    full = assemble_reference_logits(w)
    assert full.shape == (40, 2000)
    assert torch.equal(reference_topk(full, w.starts, w.ends, 512), base)


def test_ieee_context_restores_the_setting():
    m = torch.backends.cuda.matmul
    before = m.fp32_precision
    with ieee_fp32_matmul():
        assert m.fp32_precision == "ieee"
    assert m.fp32_precision == before


def test_reference_range_arguments_are_checked():
    """Bug class: a bad row/key range read silently (or an error naming the wrong argument)."""
    w = _tiny("gaussian", rows=4, keys=30, seed=1)
    args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    with pytest.raises(ValueError, match=r"^key_range: \(5, 2\) is outside \[0, 30\]$"):
        reference_logits(*args, key_range=(5, 2))
    with pytest.raises(ValueError, match=r"^key_range: \(0, 31\) is outside \[0, 30\]$"):
        reference_logits(*args, key_range=(0, 31))
    with pytest.raises(ValueError, match=r"^rows: \(-1, 2\) is outside \[0, 4\]$"):
        reference_logits(*args, rows=(-1, 2))
    with pytest.raises(ValueError, match="^rows: slices must have step 1$"):
        reference_logits(*args, rows=slice(0, 4, 2))
    assert reference_logits(*args, key_range=(0, 30)).shape == (4, 30)
    assert reference_logits(*args, key_range=(30, 30)).shape == (4, 0)
    assert reference_logits(*args, rows=slice(3, 1)).shape == (0, 30)


def test_row_chunk_argument_and_default_precision():
    """Bug class: a bad row_chunk accepted, or a wrong default precision."""
    from mqa_topk_cli.reference import iter_reference_logits

    w = _tiny("gaussian", rows=4, keys=30, seed=1)
    with pytest.raises(ValueError, match=r"^row_chunk: must be >= 1, got 0$"):
        reference_mqa_topk(w, row_chunk=0)
    chunks = list(iter_reference_logits(w))
    assert chunks and all(c[4].dtype == torch.float32 for c in chunks)
    assert [c[:2] for c in iter_reference_logits(w, row_chunk=3)] == [(0, 3), (3, 4)]


def test_assembled_logits_keep_the_precision():
    """Bug class: fp64 reference logits stored in an fp32 buffer (rounded twice)."""
    w = _tiny("gaussian", rows=4, keys=30, seed=1)
    a64 = assemble_reference_logits(w, "fp64")
    assert a64.dtype == torch.float64
    assert torch.equal(a64, reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision="fp64"))
    assert assemble_reference_logits(w).dtype == torch.float32


def test_row_slices_with_several_row_chunks():
    """Bug class: a row chunk written at the wrong offset of the output when the
    selected rows do not start at 0 (two rows per chunk, five rows from row 2)."""
    w = _tiny("gaussian", rows=9, keys=40, seed=1)
    args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    full = reference_logits(*args)
    per_row = 32 * 40 * 16 + 40 * 8
    part = reference_logits(*args, rows=slice(2, 7), max_bytes=2 * per_row)
    assert torch.equal(part, full[2:7])
    assert reference_mqa_topk(w).dtype == torch.int32


def test_reference_topk_with_several_internal_row_chunks():
    """Bug class: a row-chunk loop that stops early (rows past the first chunks left at -1)."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(10, 600, generator=g)
    st = torch.zeros(10, dtype=torch.int32)
    en = torch.full((10,), 600, dtype=torch.int32)
    want = reference_topk(logits, st, en, 512)
    assert torch.equal(reference_topk(logits, st, en, 512, max_bytes=24 * 600 * 2), want)  # 2 rows per chunk
    assert bool((want >= 0).all())


@pytest.mark.parametrize("keys", [1, 30])
@pytest.mark.parametrize("precision,esize", [("fp32", 4), ("fp64", 8)])
def test_default_row_chunk_is_the_most_rows_whose_logits_fit_a_quarter_of_max_bytes(keys, precision, esize,
                                                                                   monkeypatch):
    """Bug class: the default row chunk off its budget: a [chunk, keys] logits
    block must fit in max_bytes / 4 and one more row must not (smaller chunks
    waste passes, larger ones overshoot the memory bound); keys = 1 included."""
    from mqa_topk_cli import reference
    from mqa_topk_cli.reference import iter_reference_logits

    # Only the chunk plan is checked: the logits themselves (one key per pass
    # under these tiny budgets, seconds of work) are not computed.
    monkeypatch.setattr(reference, "reference_logits", lambda *a, **kw: None)

    w = make_workload("full", rows=9, keys=keys, topk=512, seed=1)
    for rc in (1, 2, 4):
        max_bytes = 4 * rc * keys * esize + 4 * esize * keys - 4  # room for rc rows, 1 byte short of rc + 1
        spans = [c[:2] for c in iter_reference_logits(w, precision, max_bytes=max_bytes)]
        assert spans == [(a, min(9, a + rc)) for a in range(0, 9, rc)], (rc, max_bytes)
