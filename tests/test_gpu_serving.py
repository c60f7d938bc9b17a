"""GPU tests of the serving-grade ops (issue 14), skipped without a CUDA GPU:

- each op captured in a CUDA graph, its inputs changed in place, the graph
  replayed: the result equals an eager call on the new values (identical sets);
- corrupted starts/ends (negative, end > keys, start > end, INT32_MAX/MIN)
  never fault, the output is that of the clamped ranges (fused == dense), and
  the error comes back with the argument and the row from ``check_errors()``
  or from the next op call; checked mode raises before launching.

The ops that take q and weights are checked at 16, 32 and 64 heads (a
16-head call pads q and weights inside the launcher: inside a capture too).
"""
from __future__ import annotations

import pytest
import torch

from mqa_topk_cli import ops
from mqa_topk_cli.errors import ContractError
from mqa_topk_cli.workloads import make_workload

pytestmark = pytest.mark.gpu

INT_MAX = 2**31 - 1
INT_MIN = -2**31
OPS = ["fused", "dense", "dense_chunked", "logits", "topk"]
HEADS = (16, 32, 64)


@pytest.fixture(scope="module")
def dev():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    ext = ops._native()
    for name in ("fused_mqa_topk", "topk_per_row", "range_error_take"):
        if not hasattr(ext, name):
            pytest.fail(f"the extension has no {name}")
    return torch.device("cuda")


@pytest.fixture(autouse=True)
def clean_record(dev):
    """Every test starts with no pending record (and leaves none behind)."""
    torch.cuda.synchronize()
    try:
        ops.check_errors()
    except ContractError:
        pass
    yield
    torch.cuda.synchronize()
    try:
        ops.check_errors()
    except ContractError:
        pass


def chunk_bytes(keys: int, rows: int = 16) -> int:
    """A logits budget that splits the dense path into chunks of ``rows`` rows."""
    return rows * ops._pitch(keys) * 4


def run(op, t, out=None, logits=None, **kw):
    """Runs ``op`` on t = (q, k, scales, weights, starts, ends); returns its
    result (the output, or the logits for ``logits``)."""
    q, k, scales, weights, starts, ends = t
    if op == "fused":
        ops.fused_mqa_topk_prefill(q, k, scales, weights, starts, ends, out, **kw)
    elif op == "dense":
        ops.dense_mqa_topk_prefill(q, k, scales, weights, starts, ends, out, **kw)
    elif op == "dense_chunked":
        ops.dense_mqa_topk_prefill(q, k, scales, weights, starts, ends, out,
                                   max_logits_bytes=chunk_bytes(k.shape[0]), **kw)
    elif op == "logits":
        return ops.mqa_logits(q, k, scales, weights, starts, ends, **kw)
    elif op == "topk":
        ops.top_k_per_row_prefill(logits, starts, ends, out, **kw)
    else:
        raise AssertionError(op)
    return out


def tensors(w):
    return [w.q, w.k, w.scales, w.weights, w.starts, w.ends]


def clamped(starts, ends, keys):
    s = starts.to(torch.int64).clamp(0, keys)
    e = torch.maximum(ends.to(torch.int64), s).clamp(max=keys)
    return s.to(torch.int32), e.to(torch.int32)


def same_result(op, a, b, starts, ends):
    """Identical index sets per row (top-k ops), or bitwise-equal logits inside
    every row's (clamped) range."""
    if op != "logits":
        return torch.equal(a.sort(dim=1).values, b.sort(dim=1).values)
    col = torch.arange(a.shape[1], device=a.device)
    inside = (col >= starts.to(torch.int64)[:, None]) & (col < ends.to(torch.int64)[:, None])
    return torch.equal(torch.where(inside, a, 0.0), torch.where(inside, b, 0.0))


def new_ranges(rows, keys, seed, device):
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, keys // 2, (rows,), generator=g)
    e = s + (torch.rand(rows, generator=g) * (keys - s)).to(torch.int64)
    return s.to(torch.int32).to(device), e.to(torch.int32).to(device)


# --------------------------------------------------------------------------- CUDA graphs

