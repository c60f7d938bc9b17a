"""GPU tests of the fused logits + top-k kernels (skipped without a CUDA GPU).

Every output is compared with the exact reference set computed from the dense
kernel's logits (``ops.mqa_logits``; every fused kernel computes bitwise the
same logits, so the sets must be identical, ties to the lowest index), with
poisoned outputs; inputs must be untouched and reruns bitwise identical. Each
kernel (whole, split, staged, hybrid: ``kernel=``) is checked where it runs,
and against the others' sets, at 16, 32 and 64 heads (q ``[rows, H, 128]``,
weights ``[rows, H]``; the dense logits at each H are checked against the
float64 reference in test_verify.py).
"""
from __future__ import annotations

import pytest
import torch

from mqa_topk_cli import ops
from mqa_topk_cli.contract import MAX_KEYS, TOPKS
from mqa_topk_cli.errors import ContractError
from mqa_topk_cli.workloads import make_workload

from test_gpu_topk import assert_exact  # noqa: E402 (tests/ is on sys.path under pytest)

pytestmark = pytest.mark.gpu

#: The heads every op takes (contract.SUPPORTED_HEADS).
HEADS = (16, 32, 64)


@pytest.fixture(scope="module")
def dev():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")


def sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def blocks(rows):
    return (rows + 7) // 8


def runs(kernel, rows, keys):
    """Whether a forced kernel runs the shape (csrc/include/mqa_topk/fused/heuristics.h)."""
    nb, n = blocks(rows), sms()
    if kernel == "staged":
        return 0 < rows and 0 < keys <= 1 << 19 and nb <= n
    if kernel == "hybrid":
        return 0 < rows and 0 < keys <= 1 << 19 and nb > n and nb % n in (1, 2)
    return True


def run_fused(w, topk, poison, kernel=None):
    out = torch.full((w.rows, topk), poison, dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, kernel=kernel)
    return out


def check_fused(w, topk=None, what="", kernel=None):
    """Exact, inputs untouched, reruns bitwise equal. Returns the first run's
    output."""
    topk = topk or w.topk
    inputs = [t.clone() for t in (w.q.view(torch.uint8), w.k.view(torch.uint8), w.scales, w.weights, w.starts,
                                  w.ends)]
    out1 = run_fused(w, topk, -7, kernel)
    out2 = run_fused(w, topk, -3, kernel)
    after = (w.q.view(torch.uint8), w.k.view(torch.uint8), w.scales, w.weights, w.starts, w.ends)
    assert all(torch.equal(a, b) for a, b in zip(inputs, after)), f"{what}: inputs modified"
    assert torch.equal(out1, out2), f"{what}: reruns differ"
    logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    assert_exact(out1, logits, w.starts, w.ends, topk, what)
    return out1


def same_sets(a, b, what):
    assert torch.equal(a.sort(dim=1).values, b.sort(dim=1).values), what


CASES = [
    dict(layout="causal", rows=67, keys=5001, dist="gaussian"),
    dict(layout="causal", rows=64, keys=9000, dist="ties"),
    dict(layout="causal", rows=40, keys=12000, dist="ties", tie_mode="whole"),
    dict(layout="causal", rows=33, keys=8000, dist="ties", near_ties=True),
    dict(layout="full", rows=40, keys=3000, dist="short_rows"),
    dict(layout="ragged", rows=100, keys=9001, dist="dsa", unaligned_starts=True),
    dict(layout="ragged", rows=90, keys=20000, dist="zero_weights"),
    dict(layout="full", rows=24, keys=30001, dist="negative_weights"),
    dict(layout="full", rows=24, keys=30000, dist="relu_saturated"),
    dict(layout="causal", rows=48, keys=40000, dist="rising"),
]




# kernel None: the one chosen by shape (these row counts take the staged or split kernel).
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kernel", [None, "whole", "split"])
@pytest.mark.parametrize("topk", TOPKS)
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: f"{kw['layout']}-{kw['dist']}-{kw['keys']}")
def test_fused_exact_on_workloads(dev, kw, topk, kernel, heads):
    w = make_workload(device="cuda", seed=11, topk=topk, heads=heads, **kw)
    assert w.heads == heads
    check_fused(w, what=f"{kw} kernel={kernel} heads={heads}", kernel=kernel)


