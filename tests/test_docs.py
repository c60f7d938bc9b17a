"""Documentation and scripts: the README documents every MQA_TOPK_* environment variable the code reads
(DESIGN.md: all documented in README.md); compile-time macros are exempt."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# preprocessor switches, not environment variables: the emulator build's, the
# fused kernels' rare-path counts (dev/adversarial_probe.py builds with it),
# the dense loop without its epilogue arithmetic (dev/logits_bound.py) and the
# fused loop's weight-load and tail probes (dev/fused_bound.py)
MACROS = {"MQA_TOPK_HOST_EMULATION", "MQA_TOPK_FUSED_DIAGNOSTICS", "MQA_TOPK_LOGITS_MMA_ONLY", "MQA_TOPK_FUSED_PROBE_WLOADS",
          "MQA_TOPK_FUSED_PROBE_NOTAIL"}


def test_every_environment_variable_is_in_the_readme():
    used = set()
    for d in ("mqa_topk_cli", "csrc", "scripts"):
        for p in (ROOT / d).rglob("*"):
            if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".h", ".cpp", ".sh"):
                used |= set(re.findall(r"MQA_TOPK_[A-Z_]+", p.read_text(errors="replace")))
    table = {m for m in re.findall(r"^\| `(MQA_TOPK_[A-Z_]+)`", (ROOT / "README.md").read_text(), re.M)}
    missing = sorted(used - MACROS - table)
    assert not missing, f"environment variables read by the code but not in the README table: {missing}"
    assert len(used) > 5  # the scan found the code


def test_device_scripts_parse(tmp_path):
    """A syntax error in a device script would cost a whole GPU run: check
    them here (bash -n, Python compile)."""
    import py_compile
    import shutil
    import subprocess

    for sh in [*(ROOT / "scripts").glob("*.sh"), *(ROOT / "dev").rglob("*.sh"), ROOT / ".ci" / "run"]:
        if shutil.which("bash"):
            res = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True)
            assert res.returncode == 0, f"{sh.name}: {res.stderr}"
    for py in (ROOT / "scripts").glob("*.py"):
        py_compile.compile(str(py), doraise=True, cfile=str(tmp_path / (py.name + "c")))  # (nothing in the checkout)


def test_ci_installs_the_cpu_torch_and_leaves_the_checkout_clean():
    """.ci/run (issue 47): torch from the CPU wheel index (the plain install
    only where that index is unreachable), the regular install built outside
    the checkout, pytest's cache outside it, and a final check that `git status
    --porcelain --ignored` is what it was (so .gitignore hides nothing)."""
    text = (ROOT / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in text.splitlines() if not ln.strip().startswith("#")]
    torch_lines = [ln for ln in lines if re.match(r"(if ! )?pip install\b.*\btorch==", ln)]
    assert torch_lines and "--index-url https://download.pytorch.org/whl/cpu" in torch_lines[0], torch_lines
    assert torch_lines[0].startswith("if ! pip install") and len(torch_lines) == 2, torch_lines  # then the fallback
    regular = [ln for ln in lines if "--target" in ln and "pip install" in ln]
    assert regular and not re.search(r"\s\.$", regular[0]) and '"$WORK/src"' in regular[0], regular
    assert re.search(r"python -m pytest -q -o cache_dir=\"\$WORK/", text)
    assert "export PYTHONDONTWRITEBYTECODE=1" in text
    assert 'git -C "$ROOT" status --porcelain --ignored' in text and "trap finish EXIT" in text


def _tracked_files():
    import subprocess

    res = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        import pytest

        pytest.skip("not a git checkout")
    return [ROOT / f for f in res.stdout.splitlines() if (ROOT / f).is_file()]


def test_the_tree_names_things_by_what_they_do():
    """Files are named by what they do, a date or a commit: no word for the
    periods of work that produced them, in names or in text."""
    word = "ses" + "sion"  # (spelled apart so that this file passes its own check)
    tagged = [f for f in _tracked_files() if re.search(r"(^|[/_.-])s[0-9]{1,2}[a-z]?[0-9]*([_.-]|$)", str(f.relative_to(ROOT)))]
    assert not tagged, f"file names with a work-period tag: {tagged[:10]}"
    hits = [f for f in _tracked_files() if word in f.read_text(errors="replace").lower()]
    assert not hits, f"files that speak of work periods: {[str(f.relative_to(ROOT)) for f in hits[:20]]}"


def test_benchmarks_page_is_short_and_current():
    """BENCHMARKS.md holds the current code's tables (about 200 lines at most),
    the headline first; the history lives in git."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert len(text.splitlines()) <= 220
    first = next(ln for ln in text.splitlines() if ln.startswith("## "))
    assert "headline" in first.lower(), first
