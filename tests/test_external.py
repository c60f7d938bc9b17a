"""External paths (external.py) on a CPU, with fake external packages written
on the fly into a temporary directory put on sys.path: the serving engine
(vllm), DeepGEMM, FlashInfer and a user's module. The fakes compute the
reference answer (the engine's ones take ties, and order their output, at
random, as an atomic-order kernel may); their buggy variants must be rejected.
The GPU architecture is stood in by replacing ``external.device_capability``."""
from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import textwrap

import pytest
import torch

from mqa_topk_cli import bench, external, ops, timing
from mqa_topk_cli.errors import Unavailable, UsageError
from mqa_topk_cli.paths import get_path
from mqa_topk_cli.verify import verify_case
from mqa_topk_cli.workloads import make_workload

#: 16 causal rows over 520 keys, top-512: rows 0-6 see fewer than 512 keys (-1 padding), rows 8-15 more.
SHAPE = ["--device", "cpu", "--rows", "16", "--keys", "520", "--topk", "512"]
BENCH = SHAPE + ["--reps", "3", "--warmup", "0"]

# --------------------------------------------------------------------------- the fakes

COMMON = '''
"""Shared by the fakes: reference logits and an any-order top-k."""
import torch
from mqa_topk_cli.reference import reference_logits, reference_topk

LAST = {}
#: True: logits() skips the reference computation (zeros in range, -inf outside), for
#: tests whose times are planted and whose answers nothing checks.
CHEAP = False


def record(path, rows, keys, topk):
    LAST.clear()
    LAST.update(path=path, rows=int(rows), keys=int(keys), topk=int(topk))


def logits(q, k, scales, weights, starts, ends, pad=0):
    """fp32 reference logits; pad > 0 returns a view into rows `pad` columns wider."""
    if CHEAP:
        col = torch.arange(k.shape[0])
        inside = (col >= starts.long()[:, None]) & (col < ends.long()[:, None])
        lg = torch.zeros(inside.shape).masked_fill_(~inside, float("-inf"))
    else:
        lg = reference_logits(q, k, scales, weights, starts, ends, precision="fp32")
    if not pad:
        return lg
    buf = torch.full((lg.shape[0], lg.shape[1] + pad), float("nan"))
    buf[:, : lg.shape[1]] = lg
    return buf[:, : lg.shape[1]]


def exact(lg, starts, ends, topk):
    return reference_topk(lg, starts, ends, topk)


def any_order(lg, starts, ends, topk, seed):
    """The top-k of [start, end) per row, ties taken in a random order and the
    entries shuffled: relative indices, -1 padded."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full((lg.shape[0], topk), -1, dtype=torch.int32)
    for r in range(lg.shape[0]):
        s, e = int(starts[r]), int(ends[r])
        if e <= s:
            continue
        perm = torch.randperm(e - s, generator=g)
        order = perm[torch.sort(lg[r, s:e][perm], descending=True, stable=True).indices][:topk]
        out[r, : order.numel()] = order[torch.randperm(order.numel(), generator=g)].to(torch.int32)
    return out


def drop_one(out, starts, ends, topk):
    """A known bug: loses one index of the first row that has more than topk keys."""
    n = (ends - starts).tolist()
    r = next(i for i, x in enumerate(n) if x > topk)
    out[r, 5] = -1
'''

ENGINE_FUSED = '''
"""Stand-in for the serving engine's fused op module."""
import torch
from mqa_fakes_common import any_order, drop_one, logits, record

BUG = False
AVAILABLE = True
CALLS = {"prefill": 0, "key_scales": 0}


def fused_mqa_topk_available():
    return AVAILABLE


def fused_mqa_topk_min_keys(topk):
    return 40000 if topk > 1024 else 20000  # not the published values: the tool must read these


def fused_mqa_topk_key_scales(scales):
    CALLS["key_scales"] += 1
    e = scales.view(torch.int32).squeeze(-1) & 0xFF
    return (e << 23).view(torch.float32)


def fused_mqa_topk_prefill(q, k, scales, weights, starts, ends, output):
    CALLS["prefill"] += 1
    record("engine-fused", q.shape[0], k.shape[0], output.shape[1])
    res = any_order(logits(q, k, scales, weights, starts, ends), starts, ends, output.shape[1], CALLS["prefill"])
    if BUG:
        drop_one(res, starts, ends, output.shape[1])
    output.copy_(res)
'''