@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("topk", [512, 2048])
def test_graph_replay_on_new_values_matches_eager(dev, op, topk, heads):
    rows, keys = 77, 20_000
    a = make_workload("causal", rows=rows, keys=keys, topk=topk, dist="gaussian", seed=1, device="cuda", heads=heads)
    b = make_workload("causal", rows=rows, keys=keys, topk=topk, dist="dsa", seed=2, device="cuda", heads=heads)
    b_starts, b_ends = new_ranges(rows, keys, 3, dev)
    b_t = [b.q, b.k, b.scales, b.weights, b_starts, b_ends]
    static = [x.clone() for x in tensors(a)]
    out = torch.full((rows, topk), -7, dtype=torch.int32, device=dev)
    logits_a = ops.mqa_logits(*tensors(a)).contiguous() if op == "topk" else None
    logits_b = ops.mqa_logits(*b_t).contiguous() if op == "topk" else None
    static_logits = logits_a.clone() if op == "topk" else None

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch recommends
        run(op, static, out, static_logits)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    first = run(op, static, torch.full_like(out, -5), static_logits).clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        res = run(op, static, out, static_logits)
    torch.cuda.synchronize()

    for dst, src in zip(static, b_t):
        dst.copy_(src)
    if op == "topk":
        static_logits.copy_(logits_b)
    out.fill_(-9)
    g.replay()
    torch.cuda.synchronize()
    eager = run(op, b_t, torch.full_like(out, -3), logits_b)
    torch.cuda.synchronize()
    assert same_result(op, res, eager, b_starts, b_ends), f"{op}: replay on new values != eager"
    assert not same_result(op, first, eager, b_starts, b_ends), "the new values did not change the result"
    g.replay()  # and again: replays are deterministic
    torch.cuda.synchronize()
    assert same_result(op, res, eager, b_starts, b_ends)
    ops.check_errors()


def test_fused_workspace_first_needed_inside_a_capture(dev):
    """A stream whose workspace does not exist yet: allocated during capture
    outside the graph's pool; the graph replays correctly and outlives nothing."""
    w = make_workload("causal", rows=40, keys=9000, topk=1024, dist="gaussian", seed=4, device="cuda")
    static = [x.clone() for x in tensors(w)]
    out = torch.full((40, 1024), -7, dtype=torch.int32, device=dev)
    ops.mqa_logits(*static)  # the error word exists already; only the workspace is new
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    for key in [key for key in ops._workspaces if key[2] == stream.cuda_stream]:
        del ops._workspaces[key]  # torch hands out pooled streams: forget one an earlier test used
    before = set(ops._workspaces)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        run("fused", static, out)
    new = set(ops._workspaces) - before
    assert len(new) == 1 and next(iter(new))[2] == stream.cuda_stream
    g.replay()
    torch.cuda.synchronize()
    eager = run("fused", tensors(w), torch.full_like(out, -3))
    assert same_result("fused", out, eager, w.starts, w.ends)
    del g
    torch.cuda.empty_cache()
    with torch.cuda.stream(stream):  # the workspace outlives the graph
        again = run("fused", tensors(w), torch.full_like(out, -4))
    torch.cuda.synchronize()
    assert same_result("fused", again, eager, w.starts, w.ends)


# --------------------------------------------------------------------------- corrupted ranges

def corrupt(kind, starts, ends, keys, row):
    """Corrupts row ``row`` in place; returns (argument, regex of the message)."""
    if kind == "negative_start":
        starts[row] = -5
        return "starts", rf"^starts: must be >= 0 \(row {row} has -5; "
    if kind == "int_min_start":
        starts[row] = INT_MIN
        return "starts", rf"^starts: must be >= 0 \(row {row} has {INT_MIN}; "
    if kind == "end_past_keys":
        ends[row] = keys + 1
        return "ends", rf"^ends: must be <= keys \(row {row} has {keys + 1}; "
    if kind == "int_max_end":
        ends[row] = INT_MAX
        return "ends", rf"^ends: must be <= keys \(row {row} has {INT_MAX}; "
    if kind == "start_after_end":
        e = int(ends[row])
        starts[row] = e + 3
        return "ends", rf"^ends: must be >= starts \(row {row} has end {e}; "
    if kind == "int_max_start":
        starts[row] = INT_MAX
        return "ends", rf"^ends: must be >= starts \(row {row} has end {int(ends[row])}; "
    if kind == "negative_end":
        ends[row] = -1
        return "ends", rf"^ends: must be >= starts \(row {row} has end -1; "
    if kind == "overflowing_span":  # end - start overflows int32 (a kernel computing it unclamped sees ~2^31 keys)
        starts[row] = 2**30 + 5
        ends[row] = INT_MIN + 3
        return "ends", rf"^ends: must be >= starts \(row {row} has end {INT_MIN + 3}; "
    raise AssertionError(kind)


