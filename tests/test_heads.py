"""Heads (16, 32 or 64 indexer heads, head_dim 128) as a first-class shape,
on a CPU: generated and recorded workloads and their names, config cases, the
model presets, the CLI's --model / --heads, and the calibration per heads
(format 1 read as 32 heads, format 2 written and merged, the default rule for
heads without an entry). The op contract per heads is in
test_contract_ops.py, the reference at 16 / 64 heads in test_reference.py,
the DeepGEMM adapter in test_external.py."""
from __future__ import annotations

import json

import pytest
import torch

from mqa_topk_cli import bench, checks, crossover, eligibility, workloads

from mqa_topk_cli.errors import ContractError, UsageError
from mqa_topk_cli.models import MODEL_NAMES, MODELS, get_model
from mqa_topk_cli.workloads import make_workload
from conftest import one_line_error

HEADS = (16, 32, 64)


# ------------------------------------------------------------ generated workloads


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("dist", checks.DISTS)
def test_every_distribution_generates_q_and_weights_with_the_heads(heads, dist):
    """Bug class: a generator still building 32 heads (or a weights tensor of
    another width) when asked for 16 or 64."""
    w = make_workload("causal", rows=5, keys=600, topk=512, dist=dist, seed=1, heads=heads)
    assert tuple(w.q.shape) == (5, heads, 128) and tuple(w.weights.shape) == (5, heads)
    assert w.heads == heads and w.describe()["heads"] == heads
    w.validate()  # the op contract holds at these heads


@pytest.mark.parametrize("heads", HEADS)
def test_flops_count_2_h_128_per_visible_pair(heads):
    """Bug class: TFLOP/s counted at 32 heads whatever the workload's (a
    64-head kernel would look twice as slow as DeepGEMM's own figure)."""
    w = make_workload("causal", rows=4, keys=300, topk=512, heads=heads)
    assert w.flop_per_pair == 2 * heads * 128 == bench.flop_per_pair(heads)
    assert w.flops == 2 * heads * 128 * w.visible_pairs and w.visible_pairs == sum(297 + r for r in range(4))
    assert bench.FLOP_PER_PAIR == 8192


def test_32_heads_are_the_tensors_and_names_of_earlier_versions():
    """Bug class: the heads option changing the 32-head workloads (their
    random streams, their names), which results and configs refer to."""
    a = make_workload("ragged", rows=9, keys=700, topk=512, dist="dsa", seed=4)
    b = make_workload("ragged", rows=9, keys=700, topk=512, dist="dsa", seed=4, heads=32)
    for f in workloads.FIELDS:
        assert torch.equal(getattr(a, f).view(torch.uint8) if getattr(a, f).dtype == torch.float8_e4m3fn
                           else getattr(a, f), getattr(b, f).view(torch.uint8)
                           if getattr(b, f).dtype == torch.float8_e4m3fn else getattr(b, f)), f
    assert a.name == b.name == "ragged-dsa-r9-k700-t512-s4"


@pytest.mark.parametrize("heads", [16, 64])
def test_names_of_other_heads_end_in_the_heads(heads):
    """Bug class: 16- and 64-head cases sharing the names of 32-head ones
    (their results would be confused)."""
    w = make_workload("causal", rows=3, keys=300, topk=512, seed=2, heads=heads)
    assert w.name == f"causal-gaussian-r3-k300-t512-s2-h{heads}"
    assert make_workload("causal", rows=3, keys=300, topk=512, name="mine", heads=heads).name == "mine"
    assert workloads.heads_suffix(heads) == f"-h{heads}" and workloads.heads_suffix(32) == ""
    assert workloads.name_with_heads("x", heads) == f"x-h{heads}" == workloads.name_with_heads(f"x-h{heads}", heads)
    assert workloads.name_with_heads("x", 32) == "x"


@pytest.mark.parametrize("bad", [0, 8, 24, 48, 128, True, "64", 64.0])
def test_unsupported_heads_are_refused_before_generating(bad):
    """Bug class: a workload of heads the kernels do not take (or a bool /
    string accepted as a count)."""
    with pytest.raises(UsageError) as ei:
        make_workload("causal", rows=3, keys=300, topk=512, heads=bad)
    assert str(ei.value) == f"heads: must be 16, 32 or 64 (indexer heads), got {bad!r}"


