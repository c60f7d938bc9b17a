"""The op contract (contract.py) and the Python side of ops.py, on the CPU.

Every check is pinned at its boundary: the value that must pass, and one past
it on each side that must fail with a ``ContractError`` naming the argument.
Each test's docstring names the bug class it guards against.
"""
from __future__ import annotations

import pytest
import torch

from mqa_topk_cli import contract, ops
from mqa_topk_cli.contract import FP8, MAX_KEYS, check_logits, check_mqa_inputs, check_output, check_ranges, check_topk
from mqa_topk_cli.errors import ContractError, Unavailable
from mqa_topk_cli.reference import reference_topk


def _inputs(rows=3, keys=40, heads=32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(rows, heads, 128, generator=g).to(FP8)
    k = torch.randn(keys, 128, generator=g).to(FP8)
    scales = torch.rand(keys, generator=g) + 0.5
    weights = torch.randn(rows, heads, generator=g)
    starts = torch.zeros(rows, dtype=torch.int32)
    ends = torch.full((rows,), keys, dtype=torch.int32)
    return dict(q=q, k=k, scales=scales, weights=weights, starts=starts, ends=ends)


def _raises(arg: str, fn, *a, match: str = "", **kw) -> ContractError:
    with pytest.raises(ContractError) as ei:
        fn(*a, **kw)
    assert ei.value.arg == arg, ei.value
    assert str(ei.value).startswith(f"{arg}: "), ei.value
    assert match in str(ei.value), ei.value
    return ei.value


def _offset(t: torch.Tensor, nbytes: int) -> torch.Tensor:
    """A contiguous copy of ``t`` whose data pointer is ``nbytes`` past a 64-byte aligned one."""
    es = t.element_size()
    assert nbytes % es == 0
    buf = torch.empty(t.numel() + 64 // es + nbytes // es, dtype=t.dtype)
    base = (-buf.data_ptr() % 64) // es
    out = buf[base + nbytes // es: base + nbytes // es + t.numel()].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 64 == nbytes % 64
    return out


# --------------------------------------------------------------------------- check_mqa_inputs

def test_valid_inputs_pass_and_return_rows_and_keys():
    """Bug class: a check that rejects valid input (flipped comparison)."""
    assert check_mqa_inputs(**_inputs(3, 40)) == (3, 40)
    assert check_mqa_inputs(**_inputs(0, 1)) == (0, 1)


@pytest.mark.parametrize("arg", ["q", "k", "scales", "weights", "starts", "ends"])
def test_non_contiguous_inputs_are_rejected(arg):
    """Bug class: a removed contiguity check (the kernels read dense rows)."""
    x = _inputs(4, 48)
    t = x[arg]
    u = t.view(torch.uint8) if t.dtype == FP8 else t
    strided = torch.stack([u, u], dim=-1)[..., 0].view(t.dtype)  # same shape and values, last stride 2
    assert not strided.is_contiguous() and strided.shape == t.shape and torch.equal(strided.view(u.dtype), u)
    x[arg] = strided
    assert str(_raises(arg, check_mqa_inputs, **x)) == f"{arg}: must be contiguous"


@pytest.mark.parametrize("arg", ["q", "k", "scales", "weights"])
def test_16_byte_alignment_boundary(arg):
    """Bug class: a removed or weakened 16-byte alignment check (TMA and
    vector loads need it): offset 16 passes, one element before and after fails."""
    x = _inputs(2, 64)
    es = x[arg].element_size()
    for nbytes in (0, 16, 32):
        y = dict(x)
        y[arg] = _offset(x[arg], nbytes)
        assert check_mqa_inputs(**y) == (2, 64)
    for nbytes in (es, 16 - es, 16 + es, 8) if es < 8 else (es, 16 + es):
        y = dict(x)
        y[arg] = _offset(x[arg], nbytes)
        assert str(_raises(arg, check_mqa_inputs, **y)) == f"{arg}: data pointer must be 16-byte aligned"


def test_empty_tensors_skip_the_alignment_check():
    """Bug class: an alignment check on a tensor with no data (any pointer is fine)."""
    x = _inputs(0, 8)
    x["q"] = _offset(torch.empty((1, 32, 128), dtype=FP8), 1)[:0]
    assert check_mqa_inputs(**x) == (0, 8)


@pytest.mark.parametrize("arg,bad,msg", [
    ("q", lambda x: x["q"].to(torch.float32), "expected dtype torch.float8_e4m3fn, got torch.float32"),
    ("q", lambda x: x["q"][:, :24].contiguous(),
     "expected shape [rows, heads, 128] with heads 16, 32 or 64, got [3, 24, 128]"),
    ("q", lambda x: x["q"][:, :, :64].contiguous(),
     "expected shape [rows, heads, 128] with heads 16, 32 or 64, got [3, 32, 64]"),
    ("q", lambda x: x["q"].reshape(-1, 128), "expected shape [rows, heads, 128] with heads 16, 32 or 64, got [96, 128]"),
    ("weights", lambda x: x["weights"][:, :16].contiguous(),
     "expected shape [rows, heads] = [3, 32] (the heads of q), got [3, 16]"),
    ("k", lambda x: x["k"].to(torch.bfloat16), "expected dtype torch.float8_e4m3fn, got torch.bfloat16"),
    ("k", lambda x: x["k"][:, :64].contiguous(), "expected shape [keys, 128], got [40, 64]"),
    ("k", lambda x: x["k"].reshape(-1), "expected shape [keys, 128], got [5120]"),
    ("scales", lambda x: x["scales"].double(), "expected dtype torch.float32, got torch.float64"),
    ("scales", lambda x: x["scales"][1:].contiguous(), "expected shape [keys] = [40], got [39]"),
    ("scales", lambda x: x["scales"][:, None].repeat(1, 4), "expected shape [keys] = [40], got [40, 4]"),
    ("scales", lambda x: torch.full((x["k"].shape[0],), 127, dtype=torch.uint8),
     "expected dtype torch.float32, got torch.uint8"),
    ("scales", lambda x: torch.full((x["k"].shape[0], 4), 127, dtype=torch.uint8),
     "got UE8M0 [keys, 4] uint8 scales; convert them with fused_mqa_topk_key_scales() first"),
    ("weights", lambda x: x["weights"].half(), "expected dtype torch.float32, got torch.float16"),
    ("weights", lambda x: x["weights"][:, :31].contiguous(),
     "expected shape [rows, heads] = [3, 32] (the heads of q), got [3, 31]"),
    ("weights", lambda x: x["weights"][1:].contiguous(),
     "expected shape [rows, heads] = [3, 32] (the heads of q), got [2, 32]"),
    ("starts", lambda x: x["starts"].long(), "expected dtype torch.int32, got torch.int64"),
    ("starts", lambda x: x["starts"][1:].contiguous(), "expected shape [rows] = [3], got [2]"),
    ("ends", lambda x: x["ends"].float(), "expected dtype torch.int32, got torch.float32"),
    ("ends", lambda x: x["ends"][None].contiguous(), "expected shape [rows] = [3], got [1, 3]"),
])
def test_dtype_and_shape_errors_name_the_argument(arg, bad, msg):
    """Bug class: a skipped dtype/shape check, or an error naming the wrong argument or shape."""
    x = _inputs(3, 40)
    x[arg] = bad(x)
    assert str(_raises(arg, check_mqa_inputs, **x)) == f"{arg}: {msg}"


@pytest.mark.parametrize("arg", ["q", "k", "scales", "weights", "starts", "ends"])
def test_non_tensor_inputs_are_rejected(arg):
    """Bug class: an AttributeError deep inside instead of a contract error."""
    x = _inputs()
    x[arg] = x[arg].tolist()
    _raises(arg, check_mqa_inputs, **x, match="expected a torch.Tensor, got list")


@pytest.mark.parametrize("arg", ["k", "scales", "weights", "starts", "ends"])
def test_inputs_on_another_device_are_rejected(arg):
    """Bug class: a removed same-device check (a kernel reading host memory)."""
    x = _inputs()
    x[arg] = torch.empty(x[arg].shape, dtype=x[arg].dtype, device="meta")
    _raises(arg, check_mqa_inputs, **x, match="same device as q")


def test_key_limit_is_max_keys_inclusive(monkeypatch):
    """Bug class: an off-by-one in the key limit (MAX_KEYS is allowed, one more is not)."""
    def meta(keys):
        return dict(q=torch.empty((1, 32, 128), dtype=FP8, device="meta"),
                    k=torch.empty((keys, 128), dtype=FP8, device="meta"),
                    scales=torch.empty((keys,), device="meta"), weights=torch.empty((1, 32), device="meta"),
                    starts=torch.empty((1,), dtype=torch.int32, device="meta"),
                    ends=torch.empty((1,), dtype=torch.int32, device="meta"))

    # meta tensors hold no values: only the shape checks run here
    import mqa_topk_cli.contract as contract_mod

    monkeypatch.setattr(contract_mod, "check_ranges", lambda *a, **kw: None)
    assert check_mqa_inputs(**meta(MAX_KEYS), check_values=False) == (1, MAX_KEYS)
    assert check_mqa_inputs(**meta(MAX_KEYS - 1), check_values=False) == (1, MAX_KEYS - 1)
    _raises("k", check_mqa_inputs, **meta(MAX_KEYS + 1), check_values=False, match=f"exceeds the limit of {MAX_KEYS}")
    assert MAX_KEYS == 1 << 22


@pytest.mark.parametrize("heads, limit", [(16, (1 << 26) - 1), (32, (1 << 26) - 1), (64, (1 << 25) - 1)])
def test_row_limit_is_max_rows_inclusive(monkeypatch, heads, limit):
    """Bug class: an off-by-one in the row limit, a limit that ignores the
    heads (rows * heads must fit int32), or its error naming the wrong argument."""
    from mqa_topk_cli.contract import MAX_ROWS, max_rows

    def meta(rows):
        return dict(q=torch.empty((rows, heads, 128), dtype=FP8, device="meta"),
                    k=torch.empty((16, 128), dtype=FP8, device="meta"),
                    scales=torch.empty((16,), device="meta"), weights=torch.empty((rows, heads), device="meta"),
                    starts=torch.empty((rows,), dtype=torch.int32, device="meta"),
                    ends=torch.empty((rows,), dtype=torch.int32, device="meta"))

    # meta tensors hold no values: only the shape checks run here
    import mqa_topk_cli.contract as contract_mod

    monkeypatch.setattr(contract_mod, "check_ranges", lambda *a, **kw: None)
    assert max_rows(heads) == limit == (1 << 31) // max(heads, 32) - 1  # (16 heads run as 32)
    assert check_mqa_inputs(**meta(limit), check_values=False) == (limit, 16)
    e = _raises("q", check_mqa_inputs, **meta(limit + 1), check_values=False)
    why = "rows * 32 must fit int32; 16 heads run as 32" if heads == 16 else f"rows * {heads} must fit int32"
    assert str(e) == f"q: {limit + 1} rows exceeds the limit of {limit} at {heads} heads ({why})"
    assert MAX_ROWS == max_rows(32) == (1 << 31) // 32 - 1


@pytest.mark.parametrize("heads", [16, 32, 64])
def test_every_supported_heads_is_accepted(heads):
    """Bug class: a contract still pinned to 32 heads (or missing one of 16 / 64)."""
    assert check_mqa_inputs(**_inputs(3, 40, heads)) == (3, 40)
    assert contract.mqa_heads(_inputs(3, 40, heads)["q"]) == heads
    assert contract.check_heads(heads) == heads
    assert contract.SUPPORTED_HEADS == (16, 32, 64) and contract.DEFAULT_HEADS == contract.HEADS == 32


@pytest.mark.parametrize("heads", [1, 8, 15, 17, 24, 31, 33, 48, 63, 65, 96, 128])
def test_other_heads_are_refused_naming_q(heads):
    """Bug class: a heads check that lets an unsupported H through (the
    kernels are built for 16 / 32 / 64 only), or an error naming weights (which match)."""
    e = _raises("q", check_mqa_inputs, **_inputs(2, 40, heads))
    assert str(e) == f"q: expected shape [rows, heads, 128] with heads 16, 32 or 64, got [2, {heads}, 128]"
    assert "\n" not in str(e)
    with pytest.raises(ContractError) as ei:
        contract.check_heads(heads)
    assert str(ei.value) == f"heads: must be one of (16, 32, 64), got {heads}"


@pytest.mark.parametrize("q_heads, w_heads", [(16, 32), (32, 16), (32, 64), (64, 32), (64, 16), (16, 64)])
def test_weights_that_do_not_match_the_heads_of_q_name_weights(q_heads, w_heads):
    """Bug class: weights checked against a fixed 32 (or not at all) instead of q's heads."""
    x = _inputs(3, 40, q_heads)
    x["weights"] = _inputs(3, 40, w_heads)["weights"]
    e = _raises("weights", check_mqa_inputs, **x)
    assert str(e) == f"weights: expected shape [rows, heads] = [3, {q_heads}] (the heads of q), got [3, {w_heads}]"


@pytest.mark.parametrize("bad", [True, 32.0, "32", None, 0])
def test_check_heads_refuses_non_ints(bad):
    """Bug class: a bool (True == 1) or a float passing as a heads count."""
    with pytest.raises(ContractError, match="^heads: must be one of"):
        contract.check_heads(bad)


def test_cpu_ranges_are_checked_whatever_check_values_says():
    """Bug class: the capturable mode's skip (CUDA tensors: ranges checked on
    the device instead) applied to CPU tensors, whose check costs no sync.
    The CUDA side of check_values is tested in test_ops_serving.py."""
    x = _inputs(2, 10)
    x["ends"] = torch.tensor([11, 3], dtype=torch.int32)
    _raises("ends", check_mqa_inputs, **x, check_values=False, match="<= keys = 10")
    _raises("ends", check_mqa_inputs, **x, match="<= keys = 10")
    x["ends"] = torch.tensor([10, 3], dtype=torch.int32)
    assert check_mqa_inputs(**x, check_values=False) == (2, 10)


# --------------------------------------------------------------------------- check_ranges

def _r(v):
    return torch.tensor(v, dtype=torch.int32)


def test_ranges_boundaries_pass():
    """Bug class: off-by-one in a range check (start == 0, end == start, end == keys are valid)."""
    check_ranges(_r([0, 5, 10, 0]), _r([0, 5, 10, 10]), 10)
    check_ranges(_r([]), _r([]), 0)


@pytest.mark.parametrize("starts,ends,arg,match", [
    ([0, -1, 0], [1, 1, 1], "starts", "must be >= 0 (row 1 has -1)"),
    ([0, 0, -3], [1, 1, -2], "starts", "must be >= 0 (row 2 has -3)"),
    ([0, 4, 2], [1, 3, 1], "ends", "must be >= starts (row 1: start 4, end 3)"),
    ([0, 0, 0], [10, 11, 12], "ends", "must be <= keys = 10 (row 1 has 11)"),
    ([0, 0, 0], [10, 10, 11], "ends", "must be <= keys = 10 (row 2 has 11)"),
])
def test_ranges_one_past_fail_naming_the_first_bad_row(starts, ends, arg, match):
    """Bug class: a flipped or off-by-one range comparison, or a message naming the wrong row."""
    _raises(arg, check_ranges, _r(starts), _r(ends), 10, match=match)


# --------------------------------------------------------------------------- check_output / check_topk / check_logits

def test_check_output_boundaries():
    """Bug class: accepting an output the kernels would write out of bounds."""
    for t in contract.TOPKS:
        assert check_output(torch.empty((3, t), dtype=torch.int32), 3, torch.device("cpu")) == t
    cpu = torch.device("cpu")
    _raises("output", check_output, [[1]], 3, cpu, match="expected a torch.Tensor")
    _raises("output", check_output, torch.empty((3, 512), dtype=torch.int64), 3, cpu, match="dtype")
    _raises("output", check_output, torch.empty((4, 512), dtype=torch.int32), 3, cpu, match="[rows=3, topk]")
    _raises("output", check_output, torch.empty((3, 512, 1), dtype=torch.int32), 3, cpu, match="[rows=3, topk]")
    for bad in (511, 513, 256, 4096):
        _raises("output", check_output, torch.empty((3, bad), dtype=torch.int32), 3, cpu, match=f"got {bad}")
    nc = torch.empty((512, 3), dtype=torch.int32).t()
    _raises("output", check_output, nc, 3, cpu, match="contiguous")
    _raises("output", check_output, _offset(torch.zeros((3, 512), dtype=torch.int32), 4), 3, cpu, match="aligned")
    _raises("output", check_output, _offset(torch.zeros((3, 512), dtype=torch.int32), 12), 3, cpu, match="aligned")
    assert check_output(_offset(torch.zeros((3, 512), dtype=torch.int32), 16), 3, cpu) == 512
    _raises("output", check_output, torch.empty((3, 512), dtype=torch.int32, device="meta"), 3, cpu, match="must be on")


def test_check_topk():
    """Bug class: accepting a top-k the kernels are not built for."""
    for t in (512, 1024, 2048):
        assert check_topk(t) == t
    for bad in (511, 513, 0, 4096, 512.0, "512", None):
        _raises("topk", check_topk, bad, match="must be one of")


def test_check_logits_boundaries():
    """Bug class: accepting logits rows the top-k kernel would read past."""
    lg = torch.zeros((3, 20))
    s, e = _r([0, 0, 5]), _r([20, 0, 6])
    assert check_logits(lg, s, e) == (3, 20)
    # a padded row stride (a view of a wider buffer) is fine; column stride 1 is required
    assert check_logits(torch.zeros((3, 24))[:, :20], s, e) == (3, 20)
    assert check_logits(torch.zeros((1, 20)), s[:1], e[:1]) == (1, 20)
    assert str(_raises("logits", check_logits, torch.zeros((20, 3)).t(), s, e)) == \
        "logits: rows must be dense (column stride 1, row stride >= width)"
    assert str(_raises("ends", check_logits, lg, s, e[:2])) == "ends: expected shape [rows] = [3], got [2]"
    _raises("logits", check_logits, torch.zeros((3, 40))[:, ::2], s, e, match="dense")
    # overlapping rows: row stride below the width
    overlapping = torch.zeros(80).as_strided((3, 20), (19, 1))
    _raises("logits", check_logits, overlapping, s, e, match="dense")
    _raises("logits", check_logits, torch.zeros(80).as_strided((2, 20), (19, 1)), s[:2], e[:2], match="dense")
    assert check_logits(torch.zeros(80).as_strided((3, 20), (20, 1)), s, e) == (3, 20)
    _raises("logits", check_logits, torch.zeros((3, 20), dtype=torch.float64), s, e, match="dtype")
    _raises("logits", check_logits, torch.zeros((60,)), s, e, match="[rows, width]")
    _raises("logits", check_logits, "x", s, e, match="torch.Tensor")
    _raises("starts", check_logits, lg, [0, 0, 5], e, match="expected a torch.Tensor, got list")
    _raises("ends", check_logits, lg, s, (20, 0, 6), match="expected a torch.Tensor, got tuple")
    # a single row may have any row stride (there is no second row to overlap)
    assert check_logits(torch.zeros(40).as_strided((1, 20), (5, 1)), s[:1], e[:1]) == (1, 20)
    _raises("starts", check_logits, lg, s.long(), e, match="dtype")
    _raises("ends", check_logits, lg, s, e[:2], match="[rows]")
    _raises("ends", check_logits, lg, s, torch.stack([e, e], 1)[:, 0], match="contiguous")
    _raises("starts", check_logits, lg, torch.empty(3, dtype=torch.int32, device="meta"), e, match="same device")
    _raises("ends", check_logits, lg, s, _r([20, 0, 21]), match="<= keys = 20 (row 2 has 21)")


def test_logits_width_limit():
    """Bug class: an off-by-one in the logits width limit."""
    s = torch.zeros(1, dtype=torch.int32)
    e = torch.ones(1, dtype=torch.int32)
    big = torch.empty(MAX_KEYS + 1, dtype=torch.float32)
    assert check_logits(big[:MAX_KEYS].view(1, MAX_KEYS), s, e) == (1, MAX_KEYS)
    _raises("logits", check_logits, big.view(1, MAX_KEYS + 1), s, e, match=f"exceeds the key limit {MAX_KEYS}")


# --------------------------------------------------------------------------- ops: UE8M0 scales

def _ue8m0(exps):
    return torch.tensor(exps, dtype=torch.uint8)[:, None].repeat(1, 4).contiguous()


def test_key_scales_are_two_to_the_exponent_minus_127():
    """Bug class: a wrong bit trick (shift, bias, byte) in the UE8M0 conversion."""
    exps = [1, 2, 100, 126, 127, 128, 200, 253, 254]
    got = ops.fused_mqa_topk_key_scales(_ue8m0(exps))
    assert got.dtype == torch.float32 and got.shape == (len(exps),)
    want = [2.0 ** (e - 127) for e in exps]
    assert got.tolist() == want  # exact: powers of two
    assert got[0].item() == 2.0 ** -126 and got[-1].item() == 2.0 ** 127  # the smallest and largest normal scale
    assert ops.fused_mqa_topk_key_scales(torch.empty((0, 4), dtype=torch.uint8)).shape == (0,)


@pytest.mark.parametrize("e", [0, 255])
def test_key_scales_reject_exponents_0_and_255(e):
    """Bug class: accepting exponent 0 (fp32 scale 0.0: every logit of the key
    is 0) or 255 (scale +inf: NaN/inf logits); SPEC §1 needs scales > 0."""
    for i, exps in enumerate(([e], [127, e, 127], [127, 127, e, 255 - e])):
        _raises("ue8m0_scales", ops.fused_mqa_topk_key_scales, _ue8m0(exps), match=f"key {i} has exponent {e}: ")


def test_key_scales_contract():
    """Bug class: converting malformed UE8M0 scales silently."""
    f = ops.fused_mqa_topk_key_scales
    assert str(_raises("ue8m0_scales", f, [[127] * 4])) == "ue8m0_scales: expected a torch.Tensor, got list"
    _raises("ue8m0_scales", f, _ue8m0([127]).to(torch.int32), match="uint8 [keys, 4]")
    _raises("ue8m0_scales", f, torch.full((3, 3), 127, dtype=torch.uint8), match="uint8 [keys, 4]")
    _raises("ue8m0_scales", f, torch.full((3, 5), 127, dtype=torch.uint8), match="uint8 [keys, 4]")
    _raises("ue8m0_scales", f, torch.full((12,), 127, dtype=torch.uint8), match="uint8 [keys, 4]")
    assert str(_raises("ue8m0_scales", f, torch.full((4, 3), 127, dtype=torch.uint8).t())) == \
        "ue8m0_scales: must be contiguous"
    for byte in range(4):
        s = _ue8m0([127, 127, 127])
        s[1, byte] = 128
        assert str(_raises("ue8m0_scales", f, s)) == \
            "ue8m0_scales: the four bytes of each key must be equal (one UE8M0 exponent)"


# --------------------------------------------------------------------------- ops: the rest of the Python side

def test_top_k_per_row_prefill_on_cpu_matches_the_reference():
    """Bug class: a wrong tie order, count or padding in the torch top-k
    (unordered output compared as sets; ties go to the lowest indices)."""
    g = torch.Generator().manual_seed(3)
    rows, width, topk = 9, 1400, 512
    buf = torch.randint(-2, 3, (rows, width + 4), generator=g).to(torch.float32)  # 5 values: heavy ties
    logits = buf[:, :width]  # row stride 1404 > width
    starts = _r([0, 3, 100, 0, 700, 10, 1399, 5, 0])
    ends = _r([1400, 3, 611, 512, 1213, 523, 1400, 1400, 1])  # n = 1400, 0, 511, 512, 513, 513, 1, 1395, 1
    out = torch.full((rows, topk), 12345, dtype=torch.int32)
    ops.top_k_per_row_prefill(logits, starts, ends, out)
    want = reference_topk(logits.contiguous(), starts, ends, topk)
    assert torch.equal(torch.sort(out, 1).values, torch.sort(want, 1).values)
    n = (ends - starts).tolist()
    for r in range(rows):
        assert int((out[r] >= 0).sum()) == min(topk, n[r])
        assert int((out[r] == -1).sum()) == topk - min(topk, n[r])


def test_top_k_per_row_prefill_edge_shapes():
    """Bug class: crashes or stale output on zero rows / zero width."""
    out = torch.full((2, 512), 7, dtype=torch.int32)
    ops.top_k_per_row_prefill(torch.zeros((2, 0)), _r([0, 0]), _r([0, 0]), out)
    assert bool((out == -1).all())
    # narrower than topk, rows starting past 0: every visible key, relative to the start
    out = torch.full((3, 512), 7, dtype=torch.int32)
    ops.top_k_per_row_prefill(torch.tensor([[1.0, 2, 3, 4, 5]] * 3), _r([2, 0, 4]), _r([5, 5, 4]), out)
    assert [sorted(x for x in row if x >= 0) for row in out.tolist()] == [[0, 1, 2], [0, 1, 2, 3, 4], []]
    assert [sum(1 for x in row if x == -1) for row in out.tolist()] == [509, 507, 512]
    one = torch.full((2, 512), 7, dtype=torch.int32)  # width 1: one row sees its key, one sees none
    ops.top_k_per_row_prefill(torch.tensor([[3.0], [4.0]]), _r([0, 1]), _r([1, 1]), one)
    assert one[0].tolist() == [0] + [-1] * 511 and one[1].tolist() == [-1] * 512
    empty = torch.empty((0, 512), dtype=torch.int32)
    ops.top_k_per_row_prefill(torch.zeros((0, 5)), _r([]), _r([]), empty)
    _raises("output", ops.top_k_per_row_prefill, torch.zeros((2, 5)), _r([0, 0]), _r([5, 5]),
            torch.empty((2, 500), dtype=torch.int32))


def test_native_ops_on_cpu_check_the_contract_then_say_unavailable():
    """Bug class: a native op running (or crashing) on a CPU tensor, or skipping its contract checks."""
    x = _inputs(2, 32)
    out = torch.empty((2, 512), dtype=torch.int32)
    with pytest.raises(Unavailable, match="^mqa_logits: "):
        ops.mqa_logits(**x)
    with pytest.raises(Unavailable, match="^dense_mqa_topk_prefill: "):
        ops.dense_mqa_topk_prefill(**x, output=out)
    with pytest.raises(Unavailable, match="^fused_mqa_topk_prefill: "):
        ops.fused_mqa_topk_prefill(**x, output=out)
    with pytest.raises(Unavailable, match="CUDA"):
        ops.fused_mqa_topk_workspace("cpu", 512)
    bad = dict(x, ends=_r([33, 1]))
    for op in (ops.mqa_logits, ops.dense_mqa_topk_prefill, ops.fused_mqa_topk_prefill):
        kw = {} if op is ops.mqa_logits else {"output": out}
        _raises("ends", op, **bad, **kw)
    _raises("output", ops.dense_mqa_topk_prefill, **x, output=torch.empty((3, 512), dtype=torch.int32))
    _raises("output", ops.fused_mqa_topk_prefill, **x, output=torch.empty((2, 100), dtype=torch.int32))
    for bad_budget in (0, -1, 1.5, "1"):
        _raises("max_logits_bytes", ops.dense_mqa_topk_prefill, **x, output=out, max_logits_bytes=bad_budget)
    with pytest.raises(Unavailable):  # 1 byte is a valid (tiny) budget: the contract passes
        ops.dense_mqa_topk_prefill(**x, output=out, max_logits_bytes=1)


def test_fused_workspace_size():
    """Bug class: a workspace formula that drifts from the kernels' layouts.
    The split kernel's is the largest (fused_blocks_workspace_bytes of the
    split configuration: 128-byte header, per SM 8 counter words and 3 x 256
    record words, then 3 candidate regions per SM of 8 rows x 8 segments x
    (key, index) x cap words, cap = (k + 1920) / 4 rounded up to 4, then per
    region two 8-row x 256-bin histograms), but below 16 SMs the hybrid
    kernel's whole part is larger; the GPU tests check it against the
    extension's own figure."""
    for t in (512, 1024, 2048):
        cap = ((t + 1920) // 4 + 3) & ~3
        for sms in (1, 14, 16, 132):
            split = 128 + sms * 776 * 4 + 3 * sms * 8 * 8 * 2 * cap * 4 + 3 * sms * 2 * 8 * 256 * 4
            hybrid = 128 + (sms + 32) * 8 * 8 * 2 * cap * 4  # (the hybrid kernel's whole part: SMs + 2 x 16 CTAs)
            assert ops.fused_mqa_topk_workspace_bytes(t, sms) == max(split, hybrid)
            assert (split > hybrid) == (sms >= 16)
    assert [((t + 1920) // 4 + 3) & ~3 for t in (512, 1024, 2048)] == [608, 736, 992]  # Sm90FusedBlocksConfig::cap
    mib = [ops.fused_mqa_topk_workspace_bytes(t, 132) / 2**20 for t in (512, 1024, 2048)]
    assert [round(m, 1) for m in mib] == [124.1, 148.9, 198.4]  # the figures the README gives
    for bad in (0, -1, 1.0, None, True):
        _raises("num_sms", ops.fused_mqa_topk_workspace_bytes, 512, bad)
    for bad in (511, 513, 4096):
        _raises("topk", ops.fused_mqa_topk_workspace_bytes, bad, 132, match=f"must be one of (512, 1024, 2048), got {bad}")
    _raises("num_sms", ops.fused_mqa_topk_workspace_bytes, 512, 0, match="must be a positive int, got 0")


def test_logits_pitch():
    """Bug class: a logits row pitch that is not a multiple of 4 floats (16 B) or drops columns."""
    assert [ops._pitch(w) for w in (0, 1, 3, 4, 5, 8, 9)] == [4, 4, 4, 4, 8, 8, 12]
    assert ops.LOGITS_PITCH == 4 and ops.DEFAULT_MAX_LOGITS_BYTES == 512 << 20


# --------------------------------------------------------------------------- ops host logic with a fake extension

class FakeExt:
    """Stands in for the JIT extension on the CPU: mqa_logits writes the
    reference logits of its arguments into the given buffer (and poisons the
    rest of the row), topk_per_row writes the reference top-k of the logits,
    fused_mqa_topk records its arguments; a clean device error word."""

    OK = (1 << 64) - 1

    def __init__(self):
        import ctypes

        self.logits_calls = []
        self.topk_calls = []
        self.fused_calls = []
        self.mirror = ctypes.c_uint64(self.OK)

    def range_error_mirror_address(self, index):
        import ctypes

        return ctypes.addressof(self.mirror)

    def range_error_take(self, index):
        return 0

    def mqa_logits(self, q, k, scales, weights, starts, ends, out, row_base=0):
        from mqa_topk_cli.reference import reference_logits

        assert out.dtype == torch.float32 and out.shape[0] == q.shape[0] and out.shape[1] % 4 == 0
        assert out.shape[1] >= k.shape[0] and k.data_ptr() % 16 == 0 and scales.data_ptr() % 16 == 0
        self.logits_calls.append((q.shape[0], k.shape[0], starts.clone(), ends.clone(), row_base))
        out.fill_(float("nan"))
        out[:, : k.shape[0]] = reference_logits(q, k, scales, weights, starts, ends)

    def topk_per_row(self, logits, starts, ends, output, row_base=0):
        from mqa_topk_cli.reference import reference_topk

        self.topk_calls.append((logits.shape[0], row_base))
        output.copy_(reference_topk(logits, starts, ends, output.shape[1]))

    def fused_mqa_topk(self, *args):
        self.fused_calls.append(args)


@pytest.fixture
def fake_ext(monkeypatch):
    ext = FakeExt()
    monkeypatch.setattr(ops, "_native", lambda: ext)
    monkeypatch.setattr(ops, "_require_cuda", lambda t, op: None)
    monkeypatch.setattr(ops, "_mirrors", {})
    return ext


@pytest.mark.parametrize("budget", [ops.DEFAULT_MAX_LOGITS_BYTES, 3 * 1024 * 4 + 4, 1])
def test_dense_path_chunks_rows_and_key_spans_correctly(fake_ext, budget):
    """Bug class: a chunking bug in the dense path (wrong row slice, key span
    not covering a row, starts/ends not made relative, a 16-key misalignment):
    the chunked result must equal the unchunked reference top-k."""
    from mqa_topk_cli.reference import reference_mqa_topk
    from mqa_topk_cli.workloads import make_workload

    w = make_workload("ragged", rows=11, keys=1013, topk=512, dist="ties", seed=4, requests=3, unaligned_starts=True)
    out = torch.full((w.rows, 512), 99, dtype=torch.int32)
    ops.dense_mqa_topk_prefill(w.q, w.k, w.scales, w.weights, w.starts, w.ends, out, max_logits_bytes=budget)
    want = reference_mqa_topk(w)
    assert torch.equal(torch.sort(out, 1).values, torch.sort(want, 1).values)
    full_pitch = -(-w.keys // 4) * 4
    per_call = max(1, min(w.rows, budget // (full_pitch * 4)))
    starts0 = list(range(0, w.rows, per_call))
    assert [c[0] for c in fake_ext.logits_calls] == [min(per_call, w.rows - r0) for r0 in starts0]
    for r0, (n, keys, st, en, base) in zip(starts0, fake_ext.logits_calls):
        # every chunk sees all keys with its rows' own ranges; the row offset
        # lets the kernels report absolute rows
        assert keys == w.keys and base == r0
        assert torch.equal(st, w.starts[r0:r0 + n]) and torch.equal(en, w.ends[r0:r0 + n])
    assert [c[1] for c in fake_ext.topk_calls] == starts0


def test_dense_path_rows_seeing_no_keys(fake_ext):
    """Bug class: rows that see no key left unwritten (they must be -1), or a launch for zero rows."""
    w = _inputs(3, 64)
    w["starts"] = _r([32, 32, 48])  # 16-aligned, so each chunk's span [lo, hi) is empty
    w["ends"] = _r([32, 32, 48])
    out = torch.full((3, 512), 7, dtype=torch.int32)
    ops.dense_mqa_topk_prefill(**w, output=out, max_logits_bytes=64 * 4 * 2)
    assert bool((out == -1).all())
    calls = len(fake_ext.logits_calls)
    empty = _inputs(0, 64)
    ops.dense_mqa_topk_prefill(**empty, output=torch.empty((0, 512), dtype=torch.int32))
    assert len(fake_ext.logits_calls) == calls  # no rows: no launch


def test_mqa_logits_returns_the_padded_buffer_view(fake_ext):
    """Bug class: a logits row pitch that drops keys or is not 16-byte aligned."""
    x = _inputs(2, 37)
    out = ops.mqa_logits(**x)
    assert out.shape == (2, 37) and out.stride(0) == 40 and out.stride(1) == 1
    from mqa_topk_cli.reference import reference_logits

    assert torch.equal(out, reference_logits(**x))
    assert ops.mqa_logits(**_inputs(0, 8)).shape == (0, 8) and fake_ext.logits_calls[-1][0] == 2


def test_fused_prefill_passes_its_arguments_and_the_workspace(fake_ext, monkeypatch):
    """Bug class: arguments dropped or reordered on the way to the kernel, or a
    workspace for the wrong topk."""
    got = []
    monkeypatch.setattr(ops, "_workspace", lambda index, topk: got.append((index, topk)) or "WS")
    x = _inputs(2, 32)
    out = torch.empty((2, 1024), dtype=torch.int32)
    ops.fused_mqa_topk_prefill(**x, output=out)
    assert got == [(x["q"].get_device(), 1024)]
    args = fake_ext.fused_calls[-1]
    assert [a is b for a, b in zip(args, (x["q"], x["k"], x["scales"], x["weights"], x["starts"], x["ends"], out))] \
        == [True] * 7 and args[7] == "WS" and args[8] == -1 and len(args) == 9
    ws = torch.empty(10, dtype=torch.uint8)
    ops.fused_mqa_topk_prefill(**x, output=out, workspace=ws)
    assert fake_ext.fused_calls[-1][7] is ws and len(got) == 1
    _raises("workspace", ops.fused_mqa_topk_prefill, **x, output=out, workspace=b"12", match="got bytes")
    # kernel=: a name to the extension's index; anything else refused before the launch
    for i, name in enumerate(ops.FUSED_KERNELS):
        ops.fused_mqa_topk_prefill(**x, output=out, kernel=name)
        assert fake_ext.fused_calls[-1][8] == i
    calls = len(fake_ext.fused_calls)
    for bad in ("v2", "Whole", 1, ""):
        _raises("kernel", ops.fused_mqa_topk_prefill, **x, output=out, kernel=bad)
    monkeypatch.setattr(ops, "FUSED_KERNEL", "staged")  # MQA_TOPK_FUSED_KERNEL, as read at import
    ops.fused_mqa_topk_prefill(**x, output=out)
    assert fake_ext.fused_calls[-1][8] == 2
    ops.fused_mqa_topk_prefill(**x, output=out, kernel="split")  # the argument wins
    assert fake_ext.fused_calls[-1][8] == 1
    monkeypatch.setattr(ops, "FUSED_KERNEL", "banana")
    _raises("MQA_TOPK_FUSED_KERNEL", ops.fused_mqa_topk_prefill, **x, output=out)
    assert len(fake_ext.fused_calls) == calls + 2
