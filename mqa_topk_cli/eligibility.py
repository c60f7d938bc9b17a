"""Fused-vs-dense eligibility: when a prefill chunk should take the fused
kernel (the Hopper counterpart of the SM100 rules in the seed, SPEC §3).

The thresholds are data, not code: ``load_calibration()`` reads the JSON that
``mqa-topk crossover --out`` writes, from the file named by the
``MQA_TOPK_CALIBRATION`` environment variable, else the default shipped in
``mqa_topk_cli/data/calibration_default.json``. The thresholds depend on the
indexer's heads (the work per key doubles from 32 to 64 heads), so a file
holds one entry per heads. Format 2::

    {"format": 2,
     "heads": {"32": ENTRY, "64": ENTRY, ...},     # any of 16, 32, 64
     "source": str|null}
    ENTRY = {"min_keys": {"512": int, "1024": int, "2048": int},
             "block_rows": 8, "wave_rule": bool, "sms": int|null,
             "gpu": str|null, "date": str|null, "commit": str|null,
             "source": str|null, "measured": {...}}

Format 1 (earlier versions: one ENTRY's fields at the top level, with
``"format": 1``) still reads, as the entry for 32 heads.

Heads without an entry take the default rule (``fallback_calibration``):
min keys ``DEFAULT_RULE_MIN_KEYS`` (32K / 32K / 64K for top-512 / 1024 /
2048, the SM100 seed's published thresholds: conservative, as our 32-head
measurement puts the crossover at or below 8K keys) with 8-row blocks and the
wave rule on; ``calibration_note`` says so in one line, and the CLI prints it.

Every function takes explicit ``sms`` / ``calibration`` / ``heads`` where it
matters, so the rules can be checked without a GPU. A ``calibration``
argument is either a whole calibration (a dict with a ``"heads"`` table, as
``load_calibration`` returns) or one heads' entry (``min_keys`` at the top),
which then applies as it is.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

from .checks import DEFAULT_HEADS, MAX_BLOCK_ROWS, MAX_SMS, SUPPORTED_HEADS
from .contract import HEAD_DIM, MAX_KEYS, TOPKS
from .errors import UsageError

#: Environment variable naming a calibration JSON (overrides the shipped default).
CALIBRATION_ENV = "MQA_TOPK_CALIBRATION"
#: Environment variable switching the fused path off ("0", "false", "no", "off"; "1", "true", "yes", "on":
#: on, the default; any other value is an error).
USE_FUSED_ENV = "MQA_TOPK_USE_FUSED"
#: Rows per block of the fused kernel when the calibration does not say.
DEFAULT_BLOCK_ROWS = 8
DEFAULT_CALIBRATION = Path(__file__).resolve().parent / "data" / "calibration_default.json"
#: The calibration format ``crossover`` writes (1 still reads, as 32 heads).
CALIBRATION_FORMAT = 2
#: The default rule's min keys per topk, for heads the calibration has no entry for.
DEFAULT_RULE_MIN_KEYS = {512: 32768, 1024: 32768, 2048: 65536}

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
#: Text fields of a calibration entry (each a string or null).
_TEXT_FIELDS = ("source", "gpu", "date", "commit")
#: Fields of an entry as a file stores it (``calibration_entry_doc``).
ENTRY_FIELDS = ("source", "gpu", "sms", "date", "commit", "block_rows", "min_keys", "wave_rule", "measured")


def _int_key(key, allowed, table: str, what: str, where: str) -> int:
    """A JSON object key read as an int in ``allowed`` (a topk, a heads count);
    else a one-line error naming the table and the key."""
    try:
        value = int(key)
    except (TypeError, ValueError):
        value = None
    if value not in allowed:
        raise UsageError(f"calibration file {where}: {table} key {key!r} is not {what} "
                         f"({', '.join(map(str, allowed))})")
    return value


def _validate_entry(data, where: str, at: str = "") -> dict:
    """One heads' entry (the fields of a format-1 file); ``at`` prefixes the
    field names in messages (e.g. "heads['64']: "). Returns a normalised copy:
    min_keys keyed by int topk, block_rows and wave_rule filled in."""
    if not isinstance(data, dict):
        raise UsageError(f"calibration file {where}: {at}expected a JSON object, got {type(data).__name__}")
    mk = data.get("min_keys")
    if not isinstance(mk, dict):
        raise UsageError(f"calibration file {where}: {at}'min_keys' must be an object {{\"512\": int, ...}}")
    min_keys: dict[int, int] = {}
    for key, value in mk.items():
        topk = _int_key(key, TOPKS, f"{at}min_keys", "a topk", where)
        # anything above MAX_KEYS means "never fused" (recommended_min_keys writes MAX_KEYS + 1); the
        # bound is int32, as an engine keeps its thresholds: more is a broken file, not a threshold
        min_keys[topk] = _positive_int(value, f"{at}min_keys[{key!r}]", where, MAX_MIN_KEYS)
    missing = [t for t in TOPKS if t not in min_keys]
    if missing:
        raise UsageError(f"calibration file {where}: {at}min_keys lacks topk {', '.join(map(str, missing))}")
    block_rows = _positive_int(data.get("block_rows", DEFAULT_BLOCK_ROWS), f"{at}'block_rows'", where, MAX_BLOCK_ROWS)
    wave_rule = data.get("wave_rule", True)
    if not isinstance(wave_rule, bool):
        raise UsageError(f"calibration file {where}: {at}'wave_rule' must be true or false, got {wave_rule!r}")
    sms = data.get("sms")
    if sms is not None:
        _positive_int(sms, f"{at}'sms'", where, MAX_SMS)
    for name in _TEXT_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], str):
            raise UsageError(f"calibration file {where}: {at}'{name}' must be a string or null, got {data[name]!r}")
    if "measured" in data and not isinstance(data["measured"], dict):
        raise UsageError(f"calibration file {where}: {at}'measured' must be an object, got "
                         f"{type(data['measured']).__name__}")
    out = dict(data)
    out.update(min_keys=min_keys, block_rows=block_rows, wave_rule=wave_rule, path=where)
    return out


def validate_calibration(data, where: str = "<calibration>") -> dict:
    """Check a calibration dict (format 2, or format 1 read as 32 heads);
    returns a normalised copy. Format 2: ``{"format": 2, "heads": {int heads:
    entry}, "path", ...}``, each entry as ``_validate_entry`` gives it. Format
    1: its one entry's fields at the top level, with ``"format": 1``
    (``calibration_for`` reads it as the entry for 32 heads)."""
    if not isinstance(data, dict):
        raise UsageError(f"calibration file {where}: expected a JSON object, got {type(data).__name__}")
    fmt = data.get("format")
    if fmt == 1:
        return _validate_entry(data, where)
    if fmt != CALIBRATION_FORMAT:
        raise UsageError(f"calibration file {where}: unsupported 'format' {fmt!r} (expected 2, or 1)")
    table = data.get("heads")
    if not isinstance(table, dict) or not table:
        raise UsageError(f"calibration file {where}: 'heads' must be an object with at least one entry "
                         f"{{\"32\": {{\"min_keys\": ...}}, ...}}")
    heads: dict[int, dict] = {}
    for key, entry in table.items():
        h = _int_key(key, SUPPORTED_HEADS, "heads", "a supported heads count", where)
        heads[h] = _validate_entry(entry, where, f"heads[{key!r}]: ")
    for name in ("source",):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise UsageError(f"calibration file {where}: '{name}' must be a string or null, got {data[name]!r}")
    out = dict(data)
    out.update(heads=dict(sorted(heads.items())), path=where)
    return out


def fallback_calibration(heads: int, path: str | None = None) -> dict:
    """The default rule's entry for ``heads`` heads, used where the calibration
    has none: min keys ``DEFAULT_RULE_MIN_KEYS``, 8-row blocks, the wave rule
    on. ``"fallback": True`` marks it, and ``"note"`` says so in one line."""
    mk = DEFAULT_RULE_MIN_KEYS
    where = f" in {path}" if path else ""
    note = (f"no calibration for {heads} heads{where}: the default rule applies (min keys "
            f"{' / '.join(str(mk[t]) for t in TOPKS)} for top-{' / '.join(map(str, TOPKS))}, the wave rule on); "
            f"measure it with mqa-topk crossover --heads {heads} --out FILE")
    return {"min_keys": dict(mk), "block_rows": DEFAULT_BLOCK_ROWS, "wave_rule": True, "sms": None, "gpu": None,
            "date": None, "commit": None, "source": "the default rule (no calibration for these heads)",
            "path": f"the default rule ({heads} heads{', not in ' + path if path else ''})", "fallback": True,
            "note": note}


def _heads_table(calibration) -> dict | None:
    """{heads: entry} of a calibration: format 2's table; format 1's one
    entry as 32 heads; None for one heads' entry (no format)."""
    if not isinstance(calibration, dict):
        return None
    table = calibration.get("heads")
    if isinstance(table, dict):
        return table
    if calibration.get("format") == 1:
        return {DEFAULT_HEADS: {k: v for k, v in calibration.items() if k != "format"}}
    return None


