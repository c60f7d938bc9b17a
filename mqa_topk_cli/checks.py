"""Checks of the tool's own inputs that run before any work: size limits
(before anything is allocated), numbers that must be finite and bounded, and
output files (checked before a run, not after it).

Every check raises ``UsageError`` whose message starts with the name it was
given (an option such as ``--warmup``, or a field such as ``rows``). The CLI's
option callbacks, the config readers, the workload generator and the timing
and verification functions all call these, so a limit is stated once.

The module imports neither torch nor click at import time (the CLI reads the
limits while it builds its help); ``contract.py`` takes its limits from here.
"""
from __future__ import annotations

import math
import operator
import os
from pathlib import Path

from .errors import Unavailable, UsageError

#: Largest key count the native kernels accept (indices fit int32 with room;
#: the fused kernel's workspace is sized for this). ``contract.MAX_KEYS``.
MAX_KEYS = 1 << 22
#: Indexer heads the ops take (q ``[rows, heads, 128]``, weights ``[rows,
#: heads]``): 16 (run by the kernels as 32 with zero heads), 32 (GLM-5, the
#: default) and 64 (DeepSeek-V3.2 and V4). ``contract.SUPPORTED_HEADS``.
SUPPORTED_HEADS = (16, 32, 64)
#: The heads of the headline case and of every case that does not say.
DEFAULT_HEADS = 32


def _heads_text() -> str:
    """'16, 32 or 64'."""
    return ", ".join(map(str, SUPPORTED_HEADS[:-1])) + f" or {SUPPORTED_HEADS[-1]}"


def check_heads(heads, name: str = "heads") -> int:
    """``heads`` when it is one of ``SUPPORTED_HEADS`` (an int; bools are
    refused), else ``UsageError`` naming ``name``."""
    if isinstance(heads, bool) or not isinstance(heads, int) or heads not in SUPPORTED_HEADS:
        raise UsageError(f"{name}: must be {_heads_text()} (indexer heads), got {heads!r}")
    return heads


def kernel_heads(heads: int) -> int:
    """The heads the kernels run for an indexer of ``heads`` heads: 16 heads
    run as 32 zero-padded heads (``launch_common.h``, ``kernel_heads``)."""
    return max(check_heads(heads), 32)


def max_rows(heads: int = DEFAULT_HEADS) -> int:
    """Largest row count at ``heads`` heads: the C++ launchers index
    ``rows * kernel_heads(heads)`` head rows with int32 (``launch_common.h``:
    rows <= 2**31 / kernel heads - 1)."""
    return (1 << 31) // kernel_heads(heads) - 1


#: Largest row count at the default 32 heads (``max_rows(32)``). ``contract.MAX_ROWS``.
MAX_ROWS = max_rows(DEFAULT_HEADS)
#: Largest row count at any supported heads (``max_rows(16)``): the bound of
#: the ``--rows`` options, before a case's own heads are known.
MAX_ROWS_ANY_HEADS = max(max_rows(h) for h in SUPPORTED_HEADS)
#: Seeds are int64 values of a ``torch.Generator`` (larger ones overflow, and
#: 2**63 .. 2**64-1 alias negative seeds).
MAX_SEED = (1 << 63) - 1
#: Warm-up budget cap, ms: one minute of warm-up is far more than any path needs.
MAX_WARMUP_MS = 60_000.0
#: Timed runs per measurement cap (the CUDA timer records two events per run up front).
MAX_REPS = 100_000
#: Reruns cap of the determinism check (verify keeps every rerun's output).
MAX_RERUNS = 100
#: Largest ``--tol-rel``: every logit of a row lies within +-M_r (the row's
#: magnitude bound), so a tolerance near 1 would accept any key; 2**-4 is
#: already 256x the default 2**-12.
MAX_TOL_REL = 2.0 ** -4

#: Largest SM count the wave rule takes (H100/H200: 132, B200: 148).
MAX_SMS = 1024
#: Largest rows per fused block (the kernels use 8; a CUDA block has at most 1024 threads).
MAX_BLOCK_ROWS = 1024
#: Largest ``confirm`` of a crossover (grid points that must follow a crossover).
MAX_CONFIRM = 64
#: Peak bytes per row and per key while a workload is generated: the
#: generators build q ``[rows, heads, 128]`` and k ``[keys, 128]`` in fp32 and
#: combine up to ~3 temporaries of that size before the fp8 cast (measured
#: peak on a CPU at 32 heads: 37-48 KiB per row), so 4 fp32 copies are
#: budgeted. Per row at 32 heads; ``generation_bytes`` scales it with heads.
GEN_BYTES_PER_ROW = 4 * DEFAULT_HEADS * 128 * 4 + DEFAULT_HEADS * 4 * 4 + 8 * 8
GEN_BYTES_PER_KEY = 4 * 128 * 4 + 4 * 4
#: Workload layouts and score distributions (``workloads`` generates them; here so
#: that the CLI lists them in its help without importing torch).
LAYOUTS = ("causal", "ragged", "full")
DISTS = ("gaussian", "dsa", "ties", "zero_weights", "negative_weights", "relu_saturated", "rising", "short_rows")
#: Output files the commands write, by suffix.
TABLE_SUFFIXES = (".csv", ".json")
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


