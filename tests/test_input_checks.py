"""Issue 47: every bad input is refused before the work (exit 2, one line
naming the file, case and field), and the small things a user notices:
``bench --workload``, ``--seed`` alike in bench and verify, the GPU-sized note,
case names with the distribution, ``--dist`` choices, consistent messages."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
import torch

from mqa_topk_cli import bench, checks, crossover, eligibility, workloads
from mqa_topk_cli import verify as verify_mod
from mqa_topk_cli.errors import UsageError

from test_checks import _one_line_error  # noqa: E402

CPU = ["--device", "cpu"]
TINY = ["--rows", "16", "--keys", "640", "--topk", "512"]
FAST = ["--reps", "2", "--warmup", "0"]
XO = ["crossover", *CPU, "--paths", "torch,reference", "--topks", "512", *FAST]


def _must_not_run(what: str):
    def fail(*a, **k):
        pytest.fail(f"{what} ran before the bad input was reported")

    return fail


@pytest.fixture
def no_work(monkeypatch):
    """Nothing may be timed, verified or crossed over: the command must stop before."""
    monkeypatch.setattr(bench, "run_bench", _must_not_run("bench"))
    monkeypatch.setattr(verify_mod, "verify_case", _must_not_run("verify"))
    monkeypatch.setattr(crossover, "run_crossover", _must_not_run("crossover"))


def _config(tmp_path, *cases: str, name: str = "c.toml"):
    p = tmp_path / name
    p.write_text("\n".join(f"[[case]]\n{textwrap.dedent(c).strip()}\n" for c in cases))
    return p


GOOD = 'name = "good"\nlayout = "causal"\nrows = 4\nkeys = 600\ntopk = 512\n'


def _calibration(**over):
    doc = {"format": 1, "source": "test", "gpu": None, "sms": None, "date": None, "commit": None, "block_rows": 8,
           "min_keys": {"512": 32768, "1024": 32768, "2048": 65536}, "wave_rule": True, "measured": {}}
    doc.update(over)
    return doc


# ------------------------------------------------------------ 6: generator fields, when the config is read


BAD_FIELDS = [
    ('dist = "dsa"\nsinks = -5', "sinks: must be between 0 and 600"),
    ('dist = "dsa"\nsinks = 601', "sinks: must be between 0 and 600"),
    ('layout = "ragged"\nrequests = 0', "requests: must be between 1 and 600"),
    ('layout = "ragged"\nrequests = 99999999999', "requests: must be between 1 and 600"),
    ('layout = "ragged"\nrequests = "x"', "requests: expected an integer"),
    ('requests = "x"', "requests: applies to the ragged layout only (layout is 'causal')"),
    ('dist = "ties"\ntie_mode = "bogus"', "tie_mode: must be one of boundary, whole, got 'bogus'"),
    ('tie_mode = "whole"', "tie_mode: applies to dist ties only (dist is 'gaussian')"),
    ('dist = "ties"\nnear_ties = "no"', "near_ties: expected true or false, got 'no'"),
    ('dist = "ties"\nnear_ties = inf', "near_ties: expected true or false, got inf"),
    ('unaligned_starts = 1', "unaligned_starts: expected true or false, got 1"),
    ('layout = "ragged"\nrows = 10\nkey_lengths = [300, 300]\nrow_lengths = [4, 5]',
     "rows: 10 differs from sum(row_lengths) = 9"),
    ('layout = "ragged"\nrows = 9\nkey_lengths = [300, 200]\nrow_lengths = [4, 5]',
     "keys: 600 differs from sum(key_lengths) = 500"),
    ('layout = "ragged"\nkey_lengths = [300, 300]\nrow_lengths = [4, 5]\nrequests = 2',
     "requests: give either requests or key_lengths/row_lengths"),
    ('layout = "ragged"\nkey_lengths = [300, 300]', "key_lengths/row_lengths: give both"),
    ('description = 5', "description: expected a string"),
    ('tags = "fast"', "tags: expected a list of strings"),
]


def _bad_case(extra: str) -> str:
    """GOOD with ``extra``'s fields replacing or added to its own."""
    fields = dict(ln.split(" = ", 1) for ln in GOOD.strip().splitlines())
    fields["name"] = '"bad"'
    for ln in extra.splitlines():
        k, v = ln.split(" = ", 1)
        fields[k] = v
    if "key_lengths" in fields and "rows = 10" not in extra and "rows = 9" not in extra:
        fields.pop("rows")
        fields.pop("keys")
    return "\n".join(f"{k} = {v}" for k, v in fields.items())


