"""The environment stamp every result carries (SPEC §5): GPU, SM count, L2
size, clocks if known, CPU model and threads, torch/CUDA versions, git
commit, date and host.

``environment()`` is cheap and never raises: anything it cannot find is None.
The slow probes (``nvidia-smi``, ``git``) run once per process and have short
timeouts.
"""
from __future__ import annotations

import datetime as _dt
import functools
import platform
import os
import shutil
import socket
import subprocess
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 5.0) -> str | None:
    """stdout of ``cmd`` stripped, or None on any failure."""
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except Exception:
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip()


@functools.cache
def git_commit() -> str | None:
    """Short commit of the checkout this package runs from, with ``-dirty`` when
    tracked files differ from it; None outside a git repository (e.g. a wheel).
    ``MQA_TOPK_COMMIT`` names it where the tree was copied without .git (the
    GPU machine)."""
    if os.environ.get("MQA_TOPK_COMMIT"):
        return os.environ["MQA_TOPK_COMMIT"]
    if shutil.which("git") is None:
        return None
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=_PKG_DIR)
    # Only the checkout whose root holds this package (not, say, a repository
    # that happens to contain the virtualenv it is installed in).
    if not top or Path(top).resolve() != _PKG_DIR.parent:
        return None
    commit = _run(["git", "rev-parse", "--short", "HEAD"], cwd=_PKG_DIR)
    if not commit:
        return None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_PKG_DIR)
    if status:
        commit += "-dirty"
    return commit


@functools.cache
def _smi(index: int) -> dict:
    """Clocks and driver from nvidia-smi for GPU ``index`` (empty dict if unknown)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    fields = ["clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "driver_version", "power.limit"]
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", str(index)])
    if not out:
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    if len(values) != len(fields):
        return {}

    def num(v: str):
        try:
            return float(v) if "." in v else int(v)
        except ValueError:
            return None

    return {
        "sm_clock_mhz": num(values[0]),
        "mem_clock_mhz": num(values[1]),
        "max_sm_clock_mhz": num(values[2]),
        "max_mem_clock_mhz": num(values[3]),
        "driver": values[4] or None,
        "power_limit_w": num(values[5]),
    }


@functools.cache
def _gpu(index: int) -> dict:
    info = {"gpu": None, "arch": None, "sms": None, "l2_bytes": None, "memory_bytes": None}
    try:
        import torch

        if not torch.cuda.is_available():
            return info
        p = torch.cuda.get_device_properties(index)
        info.update(
            gpu=p.name,
            arch=f"sm_{p.major}{p.minor}",
            sms=int(p.multi_processor_count),
            l2_bytes=int(getattr(p, "L2_cache_size", 0)) or None,
            memory_bytes=int(p.total_memory),
        )
    except Exception:
        pass
    return info


@functools.cache
def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _cpu() -> dict:
    """CPU model, the threads torch computes with, and the logical CPUs."""
    info = {"cpu": None, "cpu_threads": None, "cpu_count": os.cpu_count()}
    try:
        info["cpu"] = cpu_model()
        import torch

        info["cpu_threads"] = int(torch.get_num_threads())
    except Exception:
        pass
    return info


def _versions() -> dict:
    v = {"torch": None, "cuda": None, "python": platform.python_version()}
    try:
        import torch

        v["torch"] = torch.__version__
        v["cuda"] = torch.version.cuda
    except Exception:
        pass
    return v


def _device_index(device) -> int:
    try:
        import torch

        d = torch.device(device) if device is not None else None
        if d is not None and d.type == "cuda" and d.index is not None:
            return d.index
        if torch.cuda.is_available():
            return torch.cuda.current_device()
    except Exception:
        pass
    return 0


def environment(device=None) -> dict:
    """A flat-ish dict describing where a result was measured. Keys: gpu, arch,
    sms, l2_bytes, memory_bytes, clocks (dict or None), driver, cpu (model),
    cpu_threads (torch's compute threads), cpu_count, torch, cuda, python,
    commit, date (UTC ISO 8601), hostname. Never raises."""
    idx = _device_index(device)
    env: dict = {}
    env.update(_gpu(idx))
    smi = _smi(idx) if env.get("gpu") else {}
    clocks = {k: smi[k] for k in ("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "max_mem_clock_mhz") if smi.get(k) is not None}
    env["clocks"] = clocks or None
    env["driver"] = smi.get("driver")
    env.update(_cpu())
    env.update(_versions())
    try:
        env["commit"] = git_commit()
    except Exception:
        env["commit"] = None
    env["date"] = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    try:
        env["hostname"] = socket.gethostname()
    except Exception:
        env["hostname"] = None
    return env


def device_label(env: dict, device=None) -> str:
    """What the results ran on, for a one-line summary: the GPU's name, else
    (no GPU, or ``device`` is the CPU) ``CPU <model>, <n> threads``."""
    if env.get("gpu") and not str(device or "").startswith("cpu"):
        return str(env["gpu"])
    threads = f", {env['cpu_threads']} threads" if env.get("cpu_threads") else ""
    return f"CPU {env.get('cpu') or '(model unknown)'}{threads}"


def flat_environment(env: dict | None = None) -> dict:
    """``environment()`` with the nested clocks spread out (``clocks_sm_clock_mhz``...),
    for CSV columns."""
    env = dict(environment() if env is None else env)
    clocks = env.pop("clocks", None) or {}
    for k, v in clocks.items():
        env[f"clocks_{k}"] = v
    return env
