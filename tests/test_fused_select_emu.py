"""The fused kernel's selection code (csrc/include/mqa_topk/fused/select.cuh),
compiled as plain C++ and run on a CPU warp emulator (tests/emu/): exact
thresholds and kept sets against a sorting reference on crafted buffers, and
the kernel's per-row protocol (two warpgroups, shared threshold, compactions,
merge; with "gate" the v2 sample gate and redo) on adversarial rows. No GPU needed; needs a C++17 compiler."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


#: The emulator tests.
SOURCES = ("fused_select_test", "fused_v3_test")
FLAGS = ["-std=c++17", "-O2", "-Wall", "-Wno-unknown-pragmas", f"-I{ROOT / 'csrc' / 'include'}",
         f"-I{ROOT / 'tests' / 'emu'}"]

pytestmark = pytest.mark.slow  # compiling the two emulator tests takes most of their time


def _build_key() -> str:
    """A hash of everything a build depends on: the compiler (its path and
    version), the flags, and every file under tests/emu and csrc/include."""
    h = hashlib.sha256()
    version = subprocess.run([CXX, "--version"], capture_output=True, text=True).stdout
    h.update(f"{CXX}\n{version}\n{FLAGS}\n".encode())
    for d in (ROOT / "tests" / "emu", ROOT / "csrc" / "include"):
        for f in sorted(p for p in d.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


@pytest.fixture(scope="module")
def emu_binaries(request, tmp_path_factory):
    """{name: binary} of SOURCES, compiled in parallel. Kept in pytest's cache
    directory under a hash of the compiler, flags and sources
    (``.pytest_cache/d/emu``; a fresh build after any change to them), else
    (``-p no:cacheprovider``) in a temporary directory."""
    if not CXX:
        pytest.skip("no C++ compiler (g++) found")
    cache = getattr(request.config, "cache", None)
    key = _build_key()
    if cache is not None:
        root = cache.mkdir("emu")
        for old in root.iterdir():  # builds of other sources: never used again
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)
        out_dir = root / key
        out_dir.mkdir(exist_ok=True)
    else:
        out_dir = tmp_path_factory.mktemp("emu")
    bins = {name: out_dir / name for name in SOURCES}
    procs = {}
    for name, out in bins.items():
        if out.is_file():
            continue
        tmp = out.with_name(f"{name}.{os.getpid()}.tmp")  # renamed when complete: never a half-written binary
        cmd = [CXX, *FLAGS, "-o", str(tmp), str(ROOT / "tests" / "emu" / f"{name}.cpp")]
        procs[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), tmp)
    errors = {}
    for name, (proc, tmp) in procs.items():
        _, err = proc.communicate()
        if proc.returncode != 0:
            errors[name] = err[-4000:]
            tmp.unlink(missing_ok=True)
        else:
            os.replace(tmp, bins[name])
    assert not errors, errors
    return bins


def _run(args):
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "checks passed" in res.stdout


def test_fused_select_pieces_on_the_warp_emulator(emu_binaries):
    # order_key against float comparison, the gate's pieces (top4_insert,
    # warp_rank_key, warp_gate_key, gate_rank, the gate_rank_floor margin):
    # no selection mode changes them, so they run once.
    _run([emu_binaries["fused_select_test"], "pieces"])


#: "default": v1's warp_select; "lean": warp_select_lean; "gate": lean + the
#: v2 sample gate, unsafe-gate detection and redo in the protocol (the default kernel);
#: "binned": gate + the scan-time bins and the one-pass binned select (dev variant 5);
#: "binned-end": the same select with the bins counted at the block end (dev variant 6).
VARIANTS = ("default", "lean", "gate", "binned", "binned-end")


# The select part reads only g_lean, which gate, binned and binned-end set as
# lean does: select runs in modes default and lean, the protocol in every mode.
@pytest.mark.parametrize("part,variant", [("select", "default"), ("select", "lean")]
                         + [("protocol", v) for v in VARIANTS])
def test_fused_selection_on_the_warp_emulator(emu_binaries, part, variant):
    _run([emu_binaries["fused_select_test"], part, variant])


def test_fused_v3_segments_on_the_warp_emulator(emu_binaries):
    # The v3 kernel's multi-segment passes (SegLanes: 4 lanes per segment) and its
    # round-robin in-place compaction, against a sorting reference (tests/emu/fused_v3_test.cpp).
    _run([emu_binaries["fused_v3_test"]])