@pytest.mark.parametrize("extra, message", BAD_FIELDS)
def test_config_generator_fields_are_checked_when_read(tmp_path, extra, message):
    p = _config(tmp_path, GOOD, _bad_case(extra))
    with pytest.raises(UsageError) as ei:
        workloads.load_workload_config(p)
    assert str(ei.value) == f"{p}: case bad: {message}" or str(ei.value).startswith(f"{p}: case bad: {message}"), \
        str(ei.value)


@pytest.mark.parametrize("cmd", [["verify", *CPU, "--paths", "torch", "--reruns", "0"],
                                 ["bench", *CPU, "--paths", "torch", *FAST]])
def test_a_bad_case_stops_the_command_before_any_case_runs(run, no_work, tmp_path, cmd):
    p = _config(tmp_path, GOOD, _bad_case('dist = "dsa"\nsinks = -5'))
    line = _one_line_error(run(*cmd, "--config", p), 2, str(p), "case bad", "sinks")
    assert "between 0 and" in line


def test_make_workload_checks_the_options_before_allocating(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("memory was allocated before the options were checked")

    for name in ("Generator", "empty", "zeros", "randn", "rand", "randint", "randperm", "tensor", "arange"):
        monkeypatch.setattr(torch, name, boom)
    for kw, field in ((dict(dist="dsa", sinks=-5), "sinks"), (dict(dist="ties", near_ties="no"), "near_ties"),
                      (dict(layout="ragged", requests=10**11), "requests"), (dict(tie_mode="whole"), "tie_mode")):
        args = dict(layout="causal", rows=4, keys=600, topk=512) | kw
        with pytest.raises(UsageError, match=f"^{field}: "):
            workloads.make_workload(**args)


def test_valid_options_still_build(make):
    w = make(layout="ragged", rows=9, keys=None, topk=512, dist="ties", key_lengths=[600, 500], row_lengths=[4, 5],
             tie_mode="whole", near_ties=False, unaligned_starts=True)
    assert (w.rows, w.keys) == (9, 1100)
    assert make(layout="full", rows=2, keys=600, topk=512, dist="dsa", sinks=0).rows == 2


def test_crossover_sweep_fields_are_checked(tmp_path):
    p = tmp_path / "sweep.toml"
    for body, needle in (('[sweep]\nkeys = [1024]\nlayout = "diagonal"\n', "[sweep] layout: must be one of"),
                         ('[sweep]\nkeys = [1024]\ndist = "bogus"\n', "[sweep] dist: must be one of"),
                         ('[sweep]\nkeys = [1024]\nrow = [8]\n', "[sweep] row: unknown field"),
                         ('[sweep]\nkeys = [1024]\n[wave]\nenabled = "no"\n', "[wave] enabled: expected true or false"),
                         ('[sweep]\nkeys = [1024]\n[wave]\nkey = 4\n', "[wave] key: unknown field"),
                         ('[sweep]\nkeys = [1024]\ndist = "dsa"\n[sweep.options]\nsinks = -1\n',
                          "[sweep] options: sinks: must be between 0"),
                         ('[sweep]\nkeys = [1024]\n[sweep.options]\nbogus = 1\n', "[sweep] options: bogus: unknown"),
                         ('[sweep]\nkeys = [1024]\nconfirm = 100000\n', "[sweep] confirm: must be between 0 and"),
                         ('[sweep]\nkeys = { min = 1024, max = 4096, step = 2 }\n', "[sweep] keys: step: unknown")):
        p.write_text(body)
        with pytest.raises(UsageError) as ei:
            crossover.load_sweep(p)
        assert str(p) in str(ei.value) and needle in str(ei.value), (body, str(ei.value))


# ------------------------------------------------------------ 11: files a config names, before the first case


@pytest.mark.parametrize("cmd", [["verify", *CPU, "--paths", "torch", "--reruns", "0"],
                                 ["bench", *CPU, "--paths", "torch", *FAST]])
def test_a_corrupt_file_in_a_config_stops_the_command_before_any_case(run, no_work, tmp_path, cmd):
    (tmp_path / "broken.safetensors").write_bytes(b"not a workload")
    p = _config(tmp_path, GOOD, 'name = "rec"\nfile = "broken.safetensors"')
    _one_line_error(run(*cmd, "--config", p), 2, str(p), "case rec", "broken.safetensors")


# ------------------------------------------------------------ 7: crossover outputs are different files


@pytest.mark.parametrize("out, results", [("same.json", "same.json"), ("same.json", "./sub/../same.json")])
def test_crossover_out_and_results_must_be_different_files(run, no_work, tmp_path, monkeypatch, out, results):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    line = _one_line_error(run(*XO, "--rows", "8", "--keys", "600", "--no-wave", "--out", out, "--results", results),
                           2, "--results", "the same file as --out")
    assert results in line
    assert not (tmp_path / "same.json").exists()  # the probe of --out created it; the failed run removed it


# ------------------------------------------------------------ 12: output files probed by creating them


def test_an_output_that_cannot_be_created_is_refused_before_the_run(run, no_work, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = "/proc/mqa-topk-probe.json"  # passes the directory check; creating it fails, even as root
    _one_line_error(run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--out", bad), 2, "--out", bad)
    line = _one_line_error(run(*XO, "--rows", "8", "--keys", "600", "--no-wave", "--out", "good.json",
                               "--results", bad), 2, "--results", bad)
    assert "cannot write" in line or "not writable" in line  # (not writable: the check before, when not root)
    assert not (tmp_path / "good.json").exists()  # created by its probe, removed when the command failed


def test_a_failed_or_interrupted_run_leaves_no_empty_output(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def interrupted(*a, **k):
        assert (tmp_path / "r.json").is_file()  # created up front
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_bench", interrupted)
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--out", "r.json")
    assert res.exit_code == 1 and "Aborted!" in res.stderr
    assert not (tmp_path / "r.json").exists()
    (tmp_path / "old.json").write_text("kept")  # a file that was there before is left as it was
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--out", "old.json")
    assert res.exit_code == 1 and (tmp_path / "old.json").read_text() == "kept"

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(bench, "run_bench", broken)
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--out", "r.csv")
    assert res.exit_code == 1 and not (tmp_path / "r.csv").exists()


def test_a_write_that_fails_half_way_leaves_no_file(tmp_path, monkeypatch):
    p = checks.probe_output_file(tmp_path / "r.json", "--out", checks.TABLE_SUFFIXES)

    def half(self, text):
        with open(self, "w") as f:
            f.write(text[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(p), "write_text", half)
    with pytest.raises(UsageError, match="^--out .*No space left"):
        bench.write_results(p, [], {})
    checks.discard_unwritten_outputs()
    assert not p.exists()


def test_written_outputs_are_kept(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--out", "r.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "r.json").read_text())["results"]


# ------------------------------------------------------------ 13: boolean environment variables


@pytest.mark.parametrize("value, expect", [("1", True), ("true", True), ("YES", True), (" on ", True), ("0", False),
                                           ("false", False), ("No", False), ("off", False), ("", False)])
def test_env_flag_reads_clear_spellings(monkeypatch, value, expect):
    monkeypatch.setenv("MQA_TOPK_CHECKED", value)
    assert checks.env_flag("MQA_TOPK_CHECKED") is expect


@pytest.mark.parametrize("value", ["banana", "2", "y", "enabled"])
def test_env_flag_refuses_anything_else(monkeypatch, value):
    monkeypatch.setenv("MQA_TOPK_CHECKED", value)
    with pytest.raises(UsageError, match=f"^MQA_TOPK_CHECKED={value!r}: "):
        checks.env_flag("MQA_TOPK_CHECKED")


@pytest.mark.parametrize("name, value", [("MQA_TOPK_CHECKED", "banana"), ("MQA_TOPK_USE_FUSED", "maybe"),
                                         ("MQA_TOPK_VERBOSE_BUILD", "x"), ("MQA_TOPK_FUSED_KERNEL", "v2")])
def test_a_bad_environment_value_stops_every_command(run, no_work, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    for cmd in (["verify", *CPU, *TINY, "--paths", "torch"], ["bench", *CPU, *TINY, *FAST, "--paths", "torch"]):
        _one_line_error(run(*cmd), 2, f"{name}={value!r}")


def test_the_fused_switch_refuses_an_unclear_value(monkeypatch):
    monkeypatch.setenv(eligibility.USE_FUSED_ENV, "banana")
    with pytest.raises(UsageError, match="^MQA_TOPK_USE_FUSED='banana'"):
        eligibility.use_fused_mqa_topk(query_shape=(32, 128), topk=512, fp4_cache=False, full_context=True)


def test_a_bad_calibration_in_the_environment_stops_every_command(run, no_work, tmp_path, monkeypatch):
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(_calibration(block_rows=0)))
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    _one_line_error(run("bench", *CPU, *TINY, *FAST, "--paths", "torch"), 2, str(p), "block_rows")


# ------------------------------------------------------------ 9: bounds, and calibration fields on load


@pytest.mark.parametrize("option, value", [("--sms", "99999"), ("--block-rows", "99999999999999999999"),
                                           ("--confirm", "99999")])
def test_crossover_bounds_sms_block_rows_and_confirm(run, no_work, option, value):
    _one_line_error(run(*XO, "--rows", "8", "--keys", "600", option, value), 2, option)


@pytest.mark.parametrize("over, needle", [
    (dict(block_rows=99999999999999999999), "'block_rows' must be between 1 and 1024"),
    (dict(sms=10**6), "'sms' must be between 1 and 1024"),
    (dict(min_keys={"512": 32768, "1024": 32768, "2048": 10**12}), "min_keys['2048'] must be between 1 and 2147483647"),
    (dict(min_keys={"512": 1, "1024": 1, "2048": 1, "999": 1}), "min_keys key '999' is not a topk"),
    (dict(gpu=5), "'gpu' must be a string or null"),
    (dict(measured=[]), "'measured' must be an object"),
])
def test_a_calibration_file_is_checked_when_loaded(tmp_path, over, needle):
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(_calibration(**over)))
    with pytest.raises(UsageError) as ei:
        eligibility.load_calibration(p)
    assert str(p) in str(ei.value) and needle in str(ei.value), str(ei.value)
    eligibility.validate_calibration(_calibration())  # the valid one


# ------------------------------------------------------------ 8: an impossible causal grid


@pytest.mark.parametrize("rows, keys, needle", [("8000", "600", "every key count"),
                                                ("8,8000", "600,1200", "8000")])
def test_a_causal_grid_without_points_is_refused_up_front(run, monkeypatch, tmp_path, rows, keys, needle):
    monkeypatch.setattr(bench, "run_bench", _must_not_run("bench"))
    cfg = tmp_path / "causal.toml"
    cfg.write_text('[sweep]\nlayout = "causal"\nkeys = [8192]\n')
    line = _one_line_error(run(*XO, "--config", str(cfg), "--rows", rows, "--keys", keys, "--no-wave"), 2, "--rows",
                           needle)
    assert "keys >= rows" in line


def test_run_crossover_refuses_a_grid_without_points(monkeypatch):
    monkeypatch.setattr(bench, "run_bench", _must_not_run("bench"))
    sweep = {"layout": "causal", "topks": [512], "rows": [8000], "keys": [600], "paths": ["torch", "reference"],
             "confirm": 1, "wave": {"enabled": False}}
    with pytest.raises(UsageError, match=r"^rows: 8000 .*every key count"):
        crossover.run_crossover(sweep, device="cpu", sms=4)


# ------------------------------------------------------------ 10: inputs before the device


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize("args, needle", [
    (["bench", "--config", "bench", "--rows", "16", "--paths", "torch"], "--config"),
    (["bench", "--case", "headline", "--paths", "torch"], "--case"),
    (["bench", "--random-logits", "--paths", "torch"], "--random-logits"),
    (["bench", "--config", "bench", "--rows", "16", "--paths", "engine-fused"], "--config"),
    (["verify", "--device", "cuda", "--case", "x", "--rows", "16"], "--case"),
    (["crossover", "--paths", "fused"], "--paths"),
    (["crossover", "--config", "CAUSAL", "--paths", "torch,reference", "--topks", "512", "--rows", "8000", "--keys",
      "600"], "--rows"),
])
def test_input_errors_come_before_the_missing_gpu(run, no_cuda, no_work, tmp_path, args, needle):
    cfg = tmp_path / "causal.toml"
    cfg.write_text('[sweep]\nlayout = "causal"\nkeys = [8192]\n')
    _one_line_error(run(*[str(cfg) if a == "CAUSAL" else a for a in args]), 2, needle)


# ------------------------------------------------------------ 14: bench --workload


def test_bench_times_a_recorded_workload_file(run, tmp_path, make):
    w = make(layout="ragged", rows=9, keys=900, topk=1024, dist="gaussian", seed=7)
    f = workloads.save_workload(w, tmp_path / "rec.safetensors")
    out = tmp_path / "b.json"
    res = run("bench", *CPU, "--workload", f, "--paths", "torch", *FAST, "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["case"], r["rows"], r["keys"], r["topk"], r["status"]) == ("rec", 9, 900, 1024, "ok")


def test_bench_refuses_a_bad_workload_file_up_front(run, no_work, tmp_path):
    (tmp_path / "bad.pt").write_bytes(b"junk")
    _one_line_error(run("bench", *CPU, "--workload", tmp_path / "bad.pt", "--paths", "torch"), 2, "bad.pt")
    _one_line_error(run("bench", *CPU, "--workload", tmp_path / "none.pt", "--paths", "torch"), 2, "none.pt",
                    "no such file")


# ------------------------------------------------------------ 15: --seed alike in bench and verify


def _first_case(run, monkeypatch, *args):
    """The case dict the command builds its first workload from (then stops)."""
    seen = []

    def stop(case, device="cpu"):
        seen.append(dict(case))
        raise KeyboardInterrupt

    monkeypatch.setattr(workloads, "workload_from_case", stop)
    monkeypatch.setattr(bench, "_materialize", lambda case, device: stop(case))
    res = run(*args)
    assert "Aborted!" in res.stderr, res.output
    return seen[0]


def test_seed_alone_reseeds_the_default_cases_in_bench_and_verify(run, monkeypatch):
    b = _first_case(run, monkeypatch, "bench", *CPU, "--paths", "torch", "--seed", "3")
    assert (b["rows"], b["keys"], b["seed"]) == (bench.HEADLINE["rows"], bench.HEADLINE["keys"], 3)
    first = workloads.load_workload_config(__import__("mqa_topk_cli.resources", fromlist=["x"]).config_path("verify"))[0]
    v = _first_case(run, monkeypatch, "verify", *CPU, "--paths", "torch", "--seed", "3")
    assert (v["name"], v["rows"], v["keys"], v["seed"]) == (first["name"], first["rows"], first["keys"], 3)


def test_seed_with_a_config_reseeds_its_cases_and_adds_none(run, monkeypatch, tmp_path):
    p = _config(tmp_path, GOOD)
    for cmd in (["bench", *FAST], ["verify", "--reruns", "0"]):
        c = _first_case(run, monkeypatch, *cmd, *CPU, "--paths", "torch", "--config", p, "--seed", "5")
        assert (c["name"], c["seed"]) == ("good", 5)


def test_seed_with_only_recorded_files_is_refused(run, no_work, tmp_path, make):
    f = workloads.save_workload(make(layout="full", rows=4, keys=600, topk=512, seed=5), tmp_path / "w.safetensors")
    for cmd in ("bench", "verify"):
        _one_line_error(run(cmd, *CPU, "--paths", "torch", "--workload", f, "--seed", "3"), 2, "--seed")


# ------------------------------------------------------------ 16: the GPU-sized note in bench --config


def test_bench_config_on_a_cpu_says_the_cases_are_sized_for_a_gpu(run, monkeypatch, tmp_path):
    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_bench", stop)
    res = run("bench", *CPU, "--config", "bench", "--paths", "torch")
    note = next((ln for ln in res.stderr.splitlines() if ln.startswith("note:")), "")
    assert "sized for a GPU" in note and "--case" in note, res.stderr
    assert res.stderr.index("note:") < res.stderr.index("Aborted!")
    res = run("bench", *CPU, "--config", _config(tmp_path, GOOD), "--paths", "torch")
    assert "Aborted!" in res.stderr and "sized for a GPU" not in res.stderr


# ------------------------------------------------------------ 17: case names carry the distribution


def test_flag_case_names_carry_the_distribution(run, tmp_path):
    names = set()
    for dist in ("ties", "gaussian"):
        out = tmp_path / f"{dist}.json"
        res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--dist", dist, "--out", out)
        assert res.exit_code == 0, res.output
        names.add(json.loads(out.read_text())["results"][0]["case"])
        res = run("verify", *CPU, *TINY, "--paths", "torch", "--reruns", "0", "--dist", dist)
        assert f"causal-{dist}-r16-k640-t512" in res.stdout, res.stdout
    assert names == {"causal-ties-r16-k640-t512", "causal-gaussian-r16-k640-t512"}
    assert bench._case_fields({"layout": "full", "rows": 2, "keys": 600, "topk": 512, "dist": "dsa"})["case"] == \
        "full-dsa-r2-k600-t512"


# ------------------------------------------------------------ 18: --dist help lists the choices


@pytest.mark.parametrize("cmd", ["bench", "verify"])
def test_dist_and_layout_help_list_the_choices(run, cmd):
    text = " ".join(run(cmd, "--help").stdout.split())
    for name in (*workloads.DISTS, *workloads.LAYOUTS):
        assert name in text, name
    assert "--dist TEXT" not in text and "--layout TEXT" not in text


# ------------------------------------------------------------ 19: consistent, quiet messages


USER_MOD = '''
from mqa_topk_cli.reference import reference_logits, reference_topk


def whole(q, k, scales, weights, starts, ends, output):
    output.copy_(reference_topk(reference_logits(q, k, scales, weights, starts, ends), starts, ends, output.shape[1]))


whole.lowest_index_ties = True
'''


def test_a_user_path_crossover_prints_no_engine_constants(run, tmp_path, monkeypatch):
    (tmp_path / "mqa_user_fn.py").write_text(USER_MOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    cal = tmp_path / "cal.json"
    res = run(*XO, "--paths", "py:mqa_user_fn:whole,torch", "--rows", "8", "--keys", "600,1200", "--sms", "4",
              "--block-rows", "2", "--wave-keys", "300", "--out", cal)
    assert res.exit_code == 0, res.output
    assert "engine constants" not in res.output and "vllm" not in res.output, res.output
    assert "engine" not in json.loads(cal.read_text())["heads"]["32"]["measured"]
    sys.modules.pop("mqa_user_fn", None)


@pytest.mark.parametrize("cmd", [["verify", *CPU, *TINY], ["bench", *CPU, *TINY, *FAST],
                                 ["crossover", *CPU, "--topks", "512", "--rows", "8", "--keys", "600"]])
def test_an_unavailable_path_is_named_once_in_the_same_words(run, cmd):
    paths = "engine-fused,torch" if cmd[0] == "crossover" else "engine-fused"
    line = _one_line_error(run(*cmd, "--paths", paths), 1, "the engine-fused path is unavailable on cpu: needs")
    assert line.count("engine-fused") == 1, line


def test_the_wave_line_says_where_a_kept_setting_comes_from():
    line = crossover.wave_decision_line(None, False, ("a", "b"), kept_from="cal.json")
    assert line.startswith("wave rule: off, kept from cal.json (") and "no timed row" in line
