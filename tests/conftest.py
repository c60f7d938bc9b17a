"""Shared fixtures; tests marked ``@pytest.mark.gpu`` skip without a CUDA GPU."""
from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="package")  # (one cache for the whole test run: tests/ is one package)
def make():
    """make(**kwargs) -> a cached CPU workload from workloads.make_workload.
    Callers must not modify the returned tensors (tests that do clone first)."""
    from mqa_topk_cli.workloads import make_workload

    cache = {}

    def _make(**kw):
        key = tuple(sorted((k, repr(v)) for k, v in kw.items()))
        if key not in cache:
            cache[key] = make_workload(**kw)
        return cache[key]

    return _make


@pytest.fixture
def tiny(make):
    """13 causal rows over 700 keys, top-512 (some rows with n > k)."""
    return make(layout="causal", rows=13, keys=700, topk=512, dist="gaussian", seed=0)


@pytest.fixture
def cuda_device():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")


@pytest.fixture
def sm100_cal(tmp_path, monkeypatch):
    """MQA_TOPK_CALIBRATION -> a file with the SM100 seed's thresholds (min keys
    32K/32K/64K, wave rule on): the rule tests use fixed thresholds, not the
    shipped H200 measurement (which says where our fused kernel wins)."""
    import json

    p = tmp_path / "sm100.json"
    p.write_text(json.dumps({"format": 1, "source": "SM100 seed thresholds (tests)", "gpu": None, "sms": None,
                             "date": None, "commit": None, "block_rows": 8,
                             "min_keys": {"512": 32768, "1024": 32768, "2048": 65536}, "wave_rule": True,
                             "measured": {}}))
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    return p


@pytest.fixture
def run(monkeypatch):
    """run(*args, **kw): the CLI (``mqa-topk``) through click's CliRunner, with
    no calibration file from the environment; exceptions propagate."""
    from click.testing import CliRunner

    from mqa_topk_cli.cli import main

    monkeypatch.delenv("MQA_TOPK_CALIBRATION", raising=False)
    runner = CliRunner()

    def invoke(*args, **kw):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False, **kw)

    return invoke


def one_line_error(res, code: int, *needles: str) -> str:
    """The command exited with `code` and wrote exactly one non-empty line to
    stderr, with no traceback, containing every needle; returns that line."""
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]