@pytest.mark.parametrize("kernel", [None, "whole", "split"])
@pytest.mark.parametrize("dist,opts", [("gaussian", {}), ("rising", {}), ("ties", {"tie_mode": "whole"}),
                                       ("ties", {}), ("relu_saturated", {}), ("zero_weights", {})])
def test_fused_long_rows_many_compactions(dev, dist, opts, kernel):
    # 16 rows of 300K keys: ties at the gate and relu-saturated rows fill the
    # segments, so the row group's compaction (round-robin re-emit) runs many times.
    w = make_workload("full", rows=16, keys=300_000, topk=2048, dist=dist, seed=5, device="cuda", **opts)
    check_fused(w, what=f"long {dist} kernel={kernel}", kernel=kernel)


def test_fused_row_at_the_key_limit(dev):
    w = make_workload("full", rows=3, keys=MAX_KEYS, topk=2048, dist="gaussian", seed=6, device="cuda")
    check_fused(w, what="key limit")


@pytest.mark.parametrize("heads", HEADS)
def test_fused_matches_native_dense_exactly(dev, heads):
    w = make_workload("ragged", rows=300, keys=50_000, topk=2048, dist="dsa", seed=7, device="cuda",
                      unaligned_starts=True, heads=heads)
    fused = run_fused(w, 2048, -5)
    dense = torch.full_like(fused, -9)
    ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, dense)
    same_sets(fused, dense, f"fused vs native dense, {heads} heads")
    # chunked dense (several logits calls, each with its rows' slice of q and weights): the same sets
    chunked = torch.full_like(fused, -11)
    ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, chunked,
                               max_logits_bytes=64 * ops._pitch(w.keys) * 4)
    same_sets(fused, chunked, f"fused vs chunked native dense, {heads} heads")


def _pad_to_32(w):
    """q and weights of a 16-head workload with 16 zero heads appended."""
    q = torch.cat([w.q.view(torch.uint8), torch.zeros_like(w.q.view(torch.uint8))], 1).view(w.q.dtype).contiguous()
    return q, torch.cat([w.weights, torch.zeros_like(w.weights)], 1).contiguous()


@pytest.mark.parametrize("topk", TOPKS)
def test_16_heads_are_32_heads_with_zero_heads(dev, topk):
    """A 16-head call gives bitwise the logits, and the sets, of the 32-head
    call on q and weights padded with zero heads (what the launchers run)."""
    w = make_workload("ragged", rows=70, keys=9000, topk=topk, dist="ties", seed=19, device="cuda", heads=16,
                      unaligned_starts=True)
    q32, w32 = _pad_to_32(w)
    a = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    b = ops.mqa_logits(q32, w.k, w.scales, w32, w.starts, w.ends)
    col = torch.arange(w.keys, device="cuda")
    inside = (col >= w.starts.long()[:, None]) & (col < w.ends.long()[:, None])
    assert torch.equal(a[inside], b[inside])
    out16 = check_fused(w, topk, "16 heads")
    out32 = run_fused(make_workload_like(w, q32, w32), topk, -5)
    same_sets(out16, out32, "16 heads vs padded 32")


def make_workload_like(w, q, weights):
    from dataclasses import replace

    return replace(w, q=q, weights=weights)