ENGINE_DEEPGEMM = '''
"""Stand-in for vllm.utils.deep_gemm."""
from mqa_fakes_common import logits

CALLS = {"logits": 0}


def fp8_fp4_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True):
    CALLS["logits"] += 1
    (qv, _), (k, s) = q, kv
    return logits(qv, k, s, weights, cu_seqlen_ks, cu_seqlen_ke, pad=256)
'''

ENGINE_OPS = '''
"""Stand-in for vllm._custom_ops: writes only the valid entries (the engine pre-fills -1)."""
import torch
from mqa_fakes_common import any_order, record

CALLS = {"topk": 0}


def top_k_per_row_prefill(logits, cu_seqlen_ks, cu_seqlen_ke, raw_topk_indices, num_rows, stride0, stride1,
                          topk_tokens):
    CALLS["topk"] += 1
    record("engine-dense", num_rows, logits.shape[1], topk_tokens)
    res = any_order(logits, cu_seqlen_ks, cu_seqlen_ke, topk_tokens, 1000 + CALLS["topk"])
    raw_topk_indices.copy_(torch.where(res >= 0, res, raw_topk_indices))
'''

DEEPGEMM = '''
"""Stand-in for deep_gemm."""
from mqa_fakes_common import logits

CALLS = {"logits": 0}
HEADS = []  # the heads of every q it was given


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0):
    CALLS["logits"] += 1
    HEADS.append(q.shape[1])
    assert q.shape[1] in (32, 64) and weights.shape[1] == q.shape[1], "DeepGEMM takes 32 or 64 heads"
    k, s = kv
    return logits(q, k, s, weights, cu_seq_len_k_start, cu_seq_len_k_end, pad=256)
'''

FLASHINFER = '''
"""Stand-in for flashinfer."""
import torch
from mqa_fakes_common import any_order

CALLS = {"topk": 0}


def top_k_ragged_transform(input, offsets, lengths, k, deterministic=False):
    assert input.is_contiguous(), "FlashInfer's op takes contiguous rows"
    CALLS["topk"] += 1
    res = any_order(input, torch.zeros_like(lengths), lengths, k, 2000 + CALLS["topk"])
    return torch.where(res >= 0, res + offsets[:, None], res)
'''

USER = '''
"""A user's kernels, right and wrong."""
from mqa_fakes_common import drop_one, exact, logits


def whole_op(q, k, scales, weights, starts, ends, output):
    output.copy_(exact(logits(q, k, scales, weights, starts, ends), starts, ends, output.shape[1]))


whole_op.lowest_index_ties = True


def my_logits(q, k, scales, weights, starts, ends):
    return logits(q, k, scales, weights, starts, ends, pad=4)


def my_topk(logits, starts, ends, output):
    output.copy_(exact(logits, starts, ends, output.shape[1]))


def drops_index(q, k, scales, weights, starts, ends, output):
    whole_op(q, k, scales, weights, starts, ends, output)
    drop_one(output, starts, ends, output.shape[1])


CALLS = {"flaky": 0}


def flaky(q, k, scales, weights, starts, ends, output):
    """Right on the first call, drops an index after: reruns may differ, each must still be right."""
    CALLS["flaky"] += 1
    whole_op(q, k, scales, weights, starts, ends, output)
    if CALLS["flaky"] > 1:
        drop_one(output, starts, ends, output.shape[1])


flaky.identical_reruns = False


def variadic(*args):
    return whole_op(*args)


NOT_A_FUNCTION = 3
'''

