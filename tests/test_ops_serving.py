"""CPU tests of the serving-grade op contract (issue 14): the default call of
every op does no host sync and no host-device copy, host-side checks still
raise their one-line errors, device range errors are decoded and raised at the
next op call / ``check_errors()``, and the record layout agrees with
``csrc/include/mqa_topk/common/range_check.cuh``.

No GPU: the ops run on ``FakeCuda`` tensors (CPU tensors that answer
``is_cuda``/``get_device`` like CUDA ones) against a fake extension that records
the launches; every host-sync primitive is patched to fail the test.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mqa_topk_cli import contract, ops
from mqa_topk_cli.errors import ContractError

ROOT = Path(__file__).resolve().parent.parent
OK = (1 << 64) - 1


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it lives on cuda:0 (for the ops' checks only)."""

    @property
    def is_cuda(self):  # noqa: D401
        return True

    def get_device(self):
        return 0


def fake(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(FakeCuda)


class FakeExt:
    """Records launcher calls; a settable error word and its mirror."""

    def __init__(self):
        self.calls = []
        self.mirror = ctypes.c_uint64(OK)
        self.word = OK
        self.outside_capture = []

    def range_error_mirror_address(self, index):
        return ctypes.addressof(self.mirror)

    def range_error_take(self, index):
        v, self.word = self.word, OK
        self.mirror.value = OK
        return 0 if v == OK else v

    def record(self, code):  # what a kernel does when it finds a bad row
        self.word = min(self.word, code)
        self.mirror.value = self.word

    def empty_outside_capture(self, nbytes, index):
        self.outside_capture.append((nbytes, index))
        return torch.empty(nbytes, dtype=torch.uint8)

    def mqa_logits(self, q, k, scales, weights, starts, ends, logits, row_base=0):
        self.calls.append(("mqa_logits", q.shape[0], starts.shape[0], row_base))

    def topk_per_row(self, logits, starts, ends, output, row_base=0):
        self.calls.append(("topk_per_row", logits.shape[0], logits.shape[1], row_base))

    def fused_mqa_topk(self, q, k, scales, weights, starts, ends, output, workspace, kernel=-1):
        self.calls.append(("fused_mqa_topk", q.shape[0], workspace.numel(), 0))


def inputs(rows=13, keys=700, topk=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(rows, 32, 128, generator=g)).to(torch.float8_e4m3fn)
    k = (torch.randn(keys, 128, generator=g)).to(torch.float8_e4m3fn)
    scales = torch.rand(keys, generator=g) + 0.5
    weights = torch.randn(rows, 32, generator=g)
    ends = torch.arange(keys - rows + 1, keys + 1, dtype=torch.int32)
    starts = torch.zeros(rows, dtype=torch.int32)
    out = torch.empty(rows, topk, dtype=torch.int32)
    return dict(q=q, k=k, scales=scales, weights=weights, starts=starts, ends=ends, output=out)


def fake_inputs(**kw):
    return {n: fake(t) for n, t in inputs(**kw).items()}


class Synced(AssertionError):
    pass


SYNC_TENSOR_METHODS = ("item", "tolist", "cpu", "numpy", "to", "nonzero", "__bool__", "__int__", "__float__",
                       "__index__", "__array__")


@pytest.fixture
def no_sync(monkeypatch):
    """``no_sync()`` (call it once the inputs are built): from then on every
    host-sync / host-copy primitive raises ``Synced``."""

    def boom(name):
        def f(*a, **k):
            raise Synced(f"host sync/copy on the default path: {name}")
        return f

    def arm():
        for name in SYNC_TENSOR_METHODS:
            monkeypatch.setattr(torch.Tensor, name, boom(f"Tensor.{name}"), raising=False)
        for name in ("synchronize", "is_current_stream_capturing"):
            monkeypatch.setattr(torch.cuda, name, boom(f"torch.cuda.{name}"))
        for name in ("tensor", "as_tensor", "from_numpy"):
            monkeypatch.setattr(torch, name, boom(f"torch.{name}"))
        monkeypatch.setattr(contract, "check_ranges", boom("contract.check_ranges"))

    return arm


@pytest.fixture
def ext(monkeypatch):
    e = FakeExt()
    monkeypatch.setattr(ops, "_native", lambda: e)
    monkeypatch.setattr(ops, "_mirrors", {})
    monkeypatch.setattr(ops, "_workspaces", {})
    monkeypatch.setattr(ops, "_raw_stream", lambda index: 1234)
    monkeypatch.setattr(ops, "CHECKED", False)
    return e


def seed_workspace(topk=512):
    ops._workspaces[(0, topk, 1234)] = torch.empty(ops.fused_mqa_topk_workspace_bytes(topk, 132), dtype=torch.uint8)


def call(op, t, **kw):
    if op == "mqa_logits":
        return ops.mqa_logits(t["q"], t["k"], t["scales"], t["weights"], t["starts"], t["ends"], **kw)
    if op == "top_k_per_row_prefill":
        logits = fake(torch.randn(t["q"].shape[0], t["k"].shape[0]))
        return ops.top_k_per_row_prefill(logits, t["starts"], t["ends"], t["output"], **kw)
    if op == "dense_mqa_topk_prefill":
        return ops.dense_mqa_topk_prefill(t["q"], t["k"], t["scales"], t["weights"], t["starts"], t["ends"],
                                          t["output"], **kw)
    if op == "fused_mqa_topk_prefill":
        if t["output"].shape[-1] in contract.TOPKS:
            seed_workspace(t["output"].shape[-1])
        return ops.fused_mqa_topk_prefill(t["q"], t["k"], t["scales"], t["weights"], t["starts"], t["ends"],
                                          t["output"], **kw)
    raise AssertionError(op)


OPS = ["mqa_logits", "top_k_per_row_prefill", "dense_mqa_topk_prefill", "fused_mqa_topk_prefill"]
LAUNCHES = {"mqa_logits": ["mqa_logits"], "top_k_per_row_prefill": ["topk_per_row"],
            "dense_mqa_topk_prefill": ["mqa_logits", "topk_per_row"], "fused_mqa_topk_prefill": ["fused_mqa_topk"]}


# --------------------------------------------------------------------------- no sync on the default path

@pytest.mark.parametrize("op", OPS)
def test_default_call_launches_without_any_host_sync(ext, no_sync, op):
    t = fake_inputs()
    t["starts"][3] = -5  # a bad value is not looked at on the host
    if op == "fused_mqa_topk_prefill":
        seed_workspace()
    no_sync()
    call(op, t)
    assert [c[0] for c in ext.calls] == LAUNCHES[op]


def test_the_harness_catches_a_sync(ext, no_sync):
    """The patched primitives do fire: checked mode reads the values back."""
    t = fake_inputs()
    no_sync()
    with pytest.raises(Synced):
        call("mqa_logits", t, checked=True)
    assert ext.calls == []


def test_dense_chunks_pass_their_first_row_and_never_sync(ext, no_sync):
    t = fake_inputs(rows=13, keys=700)
    pitch = ops._pitch(700)
    no_sync()
    ops.dense_mqa_topk_prefill(t["q"], t["k"], t["scales"], t["weights"], t["starts"], t["ends"], t["output"],
                               max_logits_bytes=3 * pitch * 4)
    logits_calls = [c for c in ext.calls if c[0] == "mqa_logits"]
    topk_calls = [c for c in ext.calls if c[0] == "topk_per_row"]
    assert [c[3] for c in logits_calls] == [0, 3, 6, 9, 12]
    assert [c[3] for c in topk_calls] == [0, 3, 6, 9, 12]
    assert [c[1] for c in topk_calls] == [3, 3, 3, 3, 1]
    assert all(c[2] == 700 for c in topk_calls)  # full width: ranges are not shifted on the host


def test_dense_with_no_keys_still_launches_the_range_check(ext, no_sync):
    t = fake_inputs(rows=4, keys=16)
    t["k"] = t["k"][:0]
    t["scales"] = t["scales"][:0]
    no_sync()
    ops.dense_mqa_topk_prefill(t["q"], t["k"], t["scales"], t["weights"], t["starts"], t["ends"], t["output"])
    assert [c[0] for c in ext.calls] == ["mqa_logits", "topk_per_row"]


# --------------------------------------------------------------------------- checked mode

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("how", ["argument", "environment"])
def test_checked_mode_raises_before_launching(ext, monkeypatch, op, how):
    t = fake_inputs()
    t["starts"][4] = -1
    kw = {"checked": True} if how == "argument" else {}
    if how == "environment":
        monkeypatch.setattr(ops, "CHECKED", True)
    with pytest.raises(ContractError, match=r"^starts: must be >= 0 \(row 4 has -1\)$"):
        call(op, t, **kw)
    assert ext.calls == []


def test_checked_false_overrides_the_environment(ext, no_sync, monkeypatch):
    monkeypatch.setattr(ops, "CHECKED", True)
    t = fake_inputs()
    seed_workspace()
    no_sync()
    call("fused_mqa_topk_prefill", t, checked=False)
    assert [c[0] for c in ext.calls] == ["fused_mqa_topk"]


@pytest.mark.parametrize("name,value,expect", [("MQA_TOPK_CHECKED", "1", "True None"),
                                              ("MQA_TOPK_CHECKED", "off", "False None"),
                                              ("MQA_TOPK_FUSED_KERNEL", " Staged ", "False staged"),
                                              ("MQA_TOPK_FUSED_KERNEL", "auto", "False None")])
def test_environment_variables_are_read_at_import(name, value, expect):
    import os
    import sys

    env = dict(os.environ, **{name: value})
    res = subprocess.run([sys.executable, "-c", "from mqa_topk_cli import ops; print(ops.CHECKED, ops.FUSED_KERNEL)"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == expect


@pytest.mark.parametrize("name,value", [("MQA_TOPK_CHECKED", "banana"), ("MQA_TOPK_FUSED_KERNEL", "v2")])
def test_an_unclear_environment_value_is_refused_at_import(name, value):
    """Item 13: a value the ops would have to guess at is an error naming the variable, not a silent default."""
    import os
    import sys

    env = dict(os.environ, **{name: value})
    res = subprocess.run([sys.executable, "-c", "from mqa_topk_cli import ops"], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    assert res.returncode != 0 and f"{name}={value!r}" in res.stderr, res.stderr


def test_cpu_tensors_are_still_range_checked():
    t = inputs()
    t["ends"][2] = 10_000
    with pytest.raises(ContractError, match=r"^ends: must be <= keys = 700 \(row 2 has 10000\)$"):
        ops.fused_mqa_topk_prefill(**t)


# --------------------------------------------------------------------------- device records

def pack(row, cond, kernel, value):
    return (min(row, (1 << 28) - 1) << 36) | (cond << 34) | (kernel << 32) | (value & 0xFFFFFFFF)


@pytest.mark.parametrize("code,arg,text", [
    (pack(5, 0, 3, -3), "starts", "must be >= 0 (row 5 has -3; found on the device by the fused kernel)"),
    (pack(0, 1, 1, 2), "ends", "must be >= starts (row 0 has end 2; found on the device by the logits kernel)"),
    (pack(70000, 2, 2, 2**31 - 1), "ends",
     "must be <= keys (row 70000 has 2147483647; found on the device by the top-k kernel)"),
    (pack(2**30, 0, 2, -2**31), "starts",
     "must be >= 0 (row >= 268435455 has -2147483648; found on the device by the top-k kernel)"),
])
def test_record_decoding(code, arg, text):
    e = ops.range_error(code)
    assert e.arg == arg and str(e) == f"{arg}: {text}"


@pytest.mark.parametrize("op", OPS)
def test_a_recorded_error_is_raised_by_the_next_call(ext, monkeypatch, op):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(a))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    t = fake_inputs()
    call(op, t)  # first call: creates the mirror
    n = len(ext.calls)
    ext.record(pack(7, 2, 3, 900))
    ext.record(pack(9, 0, 3, -1))  # a higher row does not replace the lowest
    with pytest.raises(ContractError, match=r"^ends: must be <= keys \(row 7 has 900; found on the device by the "
                                            r"fused kernel in an earlier call on cuda:0\)$"):
        call(op, t)
    assert len(ext.calls) == n, "the op launched after finding a recorded error"
    assert synced, "the error path reads the exact record after a sync"
    call(op, t)  # consumed: the next call runs
    assert len(ext.calls) > n


def test_during_capture_the_mirror_is_reported_without_a_sync(ext, no_sync, monkeypatch):
    t = fake_inputs()
    seed_workspace()
    no_sync()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    call("fused_mqa_topk_prefill", t)
    ext.record(pack(2, 1, 1, 0))
    with pytest.raises(ContractError, match=r"^ends: must be >= starts \(row 2 has end 0;"):
        call("fused_mqa_topk_prefill", t)
    assert ext.mirror.value != OK  # kept for the next eager look


def test_check_errors(ext, monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(a))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    ops.check_errors()  # no op has run: nothing to look at
    assert synced == []
    call("mqa_logits", fake_inputs())
    ops.check_errors()
    assert synced == [(0,)]
    ext.record(pack(11, 0, 1, -8))
    with pytest.raises(ContractError, match=r"^starts: must be >= 0 \(row 11 has -8; .* on cuda:0\)$"):
        ops.check_errors()
    ops.check_errors()  # cleared
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="capture"):
        ops.check_errors()


def test_check_errors_without_any_op_does_not_load_the_extension(monkeypatch):
    monkeypatch.setattr(ops, "_mirrors", {})

    def no_ext():
        raise AssertionError("loaded the extension")

    monkeypatch.setattr(ops, "_native", no_ext)
    ops.check_errors()
    ops.check_errors("cpu")


def test_record_layout_matches_the_kernel_header(tmp_path):
    """pack_range_error (range_check.cuh) compiled as C++ gives the records the
    Python side decodes."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler")
    src = tmp_path / "pack.cpp"
    src.write_text(
        "#define MQA_TOPK_HOST_EMULATION 1\n#define __host__\n#define __device__\n"
        '#include "mqa_topk/common/range_check.cuh"\n#include <cstdio>\n#include <climits>\n'
        "using namespace mqa_topk;\nint main() {\n"
        '  std::printf("%llu\\n", pack_range_error(5, kStartNegative, kKernelFused, -3));\n'
        '  std::printf("%llu\\n", pack_range_error(123456, kEndPastKeys, kKernelTopk, INT_MAX));\n'
        '  std::printf("%llu\\n", pack_range_error(1u << 30, kEndBeforeStart, kKernelLogits, INT_MIN));\n'
        '  std::printf("%llu\\n", kRangeOk);\n}\n')
    exe = tmp_path / "pack"
    res = subprocess.run([cxx, "-std=c++17", f"-I{ROOT / 'csrc' / 'include'}", str(src), "-o", str(exe)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()]
    assert got == [pack(5, 0, 3, -3), pack(123456, 2, 2, 2**31 - 1), pack(2**30, 1, 1, -2**31), OK]
    assert str(ops.range_error(got[1])) == (
        "ends: must be <= keys (row 123456 has 2147483647; found on the device by the top-k kernel)")


# --------------------------------------------------------------------------- workspaces

def test_fused_workspace_first_needed_in_a_capture_is_allocated_outside_it(ext, monkeypatch):
    import contextlib
    import types

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(multi_processor_count=7))
    a = ops._workspace(0, 1024)
    assert ext.outside_capture == [(ops.fused_mqa_topk_workspace_bytes(1024, 7), 0)]
    assert ops._workspace(0, 1024) is a  # cached per (device, topk, stream)
    monkeypatch.setattr(ops, "_raw_stream", lambda index: 99)
    assert ops._workspace(0, 1024) is not a


# --------------------------------------------------------------------------- host-side checks, one line each

def _mutations():
    """(name, mutate(dict of CPU tensors) -> None, argument named by the error)."""
    def set_(name, fn):
        def m(t):
            t[name] = fn(t[name])
        return m

    def misalign(x):  # the same values one element past a 16-byte boundary
        big = torch.empty(x.numel() + 16, dtype=x.dtype)
        y = big[1:1 + x.numel()].view(x.shape)
        y.copy_(x)
        return y

    out = []
    for name in ("q", "k"):
        out.append((f"{name}-dtype", set_(name, lambda x: x.to(torch.float32)), name))
        out.append((f"{name}-noncontig", set_(name, lambda x: x.transpose(0, 1).contiguous().transpose(0, 1)
                                            if x.dim() == 2 else x.transpose(1, 2).contiguous().transpose(1, 2)),
                    name))
        out.append((f"{name}-misaligned", set_(name, misalign), name))
    out.append(("q-shape", set_("q", lambda x: x[:, :24]), "q"))  # 24 heads: not 16, 32 or 64
    out.append(("q-heads-vs-weights", set_("q", lambda x: x[:, :16].contiguous()), "weights"))  # 16 heads, weights 32
    out.append(("k-shape", set_("k", lambda x: x[:, :64].contiguous()), "k"))
    out.append(("scales-dtype", set_("scales", lambda x: x.double()), "scales"))
    out.append(("scales-shape", set_("scales", lambda x: x[:-1]), "scales"))
    out.append(("scales-noncontig", set_("scales", lambda x: torch.stack([x, x], 1)[:, 0]), "scales"))
    out.append(("scales-misaligned", set_("scales", misalign), "scales"))
    out.append(("scales-ue8m0", set_("scales", lambda x: torch.ones(x.shape[0], 4, dtype=torch.uint8)), "scales"))
    out.append(("weights-dtype", set_("weights", lambda x: x.half()), "weights"))
    out.append(("weights-shape", set_("weights", lambda x: x[:, :31].contiguous()), "weights"))
    out.append(("weights-misaligned", set_("weights", misalign), "weights"))
    for name in ("starts", "ends"):
        out.append((f"{name}-dtype", set_(name, lambda x: x.long()), name))
        out.append((f"{name}-shape", set_(name, lambda x: x[:-1]), name))
        out.append((f"{name}-noncontig", set_(name, lambda x: torch.stack([x, x], 1)[:, 0]), name))
        out.append((f"{name}-device", set_(name, lambda x: x.to("meta")), name))
    out.append(("k-device", set_("k", lambda x: x.to("meta")), "k"))
    out.append(("output-dtype", set_("output", lambda x: x.long()), "output"))
    out.append(("output-topk", set_("output", lambda x: x[:, :100].contiguous()), "output"))
    out.append(("output-rows", set_("output", lambda x: x[:-1]), "output"))
    out.append(("output-noncontig", set_("output", lambda x: x.t().contiguous().t()), "output"))
    out.append(("output-misaligned", set_("output", misalign), "output"))
    out.append(("q-not-a-tensor", set_("q", lambda x: x.tolist()[:1]), "q"))
    return out


MUTATIONS = _mutations()
MQA_OPS = ["mqa_logits", "dense_mqa_topk_prefill", "fused_mqa_topk_prefill"]


@pytest.mark.parametrize("name,mutate,arg", MUTATIONS, ids=[m[0] for m in MUTATIONS])
@pytest.mark.parametrize("op", MQA_OPS)
def test_host_checks_raise_one_line_errors(ext, op, name, mutate, arg):
    if op == "mqa_logits" and arg == "output":
        pytest.skip("mqa_logits has no output argument")
    t = inputs()
    mutate(t)
    with pytest.raises(ContractError) as ei:
        call(op, t)
    msg = str(ei.value)
    assert msg.startswith(f"{arg}: ") and "\n" not in msg, msg
    assert ext.calls == []


@pytest.mark.parametrize("name,mutate,arg", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_fast_path_never_accepts_what_the_detailed_checks_reject(name, mutate, arg):
    """The contract's fast path (CUDA tensors) accepts the good inputs and no
    mutated one, so every error still comes from the detailed checks."""
    t = fake_inputs()
    assert contract._mqa_inputs_ok(t["q"], t["k"], t["scales"], t["weights"], t["starts"], t["ends"])
    assert contract.check_output(t["output"], 13, t["q"].device) == 512
    m = inputs()
    mutate(m)
    mt = {n: fake(v) if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v for n, v in m.items()}
    if arg == "output":
        with pytest.raises(ContractError, match=f"^{arg}: "):
            contract.check_output(mt["output"], 13, mt["q"].device)
    else:
        assert not contract._mqa_inputs_ok(mt["q"], mt["k"], mt["scales"], mt["weights"], mt["starts"], mt["ends"])


@pytest.mark.parametrize("what,mutate,arg", [
    ("logits-dtype", lambda t: t.update(logits=t["logits"].double()), "logits"),
    ("logits-1d", lambda t: t.update(logits=t["logits"][0]), "logits"),
    ("logits-colstride", lambda t: t.update(logits=t["logits"].t().contiguous().t()), "logits"),
    ("logits-width", lambda t: t.update(logits=torch.empty(13, contract.MAX_KEYS + 1)[:, :].as_strided(
        (13, contract.MAX_KEYS + 1), (0, 1))), "logits"),
    ("starts-dtype", lambda t: t.update(starts=t["starts"].long()), "starts"),
    ("ends-shape", lambda t: t.update(ends=t["ends"][:-1]), "ends"),
    ("ends-noncontig", lambda t: t.update(ends=torch.stack([t["ends"], t["ends"]], 1)[:, 0]), "ends"),
    ("starts-device", lambda t: t.update(starts=t["starts"].to("meta")), "starts"),
    ("output-topk", lambda t: t.update(output=t["output"][:, :7].contiguous()), "output"),
    ("output-dtype", lambda t: t.update(output=t["output"].short()), "output"),
])
def test_topk_host_checks_raise_one_line_errors(ext, what, mutate, arg):
    t = inputs()
    t["logits"] = torch.randn(13, 700)
    mutate(t)
    with pytest.raises(ContractError) as ei:
        ops.top_k_per_row_prefill(t["logits"], t["starts"], t["ends"], t["output"])
    msg = str(ei.value)
    assert msg.startswith(f"{arg}: ") and "\n" not in msg, msg
    if arg != "output":
        ft = {n: fake(v) if v.device.type == "cpu" else v for n, v in t.items()}
        assert contract._logits_ok(ft["logits"], ft["starts"], ft["ends"]) is None
    assert ext.calls == []


def test_topk_fast_path_accepts_padded_rows():
    logits = fake(torch.randn(5, 40)[:, 3:33])
    st = fake(torch.zeros(5, dtype=torch.int32))
    assert contract._logits_ok(logits, st, st) == (5, 30)