@pytest.mark.parametrize("heads", [16, 64])
def test_every_head_counts(dev, heads):
    """Bug class: kernels that read only the first 32 (or 16) heads: the
    fused sets at H heads differ from those with the upper half of the
    heads' weights zeroed, while each is exact on its own logits."""
    w = make_workload("causal", rows=40, keys=8000, topk=512, dist="gaussian", seed=29, device="cuda", heads=heads)
    full = check_fused(w, 512, f"{heads} heads")
    half = w.weights.clone()
    half[:, heads // 2:] = 0
    part = check_fused(make_workload_like(w, w.q, half), 512, f"{heads} heads, upper half zeroed")
    assert not torch.equal(full.sort(dim=1).values, part.sort(dim=1).values)


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kernel", [None, "whole", "split", "staged"])
def test_fused_batch_invariant(dev, kernel, heads):
    """A row's set does not depend on the rows beside it: sub-batches (other
    row blocks, other piece counts) give the full batch's sets."""
    w = make_workload("ragged", rows=120, keys=40000, topk=2048, dist="dsa", seed=32, device="cuda",
                      unaligned_starts=True, heads=heads)
    full = run_fused(w, 2048, -1, kernel)
    for a, b in ((0, 1), (3, 50), (40, 41), (17, 120)):
        out = torch.full((b - a, 2048), -4, dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(w.q[a:b], w.k, w.scales, w.weights[a:b], w.starts[a:b].clone(),
                                   w.ends[a:b].clone(), out, kernel=kernel)
        same_sets(out, full[a:b], (kernel, a, b))


def test_fused_empty_shapes_and_rows(dev):
    w = make_workload("causal", rows=20, keys=3000, topk=512, dist="gaussian", seed=9, device="cuda")
    out = torch.empty((0, 512), dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(w.q[:0], w.k, w.scales, w.weights[:0], w.starts[:0], w.ends[:0], out)
    # every row empty, and a mix of empty and tiny rows
    starts = torch.full((20,), 100, dtype=torch.int32, device="cuda")
    ends = starts.clone()
    for kernel in (None, "whole", "split"):
        out = torch.full((20, 512), 5, dtype=torch.int32, device="cuda")
        ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, starts, ends, out, kernel=kernel)
        assert bool((out == -1).all()), kernel
    ends = starts + torch.arange(20, dtype=torch.int32, device="cuda") % 3
    out = torch.full((20, 512), 5, dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, starts, ends.contiguous(), out)
    logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, starts, ends.contiguous())
    assert_exact(out, logits, starts, ends, 512, "tiny rows")


def test_fused_workspace_contract(dev):
    """The workspace is sized by fused_mqa_topk_workspace_bytes for every
    kernel; a smaller one is an error naming it, never a silent slow path."""
    ext = ops._native()
    n = sms()
    for t in TOPKS:
        assert ext.fused_mqa_topk_workspace_bytes(t, 0) == ops.fused_mqa_topk_workspace_bytes(t, n)
        assert ops.fused_mqa_topk_workspace_bytes(t, n) <= 311_000_000  # the SM100 seed's workspace
    w = make_workload("causal", rows=9, keys=3000, topk=512, dist="gaussian", seed=10, device="cuda")
    out = torch.empty((9, 512), dtype=torch.int32, device="cuda")
    need = ops.fused_mqa_topk_workspace_bytes(512, n)
    for size in (1024, need - 16):
        small = torch.empty(size, dtype=torch.uint8, device="cuda")
        with pytest.raises(ValueError, match="workspace: needs"):
            ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, workspace=small)
    with pytest.raises(ValueError, match="workspace"):
        ext.fused_mqa_topk(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out,
                           torch.empty(4096, dtype=torch.int32, device="cuda"))
    with pytest.raises((ValueError, ContractError), match="output"):
        ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends,
                                   torch.empty((9, 100), dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="output"):
        ext.fused_mqa_topk(w.q, w.k, w.scales, w.weights, w.starts, w.ends,
                           torch.empty((9, 100), dtype=torch.int32, device="cuda"),
                           ops.fused_mqa_topk_workspace("cuda", 512))
    exact = torch.empty(need, dtype=torch.uint8, device="cuda")
    ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, workspace=exact)
    logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    assert_exact(out, logits, w.starts, w.ends, 512, "a workspace of exactly the size")


def test_fused_workspace_is_per_stream(dev):
    a = ops.fused_mqa_topk_workspace("cuda", 512)
    assert ops.fused_mqa_topk_workspace("cuda", 512) is a
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        b = ops.fused_mqa_topk_workspace("cuda", 512)
    assert b is not a and b.numel() == a.numel()