FUSED_MOD = "vllm/model_executor/kernels/attention/dsa/fused_mqa_topk.py"


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """install(*names) writes the named fake packages under tmp_path (on
    sys.path) and returns a dict of the imported modules; everything written is
    dropped from sys.modules afterwards."""
    files = {
        "common": {"mqa_fakes_common.py": COMMON},
        "engine": {FUSED_MOD: ENGINE_FUSED, "vllm/utils/deep_gemm.py": ENGINE_DEEPGEMM,
                   "vllm/_custom_ops.py": ENGINE_OPS},
        "engine-without-fused": {"vllm/utils/deep_gemm.py": ENGINE_DEEPGEMM, "vllm/_custom_ops.py": ENGINE_OPS},
        "engine-without-op": {FUSED_MOD: "def fused_mqa_topk_available():\n    return True\n"},
        "deepgemm": {"deep_gemm/__init__.py": DEEPGEMM},
        "deepgemm-without-op": {"deep_gemm/__init__.py": "def fp8_gemm_nt(*a):\n    pass\n"},
        "flashinfer": {"flashinfer/__init__.py": FLASHINFER},
        "user": {"user_kernels.py": USER},
    }
    tops = {"mqa_fakes_common", "vllm", "deep_gemm", "flashinfer", "user_kernels"}
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(*names):
        for name in ("common",) + names:
            for rel, src in files[name].items():
                p = tmp_path / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(textwrap.dedent(src))
                for d in p.relative_to(tmp_path).parents:  # packages all the way down
                    if str(d) != ".":
                        init = tmp_path / d / "__init__.py"
                        if not init.exists():
                            init.write_text("")
        importlib.invalidate_caches()
        return {n: importlib.import_module(m) for n, m in (
            ("fused", external.ENGINE_FUSED_MODULE), ("engine_dg", external.ENGINE_DEEPGEMM_MODULE),
            ("engine_ops", external.ENGINE_OPS_MODULE), ("deep_gemm", "deep_gemm"), ("flashinfer", "flashinfer"),
            ("user", "user_kernels")) if external.try_import(m)[0] is not None}

    yield install
    for mod in [m for m in sys.modules if m.split(".")[0] in tops]:
        del sys.modules[mod]
    importlib.invalidate_caches()


def gpu(monkeypatch, major, minor=0):
    """Stand in a GPU of this architecture for the adapters' checks."""
    monkeypatch.setattr(external, "device_capability", lambda device: (major, minor))


def one_line(res, code, *needles):
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- names


def test_names_resolve_without_importing_anything(fakes):
    for name in external.EXTERNAL:
        assert get_path(name).name == name and external.is_external(name)
    p = get_path("py:some.module:fn@logits")
    assert (p.module, p.function, p.declared_kind) == ("some.module", "fn", "logits")
    assert "vllm" not in sys.modules and "some" not in sys.modules
    for bad in ("py:nomodule", "py:a.b:c@sideways", "py:1x:f"):
        with pytest.raises(UsageError, match="py:MODULE:FUNCTION"):
            get_path(bad)
    with pytest.raises(UsageError, match="engine-fused.*py:MODULE:FUNCTION"):
        get_path("bogus")


def test_malformed_py_spec_is_a_usage_error_on_the_command_line(run):
    one_line(run("verify", "--paths", "py:justamodule", *SHAPE), 2, "--paths", "py:MODULE:FUNCTION")


# --------------------------------------------------------------------------- availability: one line, exit 1


def test_on_an_h200_without_the_engine_engine_fused_says_what_it_needs(run, monkeypatch):
    gpu(monkeypatch, 9)  # our H200
    for cmd in (["bench", "--paths", "engine-fused"], ["verify", "--paths", "engine-fused", *SHAPE],
                ["crossover", "--paths", "engine-fused,engine-dense", "--device", "cpu"]):
        line = one_line(run(*cmd), 1, "engine-fused", "SM100", "this GPU is sm_90", "vllm is not installed")
        assert "Traceback" not in line


