"""The block kernels' selection code (csrc/include/mqa_topk/fused/select.cuh),
compiled as plain C++ and run on a CPU warp emulator (tests/emu/): exact
thresholds, kept sets and output rows against sorting references on crafted
candidate segments (one warp's select, the pair selects, a split block's
pieces), and the block kernel's per-row protocol (the sample gate and its
redo, compactions, the block-end select) on adversarial rows. No GPU needed;
needs a C++17 compiler."""
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
SOURCES = ("fused_select_test", "blocks_select_test")
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
    # order_key against float comparison, the tile walk, the sample gate's
    # rules (gate_rank, gate_rank_floor's margin, fused_sample_tiles,
    # gate_threshold) and warp_rank_key.
    _run([emu_binaries["fused_select_test"], "pieces"])


def test_fused_select_one_run_on_the_warp_emulator(emu_binaries):
    # warp_emit in place over one run (the gate's drop) and finish_in_scratch.
    _run([emu_binaries["fused_select_test"], "select"])


#: "gate": the block kernel's protocol with the sample gate (and its redo);
#: "nogate": every row scanned without a gate (a redo's scan: compactions).
@pytest.mark.parametrize("mode", ["gate", "nogate"])
def test_fused_select_protocol_on_the_warp_emulator(emu_binaries, mode):
    _run([emu_binaries["fused_select_test"], "protocol", mode])


def test_blocks_select_segments_on_the_warp_emulator(emu_binaries):
    # One warp's select over a row's 8 segments (SegLanes: 4 lanes per
    # segment) and the round-robin in-place compaction, the pair selects, and
    # a split block's pieces, against sorting references
    # (tests/emu/blocks_select_test.cpp).
    _run([emu_binaries["blocks_select_test"]])