def test_fused_kernel_choice(dev):
    """The op's choice (fused_mqa_topk_kernel, the extension's) against the
    rule the CPU tests check (include/mqa_topk/fused/heuristics.h) at the boundaries."""
    n = sms()
    expect = {
        (8, 65536): "staged", (8 * (n // 2), 65536): "staged", (8 * (n // 2) + 8, 65536): "split",
        (8, 1 << 20): "split", (8 * n, 4096): "whole", (8 * n + 8, 4096): "hybrid",
        (8 * n + 16, 4096): "hybrid", (8 * n + 24, 4096): "split", (8 * n + 8, (1 << 19) + 1): "split",
        (16 * n, 4096): "whole", (16 * n + 1, 4096): "hybrid",
    }
    for (rows, keys), kernel in expect.items():
        assert ops.fused_mqa_topk_kernel(rows, keys, 2048) == kernel, (rows, keys, n)


def test_fused_forced_kernel_errors(dev, monkeypatch):
    """A forced kernel that cannot run the shape is an error naming the
    kernel; an unknown kernel, or a bad MQA_TOPK_FUSED_KERNEL, is an error
    naming the argument or the variable."""
    n = sms()
    w = make_workload("causal", rows=8 * n + 40, keys=3000, topk=512, dist="gaussian", seed=3, device="cuda")
    out = torch.full((w.rows, 512), -4, dtype=torch.int32, device="cuda")
    for kernel in ("staged", "hybrid"):
        with pytest.raises(ValueError, match=f"kernel: the {kernel} kernel cannot run"):
            ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, kernel=kernel)
    with pytest.raises(ContractError, match="kernel"):
        ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, kernel="v2")
    monkeypatch.setattr(ops, "FUSED_KERNEL", "v2")
    with pytest.raises(ContractError, match="MQA_TOPK_FUSED_KERNEL"):
        ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
    monkeypatch.setattr(ops, "FUSED_KERNEL", "whole")
    ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
    logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    assert_exact(out, logits, w.starts, w.ends, 512, "MQA_TOPK_FUSED_KERNEL=whole")


def _tile_stride(nt):
    """csrc/include/mqa_topk/fused/select.cuh: tile_stride."""
    import math
    if nt <= 2:
        return 1
    s = max(1, int(nt * 0.6180339887))
    while math.gcd(nt, s) != 1:
        s += 1
    return s