# ------------------------------------------------------------ integers and numbers


def check_int(value, name: str, lo: int, hi: int | None = None, what: str = "") -> int:
    """``value`` as an int in ``[lo, hi]``; bools and non-integers are refused."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise UsageError(f"{name}: expected an integer, got {value!r}") from None
    if value < lo or (hi is not None and value > hi):
        limit = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise UsageError(f"{name}: must be {limit}{what}, got {value}")
    return value


def check_choice(value, name: str, choices: tuple) -> object:
    """``value`` when it is one of ``choices`` (bools are refused)."""
    if isinstance(value, bool) or value not in choices:
        raise UsageError(f"{name}: must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def check_rows(rows, name: str = "rows", heads: int = DEFAULT_HEADS) -> int:
    """1 <= rows <= ``max_rows(heads)``."""
    kh = kernel_heads(heads)
    return check_int(rows, name, 1, max_rows(heads), f" (a workload needs at least one row; the kernels index rows "
                                                     f"* {kh} heads with int32"
                                                     + (f", {heads} heads running as {kh})" if kh != heads else ")"))


def check_keys(keys, name: str = "keys") -> int:
    return check_int(keys, name, 1, MAX_KEYS, " (the key limit)")


def check_seed(seed, name: str = "seed") -> int:
    return check_int(seed, name, 0, MAX_SEED, " (an int64 generator seed)")


def check_number(value, name: str, *, lo: float, hi: float, lo_open: bool = False) -> float:
    """A finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``): refuses
    NaN and infinities, which compare false with every bound."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name}: expected a number, got {value!r}") from None
    ok_lo = v > lo if lo_open else v >= lo
    if not (math.isfinite(v) and ok_lo and v <= hi):
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise UsageError(f"{name}: must be a finite number in {interval}, got {value!r}")
    return v


# ------------------------------------------------------------ memory, before allocating


def generation_bytes(rows: int, keys: int, heads: int = DEFAULT_HEADS) -> int:
    """Peak bytes that generating a workload of ``rows`` x ``keys`` at ``heads`` heads needs."""
    per_row = 4 * int(heads) * 128 * 4 + int(heads) * 4 * 4 + 8 * 8
    return int(rows) * per_row + int(keys) * GEN_BYTES_PER_KEY


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_available() -> int | None:
    """Room left under this process's cgroup memory limit (v2, else v1), if any."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(0, int(limit) - usage)
    return None


def available_bytes(device) -> int | None:
    """Memory free for new tensors on ``device`` ("cpu", "cuda", "cuda:N" or a
    torch.device), or None when it cannot be told."""
    dev = str(device)
    if dev.startswith("cuda"):
        try:
            import torch

            d = torch.device(dev)
            free, _ = torch.cuda.mem_get_info(d)
            return int(free) + int(torch.cuda.memory_reserved(d)) - int(torch.cuda.memory_allocated(d))
        except Exception:
            return None
    found = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
    return min(found) if found else None


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_memory(need: int, device, name: str, what: str) -> None:
    """``UsageError`` naming ``name`` when ``need`` bytes (for ``what``) exceed
    the memory available on ``device``; nothing when that is unknown."""
    free = available_bytes(device)
    if free is not None and need > free:
        raise UsageError(f"{name}: {what} needs about {_size(need)} on {device}, but only {_size(free)} is available; "
                         f"use fewer rows or keys")


def check_generation(rows: int, keys: int, device, heads: int = DEFAULT_HEADS) -> None:
    """Before generating a workload: sizes within the limits, and the memory
    it takes to build available on ``device``."""
    check_rows(rows, heads=heads)
    check_keys(keys)
    at = "" if heads == DEFAULT_HEADS else f" at {heads} heads"
    check_memory(generation_bytes(rows, keys, heads), device, "rows",
                 f"generating {rows} rows x {keys} keys{at}")


# ------------------------------------------------------------ output files


def check_output_file(path, option: str, suffixes: tuple[str, ...]) -> Path:
    """An output file a command will write when it has finished: the name
    ends in one of ``suffixes``, its directory exists and is writable, and it
    is not a directory or another non-regular file. Checked before the run,
    so no work is lost (``probe_output_file`` also creates it)."""
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        names = f"{', '.join(suffixes[:-1])} or {suffixes[-1]}" if len(suffixes) > 1 else suffixes[0]
        raise UsageError(f"{option} {path}: the file name must end in {names}")
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a directory")
    if p.exists() and not p.is_file():
        raise UsageError(f"{option} {path}: not a regular file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{option} {path}: not writable")
    return p


#: Output files probed for this command: the real path -> the option naming it.
_probed: dict[str, str] = {}
#: Of those, the ones the probe created and nothing has written yet: real path -> path.
_created: dict[str, Path] = {}


def probe_output_file(path, option: str, suffixes: tuple[str, ...]) -> Path:
    """``check_output_file``, then proof that the file can be written: it is
    created when missing (an existing file is opened for appending and left
    as it is), so a file system that refuses it (``/sys``, ``/proc``, a full
    or read-only disk) is found before the run. The same file given to two
    options of one command is refused. A file created here and never written
    is removed by ``discard_unwritten_outputs`` when the command ends (it
    failed, or was interrupted), so nothing empty or half-written is left."""
    p = check_output_file(path, option, suffixes)
    real = os.path.realpath(p)
    if real in _probed:
        raise UsageError(f"{option} {path}: the same file as {_probed[real]}; give each output its own file")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write ({e.strerror or e})") from None
    _probed[real] = option
    if not existed:
        _created[real] = p
    return p


def output_written(path) -> None:
    """Marks ``path`` as completely written: ``discard_unwritten_outputs`` keeps it."""
    _created.pop(os.path.realpath(path), None)


def discard_unwritten_outputs() -> list[Path]:
    """Removes the files ``probe_output_file`` created that were not then
    completely written (``output_written``), and forgets every probe; called
    when a command ends, however it ends. Returns the files removed."""
    removed = []
    for p in _created.values():
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    _created.clear()
    _probed.clear()
    return removed


# ------------------------------------------------------------ environment variables


#: Spellings of a boolean environment variable (any case, surrounding spaces ignored).
ENV_ON = ("1", "true", "yes", "on")
ENV_OFF = ("0", "false", "no", "off")
#: The boolean environment variables the package reads (through env_flag).
BOOL_ENV = ("MQA_TOPK_CHECKED", "MQA_TOPK_USE_FUSED", "MQA_TOPK_VERBOSE_BUILD")
#: MQA_TOPK_FUSED_KERNEL's values (ops.FUSED_KERNELS, or auto).
FUSED_KERNEL_ENV = ("whole", "split", "staged", "hybrid", "auto")


def env_flag(name: str, default: bool = False) -> bool:
    """The boolean environment variable ``name``: unset or empty -> ``default``;
    1/true/yes/on -> True; 0/false/no/off -> False; anything else is a
    ``UsageError`` naming the variable (never read as either)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    v = raw.strip().lower()
    if v in ENV_ON:
        return True
    if v in ENV_OFF:
        return False
    raise UsageError(f"{name}={raw!r}: not a boolean; use {', '.join(ENV_ON)} (on) or {', '.join(ENV_OFF)} (off)")


