"""Fused-vs-dense eligibility: when a prefill chunk should take the fused
kernel (the Hopper counterpart of the SM100 rules in the seed, SPEC §3).

The thresholds are data, not code: ``load_calibration()`` reads the JSON that
``mqa-topk crossover --out`` writes, from the file named by the
``MQA_TOPK_CALIBRATION`` environment variable, else the default shipped in
``mqa_topk_cli/data/calibration_default.json``. Format 1::

    {"format": 1, "gpu": str|null, "sms": int|null, "date": str|null,
     "commit": str|null, "block_rows": 8,
     "min_keys": {"512": int, "1024": int, "2048": int},
     "wave_rule": true, "measured": {...}, "source": str}

Every function takes explicit ``sms`` / ``calibration`` where it matters, so
the rules can be checked without a GPU.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

from .checks import MAX_BLOCK_ROWS, MAX_SMS
from .contract import HEAD_DIM, HEADS, MAX_KEYS, TOPKS
from .errors import UsageError

#: Environment variable naming a calibration JSON (overrides the shipped default).
CALIBRATION_ENV = "MQA_TOPK_CALIBRATION"
#: Environment variable switching the fused path off ("0", "false", "no", "off"; "1", "true", "yes", "on":
#: on, the default; any other value is an error).
USE_FUSED_ENV = "MQA_TOPK_USE_FUSED"
#: Rows per block of the fused kernel when the calibration does not say.
DEFAULT_BLOCK_ROWS = 8
DEFAULT_CALIBRATION = Path(__file__).resolve().parent / "data" / "calibration_default.json"

_cache: dict = {}


def calibration_path(path=None) -> Path:
    """The calibration file in effect: ``path``, else $MQA_TOPK_CALIBRATION, else the shipped default."""
    if path is not None:
        return Path(path)
    env = os.environ.get(CALIBRATION_ENV)
    if env:
        return Path(env)
    return DEFAULT_CALIBRATION


def _positive_int(value, what: str, where: str, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"calibration file {where}: {what} must be a positive integer, got {value!r}")
    if hi is not None and value > hi:
        raise UsageError(f"calibration file {where}: {what} must be between 1 and {hi}, got {value!r}")
    return value


#: Largest min_keys a calibration may give (int32).
MAX_MIN_KEYS = (1 << 31) - 1
#: Text fields of a calibration (each a string or null).
_TEXT_FIELDS = ("source", "gpu", "date", "commit")


def validate_calibration(data, where: str = "<calibration>") -> dict:
    """Check a calibration dict (format 1); returns a normalised copy
    (min_keys keyed by int topk, block_rows and wave_rule filled in)."""
    if not isinstance(data, dict):
        raise UsageError(f"calibration file {where}: expected a JSON object, got {type(data).__name__}")
    if data.get("format") != 1:
        raise UsageError(f"calibration file {where}: unsupported 'format' {data.get('format')!r} (expected 1)")
    mk = data.get("min_keys")
    if not isinstance(mk, dict):
        raise UsageError(f"calibration file {where}: 'min_keys' must be an object {{\"512\": int, ...}}")
    min_keys: dict[int, int] = {}
    for key, value in mk.items():
        try:
            topk = int(key)
        except (TypeError, ValueError):
            topk = None
        if topk not in TOPKS:
            raise UsageError(f"calibration file {where}: min_keys key {key!r} is not a topk "
                             f"({', '.join(map(str, TOPKS))})")
        # anything above MAX_KEYS means "never fused" (recommended_min_keys writes MAX_KEYS + 1); the
        # bound is int32, as an engine keeps its thresholds: more is a broken file, not a threshold
        min_keys[topk] = _positive_int(value, f"min_keys[{key!r}]", where, MAX_MIN_KEYS)
    missing = [t for t in TOPKS if t not in min_keys]
    if missing:
        raise UsageError(f"calibration file {where}: min_keys lacks topk {', '.join(map(str, missing))}")
    block_rows = _positive_int(data.get("block_rows", DEFAULT_BLOCK_ROWS), "'block_rows'", where, MAX_BLOCK_ROWS)
    wave_rule = data.get("wave_rule", True)
    if not isinstance(wave_rule, bool):
        raise UsageError(f"calibration file {where}: 'wave_rule' must be true or false, got {wave_rule!r}")
    sms = data.get("sms")
    if sms is not None:
        _positive_int(sms, "'sms'", where, MAX_SMS)
    for name in _TEXT_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], str):
            raise UsageError(f"calibration file {where}: '{name}' must be a string or null, got {data[name]!r}")
    if "measured" in data and not isinstance(data["measured"], dict):
        raise UsageError(f"calibration file {where}: 'measured' must be an object, got {type(data['measured']).__name__}")
    out = dict(data)
    out.update(min_keys=min_keys, block_rows=block_rows, wave_rule=wave_rule, path=where)
    return out


def load_calibration(path=None) -> dict:
    """The calibration in effect (see ``calibration_path``), validated; a
    missing or malformed file raises ``UsageError`` naming it. Re-read when the
    file changes."""
    p = calibration_path(path)
    try:
        st = p.stat()
    except OSError:
        src = f" (from ${CALIBRATION_ENV})" if path is None and os.environ.get(CALIBRATION_ENV) else ""
        raise UsageError(f"calibration file {p}{src}: not found") from None
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    if key in _cache:
        return dict(_cache[key])
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"calibration file {p}: not valid JSON ({e})") from None
    cal = validate_calibration(data, str(p))
    _cache.clear()
    _cache[key] = cal
    return dict(cal)


@functools.cache
def fused_mqa_topk_available() -> bool:
    """True when there is a CUDA sm_90 GPU and the JIT extension has the fused
    kernel. Builds/loads the extension on first call (lazily); never raises."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        if torch.cuda.get_device_capability() != (9, 0):
            return False
        from . import jit

        if jit.native_available() is not None:
            return False
        return hasattr(jit.load_extension(), "fused_mqa_topk")
    except Exception:
        return False