def test_not_installed(run, monkeypatch):
    gpu(monkeypatch, 10)
    for name, package in (("engine-dense", "vllm"), ("deepgemm", "deep_gemm"), ("flashinfer-topk", "flashinfer")):
        line = one_line(run("bench", "--paths", name, *BENCH), 1, name, f"{package} is not installed")
        assert "GPU is" not in line  # the GPU fits: only the package is missing
    one_line(run("verify", "--paths", "py:no_such_module_here:fn", *SHAPE), 1, "cannot import no_such_module_here",
             "PYTHONPATH")


def test_wrong_arch(run, monkeypatch, fakes):
    fakes("engine", "deepgemm")
    gpu(monkeypatch, 9)
    one_line(run("bench", "--paths", "engine-fused", *BENCH), 1, "SM100", "this GPU is sm_90")
    assert get_path("engine-dense").unavailable_reason("cpu") is None  # the engine's dense path runs on Hopper
    gpu(monkeypatch, 8, 9)
    for name in ("engine-dense", "deepgemm"):
        one_line(run("verify", "--paths", name, *SHAPE), 1, name, "SM90 or SM100", "this GPU is sm_89")


def test_op_missing(run, monkeypatch, fakes):
    gpu(monkeypatch, 10)
    fakes("engine-without-op", "deepgemm-without-op", "user")
    one_line(run("bench", "--paths", "engine-fused", *BENCH), 1, "has no fused_mqa_topk_prefill (op missing)")
    one_line(run("verify", "--paths", "deepgemm", *SHAPE), 1, "deep_gemm has no fp8_mqa_logits (op missing)")
    one_line(run("verify", "--paths", "py:user_kernels:no_such_fn", *SHAPE), 1, "has no no_such_fn (op missing)")
    one_line(run("verify", "--paths", "py:user_kernels:NOT_A_FUNCTION", *SHAPE), 1, "not callable")
    one_line(run("verify", "--paths", "py:user_kernels:variadic", *SHAPE), 1, "add @mqa_topk, @logits or @topk")


def test_engine_without_the_fused_module_or_with_it_not_compiled_in(run, monkeypatch, fakes):
    gpu(monkeypatch, 10)
    fakes("engine-without-fused")
    one_line(run("bench", "--paths", "engine-fused", *BENCH), 1, "the installed vllm has no module", "op missing")
    assert get_path("engine-dense").unavailable_reason("cpu") is None


def test_engine_fused_not_compiled_in(run, monkeypatch, fakes):
    gpu(monkeypatch, 10)
    mods = fakes("engine")
    monkeypatch.setattr(mods["fused"], "AVAILABLE", False)
    one_line(run("bench", "--paths", "engine-fused", *BENCH), 1, "not compiled in")


# --------------------------------------------------------------------------- verify and bench of correct fakes


@pytest.mark.parametrize("spec", ["py:user_kernels:whole_op", "py:user_kernels:my_logits",
                                  "py:user_kernels:my_topk@topk"])
def test_user_function_verifies_and_benches(run, fakes, spec):
    fakes("user")
    res = run("verify", "--paths", f"{spec},torch", *SHAPE)
    assert res.exit_code == 0, res.output
    assert "all 2 checks passed" in res.stdout
    res = run("bench", "--paths", f"torch,{spec}", *BENCH)
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.stdout.splitlines() if "user_kernels" in ln and not ln.startswith("["))  # not a progress line
    assert " ok" in row and "vs torch" in row


def test_user_function_kinds_and_claims(fakes):
    fakes("user")
    w = make_workload("causal", rows=12, keys=900, topk=512, seed=1)
    whole, lg, tk = (get_path(f"py:user_kernels:{f}") for f in ("whole_op", "my_logits", "my_topk"))
    assert whole.deterministic_ties and not lg.deterministic_ties  # the function's own claim
    r = verify_case(w, whole)
    assert r.passed and r.tie_rule in ("duplicate keys", "no duplicate keys")
    assert lg.logits(w) is not None and whole.logits(w) is None
    assert torch.equal(lg.logits(w), tk.logits(w))  # the user's logits and ours are both the fp32 reference here
    # --op logits / --op topk: only the kind that has that op
    assert callable(lg.prepare_logits(w))
    with pytest.raises(Unavailable, match="no logits op"):
        whole.prepare_logits(w)
    with pytest.raises(Unavailable, match="no top-k op"):
        lg.prepare_topk(w, lg.logits(w), torch.empty(w.rows, 512, dtype=torch.int32))


