"""Every subcommand through click's CliRunner on a CPU with tiny shapes, the
one-line errors and their exit codes."""
from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import torch

import mqa_topk_cli
from mqa_topk_cli import bench, jit
from conftest import one_line_error


TINY = ["--device", "cpu", "--rows", "16", "--keys", "640", "--topk", "512", "--reps", "3", "--warmup", "0"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA GPU")


# ------------------------------------------------------------ group


def test_help_lists_the_five_commands(run):
    res = run("--help")
    assert res.exit_code == 0
    for cmd in ("build", "verify", "bench", "crossover", "inspect"):
        assert f"  {cmd} " in res.output
    assert run("--version").output.strip() == f"mqa-topk {mqa_topk_cli.__version__}"


def test_every_command_has_help(run):
    for cmd in ("build", "verify", "bench", "crossover", "inspect"):
        res = run(cmd, "--help")
        assert res.exit_code == 0 and "Usage:" in res.output


def test_python_dash_m_entry_point():
    import subprocess

    out = subprocess.run([sys.executable, "-m", "mqa_topk_cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "crossover" in out.stdout


# ------------------------------------------------------------ bad inputs: one line, exit 2


@pytest.mark.parametrize(
    "args, option",
    [
        (["bench", "--topk", "100"], "--topk"),
        (["bench", "--rows", "-5"], "--rows"),
        (["bench", "--rows", "0"], "--rows"),
        (["bench", "--keys", str((1 << 22) + 1)], "--keys"),
        (["bench", "--paths", "torch,bogus"], "--paths"),
        (["bench", "--layout", "diagonal"], "--layout"),
        (["bench", "--device", "tpu"], "--device"),
        (["bench", "--out", "results.txt"], "--out"),
        (["bench", "--device", "cpu", "--config", "no-such-config"], "--config"),
        (["bench", "--device", "cpu", "--config", "bench", "--rows", "8"], "--config"),
        (["bench", "--device", "cpu", "--case", "headline"], "--case"),
        (["bench", "--device", "cpu", "--config", "bench", "--case", "nope"], "--case"),
        (["verify", "--device", "cpu", "--workload", "missing.pt"], "missing.pt"),
        (["verify", "--paths", "bogus"], "--paths"),
        (["verify", "--device", "cpu", "--config", "nope.toml"], "nope.toml"),
        (["crossover", "--topks", "100"], "--topks"),
        (["crossover", "--config", "nope"], "--config"),
        (["crossover", "--device", "cpu", "--paths", "torch,reference", "--out", "cal.txt"], "--out"),
        (["inspect", "no-such-file.safetensors"], "no-such-file.safetensors"),
        (["bench", "--bogus-flag"], "--bogus-flag"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(run, args, option):
    one_line_error(run(*args), 2, option)


def test_malformed_config_names_the_file(run, tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("[[case]\nname = ")
    one_line_error(run("bench", "--device", "cpu", "--config", p), 2, "broken.toml")
    one_line_error(run("crossover", "--device", "cpu", "--paths", "torch,reference", "--config", p), 2, "broken.toml")


def test_malformed_calibration_names_the_file(run, tmp_path, monkeypatch):
    p = tmp_path / "cal.json"
    p.write_text("{oops")
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    one_line_error(run("crossover", "--device", "cpu", "--paths", "torch,reference", "--keys", "640",
                        "--rows", "8", "--topks", "512", "--reps", "2", "--warmup", "0", "--no-wave"), 2, "cal.json")


@no_gpu
def test_bench_without_arguments_on_a_cpu_machine_is_one_line(run):
    line = one_line_error(run("bench"), 1, "no CUDA GPU", "--device cpu")
    assert line.startswith("mqa-topk bench: ")


@no_gpu
def test_crossover_without_fused_is_one_line(run):
    one_line_error(run("crossover"), 1, "fused")


@no_gpu
def test_build_on_a_cpu_machine_says_what_is_missing(run):
    res = run("build")
    assert res.exit_code == 1
    assert "no CUDA GPU" in res.stderr and "Traceback" not in res.output
    assert "cache dir" in res.stdout


# ------------------------------------------------------------ build with a fake toolchain


def test_build_reports_kernels(run, monkeypatch):
    calls = {}
    monkeypatch.setattr(jit, "toolchain_report", lambda: {
        "gpu": "NVIDIA H200", "arch": "sm_90", "sms": 132, "nvcc": "/usr/local/bin/nvcc", "nvcc_version": "13.0",
        "ninja": True, "torch_cuda": "13.0", "missing": [], "sources": ["mqa_logits.cu", "binding.cpp"],
        "cache_dir": "/tmp/cache"})

    def load_extension(verbose=False, force=False):
        calls.update(verbose=verbose, force=force)
        return object()

    monkeypatch.setattr(jit, "load_extension", load_extension)
    monkeypatch.setattr(jit, "build_report", lambda: {
        "arch": "sm_90a", "build_seconds": 12.5, "cache_dir": "/tmp/cache/sm90a-x",
        "kernels": [{"name": "sm90_fp8_mqa_logits", "registers": 168, "shared_bytes": 200704, "local_bytes": 0,
                     "max_threads": 640},
                    {"name": "sm90_topk", "registers": 40, "shared_bytes": 9000, "local_bytes": 16, "max_threads": 512}],
        "fused_workspace_bytes": {512: 28115008, 1024: 54067264, 2048: 105971776},
        "fused_call_bytes": {(64, 65536): ("staged", 17 << 20), (8192, 65536): ("whole", 0),
                             (64, 524288): ("staged", 130 << 20)}})
    monkeypatch.delenv("MQA_TOPK_VERBOSE_BUILD", raising=False)
    res = run("build", "--force", "--verbose")
    row64 = next(ln for ln in res.stdout.splitlines() if ln.strip("│ ").startswith("64 "))
    assert "staged 17 MiB" in row64 and "staged 130 MiB" in row64, res.stdout
    row8k = next(ln for ln in res.stdout.splitlines() if ln.strip("│ ").startswith("8192 "))
    assert "whole 0 MiB" in row8k and "-" in row8k and "cap 512 MiB" in res.stdout
    assert "fused workspace (any rows/keys): topk 512: 26.8 MiB" in res.stdout and "topk 2048: 101.1 MiB" in res.stdout
    assert res.exit_code == 0, res.output
    assert calls == {"verbose": True, "force": True}
    import os

    assert os.environ.get("MQA_TOPK_VERBOSE_BUILD") == "1"
    for text in ("mqa_logits.cu", "NVIDIA H200", "sm_90a", "12.5", "sm90_fp8_mqa_logits", "168", "200704", "/tmp/cache/sm90a-x"):
        assert text in res.stdout, text
    spill_row = next(ln for ln in res.stdout.splitlines() if "sm90_topk" in ln)
    assert "16" in spill_row and "[red]" not in res.stdout  # styled, not printed as markup


def test_build_with_missing_nvcc_exits_1(run, monkeypatch):
    monkeypatch.setattr(jit, "toolchain_report", lambda: {
        "gpu": "NVIDIA H200", "arch": "sm_90", "sms": 132, "nvcc": None, "nvcc_version": None, "ninja": True,
        "torch_cuda": "13.0", "missing": ["nvcc not found (set CUDA_HOME or put nvcc on PATH)"], "sources": [],
        "cache_dir": "/tmp/c"})
    monkeypatch.setattr(jit, "load_extension", lambda **kw: pytest.fail("must not build"))
    res = run("build")
    assert res.exit_code == 1 and "nvcc not found" in res.stderr


# ------------------------------------------------------------ bench on CPU (real paths)


def test_bench_tiny_cpu_run_writes_json_and_csv(run, tmp_path):
    out = tmp_path / "r.json"
    res = run("bench", *TINY, "--paths", "torch,reference", "--out", out)
    assert res.exit_code == 0, res.output
    assert "torch" in res.stdout and "reference" in res.stdout
    doc = json.loads(out.read_text())
    assert set(doc) >= {"environment", "results"}
    assert {"torch", "date", "commit", "gpu", "sms"} <= set(doc["environment"])
    rows = {r["path"]: r for r in doc["results"]}
    assert set(rows) == {"torch", "reference"}
    for r in rows.values():
        assert r["status"] == "ok" and r["rows"] == 16 and r["keys"] == 640 and r["topk"] == 512
        assert 0 < r["p20_ms"] <= r["median_ms"] <= r["p80_ms"] and r["tflops"] > 0 and r["reps"] == 3
    assert rows["torch"]["speedup"] == pytest.approx(1.0) and rows["reference"]["baseline"] == "torch"
    csv = tmp_path / "r.csv"
    assert run("bench", *TINY, "--paths", "torch", "--out", csv).exit_code == 0
    df = pd.read_csv(csv)
    assert list(df["path"]) == ["torch"] and "env_torch" in df.columns and "median_ms" in df.columns


def test_bench_unavailable_path_is_labelled_and_the_run_goes_on(run):
    res = run("bench", *TINY, "--paths", "native,torch")
    assert res.exit_code == 0, res.output
    if not torch.cuda.is_available():
        assert "unavailable" in res.stdout
    assert "ok" in res.stdout


def test_bench_op_logits_and_topk_on_cpu(run, tmp_path):
    out = tmp_path / "l.json"
    res = run("bench", *TINY, "--op", "logits", "--paths", "torch", "--out", out)
    assert res.exit_code == 0, res.output
    results = json.loads(out.read_text())["results"]
    gemm = [r for r in results if r["op"] == "gemm"]
    assert len(gemm) == 1 and "_scaled_mm" in gemm[0]["path"]
    if not torch.cuda.is_available():
        assert gemm[0]["status"].startswith("unavailable")
        assert "fp8 GEMM ceiling" in res.stdout
    assert [r["status"] for r in results if r["op"] == "logits"] == ["ok"]
    out = tmp_path / "t.json"
    for extra in ([], ["--random-logits"]):
        res = run("bench", *TINY, "--op", "topk", "--paths", "torch", *extra, "--out", out)
        assert res.exit_code == 0, res.output
        (r,) = json.loads(out.read_text())["results"]
        assert r["op"] == "topk" and r["status"] == "ok" and r["g_logits_per_s"] > 0
    one_line_error(run("bench", *TINY, "--random-logits"), 2, "--random-logits")


def test_bench_config_sweep_with_case_filter(run, tmp_path):
    cfg = tmp_path / "mini.toml"
    cfg.write_text(
        '[[case]]\nname = "a"\nlayout = "causal"\nrows = 8\nkeys = 600\ntopk = 512\ndist = "gaussian"\nseed = 1\n\n'
        '[[case]]\nname = "b"\nlayout = "full"\nrows = 4\nkeys = 700\ntopk = 512\ndist = "gaussian"\nseed = 2\n'
    )
    out = tmp_path / "s.json"
    res = run("bench", "--device", "cpu", "--config", cfg, "--paths", "torch", "--reps", "2", "--warmup", "0",
              "--out", out)
    assert res.exit_code == 0, res.output
    assert [r["case"] for r in json.loads(out.read_text())["results"]] == ["a", "b"]
    res = run("bench", "--device", "cpu", "--config", cfg, "--case", "b", "--paths", "torch", "--reps", "2",
              "--warmup", "0", "--out", out)
    assert [r["case"] for r in json.loads(out.read_text())["results"]] == ["b"]


def test_bench_failing_path_is_labelled_in_the_table(run, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("kernel exploded")

    from mqa_topk_cli import paths

    p = paths.get_path("reference")
    monkeypatch.setattr(p, "prepare", boom, raising=False)
    res = run("bench", *TINY, "--paths", "reference,torch")
    assert res.exit_code == 0, res.output
    assert "error: RuntimeError: kernel exploded" in res.stdout
    monkeypatch.setattr(paths.get_path("torch"), "prepare", boom, raising=False)
    res = run("bench", *TINY, "--paths", "reference,torch")
    assert res.exit_code == 1 and "no path could be timed" in res.stderr


def test_unexpected_errors_keep_tracebacks_for_debug_only(run, monkeypatch):
    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(bench, "run_bench", boom)
    res = run("bench", *TINY, "--paths", "torch")
    line = one_line_error(res, 1, "unexpected error", "KeyError", "--debug")
    assert line.startswith("mqa-topk bench:")
    with pytest.raises(KeyError):
        run("--debug", "bench", *TINY, "--paths", "torch")


# ------------------------------------------------------------ verify, inspect, crossover on CPU


def test_verify_tiny_cpu_passes(run, tmp_path):
    out = tmp_path / "v.json"
    res = run("verify", "--device", "cpu", "--paths", "torch,reference", "--rows", "12", "--keys", "700",
              "--topk", "512", "--reruns", "1", "--out", out)
    assert res.exit_code == 0, res.output
    assert "pass" in res.stdout and "FAIL" not in res.stdout
    doc = json.loads(out.read_text())
    assert [r["path"] for r in doc["results"]] == ["torch", "reference"]
    assert all(r["passed"] for r in doc["results"])


def test_verify_default_config_case_filter(run):
    from mqa_topk_cli.resources import config_path
    from mqa_topk_cli.workloads import load_workload_config

    cases = load_workload_config(config_path("verify"))
    small = min(cases, key=lambda c: int(c["rows"]) * int(c["keys"]))
    res = run("verify", "--device", "cpu", "--paths", "torch", "--case", small["name"], "--reruns", "1")
    assert res.exit_code == 0, res.output
    assert small["name"] in res.stdout


def test_verify_wrong_path_fails_with_exit_1(run, monkeypatch):
    from mqa_topk_cli import paths

    p = paths.get_path("torch")
    real_run = p.run

    def drop_one(w, output):  # a known-wrong implementation: loses one index per row
        real_run(w, output)
        output[:, 0] = -1

    monkeypatch.setattr(p, "run", drop_one, raising=False)
    res = run("verify", "--device", "cpu", "--paths", "torch", "--rows", "8", "--keys", "700", "--topk", "512",
              "--reruns", "1")
    assert res.exit_code == 1, res.output
    assert "FAIL" in res.stdout
    assert "failed" in res.stderr


def test_inspect_a_recorded_workload(run, tmp_path):
    from mqa_topk_cli import workloads

    w = workloads.make_workload("causal", rows=8, keys=600, topk=512, seed=3)
    f = tmp_path / "w.safetensors"
    workloads.save_workload(w, f)
    res = run("inspect", f)
    assert res.exit_code == 0, res.output
    assert "600" in res.stdout and "512" in res.stdout
    bad = tmp_path / "garbage.safetensors"
    bad.write_bytes(b"not a workload at all")
    one_line_error(run("inspect", bad), 2, "garbage.safetensors")


def test_verify_recorded_workload(run, tmp_path):
    from mqa_topk_cli import workloads

    w = workloads.make_workload("full", rows=4, keys=600, topk=512, seed=5)
    f = tmp_path / "rec.safetensors"
    workloads.save_workload(w, f)
    res = run("verify", "--device", "cpu", "--paths", "torch", "--workload", f, "--reruns", "1")
    assert res.exit_code == 0, res.output


def test_crossover_on_cpu_writes_a_calibration(run, tmp_path, monkeypatch):
    cal = tmp_path / "cal.json"
    res = run("crossover", "--device", "cpu", "--paths", "torch,reference", "--topks", "512", "--rows", "8",
              "--keys", "600,1200", "--sms", "2", "--block-rows", "8", "--wave-keys", "300", "--reps", "2",
              "--warmup", "0", "--out", cal, "--results", tmp_path / "raw.csv")
    assert res.exit_code == 0, res.output
    assert "SM100 default" in res.stdout and "wave rule" in res.stdout
    full = json.loads(cal.read_text())
    # this run's entry for 32 heads; the shipped default's other entry (64 heads) kept as it is
    from mqa_topk_cli import eligibility as el_shipped

    shipped = json.loads(el_shipped.DEFAULT_CALIBRATION.read_text())
    assert full["format"] == 2 and set(full["heads"]) == {"32", "64"}
    assert full["heads"]["64"] == shipped["heads"]["64"] and full["heads"]["32"] != shipped["heads"]["32"]
    doc = full["heads"]["32"]
    assert doc["block_rows"] == 8 and doc["sms"] == 2 and doc["measured"]["heads"] == 32
    # On 2 SMs every last wave fills at least half of them: no row of the wave
    # table is one the rule sends to the other path, so the rule is kept as the
    # current calibration has it.
    from mqa_topk_cli import eligibility as el

    assert doc["measured"]["wave"]["decision"]["wave_rule"] is None
    assert doc["wave_rule"] is el.fused_mqa_topk_calibration(32)["wave_rule"]
    assert set(doc["min_keys"]) == {"512", "1024", "2048"}
    assert len(doc["measured"]["grid"]) == 2 and doc["measured"]["wave"]["table"]
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(cal))
    from mqa_topk_cli import eligibility

    assert eligibility.fused_mqa_topk_min_keys(512) == doc["min_keys"]["512"]
    assert len(pd.read_csv(tmp_path / "raw.csv")) >= 4


def test_crossover_plot_without_matplotlib_fails_before_the_run(run, tmp_path, monkeypatch):
    from mqa_topk_cli import crossover

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    monkeypatch.setattr(crossover, "run_crossover", lambda *a, **k: pytest.fail("ran before saying --plot cannot work"))
    res = run("crossover", "--device", "cpu", "--paths", "torch,reference", "--topks", "512", "--rows", "8",
              "--keys", "600", "--no-wave", "--reps", "2", "--warmup", "0", "--plot", tmp_path / "p.png")
    one_line_error(res, 1, "--plot", "matplotlib", "mqa-topk[plot]")
    assert not (tmp_path / "p.png").exists()
