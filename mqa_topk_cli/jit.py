"""JIT build and load of the CUDA extension (csrc/).

- ``torch.utils.cpp_extension.load`` with ninja: the binding and the ops'
  launchers (csrc/*.cpp, host code) and one translation unit per kernel and
  topk (csrc/kernels/*.cu, torch-free), so ninja compiles them in parallel.
- The C++ standard is torch's own choice (its headers set it); kernel headers
  compile as C++17 and newer.
- Target ``-gencode=arch=compute_90a,code=sm_90a`` (wgmma and setmaxnreg need
  the "a" target).
- Build directory ``$MQA_TOPK_CACHE_DIR`` (default ``~/.cache/mqa_topk``) /
  ``sm90a-<hash>``, the hash covering every source and header, the flags, the
  torch version and the nvcc version: a change anywhere rebuilds, nothing
  stale is ever loaded.
- A file lock (``fcntl.flock``) around build + load: two processes never build
  over each other.
- ``MQA_TOPK_VERBOSE_BUILD=1``: ptxas ``-v`` (registers, shared memory, spills
  per kernel), ``-lineinfo``, and the compiler's output on screen.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from .checks import env_flag
from .errors import Unavailable
from .resources import csrc_dir

ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]
BASE_CUDA_FLAGS = ["-O3", "--expt-relaxed-constexpr", "-DNDEBUG", *ARCH_FLAGS]
BASE_CXX_FLAGS = ["-O3", "-DNDEBUG"]

_build_seconds: float | None = None
_build_dir: Path | None = None


def cache_root() -> Path:
    return Path(os.environ.get("MQA_TOPK_CACHE_DIR", Path.home() / ".cache" / "mqa_topk")).expanduser()


def verbose_build() -> bool:
    return env_flag("MQA_TOPK_VERBOSE_BUILD")


def sources() -> list[Path]:
    """Translation units of the extension: the binding, the ops' launchers and
    the kernels' instantiations."""
    root = csrc_dir()
    return [root / "binding.cpp", *sorted(p for p in root.glob("*.cpp") if p.name != "binding.cpp"),
            *sorted((root / "kernels").glob("*.cu"))]


def _all_inputs() -> list[Path]:
    root = csrc_dir()
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".cu", ".cuh", ".h", ".cpp"))


def find_nvcc() -> str | None:
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # pragma: no cover
        CUDA_HOME = None
    if CUDA_HOME and (Path(CUDA_HOME) / "bin" / "nvcc").is_file():
        return str(Path(CUDA_HOME) / "bin" / "nvcc")
    return shutil.which("nvcc")


@functools.cache
def nvcc_version() -> str | None:
    nvcc = find_nvcc()
    if not nvcc:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except Exception:
        return None
    for line in out.splitlines():
        if "release" in line:
            return line.split("release", 1)[1].split(",")[0].strip()
    return out.strip().splitlines()[-1] if out.strip() else None


def _flags() -> tuple[list[str], list[str]]:
    cuda = list(BASE_CUDA_FLAGS)
    cxx = list(BASE_CXX_FLAGS)
    if verbose_build():
        cuda += ["-Xptxas", "-v", "-lineinfo"]
    return cuda, cxx


def load_with_define(tag: str, define: str):
    """A development build of the extension with one extra preprocessor
    switch (``-D`` ``define``), in its own folder ``cache_root() / tag``
    (dev/adversarial_probe.py, dev/logits_bound.py, dev/fused_bound.py)."""
    from torch.utils.cpp_extension import load

    cuda, cxx = _flags()
    d = cache_root() / tag
    d.mkdir(parents=True, exist_ok=True)
    return load(name=f"mqa_topk_{tag}_ext", sources=[str(p) for p in sources()],
                extra_include_paths=[str(csrc_dir()), str(csrc_dir() / "include")],
                extra_cflags=cxx, extra_cuda_cflags=cuda + [f"-D{define}"], build_directory=str(d))