def fused_kernel_env() -> str | None:
    """MQA_TOPK_FUSED_KERNEL: the fused kernel every call runs (None: unset,
    empty or auto, the kernel chosen by shape); anything else is a
    ``UsageError`` naming the variable."""
    raw = os.environ.get("MQA_TOPK_FUSED_KERNEL", "")
    v = raw.strip().lower()
    if v not in ("", *FUSED_KERNEL_ENV):
        raise UsageError(f"MQA_TOPK_FUSED_KERNEL={raw!r}: must be one of {', '.join(FUSED_KERNEL_ENV)}")
    return None if v in ("", "auto") else v


def check_environment() -> None:
    """The tool's environment variables, checked before a command does any
    work: the boolean switches (BOOL_ENV), MQA_TOPK_FUSED_KERNEL, the
    calibration file named by MQA_TOPK_CALIBRATION, and the engine's logits
    budget (VLLM_SPARSE_INDEXER_MAX_LOGITS_MB). ``UsageError`` names the
    variable."""
    for name in BOOL_ENV:
        env_flag(name)
    fused_kernel_env()
    from . import eligibility

    if os.environ.get(eligibility.CALIBRATION_ENV):
        eligibility.load_calibration()
    if os.environ.get("VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "").strip():
        from . import external

        external.engine_logits_budget()


def check_matplotlib(option: str = "--plot") -> None:
    """``Unavailable`` (one line) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except Exception:
        raise Unavailable(f"{option}: needs matplotlib, which is not installed here "
                          f"(pip install 'mqa-topk[plot]'), or leave out {option}") from None


__all__ = [
    "MAX_KEYS", "MAX_ROWS", "MAX_ROWS_ANY_HEADS", "SUPPORTED_HEADS", "DEFAULT_HEADS", "check_heads", "kernel_heads", "max_rows",
    "MAX_SEED", "MAX_WARMUP_MS", "MAX_REPS", "MAX_RERUNS", "MAX_TOL_REL", "MAX_SMS",
    "MAX_BLOCK_ROWS", "MAX_CONFIRM", "check_int",
    "check_choice",
    "check_rows", "check_keys", "check_seed", "check_number", "generation_bytes", "available_bytes",
    "check_memory", "check_generation", "check_output_file", "probe_output_file", "output_written",
    "discard_unwritten_outputs", "env_flag", "check_environment", "check_matplotlib",
]