def _sample_tiles(nt, k):
    """fused/select.cuh: fused_sample_tiles (the first tiles of the walk)."""
    target = k + k // 2 + 256
    ns = min(max((128 * nt + target - 1) // target, 1), 24, nt)
    stride, tp, out = _tile_stride(nt), nt - 1, []
    for _ in range(ns):
        out.append(tp)
        tp = (tp + stride) % nt
    return out


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kernel", ["whole", "split", "staged"])
@pytest.mark.parametrize("topk", [512, 2048])
def test_fused_unsafe_gate_is_redone(dev, topk, kernel, heads):
    """Keys of the gate's sample tiles scaled 1000x: every row's gate lands among
    them, fewer than k logits reach it, and each row must be rescanned without a
    gate (a redo) and still be exact (the whole and split kernels gate; the
    staged kernel selects from the stored logits)."""
    keys = 40_000
    w = make_workload("full", rows=20, keys=keys, topk=topk, dist="gaussian", seed=13, device="cuda", heads=heads)
    nt = (keys + 127) // 128
    for tp in _sample_tiles(nt, topk):
        w.scales[tp * 128: (tp + 1) * 128] *= 1000.0
    check_fused(w, what=f"unsafe gate {kernel}", kernel=kernel)


SPLIT_CASES = [
    dict(layout="causal", rows=64, keys=65536, dist="gaussian"),
    dict(layout="causal", rows=5, keys=40000, dist="gaussian"),
    dict(layout="full", rows=3, keys=3000, dist="gaussian"),
    dict(layout="ragged", rows=37, keys=20000, dist="dsa", unaligned_starts=True),
    dict(layout="full", rows=40, keys=3000, dist="short_rows"),
    dict(layout="causal", rows=1064, keys=9000, dist="gaussian"),
    dict(layout="full", rows=16, keys=70000, dist="ties", tie_mode="whole"),
    dict(layout="full", rows=9, keys=50000, dist="relu_saturated"),
    dict(layout="causal", rows=24, keys=30000, dist="rising"),
    # about equal blocks, at most SMs / 4 of them (every block the same number of pieces)
    dict(layout="full", rows=128, keys=9000, dist="rising"),
    dict(layout="causal", rows=256, keys=20000, dist="gaussian"),
]




@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kw", SPLIT_CASES, ids=lambda kw: f"{kw['layout']}-{kw['rows']}x{kw['keys']}-{kw['dist']}")
def test_fused_split_kernel_exact(dev, kw, heads):
    """The split kernel forced on few and long rows (many pieces per block),
    ragged and short rows (pieces where a row has fewer keys than the piece or
    none: empty slices), 1064 rows (whole blocks beside split ones): exact,
    reruns bitwise equal, inputs untouched, and the whole kernel's sets."""
    for topk in (512, 2048):
        w = make_workload(device="cuda", seed=17, topk=topk, heads=heads, **kw)
        split = check_fused(w, topk, f"split {kw} topk={topk} heads={heads}", kernel="split")
        same_sets(split, run_fused(w, topk, -5, "whole"), f"{kw} topk={topk}: split vs whole")


LARGE_SPLIT_CASES = [
    dict(layout="causal", rows=272, keys=12000, dist="gaussian"),
    dict(layout="ragged", rows=600, keys=20000, dist="dsa", unaligned_starts=True),
    dict(layout="full", rows=1100, keys=3000, dist="short_rows"),
    dict(layout="causal", rows=1576, keys=6000, dist="relu_saturated"),
    dict(layout="full", rows=530, keys=9000, dist="ties", tie_mode="whole"),
    # 64-66 about equal blocks
    dict(layout="causal", rows=512, keys=30000, dist="gaussian"),
    dict(layout="full", rows=520, keys=9000, dist="relu_saturated"),
]




@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kw", LARGE_SPLIT_CASES, ids=lambda kw: f"{kw['layout']}-{kw['rows']}x{kw['keys']}-{kw['dist']}")
def test_fused_split_kernel_every_sm(dev, kw, heads):
    """The split kernel where its grid is every SM, for every topk: exact,
    reruns bitwise equal (the merge sums bins only after every piece stored
    them), and the whole kernel's sets."""
    for topk in TOPKS:
        w = make_workload(device="cuda", seed=23, topk=topk, heads=heads, **kw)
        split = check_fused(w, topk, f"split {kw} topk={topk} heads={heads}", kernel="split")
        same_sets(split, run_fused(w, topk, -5, "whole"), f"{kw} topk={topk}: split vs whole")


STAGED_CASES = [
    dict(layout="causal", rows=64, keys=65536, dist="gaussian"),
    dict(layout="causal", rows=1, keys=40000, dist="gaussian"),
    dict(layout="full", rows=5, keys=2049, dist="gaussian"),
    dict(layout="full", rows=13, keys=2048, dist="ties", tie_mode="whole"),
    dict(layout="full", rows=16, keys=30000, dist="ties", tie_mode="whole"),
    dict(layout="ragged", rows=61, keys=20000, dist="dsa", unaligned_starts=True),
    dict(layout="full", rows=40, keys=3000, dist="short_rows"),
    dict(layout="causal", rows=200, keys=9000, dist="ties"),
    dict(layout="causal", rows=64, keys=30000, dist="ties", near_ties=True),
    dict(layout="full", rows=24, keys=30000, dist="relu_saturated"),
    dict(layout="causal", rows=256, keys=30000, dist="rising"),
    dict(layout="ragged", rows=90, keys=20000, dist="zero_weights"),
    dict(layout="full", rows=17, keys=30001, dist="negative_weights"),
    dict(layout="full", rows=8, keys=524000, dist="gaussian"),
    dict(layout="causal", rows=520, keys=12000, dist="gaussian"),
    dict(layout="ragged", rows=1056, keys=9000, dist="dsa", unaligned_starts=True),
]




@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kw", STAGED_CASES, ids=lambda kw: f"{kw['layout']}-{kw['rows']}x{kw['keys']}-{kw['dist']}")
def test_fused_staged_kernel_exact(dev, kw, heads):
    """The staged kernel for every topk: exact, inputs untouched, reruns
    bitwise equal, and the sets of the whole kernel and of native dense."""
    if not runs("staged", kw["rows"], kw["keys"]):
        pytest.skip(f"{kw['rows']} rows are more than one wave of row blocks on {sms()} SMs")
    for topk in TOPKS:
        w = make_workload(device="cuda", seed=31, topk=topk, heads=heads, **kw)
        out = check_fused(w, topk, f"staged {kw} topk={topk} heads={heads}", kernel="staged")
        same_sets(out, run_fused(w, topk, -5, "whole"), f"{kw} topk={topk}: staged vs whole")
        dense = torch.full_like(out, -9)
        ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, dense)
        same_sets(out, dense, f"{kw} topk={topk}: staged vs native dense")


HYBRID_CASES = [
    dict(layout="causal", rows=1064, keys=20000, dist="gaussian"),
    dict(layout="ragged", rows=1057, keys=30000, dist="dsa", unaligned_starts=True),
    dict(layout="full", rows=1072, keys=3000, dist="short_rows"),
    dict(layout="full", rows=1064, keys=9000, dist="ties", tie_mode="whole"),
    dict(layout="causal", rows=2120, keys=8000, dist="rising"),
    dict(layout="full", rows=1060, keys=1500, dist="relu_saturated"),
]




@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kw", HYBRID_CASES, ids=lambda kw: f"{kw['layout']}-{kw['rows']}x{kw['keys']}-{kw['dist']}")
def test_fused_hybrid_kernel_exact(dev, kw, heads):
    """The hybrid kernel for every topk: exact, inputs untouched, reruns
    bitwise equal, and the whole kernel's sets."""
    if not runs("hybrid", kw["rows"], kw["keys"]):
        pytest.skip(f"{kw['rows']} rows are not SMs + 1 or 2 row blocks on {sms()} SMs")
    for topk in TOPKS:
        w = make_workload(device="cuda", seed=31, topk=topk, heads=heads, **kw)
        out = check_fused(w, topk, f"hybrid {kw} topk={topk} heads={heads}", kernel="hybrid")
        same_sets(out, run_fused(w, topk, -5, "whole"), f"{kw} topk={topk}: hybrid vs whole")


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("rows,keys", [(528, 1 << 19), (250, 1 << 19), (64, 1 << 19), (8 * 132 + 8, 1 << 19)])
def test_fused_call_allocates_at_most_512_mib_beyond_its_workspace(dev, rows, keys, heads):
    """Whatever kernel a shape runs, its per-call buffer (the staged and hybrid
    kernels' logits of their row blocks) stays within 512 MiB: the peak of
    torch's allocator during the call, past the cached workspace and the
    inputs (at 16 heads, plus the padded copy of q and weights)."""
    w = make_workload("causal", rows=rows, keys=keys, topk=2048, dist="gaussian", seed=41, device="cuda", heads=heads)
    out = torch.full((rows, 2048), -7, dtype=torch.int32, device="cuda")
    ops.fused_mqa_topk_workspace("cuda", 2048)  # (the fixed workspace, allocated once)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ops.fused_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    pad = ops.fused_mqa_topk_padding_bytes(rows, heads)
    assert pad == (rows * 32 * 132 if heads == 16 else 0)
    kernel = ops.fused_mqa_topk_kernel(rows, keys, 2048, heads=heads)
    assert extra <= (512 << 20) + pad, f"{rows} x {keys} ({kernel}): {extra / 2**20:.1f} MiB"
    reported = ops.fused_mqa_topk_call_bytes(rows, keys, 2048, heads=heads)  # what `mqa-topk build` reports
    assert reported - pad <= ops.FUSED_CALL_BYTES_CAP and extra <= reported + (2 << 20), (extra, reported)
    logits = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)
    assert_exact(out, logits, w.starts, w.ends, 2048, f"{rows} x {keys}")
