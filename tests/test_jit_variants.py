"""jit.build_variants: one build process per variant, the compile jobs split
between them, a failed build named with its log (no compiler runs here: the
processes are stand-ins)."""
from __future__ import annotations

import pytest

from mqa_topk_cli import jit
from mqa_topk_cli.errors import Unavailable


class FakeProc:
    def __init__(self, rc, out, text):
        self.rc = rc
        out.write(text)

    def wait(self):
        return self.rc


def fake_popen(calls, fail=()):
    def popen(cmd, stdout, stderr, env):
        code = cmd[-1]
        calls.append((code, env["MAX_JOBS"]))
        bad = any(t in code for t in fail)
        return FakeProc(1 if bad else 0, stdout, "nvcc error: x.cu(3): bad thing\n" if bad else "built\n")
    return popen


def test_one_process_per_variant_with_split_jobs(monkeypatch, tmp_path):
    monkeypatch.setenv("MQA_TOPK_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(jit.subprocess, "Popen", fake_popen(calls))
    secs = jit.build_variants({"shipped": None, "fb_f5": "MQA_TOPK_FUSED_STAGES=5", "diag": "MQA_TOPK_X"}, jobs=16)
    assert set(secs) == {"shipped", "fb_f5", "diag"}
    codes = [c for c, _ in calls]
    assert codes[0].endswith("jit.load_extension()")
    assert codes[1].endswith("jit.load_with_define('fb_f5', 'MQA_TOPK_FUSED_STAGES=5')")
    assert codes[2].endswith("jit.load_with_define('diag', 'MQA_TOPK_X')")
    assert [j for _, j in calls] == ["5", "5", "5"]
    assert (tmp_path / "fb_f5.build.log").read_text() == "built\n"


def test_jobs_never_below_two(monkeypatch, tmp_path):
    monkeypatch.setenv("MQA_TOPK_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(jit.subprocess, "Popen", fake_popen(calls))
    jit.build_variants({f"v{i}": f"D{i}" for i in range(5)}, jobs=4)
    assert [j for _, j in calls] == ["2"] * 5


def test_a_failed_build_is_named_with_its_log(monkeypatch, tmp_path):
    monkeypatch.setenv("MQA_TOPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit.subprocess, "Popen", fake_popen([], fail=("'bad'",)))
    with pytest.raises(Unavailable) as e:
        jit.build_variants({"good": "A", "bad": "B"}, jobs=8)
    msg = str(e.value)
    assert "bad (exit 1: nvcc error: x.cu(3): bad thing; log " in msg and "bad.build.log" in msg
    assert "good" not in msg


def test_tags_are_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("MQA_TOPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit.subprocess, "Popen", fake_popen([]))
    with pytest.raises(ValueError, match="tag '../x'"):
        jit.build_variants({"../x": "A"})
    assert jit.build_variants({}) == {}