KINDS = ["negative_start", "int_min_start", "end_past_keys", "int_max_end", "start_after_end", "int_max_start",
         "negative_end", "overflowing_span"]


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
def test_corrupted_ranges_never_fault_and_report_the_row(dev, op, kind, heads):
    rows, keys, topk, row = 67, 5001, 512, 37  # row 37: the third chunk of dense_chunked
    w = make_workload("causal", rows=rows, keys=keys, topk=topk, dist="gaussian", seed=5, device="cuda", heads=heads)
    starts, ends = w.starts.clone(), w.ends.clone()
    logits = ops.mqa_logits(*tensors(w)) if op == "topk" else None
    arg, pattern = corrupt(kind, starts, ends, keys, row)
    t = [w.q, w.k, w.scales, w.weights, starts, ends]
    out = torch.full((rows, topk), -7, dtype=torch.int32, device=dev)
    res = run(op, t, out, logits)  # no error here: nothing is read back
    torch.cuda.synchronize()  # an out-of-bounds access would surface here
    with pytest.raises(ContractError, match=pattern) as ei:
        ops.check_errors()
    assert ei.value.arg == arg
    ops.check_errors()  # consumed
    # the bad row reads as its clamped range, every other row as usual
    cs, ce = clamped(starts, ends, keys)
    ref = run(op, [w.q, w.k, w.scales, w.weights, cs, ce], torch.full_like(out, -3), logits)
    torch.cuda.synchronize()
    assert same_result(op, res, ref, cs, ce), f"{op}/{kind}: output differs from the clamped ranges'"
    ops.check_errors()  # the clamped ranges are valid


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kernel", ops.FUSED_KERNELS)
@pytest.mark.parametrize("kind", ["overflowing_span", "int_min_start", "int_max_end"])
def test_every_fused_kernel_survives_corrupted_rows(dev, kernel, kind, heads):
    """Bug class: a kernel that computes a row's length from the raw range
    (the staged owner once cleared ~2^31 keys of bitmap: an illegal instruction)."""
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    rows, keys = (8 * sms + 8, 9000) if kernel == "hybrid" else (67, 5001)  # (hybrid: SMs + 1 row blocks)
    w = make_workload("causal", rows=rows, keys=keys, topk=512, dist="gaussian", seed=8, device="cuda", heads=heads)
    starts, ends = w.starts.clone(), w.ends.clone()
    arg, pattern = corrupt(kind, starts, ends, keys, 37)
    out = run("fused", [w.q, w.k, w.scales, w.weights, starts, ends], torch.full((rows, 512), -7, dtype=torch.int32,
                                                                                 device=dev), kernel=kernel)
    torch.cuda.synchronize()
    with pytest.raises(ContractError, match=pattern):
        ops.check_errors()
    cs, ce = clamped(starts, ends, keys)
    ref = run("dense", [w.q, w.k, w.scales, w.weights, cs, ce], torch.full_like(out, -3))
    torch.cuda.synchronize()
    assert same_result("fused", out, ref, cs, ce), f"{kernel}/{kind}: output differs from the clamped ranges'"


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("kind", KINDS)
def test_fused_and_dense_agree_on_corrupted_rows(dev, kind, heads):
    w = make_workload("causal", rows=40, keys=7000, topk=1024, dist="gaussian", seed=6, device="cuda", heads=heads)
    starts, ends = w.starts.clone(), w.ends.clone()
    corrupt(kind, starts, ends, w.keys, 9)
    t = [w.q, w.k, w.scales, w.weights, starts, ends]
    fused = run("fused", t, torch.full((40, 1024), -7, dtype=torch.int32, device=dev))
    torch.cuda.synchronize()
    with pytest.raises(ContractError, match="row 9"):  # taken here, or the dense call would raise it
        ops.check_errors()
    dense = run("dense", t, torch.full((40, 1024), -5, dtype=torch.int32, device=dev))
    torch.cuda.synchronize()
    assert torch.equal(fused.sort(dim=1).values, dense.sort(dim=1).values)
    with pytest.raises(ContractError, match="row 9"):
        ops.check_errors()


def test_lowest_bad_row_is_reported(dev):
    w = make_workload("causal", rows=64, keys=5000, topk=512, dist="gaussian", seed=7, device="cuda")
    starts, ends = w.starts.clone(), w.ends.clone()
    ends[50] = 9999
    starts[30] = int(ends[30]) + 1
    starts[10] = -1
    ends[10] = -7  # row 10 fails two conditions: the first (starts) is reported
    run("fused", [w.q, w.k, w.scales, w.weights, starts, ends], torch.empty((64, 512), dtype=torch.int32,
                                                                          device=dev))
    with pytest.raises(ContractError, match=r"^starts: must be >= 0 \(row 10 has -1; found on the device by the "
                                            r"fused kernel on cuda:\d+\)$"):
        ops.check_errors()