def build_variants(variants: dict[str, str | None], jobs: int | None = None) -> dict[str, float]:
    """Builds several extensions at once, each in its own process: ``{tag:
    define}``, a ``load_with_define(tag, define)`` build, or ``{tag: None}``
    for the shipped one (``load_extension``). The machine's compile jobs
    (``MAX_JOBS``, else the CPU count) are split between them, so N variants
    take about the time of their compile work rather than N builds' tails in
    a row. Each build's output goes to ``cache_root() / f"{tag}.build.log"``;
    a failed build raises ``Unavailable`` naming its tag and log. Returns each
    build's seconds. The caller then loads them in its own process (ninja
    finds them up to date)."""
    import sys

    if not variants:
        return {}
    total = jobs or int(os.environ.get("MAX_JOBS") or os.cpu_count() or 2)
    per = max(2, total // len(variants))
    cache_root().mkdir(parents=True, exist_ok=True)
    procs = {}
    for tag, define in variants.items():
        if not tag or not all(c.isalnum() or c in "_-" for c in tag):
            raise ValueError(f"variants: tag {tag!r} must be letters, digits, '_' or '-'")
        call = ("load_extension()" if define is None else f"load_with_define({tag!r}, {define!r})")
        log = cache_root() / f"{tag}.build.log"
        env = dict(os.environ, MAX_JOBS=str(per))
        with open(log, "w") as f:
            procs[tag] = (subprocess.Popen([sys.executable, "-c", f"from mqa_topk_cli import jit; jit.{call}"],
                                           stdout=f, stderr=subprocess.STDOUT, env=env), log, time.perf_counter())
    seconds, failed = {}, []
    for tag, (p, log, t0) in procs.items():
        rc = p.wait()
        seconds[tag] = time.perf_counter() - t0
        if rc != 0:
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            failed.append(f"{tag} (exit {rc}: {lines[-1] if lines else 'no output'}; log {log})")
    if failed:
        raise Unavailable("building extension variants failed: " + "; ".join(failed))
    return seconds


def build_key() -> str:
    import torch

    h = hashlib.sha256()
    root = csrc_dir()
    for p in _all_inputs():
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    cuda, cxx = _flags()
    h.update(repr((cuda, cxx, torch.__version__, nvcc_version())).encode())
    return h.hexdigest()[:16]


def _gpu():
    """(name, (major, minor), sms) of the current CUDA device, or None."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        idx = torch.cuda.current_device()
        prop = torch.cuda.get_device_properties(idx)
        return prop.name, (prop.major, prop.minor), prop.multi_processor_count
    except Exception:
        return None


def native_available() -> str | None:
    """None when the native kernels can be built and run here, else why not (one line)."""
    gpu = _gpu()
    if gpu is None:
        return "no CUDA GPU found (the native kernels need an sm_90 Hopper GPU)"
    name, cap, _ = gpu
    if cap != (9, 0):
        return f"GPU {name} is sm_{cap[0]}{cap[1]}; the native kernels need sm_90 (Hopper)"
    if find_nvcc() is None:
        return "nvcc not found (set CUDA_HOME or put nvcc on PATH)"
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401
        except ImportError:
            return "ninja not found (pip install ninja)"
    return None


def toolchain_report() -> dict:
    gpu = _gpu()
    missing = []
    reason = native_available()
    if reason:
        missing.append(reason)
    try:
        import torch

        torch_cuda = torch.version.cuda
    except Exception:  # pragma: no cover
        torch_cuda = None
    try:
        srcs = [str(p.relative_to(csrc_dir())) for p in sources()]
    except FileNotFoundError as e:
        srcs, _ = [], missing.append(str(e))
    return {
        "gpu": gpu[0] if gpu else None,
        "arch": f"sm_{gpu[1][0]}{gpu[1][1]}" if gpu else None,
        "sms": gpu[2] if gpu else None,
        "nvcc": find_nvcc(),
        "nvcc_version": nvcc_version(),
        "ninja": shutil.which("ninja") is not None,
        "torch_cuda": torch_cuda,
        "missing": missing,
        "sources": srcs,
        "cache_dir": str(cache_root()),
        "target": " ".join(ARCH_FLAGS),
    }


@functools.cache
def _load(force: bool = False):
    global _build_seconds, _build_dir
    reason = native_available()
    if reason:
        raise Unavailable(reason)
    from torch.utils.cpp_extension import load

    key = build_key()
    build_dir = cache_root() / f"sm90a-{key}"
    if force and build_dir.exists():
        shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    cuda, cxx = _flags()
    t0 = time.perf_counter()
    with open(cache_root() / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            ext = load(
                name=f"mqa_topk_ext_{key}",
                sources=[str(p) for p in sources()],
                extra_include_paths=[str(csrc_dir()), str(csrc_dir() / "include")],
                extra_cflags=cxx,
                extra_cuda_cflags=cuda,
                build_directory=str(build_dir),
                verbose=verbose_build(),
            )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _build_seconds = time.perf_counter() - t0
    _build_dir = build_dir
    return ext


def load_extension(verbose: bool = False, force: bool = False):
    """Builds (once per source hash) and loads the extension; raises
    ``Unavailable`` with one line when this machine cannot run it."""
    if verbose:
        os.environ["MQA_TOPK_VERBOSE_BUILD"] = "1"
    try:
        return _load(force)
    except Unavailable:
        raise
    except Exception as e:  # compiler errors: keep the first lines, they name the file
        msg = str(e).strip().splitlines()
        raise Unavailable(f"building the CUDA extension failed: {msg[-1] if msg else e!r}"
                          f" (rerun with MQA_TOPK_VERBOSE_BUILD=1 for the compiler output)") from e


def build_report() -> dict:
    """Loads (building if needed) and describes the extension and its kernels."""
    ext = load_extension()
    gpu = _gpu()
    return {
        "arch": f"sm_{gpu[1][0]}{gpu[1][1]}a" if gpu else None,
        "build_seconds": _build_seconds,
        "cache_dir": str(_build_dir),
        "kernels": list(ext.kernel_info()),
        "ops": sorted(n for n in ("mqa_logits", "topk_per_row", "fused_mqa_topk") if hasattr(ext, n)),
        "fused_workspace_bytes": {t: int(ext.fused_mqa_topk_workspace_bytes(t, _current_device()))
                                  for t in (512, 1024, 2048)},
        # (rows, keys) -> (kernel, bytes beyond the workspace) at top-2048, causal-chunk shapes
        "fused_call_bytes": {(r, n): tuple(ext.fused_mqa_topk_choice(r, n, 2048, 32, _current_device()))
                             for r in CALL_BYTES_ROWS for n in CALL_BYTES_KEYS if n >= r},
    }


#: The shapes `mqa-topk build` reports the fused per-call allocation at.
CALL_BYTES_ROWS = (64, 528, 1064, 2120, 8192)
CALL_BYTES_KEYS = (65536, 131072, 524288)


def _current_device() -> int:
    import torch

    return torch.cuda.current_device()