def test_named_adapters_verify_against_fakes(run, monkeypatch, fakes, tmp_path):
    gpu(monkeypatch, 10)
    mods = fakes("engine", "deepgemm", "flashinfer")
    res = run("verify", "--paths", "engine-fused,engine-dense,deepgemm,flashinfer-topk", *SHAPE, "--out",
              tmp_path / "v.json")
    assert res.exit_code == 0, res.output
    assert "all 4 checks passed" in res.stdout
    # the fakes ran (1 run + 2 reruns each), not one of our own paths
    assert mods["fused"].CALLS["prefill"] == 3
    assert mods["engine_ops"].CALLS["topk"] >= 3 and mods["engine_dg"].CALLS["logits"] >= 3
    assert mods["deep_gemm"].CALLS["logits"] >= 3 and mods["flashinfer"].CALLS["topk"] >= 3
    doc = json.loads((tmp_path / "v.json").read_text())
    by = {r["path"]: r for r in doc["results"]}
    # atomic-order ties: reruns differ, yet each run is tie-equivalent, so they pass
    for name in ("engine-fused", "engine-dense"):
        assert by[name]["passed"] and not by[name]["deterministic"] and by[name]["rerun_failures"] == 0
        assert by[name]["tie_rule"] == "not claimed"
    # our top-k on DeepGEMM's logits: held to the tie rule with those logits
    assert by["deepgemm"]["deterministic"] and by["deepgemm"]["tie_rule"] == "own logits"


def test_named_adapters_bench_against_fakes(run, monkeypatch, fakes, tmp_path):
    gpu(monkeypatch, 10)
    fakes("engine", "deepgemm", "flashinfer", "user")
    res = run("bench", "--paths", "engine-fused,engine-dense,deepgemm,flashinfer-topk", *BENCH,
              "--out", tmp_path / "b.json")
    assert res.exit_code == 0, res.output
    st = {r["path"]: r for r in json.loads((tmp_path / "b.json").read_text())["results"]}
    assert all(st[n]["status"] == "ok" for n in external.EXTERNAL), st
    assert st["engine-fused"]["baseline"] == "engine-dense"  # no native here: the engine's dense path is the baseline
    res = run("bench", "--op", "logits", "--paths", "deepgemm,engine-dense,py:user_kernels:my_logits,engine-fused",
              *BENCH, "--out", tmp_path / "l.json")
    assert res.exit_code == 0, res.output
    st = {r["path"]: r["status"] for r in json.loads((tmp_path / "l.json").read_text())["results"]}
    assert st["deepgemm"] == st["engine-dense"] == st["py:user_kernels:my_logits"] == "ok"
    assert st["engine-fused"].startswith("unavailable") and "no logits op" in st["engine-fused"]
    res = run("bench", "--op", "topk", "--paths", "engine-dense,flashinfer-topk,py:user_kernels:my_topk,deepgemm",
              *BENCH, "--out", tmp_path / "t.json")
    assert res.exit_code == 0, res.output
    st = {r["path"]: r["status"] for r in json.loads((tmp_path / "t.json").read_text())["results"]}
    assert st["engine-dense"] == st["flashinfer-topk"] == st["py:user_kernels:my_topk"] == "ok"
    assert st["deepgemm"].startswith("unavailable")


def test_flashinfer_topk_refuses_rows_that_do_not_start_at_zero(monkeypatch, fakes):
    gpu(monkeypatch, 9)
    fakes("flashinfer")
    w = make_workload("ragged", rows=12, keys=2000, topk=512, seed=2, requests=3)
    assert bool((w.starts != 0).any())
    r = verify_case(w, "flashinfer-topk")
    assert not r.passed and r.status.startswith("unavailable") and "starting after key 0" in r.status