@pytest.mark.parametrize("heads", HEADS)
def test_the_row_limit_follows_the_heads(heads):
    """Bug class: the 32-head row limit applied at 64 heads (rows * 64 would
    overflow int32), or 16 heads given twice the rows although the kernels
    run them as 32 zero-padded heads (rows * 32 would overflow)."""
    limit = checks.max_rows(heads)
    kernel_heads = max(heads, 32)
    assert limit == (1 << 31) // kernel_heads - 1
    assert checks.check_rows(limit, heads=heads) == limit
    with pytest.raises(UsageError, match=rf"^rows: must be between 1 and {limit} .*rows \* {kernel_heads} heads"):
        checks.check_rows(limit + 1, heads=heads)
    case = {"layout": "full", "rows": limit + 1, "keys": 16, "topk": 512, "heads": heads}
    with pytest.raises(UsageError, match=f"between 1 and {limit}"):
        workloads.check_case(case)
    workloads.check_case(dict(case, rows=limit))  # (no device: nothing allocated)
    assert checks.MAX_ROWS == checks.max_rows(32) and checks.MAX_ROWS_ANY_HEADS == checks.max_rows(16)


def test_generation_memory_grows_with_the_heads(monkeypatch):
    """Bug class: the memory check sized for 32 heads, so a 64-head case that
    does not fit starts allocating anyway."""
    rows, keys = 1000, 1000
    g32, g64 = checks.generation_bytes(rows, keys, 32), checks.generation_bytes(rows, keys, 64)
    assert g64 - g32 == rows * (4 * 32 * 128 * 4 + 32 * 4 * 4) and g32 == checks.generation_bytes(rows, keys)
    assert checks.generation_bytes(rows, keys, 16) < g32
    monkeypatch.setattr(checks, "available_bytes", lambda device: (g32 + g64) // 2)
    checks.check_generation(rows, keys, "cpu", 32)
    with pytest.raises(UsageError, match="^rows: generating 1000 rows x 1000 keys at 64 heads needs"):
        checks.check_generation(rows, keys, "cpu", 64)


# ------------------------------------------------------------ recorded workloads


@pytest.mark.parametrize("heads", [16, 64])
@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_recorded_files_keep_their_heads(tmp_path, heads, suffix):
    """Bug class: a file's heads read as 32 (or refused) instead of taken from its tensors."""
    w = make_workload("ragged", rows=7, keys=500, topk=1024, dist="ties", seed=3, heads=heads)
    p = workloads.save_workload(w, tmp_path / f"w{suffix}")
    back = workloads.load_workload(p)
    assert back.heads == heads and torch.equal(back.weights, w.weights)
    assert torch.equal(back.q.view(torch.uint8), w.q.view(torch.uint8))
    info = workloads.describe_workload(p)
    assert info["heads"] == heads and info["tensors"]["q"] == f"[7, {heads}, 128] float8_e4m3fn"
    assert info["tensors"]["weights"] == f"[7, {heads}] float32"
    r = workloads.record(tmp_path / f"r{suffix}", w.q, w.k, w.scales, w.weights, w.starts, w.ends, 1024)
    assert workloads.load_workload(r).heads == heads


def test_a_recorded_file_with_other_heads_or_mismatched_weights_names_the_field(tmp_path):
    """Bug class: a file of unsupported heads loaded (the kernels would refuse
    it later, or read it wrongly), or weights that do not match q blamed on q."""
    w = make_workload("causal", rows=4, keys=300, topk=512, heads=64)
    t = dict(w.tensors())
    t["weights"] = t["weights"][:, :32].contiguous()
    from safetensors.torch import save_file

    def write(name, tensors):
        p = tmp_path / name
        q = tensors["q"].view(torch.uint8) if tensors["q"].dtype == torch.float8_e4m3fn else tensors["q"]
        save_file({**tensors, "q": q, "k": tensors["k"].view(torch.uint8)}, str(p),
                  metadata={"topk": "512", "fp8_as_uint8": "q,k"})
        return p

    p = write("mismatch.safetensors", t)
    with pytest.raises(UsageError) as ei:
        workloads.load_workload(p)
    assert str(ei.value) == f"{p}: weights: expected shape [rows, heads] = [4, 64] (the heads of q), got [4, 32]"
    t = dict(w.tensors())
    t["q"] = t["q"][:, :48].contiguous()
    t["weights"] = t["weights"][:, :48].contiguous()
    p = write("h48.safetensors", t)
    with pytest.raises(UsageError) as ei:
        workloads.load_workload(p)
    assert str(ei.value) == f"{p}: q: expected shape [rows, heads, 128] with heads 16, 32 or 64, got [4, 48, 128]"
    with pytest.raises(ContractError, match="^weights: "):
        workloads.record(tmp_path / "x.pt", w.q, w.k, w.scales, w.weights[:, :16].contiguous(), w.starts, w.ends, 512)


# ------------------------------------------------------------ config cases


def _cfg(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_config_cases_take_heads_and_model(tmp_path):
    """Bug class: a config's heads or model ignored (the case runs at 32 heads
    and top-2048), or a model overriding what the case says itself."""
    p = _cfg(tmp_path, """
[[case]]
rows = 8
keys = 600
topk = 512
heads = 64

[[case]]
rows = 8
keys = 700
model = "deepseek-v4-flash"

[[case]]
name = "pro-at-16"
rows = 8
keys = 1200
model = "DeepSeek-V4-Pro"
heads = 16

[[case]]
rows = 8
keys = 600
topk = 512
""")
    a, b, c, d = workloads.load_workload_config(p)
    assert (a["heads"], a["topk"], a["name"]) == (64, 512, "causal-gaussian-r8-k600-t512-h64")
    assert (b["heads"], b["topk"], b["model"], b["name"]) == (64, 512, "deepseek-v4-flash",
                                                             "causal-gaussian-r8-k700-t512-h64")
    assert (c["heads"], c["topk"], c["model"], c["name"]) == (16, 1024, "deepseek-v4-pro", "pro-at-16")
    assert "heads" not in d and d["name"] == "causal-gaussian-r8-k600-t512"
    for case, heads, topk in ((a, 64, 512), (b, 64, 512), (c, 16, 1024), (d, 32, 512)):
        w = workloads.workload_from_case(case)
        assert (w.heads, w.topk) == (heads, topk)


def test_a_hand_written_case_with_a_model_takes_its_heads_and_topk():
    w = workloads.workload_from_case({"layout": "causal", "rows": 4, "keys": 2100, "model": "deepseek-v3.2"})
    assert (w.heads, w.topk) == (64, 2048)
    assert workloads.case_heads_topk({"model": "glm-5"}) == (32, 2048)
    assert workloads.case_heads_topk({}) == (32, 2048)


@pytest.mark.parametrize("text, needle", [
    ('[[case]]\nrows = 8\nkeys = 600\ntopk = 512\nheads = 48\n', "case #1: heads: must be 16, 32 or 64"),
    ('[[case]]\nrows = 8\nkeys = 600\nmodel = "deepseek-v9"\n',
     "case #1: model: unknown model 'deepseek-v9'; presets: deepseek-v3.2, deepseek-v4-flash, deepseek-v4-pro, glm-5"),
    ('[defaults]\nheads = 64\n[[case]]\nrows = 40000000\nkeys = 600000\ntopk = 512\nlayout = "full"\n',
     "case #1: rows: must be between 1 and 33554431"),
    ('[[case]]\nfile = "w.safetensors"\nheads = 64\n', "heads: does not apply to a recorded workload"),
])
def test_bad_heads_or_model_in_a_config_name_the_case_and_field(tmp_path, text, needle):
    make_workload("causal", rows=2, keys=300, topk=512).to("cpu")
    workloads.save_workload(make_workload("causal", rows=2, keys=300, topk=512), tmp_path / "w.safetensors")
    p = _cfg(tmp_path, text)
    with pytest.raises(UsageError) as ei:
        workloads.load_workload_config(p)
    assert str(ei.value).startswith(f"{p}: ") and needle in str(ei.value), ei.value


def test_defaults_model_applies_to_every_case(tmp_path):
    p = _cfg(tmp_path, '[defaults]\nmodel = "deepseek-v3.2"\n[[case]]\nrows = 8\nkeys = 3000\n'
                       '[[case]]\nrows = 8\nkeys = 3000\ntopk = 1024\n')
    a, b = workloads.load_workload_config(p)
    assert (a["heads"], a["topk"]) == (64, 2048) and (b["heads"], b["topk"]) == (64, 1024)


def test_with_heads_sets_the_heads_and_renames_changed_cases():
    """Bug class: --heads applied to recorded files, or results of two heads
    under one case name."""
    cases = [{"name": "ties-t512", "rows": 8, "keys": 600, "topk": 512},
             {"name": "big-h64", "rows": 8, "keys": 600, "topk": 512, "heads": 64},
             {"name": "rec", "file": "rec.safetensors"},
             {"name": "v4", "rows": 8, "keys": 600, "model": "deepseek-v4-flash"}]
    out = workloads.with_heads(cases, 64)
    assert [c.get("heads") for c in out] == [64, 64, None, 64]
    assert [c["name"] for c in out] == ["ties-t512-h64", "big-h64", "rec", "v4"]
    out = workloads.with_heads(cases, 32)
    assert [c["name"] for c in out] == ["ties-t512", "big", "rec", "v4"]  # (32 heads: no suffix)
    assert out[3]["heads"] == 32 and workloads.case_heads_topk(out[3]) == (32, 512)
    assert [c["name"] for c in workloads.with_heads(cases, 16)] == ["ties-t512-h16", "big-h16", "rec", "v4-h16"]
    assert workloads.with_heads(cases, None) is cases
    assert cases[0] == {"name": "ties-t512", "rows": 8, "keys": 600, "topk": 512}  # not modified in place
    with pytest.raises(UsageError, match="^--heads: must be 16, 32 or 64"):
        workloads.with_heads(cases, 48)


# ------------------------------------------------------------ model presets


def test_the_presets():
    """Bug class: a preset with the wrong heads or topk (a model benchmarked at the wrong shape)."""
    assert {n: (m.heads, m.topk) for n, m in MODELS.items()} == {
        "deepseek-v3.2": (64, 2048), "deepseek-v4-flash": (64, 512), "deepseek-v4-pro": (64, 1024),
        "glm-5": (32, 2048)}
    assert MODEL_NAMES == tuple(MODELS) and get_model(" GLM-5 ") is MODELS["glm-5"]
    with pytest.raises(UsageError) as ei:
        get_model("llama")
    assert str(ei.value) == ("--model: unknown model 'llama'; presets: deepseek-v3.2, deepseek-v4-flash, "
                             "deepseek-v4-pro, glm-5")


def test_shipped_models_config_names_every_preset():
    from mqa_topk_cli.resources import config_path

    cases = workloads.load_workload_config(config_path("models"))
    assert {c["model"] for c in cases} == set(MODEL_NAMES)
    for c in cases:
        m = MODELS[c["model"]]
        assert (c["heads"], c["topk"]) == (m.heads, m.topk)
        assert (c["layout"], c["rows"], c["keys"]) == ("causal", 8192, 65536)


# ------------------------------------------------------------ CLI


@pytest.mark.parametrize("cmd", ["bench", "verify", "crossover"])
def test_help_lists_the_models_and_the_heads(run, cmd):
    res = run(cmd, "--help")
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for name in MODEL_NAMES:
        assert name in text, name
    assert "--model" in text and "--heads [16|32|64]" in text


def test_bench_model_sets_the_heads_and_topk_of_the_shape_flags_case(run, tmp_path):
    """Bug class: --model ignored, or its topk overriding an explicit --topk."""
    out = tmp_path / "b.json"
    res = run("bench", "--device", "cpu", "--rows", "16", "--keys", "640", "--paths", "torch", "--reps", "2",
              "--warmup", "0", "--model", "deepseek-v4-flash", "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["heads"], r["topk"], r["case"]) == (64, 512, "causal-gaussian-r16-k640-t512-h64")
    # 2 * 64 * 128 FLOP per visible pair
    assert r["tflops"] == pytest.approx(2 * 64 * 128 * r["visible_pairs"] / (r["median_ms"] * 1e-3) / 1e12)
    res = run("bench", "--device", "cpu", "--rows", "16", "--keys", "1300", "--paths", "torch", "--reps", "2",
              "--warmup", "0", "--model", "deepseek-v4-flash", "--heads", "16", "--topk", "1024", "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["heads"], r["topk"], r["case"]) == (16, 1024, "causal-gaussian-r16-k1300-t1024-h16")


@pytest.mark.parametrize("args, name, heads, topk", [
    ([], "headline", 32, 2048),
    (["--model", "glm-5"], "headline", 32, 2048),
    (["--model", "deepseek-v3.2"], "headline-h64", 64, 2048),
    (["--heads", "16"], "headline-h16", 16, 2048),
    (["--model", "deepseek-v4-flash"], "causal-gaussian-r8192-k65536-t512-h64", 64, 512),
    (["--model", "deepseek-v4-pro", "--heads", "32"], "causal-gaussian-r8192-k65536-t1024", 32, 1024),
])
def test_bench_default_case_per_model(run, monkeypatch, args, name, heads, topk):
    """Bug class: the headline default changed (it stays 32 heads, top-2048),
    or a model's case named like another shape's."""
    seen = []
    monkeypatch.setattr(workloads, "workload_from_case", lambda case, device: case)  # no 8192-row workload on a CPU
    monkeypatch.setattr(bench, "run_bench", lambda cases, paths, **kw: seen.extend(cases) or [])
    res = run("bench", "--device", "cpu", "--paths", "torch", *args)
    assert res.exit_code == 0, res.output
    (case,) = seen
    assert (case["name"], case["heads"], case["topk"], case["rows"], case["keys"]) == (name, heads, topk, 8192, 65536)


def test_verify_heads_runs_the_config_cases_at_those_heads(run, tmp_path):
    cfg = _cfg(tmp_path, '[[case]]\nname = "small"\nrows = 6\nkeys = 600\ntopk = 512\ndist = "ties"\n')
    out = tmp_path / "v.json"
    res = run("verify", "--device", "cpu", "--paths", "torch", "--config", cfg, "--heads", "64", "--reruns", "1",
              "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["case"], r["heads"], r["passed"]) == ("small-h64", 64, True)
    res = run("verify", "--device", "cpu", "--paths", "torch", "--config", cfg, "--model", "deepseek-v3.2",
              "--case", "small", "--reruns", "0", "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["case"], r["heads"], r["topk"]) == ("small-h64", 64, 512)  # the config's topk stays


def test_verify_shape_flags_with_a_model(run, tmp_path):
    out = tmp_path / "v.json"
    res = run("verify", "--device", "cpu", "--paths", "torch", "--rows", "8", "--keys", "1100", "--model",
              "deepseek-v4-pro", "--reruns", "0", "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["heads"], r["topk"], r["case"]) == (64, 1024, "causal-gaussian-r8-k1100-t1024-h64")


@pytest.mark.parametrize("cmd", ["bench", "verify"])
@pytest.mark.parametrize("option, value", [("--heads", "64"), ("--model", "deepseek-v3.2")])
def test_a_heads_option_with_only_recorded_files_is_a_usage_error(run, tmp_path, cmd, option, value):
    """Bug class: --heads silently ignored for recorded files (whose heads come from their tensors)."""
    f = tmp_path / "w.safetensors"
    workloads.save_workload(make_workload("causal", rows=4, keys=600, topk=512), f)
    res = run(cmd, "--device", "cpu", "--paths", "torch", "--workload", f, option, value)
    one_line_error(res, 2, f"{option}: sets the heads of generated cases", "recorded")


@pytest.mark.parametrize("cmd", ["bench", "verify", "crossover"])
def test_unsupported_heads_or_models_are_click_errors(run, cmd):
    for option, value in (("--heads", "48"), ("--model", "llama")):
        res = run(cmd, "--device", "cpu", option, value)
        one_line_error(res, 2, option)


def test_inspect_shows_the_heads_of_a_file(run, tmp_path):
    f = tmp_path / "w.pt"
    workloads.save_workload(make_workload("causal", rows=4, keys=600, topk=512, heads=16), f)
    res = run("inspect", f)
    assert res.exit_code == 0, res.output
    assert "[4, 16, 128] float8_e4m3fn" in res.output and "[4, 16] float32" in res.output
    heads_line = next(ln for ln in res.output.splitlines() if ln.strip("│ ").startswith("heads "))
    assert heads_line.split("│")[2].strip() == "16"


# ------------------------------------------------------------ calibration per heads


def _entry(mk, **over):
    e = {"min_keys": {str(t): v for t, v in zip((512, 1024, 2048), mk)}, "block_rows": 8, "wave_rule": False,
         "sms": 132, "gpu": "G", "date": "D", "commit": "C", "source": "test", "measured": {}}
    e.update(over)
    return e


def _format1(path, mk=(1000, 2000, 3000), **over):
    path.write_text(json.dumps({"format": 1, **_entry(mk, **over)}))
    return path


def _format2(path, table):
    path.write_text(json.dumps({"format": 2, "heads": {str(h): e for h, e in table.items()}}))
    return path


def test_a_format_1_file_reads_as_32_heads_and_other_heads_take_the_default_rule(tmp_path, monkeypatch):
    """Bug class: a format-1 calibration refused (files written by earlier
    versions), or its 32-head thresholds applied to 64 heads."""
    p = _format1(tmp_path / "c1.json")
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    assert [eligibility.fused_mqa_topk_min_keys(t) for t in (512, 1024, 2048)] == [1000, 2000, 3000]
    assert [eligibility.fused_mqa_topk_min_keys(t, heads=32) for t in (512, 1024, 2048)] == [1000, 2000, 3000]
    for heads in (16, 64):
        assert [eligibility.fused_mqa_topk_min_keys(t, heads=heads) for t in (512, 1024, 2048)] == [32768, 32768,
                                                                                                  65536]
        entry = eligibility.fused_mqa_topk_calibration(heads)
        assert entry["fallback"] is True and entry["wave_rule"] is True and entry["block_rows"] == 8
        assert eligibility.calibration_note(eligibility.load_calibration(), heads) == (
            f"no calibration for {heads} heads in {p}: the default rule applies (min keys 32768 / 32768 / 65536 for "
            f"top-512 / 1024 / 2048, the wave rule on); measure it with mqa-topk crossover --heads {heads} --out FILE")
    assert eligibility.calibration_note(eligibility.load_calibration(), 32) is None
    assert eligibility.DEFAULT_RULE_MIN_KEYS == {512: 32768, 1024: 32768, 2048: 65536}
    # the wave rule follows the entry: off at 32 heads (the file's), on at 64 (the default rule's)
    one_block = dict(keys=65536, topk=512, rows=8, dense_rows=1 << 20, sms=132)
    assert eligibility.fused_mqa_topk_chunk(65536, **one_block, heads=32)
    assert not eligibility.fused_mqa_topk_chunk(65536, **one_block, heads=64)
    with pytest.raises(UsageError, match="^heads: must be one of 16, 32, 64, got 48"):
        eligibility.fused_mqa_topk_min_keys(512, heads=48)


def test_a_format_2_file_gives_each_heads_its_own_entry(tmp_path):
    """Bug class: the entries of a format-2 file mixed up (64 heads reading 32's)."""
    p = _format2(tmp_path / "c2.json", {32: _entry((1000, 2000, 3000)),
                                        64: _entry((4096, 8192, 16384), block_rows=16, wave_rule=True)})
    cal = eligibility.load_calibration(p)
    assert cal["format"] == 2 and set(cal["heads"]) == {32, 64}
    mk = lambda heads: [eligibility.fused_mqa_topk_min_keys(t, heads=heads, calibration=cal)  # noqa: E731
                        for t in (512, 1024, 2048)]
    assert mk(32) == [1000, 2000, 3000] and mk(64) == [4096, 8192, 16384] and mk(16) == [32768, 32768, 65536]
    e64 = eligibility.calibration_for(cal, 64)
    assert e64["block_rows"] == 16 and e64["wave_rule"] is True and e64["path"] == str(p) and "note" not in e64
    # 16-row blocks at 64 heads: 1056 rows = 66 blocks = half of 132 SMs (ok); 1040 = 65 (not)
    assert eligibility.fused_mqa_topk_chunk(65536, 65536, 512, 1056, 1 << 30, sms=132, calibration=cal, heads=64)
    assert not eligibility.fused_mqa_topk_chunk(65536, 65536, 512, 1040, 1 << 30, sms=132, calibration=cal, heads=64)
    assert eligibility.fused_mqa_topk_chunk(65536, 65536, 512, 1040, 1 << 30, sms=132, calibration=cal, heads=32)


def test_merge_keeps_the_other_heads_and_replaces_its_own(tmp_path):
    """Bug class: writing a 64-head calibration loses the 32-head entry (or
    keeps a stale 64-head one); a default-rule entry written as if measured."""
    base1 = eligibility.load_calibration(_format1(tmp_path / "c1.json"))
    new64 = eligibility._validate_entry(_entry((5000, 6000, 7000)), "run")
    doc, kept = eligibility.merge_calibration(base1, 64, new64)
    assert kept == [32] and doc["format"] == 2 and list(doc["heads"]) == ["32", "64"]
    assert doc["heads"]["32"]["min_keys"] == {"512": 1000, "1024": 2000, "2048": 3000}
    assert doc["heads"]["64"]["min_keys"] == {"512": 5000, "1024": 6000, "2048": 7000}
    assert "path" not in doc["heads"]["32"] and "format" not in doc["heads"]["32"]
    p = crossover.write_calibration(tmp_path / "merged.json", doc)
    merged = eligibility.load_calibration(p)
    newer64 = eligibility._validate_entry(_entry((100, 200, 300)), "run")
    doc2, kept2 = eligibility.merge_calibration(merged, 64, newer64)
    assert kept2 == [32] and doc2["heads"]["64"]["min_keys"]["512"] == 100 and doc2["heads"]["32"] == doc["heads"]["32"]
    doc3, kept3 = eligibility.merge_calibration(merged, 16, newer64)
    assert kept3 == [32, 64] and list(doc3["heads"]) == ["16", "32", "64"]
    # nothing to keep from no base, or from a bare entry
    assert eligibility.merge_calibration(None, 64, newer64)[1] == []
    assert eligibility.merge_calibration(dict(newer64), 64, newer64)[1] == []
    # the default rule is never written as an entry
    fb = eligibility.calibration_for(merged, 16)
    assert fb["fallback"] and eligibility.merge_calibration({"heads": {16: fb, 32: merged["heads"][32]}}, 64,
                                                            newer64)[1] == [32]


def _fake_bench(seen):
    """bench.run_bench standing in: A = keys/1000 + 10 ms, B = keys/500 ms (A wins from ~10K keys)."""
    def run_bench(cases, paths, **kw):
        seen.extend(cases)
        out = []
        for c in cases:
            for p, ms in zip(paths, (c["keys"] / 1000 + 10, c["keys"] / 500)):
                out.append(bench.BenchResult(case=c["name"], op="mqa_topk", path=p, layout=c["layout"],
                                             rows=c["rows"], keys=c["keys"], topk=c["topk"], dist="", seed=0,
                                             heads=c["heads"], median_ms=ms, p20_ms=ms, p80_ms=ms))
        return out
    return run_bench


def test_crossover_at_64_heads_runs_64_head_cases_and_writes_their_entry(tmp_path, monkeypatch):
    """Bug class: a --heads 64 crossover timing 32-head workloads, comparing
    with the 32-head thresholds, or writing over the 32-head entry."""
    seen = []
    monkeypatch.setattr(bench, "run_bench", _fake_bench(seen))
    cal = eligibility.load_calibration(_format1(tmp_path / "c1.json"))
    sweep = {"layout": "full", "heads": 64, "topks": [512, 2048], "rows": [8], "paths": ["torch", "reference"],
             "keys": [2000, 4000, 8000, 16000, 32000, 64000], "confirm": 1,
             "wave": {"enabled": True, "keys": 32000, "topk": 512, "multiples": [1]}}
    rep = crossover.run_crossover(sweep, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert seen and all(c["heads"] == 64 and c["name"].endswith("-h64") for c in seen)
    assert rep.heads == 64 and rep.current == eligibility.DEFAULT_RULE_MIN_KEYS  # no 64-head entry yet
    assert any(n.startswith(f"no calibration for 64 heads in {tmp_path / 'c1.json'}") for n in rep.notes)
    assert any("keeps the entries for 32 heads" in n for n in rep.notes) and rep.kept_heads == [32]
    assert rep.entry["measured"]["heads"] == 64 and "64 heads" in rep.entry["source"]
    doc = eligibility.validate_calibration(rep.calibration)
    assert set(doc["heads"]) == {32, 64}
    assert doc["heads"][32]["min_keys"] == {512: 1000, 1024: 2000, 2048: 3000}
    assert doc["heads"][64]["min_keys"][512] == rep.recommended[512] and 8000 < rep.recommended[512] <= 16384
    assert doc["heads"][64]["min_keys"][1024] == 32768  # not measured: kept from the (default-rule) current entry
    # the wave rule kept (nothing decided it) is the default rule's for 64 heads: on
    sweep16 = dict(sweep, heads=16, wave={"enabled": False})
    rep16 = crossover.run_crossover(sweep16, device="cpu", sms=4, block_rows=2, calibration=doc)
    assert rep16.entry["wave_rule"] is True and rep16.kept_heads == [32, 64]
    assert set(eligibility.validate_calibration(rep16.calibration)["heads"]) == {16, 32, 64}


def test_crossover_sweep_config_takes_heads_and_model(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\nmodel = "deepseek-v4-pro"\nkeys = [1024, 2048]\n')
    sw = crossover.load_sweep(p)
    assert (sw["heads"], sw["topks"], sw["wave"]["topk"], sw["model"]) == (64, [1024], 1024, "deepseek-v4-pro")
    p.write_text('[sweep]\nmodel = "deepseek-v4-pro"\nheads = 16\ntopks = [512]\nkeys = [1024, 2048]\n'
                 '[wave]\ntopk = 2048\n')
    sw = crossover.load_sweep(p)
    assert (sw["heads"], sw["topks"], sw["wave"]["topk"]) == (16, [512], 2048)
    p.write_text('[sweep]\nkeys = [1024]\n')
    assert crossover.load_sweep(p)["heads"] == 32
    for text, needle in (('[sweep]\nheads = 48\nkeys = [1024]\n', "[sweep] heads: must be 16, 32 or 64"),
                         ('[sweep]\nmodel = "x"\nkeys = [1024]\n', "[sweep] model: unknown model 'x'"),
                         ('[sweep]\nheads = 64\nrows = [40000000]\nkeys = [1024]\n',
                          "[sweep] rows: must be between 1 and 33554431")):
        p.write_text(text)
        with pytest.raises(UsageError) as ei:
            crossover.load_sweep(p)
        assert str(ei.value).startswith(f"--config {p}: ") and needle in str(ei.value), ei.value


XO = ["crossover", "--device", "cpu", "--paths", "torch,reference", "--topks", "512", "--rows", "8", "--keys",
      "600,1200", "--sms", "2", "--block-rows", "8", "--wave-keys", "300", "--reps", "2", "--warmup", "0"]


def test_crossover_heads_merges_into_an_existing_calibration_file(run, tmp_path, monkeypatch):
    """Bug class: --out overwritten with only the heads just measured."""
    out = _format1(tmp_path / "cal.json")
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(out))  # in effect: 32 heads only (64 takes the default rule)
    res = run(*XO, "--heads", "64", "--out", out)
    assert res.exit_code == 0, res.output
    assert "64 heads" in res.output and "no calibration for 64 heads" in res.output
    assert "keeps the entries for 32 heads" in " ".join(res.output.split())
    doc = json.loads(out.read_text())
    assert doc["format"] == 2 and set(doc["heads"]) == {"32", "64"}
    assert doc["heads"]["32"]["min_keys"] == {"512": 1000, "1024": 2000, "2048": 3000}
    assert doc["heads"]["64"]["measured"]["heads"] == 64 and len(doc["heads"]["64"]["measured"]["grid"]) == 2
    assert doc["heads"]["64"]["min_keys"]["2048"] == 65536  # not measured: the default rule's, kept
    res = run(*XO, "--model", "deepseek-v4-flash", "--heads", "16", "--out", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert set(doc["heads"]) == {"16", "32", "64"} and doc["heads"]["16"]["measured"]["heads"] == 16
    assert {g["topk"] for g in doc["heads"]["16"]["measured"]["grid"]} == {512}


def test_crossover_model_measures_its_topk_at_its_heads(run, tmp_path):
    out = tmp_path / "new.json"
    res = run(*[a for a in XO if a not in ("--topks", "512")], "--model", "deepseek-v4-flash", "--out", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    entry = doc["heads"]["64"]
    assert {g["topk"] for g in entry["measured"]["grid"]} == {512} and entry["measured"]["wave"]["topk"] == 512
    # a new file keeps the 32-head entry of the calibration in effect (the shipped one)
    assert set(doc["heads"]) == {"32", "64"} and doc["heads"]["32"]["gpu"] == "NVIDIA H200"


def test_crossover_refuses_an_out_file_that_is_not_a_calibration(run, tmp_path, monkeypatch):
    """Bug class: a file overwritten that was not ours to replace (or found out after the run)."""
    monkeypatch.setattr(crossover, "run_crossover", lambda *a, **k: pytest.fail("ran before refusing --out"))
    out = tmp_path / "notes.json"
    out.write_text('{"hello": 1}')
    res = run(*XO, "--out", out)
    one_line_error(res, 2, f"--out {out}: exists and is not a calibration file", "remove it or choose another")
    assert out.read_text() == '{"hello": 1}'


# ------------------------------------------------------------ ops helpers


def test_the_fused_choice_gets_the_heads_and_counts_the_16_head_padding(monkeypatch):
    """Bug class: the kernel choice asked at 32 heads whatever the call's, or
    a 16-head call's padded copies left out of the bytes it allocates."""
    from mqa_topk_cli import ops

    calls = []

    class Ext:
        def fused_mqa_topk_choice(self, rows, keys, topk, heads, index):
            calls.append((rows, keys, topk, heads, index))
            return "staged", 1000

    monkeypatch.setattr(ops, "_native", lambda: Ext())
    for heads in HEADS:
        assert ops.fused_mqa_topk_kernel(64, 4096, 512, device="cuda:0", heads=heads) == "staged"
        assert calls[-1] == (64, 4096, 512, heads, 0)
        pad = 64 * 32 * 132 if heads == 16 else 0
        assert ops.fused_mqa_topk_padding_bytes(64, heads) == pad
        assert ops.fused_mqa_topk_call_bytes(64, 4096, 512, device="cuda:0", heads=heads) == 1000 + pad
    assert ops.fused_mqa_topk_kernel(8, 4096, 512, device="cuda:0") == "staged" and calls[-1][3] == 32
    n = len(calls)
    for bad in (48, True):
        with pytest.raises(ContractError, match="^heads: must be one of"):
            ops.fused_mqa_topk_kernel(8, 4096, 512, device="cuda:0", heads=bad)
    assert len(calls) == n  # refused before the extension was asked


# ------------------------------------------------------------ verify at other heads


def test_verify_rejects_a_path_that_drops_heads():
    """Bug class: a kernel that reads only the first 32 heads of a 64-head
    indexer passing verification (the reference must sum every head)."""
    from mqa_topk_cli.path_base import PathImpl
    from mqa_topk_cli.reference import reference_logits, reference_topk
    from mqa_topk_cli.verify import verify_case

    class First32(PathImpl):
        name = "first-32-heads"
        deterministic_ties = True

        def run(self, w, output):
            lg = reference_logits(w.q[:, :32].contiguous(), w.k, w.scales, w.weights[:, :32].contiguous(),
                                  w.starts, w.ends)
            output.copy_(reference_topk(lg, w.starts, w.ends, w.topk))

    w32 = make_workload("causal", rows=6, keys=900, topk=512, dist="gaussian", seed=5)
    assert verify_case(w32, First32(), reruns=0).passed  # right at 32 heads
    w64 = make_workload("causal", rows=6, keys=900, topk=512, dist="gaussian", seed=5, heads=64)
    r = verify_case(w64, First32(), reruns=0)
    assert not r.passed and r.heads == 64 and r.tie_equivalent_rows < r.rows
    good = verify_case(w64, "torch", other="reference", reruns=1)
    assert good.passed and good.heads == 64, good.errors
