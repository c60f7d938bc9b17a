"""Issue 13: bad input fails before the work, in one line naming the option or
file (exit 2 for usage errors); nothing ends as "unexpected error" or a kill;
sizes are checked before anything is allocated; no result is lost; progress
shows in a log."""
from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import warnings

import pytest
import torch
from safetensors.torch import save_file

from mqa_topk_cli import bench, checks, crossover, timing, workloads
from mqa_topk_cli import verify as verify_mod
from mqa_topk_cli.errors import ContractError, UsageError

from conftest import one_line_error as _cli_one_line_error  # noqa: E402


def _one_line_error(res, code: int, *needles: str) -> str:
    """conftest's one-line check, and never an "unexpected error"."""
    line = _cli_one_line_error(res, code, *needles)
    assert "unexpected error" not in res.output
    return line

CPU = ["--device", "cpu"]
TINY = ["--rows", "16", "--keys", "640", "--topk", "512"]
FAST = ["--reps", "2", "--warmup", "0"]
XO = ["crossover", *CPU, "--paths", "torch,reference", "--topks", "512", "--rows", "8", "--keys", "600", "--no-wave",
      *FAST]


def _must_not_run(what: str):
    def fail(*a, **k):
        pytest.fail(f"{what} ran before the bad input was reported")

    return fail


@pytest.fixture
def no_alloc(monkeypatch):
    """Every torch allocator/generator the workload code uses fails: a check
    that passes under this fixture ran before any memory was touched."""
    def boom(*a, **k):
        raise AssertionError("memory was allocated before the size check")

    for name in ("Generator", "empty", "zeros", "ones", "full", "arange", "randn", "rand", "randint", "randperm",
                 "tensor"):
        monkeypatch.setattr(torch, name, boom)


@pytest.fixture
def one_gib(monkeypatch):
    """The machine has 1 GiB free (whatever it really has)."""
    monkeypatch.setattr(checks, "available_bytes", lambda device: 1 << 30)


# ------------------------------------------------------------ 1: pickles


def _tensors(w):
    return {k: v.clone() for k, v in w.tensors().items()}


def test_pt_calling_os_system_is_refused_without_torch_advice(tmp_path, tiny):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    p = tmp_path / "evil.pt"
    torch.save({**_tensors(tiny), "topk": 512, "payload": Evil()}, p)
    with pytest.raises(UsageError) as ei:
        workloads.load_workload(p)
    msg = str(ei.value)
    assert str(p) in msg and "refusing to unpickle" in msg and "system" in msg, msg
    assert "weights_only=False" not in msg.replace("`", "") and "set to False" not in msg.replace("`", ""), msg
    assert "\n" not in msg
    assert not marker.exists()