def test_engine_dense_chunks_rows_under_the_engine_budget(monkeypatch, fakes):
    gpu(monkeypatch, 10)
    mods = fakes("engine")
    w = make_workload("causal", rows=16, keys=40000, topk=512, seed=4)
    monkeypatch.setenv(external.ENGINE_LOGITS_MB_ENV, "1")  # 1 MiB / (40000 keys * 4 B) = 6 rows a chunk
    calls = mods["engine_ops"].CALLS["topk"]
    assert verify_case(w, "engine-dense", reruns=0).passed
    assert mods["engine_ops"].CALLS["topk"] - calls == 3
    monkeypatch.setenv(external.ENGINE_LOGITS_MB_ENV, "lots")
    with pytest.raises(UsageError, match=external.ENGINE_LOGITS_MB_ENV):
        external.engine_logits_budget()


# --------------------------------------------------------------------------- UE8M0 scales


def test_ue8m0_form_round_trips_through_the_key_scale_op():
    s = torch.tensor([1.0, 0.5, 2.0 ** -20, 1024.0], dtype=torch.float32)
    ue = external.ue8m0_form(s)
    assert ue.dtype == torch.uint8 and ue.shape == (4, 4) and bool((ue == ue[:, :1]).all())
    assert torch.equal(ops.fused_mqa_topk_key_scales(ue), s)
    assert external.ue8m0_form(torch.tensor([1.0, 1.5])) is None  # not a power of two
    assert external.ue8m0_form(torch.tensor([1.0, 0.0])) is None
    assert external.ue8m0_form(torch.tensor([1.0, 2.0 ** -130])) is None  # denormal


def test_engine_fused_passes_power_of_two_scales_in_ue8m0_form(monkeypatch, fakes):
    gpu(monkeypatch, 10)
    mods = fakes("engine")
    w = make_workload("causal", rows=12, keys=800, topk=512, seed=5)
    assert verify_case(w, "engine-fused").passed
    assert mods["fused"].CALLS["key_scales"] == 0  # U(0.5, 2) scales: fp32 as given
    p2 = dataclasses.replace(w, scales=torch.exp2(torch.round(torch.log2(w.scales))))
    r = verify_case(p2, "engine-fused")
    assert r.passed, r.errors
    assert mods["fused"].CALLS["key_scales"] == r.runs  # through the engine's own converter, every call


# --------------------------------------------------------------------------- known-wrong fakes are rejected


def test_buggy_user_function_is_rejected(run, fakes):
    fakes("user")
    res = run("verify", "--paths", "py:user_kernels:drops_index", *SHAPE)
    assert res.exit_code == 1 and "FAIL" in res.stdout
    assert "valid entries, expected" in res.stdout


def test_buggy_engine_is_rejected(run, monkeypatch, fakes):
    gpu(monkeypatch, 10)
    mods = fakes("engine")
    monkeypatch.setattr(mods["fused"], "BUG", True)
    res = run("verify", "--paths", "engine-fused", *SHAPE)
    assert res.exit_code == 1 and "FAIL" in res.stdout and "row 8: invalid" in res.stdout


def test_a_wrong_rerun_fails_a_path_without_identical_reruns(fakes):
    fakes("user")
    w = make_workload("causal", rows=16, keys=1024, topk=512, seed=6)
    r = verify_case(w, "py:user_kernels:flaky", reruns=2)
    assert not r.passed and r.rerun_failures == 2
    assert any(e.startswith("run 1: row 0: invalid") for e in r.errors)


# --------------------------------------------------------------------------- crossover between two fakes