@pytest.mark.parametrize("op", ["fused", "dense", "logits", "topk"])
def test_the_next_call_raises_an_earlier_error(dev, op):
    w = make_workload("causal", rows=20, keys=3000, topk=512, dist="gaussian", seed=8, device="cuda")
    logits = ops.mqa_logits(*tensors(w)) if op == "topk" else None
    starts = w.starts.clone()
    starts[4] = -2
    out = torch.full((20, 512), -7, dtype=torch.int32, device=dev)
    run(op, [w.q, w.k, w.scales, w.weights, starts, w.ends], out, logits)
    torch.cuda.synchronize()
    poison = torch.full_like(out, -11)
    with pytest.raises(ContractError, match=r"^starts: must be >= 0 \(row 4 has -2; .* in an earlier call on cuda:"):
        run(op, tensors(w), poison, logits)
    if op != "logits":
        assert bool((poison == -11).all()), "the call that reported the error launched anyway"
    good = run(op, tensors(w), torch.full_like(out, -13), logits)  # consumed: runs again
    torch.cuda.synchronize()
    ops.check_errors()
    assert op == "logits" or not bool((good == -13).all())


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("op", OPS)
def test_checked_mode_raises_before_launching(dev, op, heads):
    w = make_workload("causal", rows=20, keys=3000, topk=512, dist="gaussian", seed=9, device="cuda", heads=heads)
    logits = ops.mqa_logits(*tensors(w)) if op == "topk" else None
    ends = w.ends.clone()
    ends[6] = 3001
    out = torch.full((20, 512), -7, dtype=torch.int32, device=dev)
    with pytest.raises(ContractError, match=r"^ends: must be <= keys = 3000 \(row 6 has 3001\)$"):
        run(op, [w.q, w.k, w.scales, w.weights, w.starts, ends], out, logits, checked=True)
    torch.cuda.synchronize()
    assert bool((out == -7).all())
    ops.check_errors()  # no kernel ran on the bad rows


@pytest.mark.parametrize("heads", HEADS)
def test_logits_with_no_keys_still_checks_the_rows(dev, heads):
    q = torch.zeros((9, heads, 128), dtype=torch.float8_e4m3fn, device=dev)
    k = torch.zeros((0, 128), dtype=torch.float8_e4m3fn, device=dev)
    scales = torch.zeros(0, device=dev)
    weights = torch.zeros((9, heads), device=dev)
    starts = torch.zeros(9, dtype=torch.int32, device=dev)
    ends = torch.zeros(9, dtype=torch.int32, device=dev)
    assert ops.mqa_logits(q, k, scales, weights, starts, ends).shape == (9, 0)
    ops.check_errors()
    ends[5] = 1
    ops.mqa_logits(q, k, scales, weights, starts, ends)
    with pytest.raises(ContractError, match=r"^ends: must be <= keys \(row 5 has 1; "):
        ops.check_errors()


@pytest.mark.parametrize("heads", HEADS)
def test_corrupted_values_written_into_a_captured_graph_are_reported(dev, heads):
    w = make_workload("causal", rows=48, keys=6000, topk=2048, dist="gaussian", seed=10, device="cuda", heads=heads)
    static = [x.clone() for x in tensors(w)]
    out = torch.full((48, 2048), -7, dtype=torch.int32, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run("dense_chunked", static, out)
        run("fused", static, out)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for op in ("fused", "dense_chunked"):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            run(op, static, out)
        static[5][33] = 6001  # ends of row 33
        g.replay()
        torch.cuda.synchronize()
        with pytest.raises(ContractError, match=r"^ends: must be <= keys \(row 33 has 6001; "):
            ops.check_errors()
        static[5][33] = w.ends[33]
        g.replay()
        torch.cuda.synchronize()
        ops.check_errors()
        eager = run(op, tensors(w), torch.full_like(out, -3))
        assert same_result(op, out, eager, w.starts, w.ends)


@pytest.mark.parametrize("op", ["fused", "logits"])
def test_the_launchers_refuse_other_heads_naming_q_or_weights(dev, op):
    """The C++ launchers' own check (a caller that bypasses the Python
    contract): q of unsupported heads names q, weights of other heads than
    q's name weights; nothing is launched."""
    w = make_workload("causal", rows=8, keys=600, topk=512, dist="gaussian", seed=12, device="cuda", heads=64)
    ext = ops._native()
    out = torch.full((8, 512), -7, dtype=torch.int32, device=dev)
    buf = torch.empty((8, ops._pitch(600)), device=dev)
    q48 = w.q[:, :48].contiguous()

    def call(q, weights):
        if op == "fused":
            ext.fused_mqa_topk(q, w.k, w.scales, weights, w.starts, w.ends, out,
                               ops.fused_mqa_topk_workspace("cuda", 512), -1)
        else:
            ext.mqa_logits(q, w.k, w.scales, weights, w.starts, w.ends, buf)

    with pytest.raises(ValueError, match=r"^q: expected shape \[rows, heads, 128\] with heads 16, 32 or 64"):
        call(q48, w.weights[:, :48].contiguous())
    with pytest.raises(ValueError, match=r"^weights: "):
        call(w.q, w.weights[:, :32].contiguous())
    torch.cuda.synchronize()
    assert bool((out == -7).all())