def fused_mqa_topk_min_keys(topk: int, *, calibration: dict | None = None) -> int:
    """Longest-row key count from which the fused path beats the dense one
    (shorter chunks stay dense), from the calibration: the entry of the
    smallest calibrated topk >= ``topk`` (the largest one above all of them)."""
    if isinstance(topk, bool) or not isinstance(topk, int) or topk <= 0:
        raise UsageError(f"topk: must be a positive int, got {topk!r}")
    cal = calibration if calibration is not None else load_calibration()
    mk = cal["min_keys"]
    mk = {int(k): int(v) for k, v in mk.items()}
    for t in sorted(mk):
        if t >= topk:
            return mk[t]
    return mk[max(mk)]


def _sm_count() -> int | None:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    except Exception:
        pass
    return None


def last_wave(rows: int, sms: int, block_rows: int = DEFAULT_BLOCK_ROWS) -> int:
    """Blocks in the last wave (1..sms) when ceil(rows / block_rows) blocks run
    one per SM."""
    blocks = -(-rows // block_rows)
    return (blocks - 1) % sms + 1


def wave_ok(rows: int, sms: int, block_rows: int = DEFAULT_BLOCK_ROWS) -> bool:
    """The wave rule: the last wave fills at least half the SMs."""
    return 2 * last_wave(rows, sms, block_rows) >= sms


def fused_mqa_topk_chunk(
    max_seqlen_k: int,
    keys: int,
    topk: int,
    rows: int,
    dense_rows: int,
    *,
    sms: int | None = None,
    block_rows: int | None = None,
    calibration: dict | None = None,
) -> bool:
    """Whether a prefill chunk of a fused-eligible layer takes the fused kernel:
    its longest row sees at least ``fused_mqa_topk_min_keys(topk)`` keys (the
    dense path is as fast below), its gathered keys fit the kernel
    (``keys <= contract.MAX_KEYS``), and its rows keep the SMs busy.

    Each SM scans every key of one ``block_rows``-row block at a time, so the
    blocks run in waves of one per SM. A last wave that fills less than half
    the SMs costs a whole wave and makes the fused kernel slower than dense,
    unless dense needs more than one logits call (``rows > dense_rows``, its
    rows per call). The wave check is skipped when the calibration says
    ``"wave_rule": false``.

    sms: SM count (None = the current GPU's; False without a GPU);
    block_rows: None = the calibration's (default 8).
    """
    cal = calibration if calibration is not None else load_calibration()
    if sms is None:
        sms = _sm_count()
        if sms is None:
            return False
    if isinstance(sms, bool) or not isinstance(sms, int) or sms <= 0:
        raise UsageError(f"sms: must be a positive int, got {sms!r}")
    br = block_rows if block_rows is not None else int(cal.get("block_rows", DEFAULT_BLOCK_ROWS))
    if br <= 0:
        raise UsageError(f"block_rows: must be a positive int, got {br!r}")
    busy = (not cal.get("wave_rule", True)) or rows > dense_rows or wave_ok(rows, sms, br)
    return (
        max_seqlen_k >= fused_mqa_topk_min_keys(topk, calibration=cal)
        and keys <= MAX_KEYS
        and busy
    )


def _env_on(name: str, default: bool = True) -> bool:
    """A boolean switch (``checks.env_flag``): an unclear value is a ``UsageError`` naming it."""
    from .checks import env_flag

    return env_flag(name, default)


def use_fused_mqa_topk(
    *,
    query_shape: tuple[int, ...],
    topk: int,
    fp4_cache: bool,
    full_context: bool,
    candidate_selection: bool = False,
) -> bool:
    """Whether an indexer may use the fused kernel (each prefill chunk then
    also needs ``fused_mqa_topk_chunk``).

    query_shape: one token's indexer queries, (heads, head_dim) = (32, 128);
    topk: in {512, 1024, 2048}; fp4_cache: an MXFP4 cache stays dense;
    full_context: every rank ranks its rows over the whole context (a
    per-shard top-k would need a merge); candidate_selection: two-level
    selection needs the logits, so it stays dense.

    ``MQA_TOPK_USE_FUSED=0`` switches the fused path off (default on). Unlike
    the SM100 seed there is no batch-invariance switch: our fused kernel breaks
    ties at the k-th value by the lowest key index and its result does not
    depend on the other rows of the launch, so it is deterministic and
    batch-invariant by construction.
    """
    return (
        _env_on(USE_FUSED_ENV)
        and not fp4_cache
        and bool(full_context)
        and not candidate_selection
        and tuple(query_shape) == (HEADS, HEAD_DIM)
        and topk in TOPKS
        and fused_mqa_topk_available()
    )


def recommended_min_keys(crossover_keys: float | None, *, align: int = 256) -> int:
    """A min-keys threshold from a measured crossover: rounded up to ``align``;
    ``MAX_KEYS + 1`` (never fused) when the fused path never won."""
    if crossover_keys is None:
        return MAX_KEYS + 1
    return int(max(align, math.ceil(crossover_keys / align) * align))