def _planted(fn, **kw):
    """Run the path once, then report the planted time of what the fake saw:
    grid (rows 8): fused = keys/1000 + 1.25 ms (+1.25 for top-2048), dense = keys/500,
    so fused wins from 1250 keys (2500 for top-2048); wave table (3000 keys):
    fused = 10 ms per wave (4 SMs x 2-row blocks), dense = 6 + 1.25 ms per row."""
    fn()
    last = sys.modules["mqa_fakes_common"].LAST
    fused = last["path"] == "engine-fused"
    if last["keys"] == 3000:
        ms = 10.0 * -(-last["rows"] // 8) if fused else 6.0 + 1.25 * last["rows"]
    elif fused:
        ms = last["keys"] / 1000 + (2.5 if last["topk"] == 2048 else 1.25)
    else:
        ms = last["keys"] / 500
    return timing.summarize([ms] * 3, "planted")


def test_crossover_between_two_fakes_prints_the_engine_constants(run, monkeypatch, fakes, tmp_path):
    gpu(monkeypatch, 10)
    fakes("engine")
    monkeypatch.setattr(bench, "time_fn", _planted)
    monkeypatch.setattr(bench, "_free", lambda device, **kw: None)  # no gc between the points of this tiny sweep
    # the paths still run once per point (the planted time reads what they saw); their answers are not checked
    monkeypatch.setattr(sys.modules["mqa_fakes_common"], "CHEAP", True)
    cal = tmp_path / "engine.json"
    res = run("crossover", "--device", "cpu", "--paths", "engine-fused,engine-dense", "--topks", "512,2048",
              "--rows", "8", "--keys", "250,500,1000,2000,4000,8000", "--sms", "4", "--block-rows", "2",
              "--wave-keys", "3000", "--wave-topk", "512", "--out", cal)
    assert res.exit_code == 0, res.output
    doc = json.loads(cal.read_text())["heads"]["32"]
    eng = doc["measured"]["engine"]
    mk = {int(t): v for t, v in eng["min_keys"].items()}
    # planted crossovers: 1250 keys (top-512) and 2500 keys (top-2048), rounded up to 256
    assert 1000 < mk[512] <= 2048 and 2000 < mk[2048] <= 4096 and mk[512] % 256 == mk[2048] % 256 == 0
    assert doc["min_keys"]["512"] == mk[512] and doc["min_keys"]["2048"] == mk[2048]
    assert eng["defaults"] == {"512": 20000, "1024": 20000, "2048": 40000}  # read from the installed (fake) engine
    assert "installed engine" in eng["defaults_source"]
    # the preset's wave rows around 1 and 2 x block rows x SMs (8) and its extra 64 / 256 / 512 rows (3)
    assert eng["wave_rule_held"] is True and eng["wave_rows_checked"] == 8 + 3
    assert "wave rule: " in res.stdout and doc["wave_rule"] == doc["measured"]["wave"]["decision"]["wave_rule"]
    out = res.stdout
    assert f"fused_mqa_topk_min_keys(512) = {mk[512]}" in out and "(engine now: 20000)" in out
    assert f"fused_mqa_topk_min_keys(2048) = {mk[2048]}" in out and "(engine now: 40000)" in out
    assert "held at all 11 row counts; keep it" in out


def test_engine_constants_report_a_wave_rule_that_did_not_hold():
    wave = [{"rows": 8, "predicted": "engine-fused", "measured": "engine-fused", "agree": True},
            {"rows": 10, "predicted": "engine-dense", "measured": "engine-fused", "agree": False},
            {"rows": 12, "predicted": "engine-fused", "measured": None, "agree": None}]
    info = external.engine_constants({512: 10240, 2048: (1 << 22) + 1}, wave)
    assert info["wave_rule_held"] is False and info["wave_rows_checked"] == 2
    text = "\n".join(external.engine_constants_lines(info, ("engine-fused", "engine-dense")))
    assert "did not hold at 1 of 2 row counts: 10 (predicted engine-dense, measured engine-fused)" in text
    assert "fused_mqa_topk_min_keys(512) = 10240 (10K)" in text and "never (keep dense)" in text
    assert "(engine now: 32768 (32K))" in text  # the published defaults: no engine installed here
    assert external.engine_constants({}, [])["wave_rule_held"] is None


def test_crossover_of_our_own_paths_prints_no_engine_constants(run, tmp_path):
    cal = tmp_path / "cal.json"
    res = run("crossover", "--device", "cpu", "--paths", "torch,reference", "--topks", "512", "--rows", "8",
              "--keys", "600", "--no-wave", "--reps", "2", "--warmup", "0", "--out", cal)
    assert res.exit_code == 0, res.output
    assert "engine constants" not in res.stdout and "engine" not in json.loads(cal.read_text())["heads"]["32"]["measured"]


# --------------------------------------------------------------------------- heads


def test_deepgemm_takes_the_heads_of_the_workload_and_reports_16_unavailable(run, monkeypatch, fakes, tmp_path):
    """Bug class: an adapter that reshapes q to 32 heads (or drops the extra
    ones), or one that calls DeepGEMM at 16 heads and fails with an error
    instead of reporting the shape unavailable."""
    gpu(monkeypatch, 9)
    mods = fakes("engine", "deepgemm")
    res = run("verify", "--paths", "deepgemm,engine-dense", *SHAPE, "--heads", "64", "--reruns", "1")
    assert res.exit_code == 0, res.output
    assert mods["deep_gemm"].HEADS and set(mods["deep_gemm"].HEADS) == {64}
    calls, engine_calls = mods["deep_gemm"].CALLS["logits"], mods["engine_dg"].CALLS["logits"]
    out = tmp_path / "b.json"
    res = run("bench", "--paths", "deepgemm,engine-dense,torch", *BENCH, "--heads", "16", "--out", out)
    assert res.exit_code == 0, res.output  # torch was timed
    st = {r["path"]: r for r in json.loads(out.read_text())["results"]}
    assert st["torch"]["status"] == "ok" and st["torch"]["heads"] == 16
    for name in ("deepgemm", "engine-dense"):
        assert st[name]["status"] == (f"unavailable: {name}: DeepGEMM's fp8_mqa_logits takes 32 or 64 heads; "
                                      f"this workload has 16"), st[name]
    assert (mods["deep_gemm"].CALLS["logits"], mods["engine_dg"].CALLS["logits"]) == (calls, engine_calls)  # not called
    res = run("bench", "--op", "logits", "--paths", "deepgemm", *BENCH, "--heads", "16", "--out", out)
    assert res.exit_code == 1  # nothing could be timed
    (r,) = [r for r in json.loads(out.read_text())["results"] if r["path"] == "deepgemm"]
    assert r["status"].startswith("unavailable: deepgemm: DeepGEMM's fp8_mqa_logits takes 32 or 64 heads")
    res = run("verify", "--paths", "deepgemm", *SHAPE, "--heads", "16", "--reruns", "0")
    assert res.exit_code == 1 and "takes 32 or 64 heads; this workload has 16" in res.output
    assert "Traceback" not in res.output


def test_engine_fused_runs_32_heads_only_and_reports_others_unavailable(run, monkeypatch, fakes, tmp_path):
    """Bug class: the SM100 engine kernel (32 heads only) called with a 64- or
    16-head workload, failing with an error or silently computing something
    else, instead of the shape reported unavailable."""
    gpu(monkeypatch, 10)
    mods = fakes("engine", "deepgemm")
    out = tmp_path / "b.json"
    for heads in (64, 16):
        before = mods["fused"].CALLS["prefill"]
        res = run("bench", "--paths", "engine-fused,torch", *BENCH, "--heads", str(heads), "--out", out)
        assert res.exit_code == 0, res.output  # torch was timed
        st = {r["path"]: r for r in json.loads(out.read_text())["results"]}
        assert st["engine-fused"]["status"] == (f"unavailable: engine-fused: the engine's fused kernel takes 32 heads; "
                                               f"this workload has {heads}"), st["engine-fused"]
        assert mods["fused"].CALLS["prefill"] == before  # not called
    res = run("bench", "--paths", "engine-fused", *BENCH, "--out", out)  # 32 heads: runs
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["results"][0]["status"] == "ok"