def test_raw_pickle_is_refused_quietly(tmp_path, tiny):
    p = tmp_path / "raw.pt"
    with open(p, "wb") as f:
        pickle.dump({**_tensors(tiny), "topk": 512}, f, protocol=4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(UsageError) as ei:
            workloads.load_workload(p)
    assert not [str(w.message) for w in seen]
    msg = str(ei.value)
    assert str(p) in msg and "not unpickled" in msg and "\n" not in msg, msg
    assert "False" not in msg, msg


def test_raw_pickle_inspect_prints_one_line(tmp_path, tiny):
    """The real process: torch's UserWarning would reach stderr before the error."""
    p = tmp_path / "raw.pt"
    with open(p, "wb") as f:
        pickle.dump({**_tensors(tiny), "topk": 512}, f, protocol=4)
    out = subprocess.run([sys.executable, "-W", "default", "-m", "mqa_topk_cli", "inspect", str(p)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "raw.pt" in lines[0], out.stderr


# ------------------------------------------------------------ 2: output paths, before the run


@pytest.mark.parametrize("cmd, option, value", [
    (["bench", *CPU, *TINY, *FAST, "--paths", "torch"], "--out", "missing-dir/r.json"),
    (["verify", *CPU, *TINY, "--paths", "torch", "--reruns", "0"], "--out", "missing-dir/v.csv"),
    (XO, "--results", "missing-dir/raw.csv"),
    (XO, "--out", "missing-dir/cal.json"),
    (XO, "--plot", "missing-dir/p.png"),
    (XO, "--plot", "p.gif"),
])
def test_output_paths_are_checked_before_the_run(run, monkeypatch, tmp_path, cmd, option, value):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_bench", _must_not_run("bench"))
    monkeypatch.setattr(verify_mod, "verify_case", _must_not_run("verify"))
    monkeypatch.setattr(crossover, "run_crossover", _must_not_run("crossover"))
    _one_line_error(run(*cmd, option, value), 2, option, value)


def test_output_file_checks(tmp_path):
    assert checks.check_output_file(tmp_path / "a.csv", "--out", checks.TABLE_SUFFIXES) == tmp_path / "a.csv"
    (tmp_path / "d.json").mkdir()
    with pytest.raises(UsageError, match="^--out .*is a directory"):
        checks.check_output_file(tmp_path / "d.json", "--out", checks.TABLE_SUFFIXES)
    with pytest.raises(UsageError, match="^--results .*must end in .csv or .json"):
        checks.check_output_file(tmp_path / "a.txt", "--results", checks.TABLE_SUFFIXES)


# ------------------------------------------------------------ 3: sizes, before any allocation


@pytest.mark.parametrize("args, needle", [
    (["--rows", "99999999999"], "--rows"),
    (["--layout", "full", "--rows", "2000000000"], "--rows"),
    (["--layout", "full", "--rows", "5000000"], "rows"),
])
def test_huge_sizes_are_one_line_before_any_allocation(run, no_alloc, one_gib, args, needle):
    for cmd in (["verify", *CPU, "--paths", "torch"], ["bench", *CPU, "--paths", "torch", *FAST]):
        _one_line_error(run(*cmd, *args), 2, needle)


def test_generation_is_checked_against_memory_before_allocating(no_alloc, one_gib):
    with pytest.raises(UsageError, match=r"^rows: generating 5000000 rows x 4096 keys needs about .* GiB"):
        workloads.make_workload("full", rows=5_000_000, keys=4096, topk=512)
    with pytest.raises(UsageError, match="^rows: must be between 1 and"):
        workloads.make_workload("causal", rows=99_999_999_999, keys=4096, topk=512)
    with pytest.raises(UsageError, match="^rows: the causal layout needs rows <= keys"):
        workloads.make_workload("causal", rows=8192, keys=4096, topk=512)
    with pytest.raises(UsageError, match="^rows: generating"):  # ragged lengths: their sums
        workloads.make_workload("ragged", rows=None, keys=None, topk=512, key_lengths=[2_000_000] * 2,
                                row_lengths=[2_000_000] * 2)
    with pytest.raises(UsageError, match="^keys: must be between 1 and 4194304"):
        workloads.make_workload("full", rows=1, keys=(1 << 22) + 1, topk=512)


def test_memory_estimate_covers_the_generation():
    """The budget per row/key is at least what a generator really builds (q
    and k in fp32 plus the final tensors)."""
    w = workloads.make_workload("full", rows=64, keys=1000, topk=512, dist="ties")
    assert checks.generation_bytes(64, 1000) >= 3 * 4 * (w.q.numel() + w.k.numel()) + w.nbytes
    free = checks.available_bytes("cpu")
    assert free is None or free > 0


def test_config_sizes_are_checked_when_read(tmp_path):
    p = tmp_path / "big.toml"
    p.write_text('[[case]]\nname = "huge"\nlayout = "full"\nrows = 99999999999\nkeys = 600\ntopk = 512\n')
    with pytest.raises(UsageError, match=r"big.toml: case huge: rows: must be between 1 and"):
        workloads.load_workload_config(p)
    p.write_text('[[case]]\nname = "k"\nlayout = "full"\nrows = 4\nkeys = 99999999\ntopk = 512\n')
    with pytest.raises(UsageError, match=r"case k: keys: must be between 1 and 4194304"):
        workloads.load_workload_config(p)
    p.write_text('[[case]]\nname = "s"\nlayout = "full"\nrows = 4\nkeys = 600\ntopk = 512\nseed = 99999999999999999999\n')
    with pytest.raises(UsageError, match=r"case s: seed: must be between 0 and"):
        workloads.load_workload_config(p)
    p.write_text('[[case]]\nfile = "nowhere.safetensors"\n')
    with pytest.raises(UsageError, match=r"file: .*nowhere.safetensors: no such file"):
        workloads.load_workload_config(p)


def test_dense_logits_are_checked_against_memory(run, monkeypatch):
    """verify --paths reference builds the reference path's whole [rows, keys]
    logits: too big for the memory left is a labelled failure, not a kill."""
    rows, keys = 16, 640
    gen = checks.generation_bytes(rows, keys)
    assert gen < 4 * rows * keys + 256 * rows * keys  # the room below fits the generation, not the logits
    monkeypatch.setattr(checks, "available_bytes", lambda device: gen + 1)
    res = run("verify", *CPU, *TINY, "--paths", "reference", "--reruns", "0")
    assert res.exit_code == 1, res.output
    assert "reference path's dense logits [16, 640] needs about" in res.stdout


# ------------------------------------------------------------ 4: verify --config keeps the other cases


def test_verify_config_labels_a_case_that_cannot_run_and_goes_on(run, tmp_path, monkeypatch):
    # (a corrupt file named in the config no longer gets this far: it is refused
    # before the first case, issue 47: test_input_checks.py)
    cfg = tmp_path / "c.toml"
    case = 'layout = "causal"\nrows = 4\nkeys = 600\ntopk = 512\n'
    cfg.write_text(f'[[case]]\nname = "first"\n{case}\n[[case]]\nname = "oom"\n{case}\n'
                   f'[[case]]\nname = "last"\n{case}')
    real = workloads.workload_from_case

    def build(c, device="cpu"):
        if c.get("name") == "oom":
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
        return real(c, device)

    monkeypatch.setattr(workloads, "workload_from_case", build)
    out = tmp_path / "v.json"
    res = run("verify", *CPU, "--config", cfg, "--paths", "torch", "--reruns", "0", "--out", out)
    assert res.exit_code == 1, res.output
    assert "unexpected error" not in res.output and "1 of 3 checks failed" in res.stderr
    recs = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert set(recs) == {"first", "oom", "last"}
    assert recs["first"]["passed"] and recs["last"]["passed"]
    assert recs["oom"]["status"].startswith("error: RuntimeError: [enforce fail at alloc_cpu.cpp:127]")
    assert "oom / torch: the case could not run: error: RuntimeError: [enforce fail" in res.stdout


def test_verify_many_labels_a_case_that_cannot_run(tmp_path):
    good = {"name": "good", "layout": "causal", "rows": 4, "keys": 600, "topk": 512}
    bad = {"name": "bad", "layout": "causal", "rows": 4, "keys": 600, "topk": 512, "file": str(tmp_path / "gone.pt")}
    seen = []
    res = verify_mod.verify_many([good, bad], ["torch"], reruns=0, on_result=seen.append)
    assert [r.case for r in res] == ["good", "bad"] and seen == res
    assert res[0].passed and not res[1].passed and "no such file" in res[1].status
    assert res[1].file == bad["file"]


# ------------------------------------------------------------ 5: numbers


@pytest.mark.parametrize("cmd, option, value", [
    (["verify", *CPU, *TINY, "--paths", "torch"], "--tol-rel", "nan"),
    (["verify", *CPU, *TINY, "--paths", "torch"], "--tol-rel", "inf"),
    (["verify", *CPU, *TINY, "--paths", "torch"], "--tol-rel", "0.5"),
    (["verify", *CPU, *TINY, "--paths", "torch"], "--seed", "99999999999999999999"),
    (["verify", *CPU, *TINY, "--paths", "torch"], "--reruns", "1000000000"),
    (["bench", *CPU, *TINY, "--paths", "torch", "--reps", "2"], "--warmup", "inf"),
    (["bench", *CPU, *TINY, "--paths", "torch", "--reps", "2"], "--warmup", "nan"),
    (["bench", *CPU, *TINY, "--paths", "torch", "--reps", "2"], "--warmup", "1e300"),
    (["bench", *CPU, *TINY, "--paths", "torch", "--warmup", "0"], "--reps", "10000000000"),
    (["bench", *CPU, *TINY, "--paths", "torch", *FAST], "--seed", "-1"),
    (XO[:-4] + ["--reps", "2"], "--warmup", "inf"),
])
def test_bad_numbers_are_one_line_exit_2(run, monkeypatch, cmd, option, value):
    monkeypatch.setattr(bench, "run_bench", _must_not_run("bench"))
    monkeypatch.setattr(verify_mod, "verify_case", _must_not_run("verify"))
    monkeypatch.setattr(crossover, "run_crossover", _must_not_run("crossover"))
    _one_line_error(run(*cmd, option, value), 2, option)


def test_library_refuses_non_finite_numbers(tiny):
    with pytest.raises(ValueError, match="tol_rel"):
        verify_mod.verify_case(tiny, "reference", tol_rel=math.inf)
    with pytest.raises(UsageError, match="^warmup"):
        timing.time_fn(lambda: None, warmup=math.nan, device="cpu")
    calls = []

    def fn():  # bounds the old behaviour (an endless warm-up) to a quick failure
        calls.append(1)
        if len(calls) > 1000:
            raise RuntimeError("warm-up did not stop")

    with pytest.raises(UsageError, match="^warmup"):
        timing.time_fn(fn, warmup=math.inf, device="cpu")
    with pytest.raises(UsageError, match="^seed"):
        workloads.make_workload("causal", rows=2, keys=10, topk=512, seed=1 << 64)
    with pytest.raises(UsageError, match="^--tol-rel: must be a finite number"):
        checks.check_number("nan", "--tol-rel", lo=0, hi=1, lo_open=True)


# ------------------------------------------------------------ 6: crossover keys


@pytest.mark.parametrize("option, value", [("--keys", "1024,99999999"), ("--wave-keys", "99999999"),
                                           ("--rows", "99999999999")])
def test_crossover_checks_sizes_against_the_limits(run, monkeypatch, option, value):
    monkeypatch.setattr(crossover, "run_crossover", _must_not_run("crossover"))
    args = [a for a in XO if a != "--no-wave"]
    i = args.index(option) if option in args else None
    if i is not None:
        args[i + 1] = value
    else:
        args += [option, value]
    line = _one_line_error(run(*args, "--sms", "2"), 2, option)
    assert str(checks.MAX_ROWS_ANY_HEADS if option == "--rows" else checks.MAX_KEYS) in line


def test_crossover_sweep_config_sizes_are_checked(tmp_path):
    p = tmp_path / "sweep.toml"
    p.write_text("[sweep]\nkeys = [1024, 99999999]\n")
    with pytest.raises(UsageError, match=r"sweep.toml: \[sweep\] keys: must be between 1 and 4194304"):
        crossover.load_sweep(p)
    p.write_text("[sweep]\nkeys = [1024]\n[wave]\nkeys = 99999999\n")
    with pytest.raises(UsageError, match=r"sweep.toml: \[wave\] keys: must be between"):
        crossover.load_sweep(p)
    p.write_text("[sweep]\nkeys = [1024]\nseed = 'x'\n")
    with pytest.raises(UsageError, match=r"sweep.toml: \[sweep\] seed: expected an integer"):
        crossover.load_sweep(p)


def test_unsorted_keys_name_the_keys_not_a_function(monkeypatch):
    with pytest.raises(UsageError) as ei:
        crossover.find_crossover([4, 2, 8], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert str(ei.value).startswith("keys:") and "find_crossover" not in str(ei.value)
    # run_crossover sorts the grid: unsorted keys give the sorted result
    times = {"fused": lambda w: w.keys / 1000 + 10, "native": lambda w: w.keys / 500}

    class W:
        def __init__(self, c):
            self.name, self.rows, self.keys, self.topk = c["name"], c["rows"], c["keys"], c["topk"]
            self.visible_pairs = self.rows * self.keys

    def fake_bench(cases, paths, **kw):
        return [bench.BenchResult(case=c["name"], op="mqa_topk", path=p, layout="full", rows=c["rows"],
                                  keys=c["keys"], topk=c["topk"], dist="", seed=0, median_ms=times[p](W(c)))
                for c in cases for p in paths]

    monkeypatch.setattr(crossover, "check_paths_available", lambda *a: None)
    monkeypatch.setattr(bench, "run_bench", fake_bench)
    sweep = {"layout": "full", "topks": [512], "rows": [8], "keys": [64000, 1000, 16000, 4000],
             "paths": ["fused", "native"], "confirm": 1, "wave": {"enabled": False}}
    rep = crossover.run_crossover(sweep, device="cpu", sms=4)
    assert [g["keys"] for g in rep.grid] == [1000, 4000, 16000, 64000]
    assert 4000 < rep.crossovers[0]["keys"] < 16000
    assert sweep["keys"] == [64000, 1000, 16000, 4000]  # the caller's sweep is left as it was


# ------------------------------------------------------------ 7: brackets in table cells


def test_bracketed_error_text_is_shown_in_the_status_column(run, monkeypatch):
    from mqa_topk_cli import paths

    def boom(w):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] boom")

    monkeypatch.setattr(paths.get_path("reference"), "prepare", boom, raising=False)
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch,reference")
    assert res.exit_code == 0, res.output
    table_rows = [ln for ln in res.stdout.splitlines() if "│" in ln and "boom" in ln]
    assert table_rows and "[enforce fail at alloc_cpu.cpp:127] boom" in table_rows[0], res.stdout


# ------------------------------------------------------------ 8: bench shows a recorded file's shape


def test_bench_config_case_naming_a_file_shows_its_shape(run, tmp_path, make):
    w = make(layout="ragged", rows=9, keys=900, topk=1024, dist="gaussian", seed=7)
    workloads.save_workload(w, tmp_path / "rec.safetensors")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[case]]\nfile = "rec.safetensors"\n')
    out = tmp_path / "b.json"
    res = run("bench", *CPU, "--config", cfg, "--paths", "torch", *FAST, "--out", out)
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    assert (r["case"], r["rows"], r["keys"], r["topk"], r["layout"]) == ("rec", 9, 900, 1024, "ragged")
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("│ rec"))
    assert [c.strip() for c in row.split("│")[3:7]] == ["9", "900", "32", "1024"]


# ------------------------------------------------------------ 9: one rule for empty workloads


def _empty_file(tmp_path, w, what: str):
    t = _tensors(w)
    if what == "rows":
        for f in ("q", "weights", "starts", "ends"):
            t[f] = t[f][:0].contiguous()
    else:
        t["k"], t["scales"] = t["k"][:0].contiguous(), t["scales"][:0].contiguous()
        t["starts"], t["ends"] = torch.zeros_like(t["starts"]), torch.zeros_like(t["ends"])
    p = tmp_path / f"no-{what}.safetensors"
    t["q"], t["k"] = t["q"].view(torch.uint8), t["k"].view(torch.uint8)
    save_file(t, str(p), metadata={"topk": "512", "fp8_as_uint8": "q,k"})
    return p


@pytest.mark.parametrize("what, field", [("rows", "q"), ("keys", "k")])
def test_files_with_no_rows_or_keys_are_refused_like_the_flags(run, tmp_path, tiny, what, field):
    p = _empty_file(tmp_path, tiny, what)
    _one_line_error(run("inspect", p), 2, str(p), f"{field}: holds 0 {what}")
    _one_line_error(run("verify", *CPU, "--paths", "torch", "--workload", p), 2, str(p), "at least one")
    _one_line_error(run("bench", *CPU, "--paths", "torch", f"--{what}", "0"), 2, f"--{what}")


def test_generated_and_recorded_workloads_need_a_row_and_a_key(tmp_path, tiny):
    with pytest.raises(UsageError, match="^rows: must be between 1"):
        workloads.make_workload("full", rows=0, keys=17, topk=512)
    with pytest.raises(UsageError, match="^rows: must be between 1"):
        workloads.make_workload("ragged", rows=None, keys=None, topk=512, key_lengths=[5], row_lengths=[0])
    p = tmp_path / "c.toml"
    p.write_text('[[case]]\nname = "e"\nlayout = "full"\nrows = 0\nkeys = 600\ntopk = 512\n')
    with pytest.raises(UsageError, match="case e: rows: must be between 1"):
        workloads.load_workload_config(p)
    with pytest.raises(ContractError, match="^q: a workload needs at least one row"):
        workloads.record(tmp_path / "r.pt", tiny.q[:0], tiny.k, tiny.scales, tiny.weights[:0], tiny.starts[:0],
                         tiny.ends[:0], 512)
    assert not (tmp_path / "r.pt").exists()


# ------------------------------------------------------------ also expected


def test_progress_is_one_line_per_finished_step_when_stdout_is_not_a_terminal(run):
    res = run("verify", *CPU, *TINY, "--paths", "torch,reference", "--reruns", "0")
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 2, res.stdout
    assert lines[0].startswith("[1/2 ") and "verify: causal-gaussian-r16-k640-t512 / torch: pass" in lines[0]
    assert lines[1].startswith("[2/2 ") and "/ reference: pass" in lines[1]
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch")
    assert any(ln.startswith("[1/1 ") and "bench mqa_topk: causal-gaussian-r16-k640-t512 / torch: ok" in ln
               for ln in res.stdout.splitlines()), res.stdout


@pytest.mark.parametrize("cmd", [["verify", *CPU, "--paths", "torch"], ["bench", *CPU, "--paths", "torch"]])
def test_gpu_sized_default_cases_on_a_cpu_are_announced_before_the_work(run, monkeypatch, cmd):
    def stop(*a, **k):  # the first workload: stop here, the note must already be out
        raise KeyboardInterrupt

    monkeypatch.setattr(workloads, "workload_from_case", stop)
    res = run(*cmd)
    assert "Aborted!" in res.stderr
    note = next(ln for ln in res.stderr.splitlines() if ln.startswith("note:"))
    assert "sized for a GPU" in note and "--rows 16 --keys 1024 --topk 512" in note
    assert res.stderr.index("note:") < res.stderr.index("Aborted!")


def test_no_gpu_sized_note_for_chosen_cases(run):
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch")
    assert res.exit_code == 0 and "sized for a GPU" not in res.stderr


def test_graph_on_a_cpu_says_it_does_nothing(run):
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--graph")
    assert res.exit_code == 0, res.output
    assert "--graph does nothing on a CPU" in res.stderr
    assert "does nothing on a CPU" in " ".join(run("bench", "--help").stdout.split())


def test_cpu_environment_stamp_has_the_model_and_threads(run, tmp_path):
    from mqa_topk_cli.envinfo import environment

    env = environment("cpu")
    assert isinstance(env["cpu"], str) and env["cpu"]
    assert env["cpu_threads"] == torch.get_num_threads() and env["cpu_count"] == os.cpu_count()
    out = tmp_path / "r.json"
    res = run("bench", *CPU, *TINY, *FAST, "--paths", "torch", "--out", out)
    assert f"CPU {env['cpu']}, {torch.get_num_threads()} threads |" in res.stdout
    assert json.loads(out.read_text())["environment"]["cpu_threads"] == torch.get_num_threads()


def test_inspect_lists_each_tensor_with_shape_and_dtype(run, tmp_path, tiny):
    p = workloads.record(tmp_path / "w.safetensors", tiny.q, tiny.k, torch.full((tiny.keys, 4), 127, dtype=torch.uint8),
                         tiny.weights, tiny.starts.long(), tiny.ends.long(), 512)
    res = run("inspect", p)
    assert res.exit_code == 0, res.output
    want = {"q": "[13, 32, 128] float8_e4m3fn", "k": "[700, 128] float8_e4m3fn", "scales": "[700, 4] uint8",
            "weights": "[13, 32] float32", "starts": "[13] int32", "ends": "[13] int32"}
    for name, desc in want.items():
        assert any(f"tensor {name}" in ln and desc in ln for ln in res.stdout.splitlines()), (name, res.stdout)
    assert workloads.describe_workload(p)["tensors"] == want


def test_help_texts_give_the_key_maximum_and_how_to_record(run):
    assert "4194304" in run("bench", "--help").stdout and "4194304" in run("verify", "--help").stdout
    assert "4194304" in run("crossover", "--help").stdout
    assert "workloads.record(path, q, k, scales, weights, starts, ends, topk)" in " ".join(
        run("inspect", "--help").stdout.split())


def test_verify_table_names_the_workload_file(run, tmp_path, make, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = make(layout="full", rows=4, keys=600, topk=512, seed=5)
    workloads.save_workload(w, "rec.safetensors")
    res = run("verify", *CPU, "--paths", "torch", "--workload", "rec.safetensors", "--reruns", "0", "--out", "v.json")
    assert res.exit_code == 0, res.output
    header = next(ln for ln in res.stdout.splitlines() if "case" in ln and "path" in ln)
    assert [c.strip() for c in header.split("┃")[1:4]] == ["case", "path", "file"]
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("│ ") and "torch" in ln)
    assert row.split("│")[3].strip() == "rec.safetensors"
    assert json.loads((tmp_path / "v.json").read_text())["results"][0]["file"] == "rec.safetensors"
    res = run("verify", *CPU, *TINY, "--paths", "torch", "--reruns", "0")  # no file: no file column
    assert "file" not in next(ln for ln in res.stdout.splitlines() if "case" in ln and "path" in ln)


def _readme_block(heading: str) -> str:
    """The first indented code block under ``heading`` in the README, dedented."""
    import textwrap
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    block, started = [], False
    for ln in section.splitlines():
        if ln.startswith("    ") or (started and not ln.strip()):
            block.append(ln)
            started = True
        elif started:
            break
    return textwrap.dedent("\n".join(block)).strip() + "\n"


def test_readme_recording_example_runs(run, tmp_path, monkeypatch, tiny):
    code = _readme_block("## Recording a workload")
    assert "workloads.record(" in code and len(code.splitlines()) <= 6
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    ns["indexer_prefill"](tiny.q, tiny.k, tiny.scales, tiny.weights, tiny.starts, tiny.ends, 512)
    assert workloads.load_workload("chunk.safetensors").rows == tiny.rows
    assert run("inspect", "chunk.safetensors").exit_code == 0


def test_readme_says_how_to_install_the_cpu_torch():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    after = text.split("**CPU-only machine**", 1)[1]
    lines = [ln.strip() for ln in after.splitlines() if ln.startswith("      ") and ln.strip()][:2]
    assert lines[0].startswith("pip install torch") and "download.pytorch.org/whl/cpu" in lines[0]
    assert lines[1].startswith("pip install -e")


def test_a_gpu_index_that_does_not_exist_is_one_line(run, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(bench, "run_bench", _must_not_run("bench"))
    _one_line_error(run("bench", "--device", "cuda:7", *TINY, *FAST, "--paths", "torch"), 2, "--device cuda:7",
                    "cuda:0..cuda:1")


def test_verify_checks_room_for_every_rerun_before_running(tiny, monkeypatch):
    monkeypatch.setattr(checks, "available_bytes", lambda device: 3 * tiny.rows * 512 * 4 - 1)
    r = verify_mod.verify_case(tiny, "torch", reruns=2)
    assert not r.passed and r.runs == 0 and "--reruns: keeping 3 outputs [13, 512]" in r.status
    assert verify_mod.verify_case(tiny, "torch", reruns=1).passed  # 2 outputs fit


def test_a_device_file_is_not_called_missing(run):
    _one_line_error(run("inspect", os.devnull), 2, os.devnull, "not a regular file")
    _one_line_error(run("verify", *CPU, "--paths", "torch", "--workload", os.devnull), 2, "not a regular file")