def calibration_for(calibration: dict, heads: int = DEFAULT_HEADS) -> dict:
    """The entry of ``calibration`` for ``heads`` heads (``path`` set to the
    calibration's): its own, else ``fallback_calibration``. A format-1
    calibration is the entry for 32 heads; a dict with neither ``"format"``
    nor a ``"heads"`` table is taken as one heads' entry and returned as it is."""
    if isinstance(heads, bool) or heads not in SUPPORTED_HEADS:
        raise UsageError(f"heads: must be one of {', '.join(map(str, SUPPORTED_HEADS))}, got {heads!r}")
    table = _heads_table(calibration)
    if table is None:
        return calibration
    entry = table.get(heads, table.get(str(heads)))
    if entry is None:
        return fallback_calibration(heads, calibration.get("path"))
    out = dict(entry)
    out["path"] = calibration.get("path", entry.get("path"))
    return out


def calibration_note(calibration: dict, heads: int = DEFAULT_HEADS) -> str | None:
    """One line when ``heads`` has no entry in ``calibration`` (the default
    rule applies), else None."""
    return calibration_for(calibration, heads).get("note")


def calibration_entry_doc(entry: dict) -> dict:
    """An entry as a file stores it: ``ENTRY_FIELDS`` only, min_keys keyed by str."""
    doc = {k: entry[k] for k in ENTRY_FIELDS if k in entry}
    doc["min_keys"] = {str(t): int(v) for t, v in sorted(entry["min_keys"].items(), key=lambda kv: int(kv[0]))}
    return doc


