"""The fused kernel's selection code (csrc/include/mqa_topk/fused/select.cuh),
compiled as plain C++ and run on a CPU warp emulator (tests/emu/): exact
thresholds and kept sets against a sorting reference on crafted buffers, and
the kernel's per-row protocol (two warpgroups, shared threshold, compactions,
merge; with "gate" the v2 sample gate and redo) on adversarial rows. No GPU needed; needs a C++17 compiler."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


@pytest.fixture(scope="module")
def emu_binary(tmp_path_factory):
    if not CXX:
        pytest.skip("no C++ compiler (g++) found")
    out = tmp_path_factory.mktemp("emu") / "fused_select_test"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wno-unknown-pragmas", f"-I{ROOT / 'csrc' / 'include'}",
           f"-I{ROOT / 'tests' / 'emu'}", "-o", str(out), str(ROOT / "tests" / "emu" / "fused_select_test.cpp")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    return out


@pytest.mark.parametrize("variant", ["default", "lean", "gate", "binned", "binned-end"])
@pytest.mark.parametrize("part", ["select", "protocol"])
def test_fused_selection_on_the_warp_emulator(emu_binary, part, variant):
    # "default": v1's warp_select; "lean": warp_select_lean; "gate": lean + the
    # v2 sample gate, unsafe-gate detection and redo in the protocol (the default kernel);
    # "binned": gate + the scan-time bins and the one-pass binned select (dev variant 5);
    # "binned-end": the same select with the bins counted at the block end (dev variant 6).
    res = subprocess.run([str(emu_binary), part, variant], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "checks passed" in res.stdout


def test_fused_v3_segments_on_the_warp_emulator(tmp_path):
    # The v3 kernel's multi-segment passes (SegLanes: 4 lanes per segment) and its
    # round-robin in-place compaction, against a sorting reference (tests/emu/fused_v3_test.cpp).
    if not CXX:
        pytest.skip("no C++ compiler (g++) found")
    out = tmp_path / "fused_v3_test"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wno-unknown-pragmas", f"-I{ROOT / 'csrc' / 'include'}",
           f"-I{ROOT / 'tests' / 'emu'}", "-o", str(out), str(ROOT / "tests" / "emu" / "fused_v3_test.cpp")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    res = subprocess.run([str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "checks passed" in res.stdout