def merge_calibration(base: dict | None, heads: int, entry: dict, source: str | None = None) -> tuple[dict, list[int]]:
    """A format-2 calibration document holding ``entry`` for ``heads`` heads
    and every other heads' entry of ``base`` (a validated calibration, format 1
    or 2; None or one without a ``"heads"`` table: none). Returns (document,
    the heads kept from ``base``)."""
    table = {}
    kept = []
    base_table = _heads_table(base)
    if base_table is not None:
        for h, e in base_table.items():
            if int(h) != int(heads) and not e.get("fallback"):
                table[int(h)] = calibration_entry_doc(e)
                kept.append(int(h))
    table[int(heads)] = calibration_entry_doc(entry)
    doc = {"format": CALIBRATION_FORMAT,
           "source": source or "mqa-topk crossover (one entry per heads)",
           "heads": {str(h): table[h] for h in sorted(table)}}
    return doc, sorted(kept)


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


def fused_mqa_topk_calibration(heads: int = DEFAULT_HEADS, *, calibration: dict | None = None) -> dict:
    """The calibration entry the rules use for ``heads`` heads: the
    calibration's own (``calibration``, else the one in effect), or the
    default rule's, marked ``"fallback": True`` with a one-line ``"note"``."""
    cal = calibration if calibration is not None else load_calibration()
    return calibration_for(cal, heads)


def fused_mqa_topk_min_keys(topk: int, *, heads: int = DEFAULT_HEADS, calibration: dict | None = None) -> int:
    """Longest-row key count from which the fused path beats the dense one
    (shorter chunks stay dense) at ``heads`` heads, from the calibration's
    entry for those heads (else the default rule, ``fallback_calibration``):
    the threshold of the smallest calibrated topk >= ``topk`` (the largest
    one above all of them)."""
    if isinstance(topk, bool) or not isinstance(topk, int) or topk <= 0:
        raise UsageError(f"topk: must be a positive int, got {topk!r}")
    cal = fused_mqa_topk_calibration(heads, calibration=calibration)
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
    heads: int = DEFAULT_HEADS,
) -> bool:
    """Whether a prefill chunk of a fused-eligible layer takes the fused kernel:
    its longest row sees at least ``fused_mqa_topk_min_keys(topk, heads=heads)``
    keys (the dense path is as fast below), its gathered keys fit the kernel
    (``keys <= contract.MAX_KEYS``), and its rows keep the SMs busy. The
    thresholds, block rows and wave rule are the calibration's entry for
    ``heads`` (the indexer's heads; else the default rule).

    Each SM scans every key of one ``block_rows``-row block at a time, so the
    blocks run in waves of one per SM. A last wave that fills less than half
    the SMs costs a whole wave and makes the fused kernel slower than dense,
    unless dense needs more than one logits call (``rows > dense_rows``, its
    rows per call). The wave check is skipped when the calibration says
    ``"wave_rule": false``.

    sms: SM count (None = the current GPU's; False without a GPU);
    block_rows: None = the calibration's (default 8).
    """
    cal = fused_mqa_topk_calibration(heads, calibration=calibration)
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
        max_seqlen_k >= fused_mqa_topk_min_keys(topk, heads=heads, calibration=cal)
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

    query_shape: one token's indexer queries, (heads, head_dim) with heads
    16, 32 or 64 and head_dim 128 (then pass the heads to
    ``fused_mqa_topk_chunk``: its thresholds are per heads);
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
        and len(tuple(query_shape)) == 2
        and tuple(query_shape)[0] in SUPPORTED_HEADS
        and not isinstance(tuple(query_shape)[0], bool)
        and tuple(query_shape)[1] == HEAD_DIM
        and topk in TOPKS
        and fused_mqa_topk_available()
    )


def recommended_min_keys(crossover_keys: float | None, *, align: int = 256) -> int:
    """A min-keys threshold from a measured crossover: rounded up to ``align``;
    ``MAX_KEYS + 1`` (never fused) when the fused path never won."""
    if crossover_keys is None:
        return MAX_KEYS + 1
    return int(max(align, math.ceil(crossover_keys / align) * align))
