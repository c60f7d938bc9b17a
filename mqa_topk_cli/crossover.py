"""Where the fused path starts to beat the dense one, and whether the wave
rule predicts the row counts where it does not.

``find_crossover`` is a pure function on a timing table. ``run_crossover``
times two paths (default fused vs native dense) over a sweep read from
``configs/crossover.toml`` with ``timing.time_fn`` (through ``bench.run_bench``,
so failures are labelled and the sweep goes on), finds the crossover per
(topk, rows), recommends min-keys thresholds, measures the wave-rule table and
builds the calibration dict that ``eligibility.load_calibration`` reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from . import checks, eligibility, workloads
from .errors import Unavailable, UsageError, path_unavailable

#: The SM100 seed's thresholds, shown beside ours.
SM100_MIN_KEYS = {512: 32768, 1024: 32768, 2048: 65536}
#: Offsets (in units: B = block rows, S = SMs) around each k*B*S of the wave table.
WAVE_OFFSETS = ("-B", "0", "+B", "+S*B/2-B", "+S*B/2")


# ------------------------------------------------------------ pure functions


def find_crossover(keys: Sequence[int], t_a: Sequence[float], t_b: Sequence[float], *, confirm: int = 2) -> float | None:
    """The key count from which path A (fused) stays faster than path B (dense).

    Grid points where either time is missing (NaN, None, <= 0: a failed case)
    are dropped. The crossover is at the first point i where A is faster at i
    *and* at the ``confirm`` following points (all remaining ones if fewer), so
    a lone point where A happens to win does not count. Between that point and
    the previous one (where A was not faster) the log ratio log(t_a/t_b) is
    interpolated linearly in log(keys) to where it crosses 0.

    Returns None when A never stays faster, and ``keys[0]`` (report it as
    "<= min") when A is faster from the first point on.
    """
    if not (len(keys) == len(t_a) == len(t_b)):
        raise UsageError(f"keys: the key grid and the two time lists differ in length ({len(keys)}, {len(t_a)}, {len(t_b)})")
    if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0:
        raise UsageError(f"confirm: must be an int >= 0, got {confirm!r}")
    pts = []
    for k, a, b in zip(keys, t_a, t_b):
        if a is None or b is None:
            continue
        a, b = float(a), float(b)
        if not (math.isfinite(a) and math.isfinite(b)) or a <= 0 or b <= 0:
            continue
        pts.append((float(k), a, b))
    for (k0, _, _), (k1, _, _) in zip(pts, pts[1:]):
        if not (0 < k0 < k1):
            raise UsageError(f"keys: must be positive and strictly increasing, got {list(keys)}")
    if pts and pts[0][0] <= 0:
        raise UsageError(f"keys: must be positive and strictly increasing, got {list(keys)}")
    wins = [a < b for _, a, b in pts]
    n = len(pts)
    for i in range(n):
        if wins[i] and all(wins[i + 1 : i + 1 + confirm]):
            if i == 0:
                return pts[0][0]
            (k0, a0, b0), (k1, a1, b1) = pts[i - 1], pts[i]
            r0, r1 = math.log(a0 / b0), math.log(a1 / b1)  # r0 >= 0 > r1
            x0, x1 = math.log(k0), math.log(k1)
            if r0 <= 0:  # A tied at the previous point: the crossover is there
                return k0
            x = x0 + (0.0 - r0) * (x1 - x0) / (r1 - r0)
            return float(min(max(math.exp(x), k0), k1))
    return None


def describe_crossover(x: float | None, keys: Sequence[int]) -> str:
    """Human form: "never", "<= 8192" (A faster from the first point) or "23170"."""
    valid = [k for k in keys if k]
    if x is None:
        return "never"
    if valid and x <= min(valid):
        return f"<= {int(min(valid))}"
    return f"{x:.0f}"


def geometric_grid(lo: int, hi: int, factor: float = math.sqrt(2.0), align: int = 128) -> list[int]:
    """lo, lo*factor, ... up to hi (inclusive when hit), each rounded to ``align``."""
    if lo <= 0 or hi < lo:
        raise UsageError(f"keys grid: need 0 < min <= max, got min={lo}, max={hi}")
    if factor <= 1.0:
        raise UsageError(f"keys grid: factor must be > 1, got {factor}")
    out: list[int] = []
    i = 0
    while True:
        v = lo * factor ** i
        if v > hi * (1 + 1e-9):
            break
        k = max(align, int(round(v / align)) * align) if v >= align else int(round(v))
        if not out or k > out[-1]:
            out.append(k)
        i += 1
    return out


def wave_rows(block_rows: int, sms: int, multiples: Sequence[int] = (1, 2), extra: Sequence[int] = ()) -> list[int]:
    """Row counts around each k*B*S (B block rows, S SMs): k*B*S - B, k*B*S,
    k*B*S + B, k*B*S + S*B/2 - B, k*B*S + S*B/2 -- where the last wave goes
    from full to one block, and from just under to just over half the SMs --
    and the ``extra`` ones (e.g. chunks of less than one wave)."""
    if block_rows <= 0 or sms <= 0:
        raise UsageError(f"wave table: block_rows and sms must be positive, got {block_rows}, {sms}")
    b, s = int(block_rows), int(sms)
    half = (s * b) // 2
    rows: set[int] = {int(r) for r in extra if int(r) > 0}
    for k in multiples:
        base = int(k) * b * s
        for r in (base - b, base, base + b, base + half - b, base + half):
            if r > 0:
                rows.add(r)
    return sorted(rows)


def dense_rows_per_call(keys: int, max_logits_bytes: int | None = None) -> int:
    """Rows of one dense logits call under the logits budget (as ops.dense_mqa_topk_prefill chunks)."""
    from .ops import DEFAULT_MAX_LOGITS_BYTES, LOGITS_PITCH

    budget = DEFAULT_MAX_LOGITS_BYTES if max_logits_bytes is None else int(max_logits_bytes)
    pitch = -(-max(int(keys), 1) // LOGITS_PITCH) * LOGITS_PITCH
    return max(1, budget // (pitch * 4))


def wave_table(rows_list: Sequence[int], *, keys: int, topk: int, sms: int, block_rows: int,
               t_a: Sequence[float] | None = None, t_b: Sequence[float] | None = None,
               calibration: dict | None = None, dense_rows: int | None = None,
               names: tuple[str, str] = ("fused", "dense"), heads: int = checks.DEFAULT_HEADS) -> list[dict]:
    """Predicted (wave rule + the full chunk rule, with the calibration's
    entry for ``heads``) vs measured winner per row count."""
    cal = eligibility.fused_mqa_topk_calibration(heads, calibration=calibration)
    dr = dense_rows_per_call(keys) if dense_rows is None else int(dense_rows)
    out = []
    for i, rows in enumerate(rows_list):
        lw = eligibility.last_wave(rows, sms, block_rows)
        wave_ok = 2 * lw >= sms
        chunk = eligibility.fused_mqa_topk_chunk(keys, keys, topk, rows, dr, sms=sms, block_rows=block_rows,
                                                 calibration=cal, heads=heads)
        row = {
            "rows": int(rows),
            "blocks": -(-int(rows) // block_rows),
            "last_wave": lw,
            "wave_ok": wave_ok,
            "dense_rows": dr,
            "predicted": names[0] if chunk else names[1],
            "t_a_ms": math.nan,
            "t_b_ms": math.nan,
            "measured": None,
            "agree": None,
        }
        if t_a is not None and t_b is not None:
            a, b = t_a[i], t_b[i]
            row["t_a_ms"], row["t_b_ms"] = a, b
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
                row["measured"] = names[0] if a < b else names[1]
                row["agree"] = row["measured"] == row["predicted"]
        out.append(row)
    return out


#: Default tolerance of the wave-rule decision (``decide_wave_rule``).
WAVE_RULE_TOLERANCE = 0.03


def check_wave_tolerance(value, what: str) -> float:
    """A wave-rule tolerance: a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < 1):
        raise UsageError(f"{what}: must be a number in [0, 1), got {value!r}")
    return float(value)


def decide_wave_rule(table: Sequence[dict], tolerance: float = WAVE_RULE_TOLERANCE) -> dict:
    """Whether the calibration keeps the wave rule, from a measured wave table.

    The rule only ever sends chunks to the dense path: the rows of the table
    where the last wave fills less than half the SMs and dense needs one logits
    call (``wave_ok`` false and ``rows <= dense_rows``). If A (fused) took at
    most ``(1 + tolerance)`` times B's (dense) time at every such row that was
    timed on both paths, the rule is not needed (``wave_rule`` false: those
    chunks take the fused path); if A was slower than that at any of them, it
    stays on. None when no such row was timed (keep the current setting).
    Returns {wave_rule, tolerance, rows_checked, worst_rows, worst_ratio}."""
    tolerance = check_wave_tolerance(tolerance, "wave tolerance")
    checked = []
    for r in table:
        if r.get("wave_ok") or int(r["rows"]) > int(r["dense_rows"]):
            continue
        a, b = r.get("t_a_ms"), r.get("t_b_ms")
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
            continue
        checked.append((a / b, int(r["rows"])))
    if not checked:
        return {"wave_rule": None, "tolerance": float(tolerance), "rows_checked": 0, "worst_rows": None,
                "worst_ratio": None}
    worst_ratio, worst_rows = max(checked)
    return {"wave_rule": bool(worst_ratio > 1 + tolerance), "tolerance": float(tolerance),
            "rows_checked": len(checked), "worst_rows": worst_rows, "worst_ratio": worst_ratio}


def wave_decision_line(decision: dict | None, wave_rule: bool, names: tuple[str, str] = ("fused", "dense"),
                       kept_from: str | None = None) -> str:
    """The printed form of ``decide_wave_rule``'s result and the rule written
    (``kept_from``: the calibration an undecided setting was kept from)."""
    a, b = names
    state = "on" if wave_rule else "off"
    if not decision or decision.get("wave_rule") is None:
        return (f"wave rule: {state}, kept from {kept_from or 'the current calibration'} (no timed row is one the "
                f"rule sends to {b}: this run does not decide it)")
    tol = decision["tolerance"]
    worst = f"worst {decision['worst_ratio']:.3f}x at {decision['worst_rows']} rows"
    if decision["wave_rule"]:
        return (f"wave rule: on ({a} took more than {1 + tol:.2f}x {b}'s time at a row count the rule sends to "
                f"{b}; {worst}; {decision['rows_checked']} checked)")
    return (f"wave rule: off ({a} took at most {1 + tol:.2f}x {b}'s time at all {decision['rows_checked']} row "
            f"counts the rule would send to {b}; {worst}): those chunks take {a}")


# ------------------------------------------------------------ sweep config


def _toml_load(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise UsageError(f"--config {path}: cannot read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config {path}: not valid TOML ({e})") from None


def _int_list(v, what: str, where: str, check=None) -> list[int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        raise UsageError(f"--config {where}: {what} must be a non-empty list of positive integers, got {v!r}")
    for x in v:
        _checked(check, x, what, where)
    return list(v)


def _check_topk(value, what: str) -> int:
    from .contract import TOPKS

    return checks.check_choice(value, what, TOPKS)


def check_confirm(value, what: str = "confirm") -> int:
    """Grid points A must also win at after the crossover: 0..MAX_CONFIRM."""
    return checks.check_int(value, what, 0, checks.MAX_CONFIRM, " (grid points after the crossover)")


def _checked(check, value, what: str, where: str):
    """``check(value, what)`` (a ``checks`` function) with the config file named."""
    if check is None:
        return value
    try:
        return check(value, what)
    except UsageError as e:
        raise UsageError(f"--config {where}: {e}") from None


#: Fields of a sweep config's tables (``load_sweep``).
SWEEP_FIELDS = ("layout", "dist", "seed", "heads", "model", "topks", "rows", "keys", "paths", "confirm", "options")
WAVE_FIELDS = ("enabled", "keys", "topk", "multiples", "rows", "tolerance")
KEY_GRID_FIELDS = ("min", "max", "factor", "align")


def _known_fields(table: dict, known: tuple, what: str, where: str) -> None:
    for key in table:
        if key not in known:
            raise UsageError(f"--config {where}: {what} {key}: unknown field; valid fields: {', '.join(known)}")


def load_sweep(path) -> dict:
    """Read a crossover sweep TOML (see configs/crossover.toml); returns a
    normalised dict: layout, dist, seed, heads (default 32; ``model`` = a
    preset of ``models.py`` gives its heads, and its topk as the default
    ``topks`` and wave ``topk``), options (generator options, see
    ``workloads.OPTIONS``, merged into every case), topks, rows, keys (list),
    paths, confirm, wave {keys, topk, multiples, rows (extra row counts),
    tolerance (of the wave-rule decision), enabled}."""
    p = Path(path)
    data = _toml_load(p)
    sw = data.get("sweep")
    if not isinstance(sw, dict):
        raise UsageError(f"--config {p}: missing the [sweep] table")
    where = str(p)
    _known_fields(sw, SWEEP_FIELDS, "[sweep]", where)
    keys = sw.get("keys")
    if isinstance(keys, dict):
        _known_fields(keys, KEY_GRID_FIELDS, "[sweep] keys:", where)
        try:
            grid = geometric_grid(int(keys["min"]), int(keys["max"]), float(keys.get("factor", math.sqrt(2.0))),
                                  int(keys.get("align", 128)))
        except KeyError as e:
            raise UsageError(f"--config {p}: [sweep] keys needs {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise UsageError(f"--config {p}: [sweep] keys: {e}") from None
    else:
        grid = sorted(set(_int_list(keys, "[sweep] keys", where)))
    for k in grid:
        _checked(checks.check_keys, k, "[sweep] keys", where)
    paths = sw.get("paths", ["fused", "native"])
    if not (isinstance(paths, list) and len(paths) == 2 and all(isinstance(x, str) for x in paths)):
        raise UsageError(f"--config {p}: [sweep] paths must name two paths, got {paths!r}")
    wave = data.get("wave", {})
    if not isinstance(wave, dict):
        raise UsageError(f"--config {p}: [wave] must be a table")
    _known_fields(wave, WAVE_FIELDS, "[wave]", where)
    options = sw.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f"--config {p}: [sweep] options must be a table")
    layout = _checked(lambda v, w: checks.check_choice(v, w, workloads.LAYOUTS), sw.get("layout", "causal"),
                      "[sweep] layout", where)
    dist = _checked(lambda v, w: checks.check_choice(v, w, workloads.DISTS), sw.get("dist", "gaussian"),
                    "[sweep] dist", where)
    try:  # their types and what they apply to; the bounds per grid point when the sweep runs
        workloads.check_options(layout, dist, None, None, options)
    except UsageError as e:
        raise UsageError(f"--config {where}: [sweep] options: {e}") from None
    enabled = wave.get("enabled", True)
    if not isinstance(enabled, bool):
        raise UsageError(f"--config {where}: [wave] enabled: expected true or false, got {enabled!r}")
    model = None
    if "model" in sw:
        from .models import get_model

        model = _checked(get_model, sw["model"], "[sweep] model", where)
    heads = _checked(checks.check_heads, sw.get("heads", model.heads if model else checks.DEFAULT_HEADS),
                     "[sweep] heads", where)
    default_topks = [model.topk] if model else [512, 1024, 2048]
    out = {
        "layout": layout,
        "dist": dist,
        "seed": _checked(checks.check_seed, sw.get("seed", 0), "[sweep] seed", where),
        "heads": heads,
        "options": options,
        "topks": _int_list(sw.get("topks", default_topks), "[sweep] topks", where, _check_topk),
        "rows": _int_list(sw.get("rows", [8192]), "[sweep] rows", where,
                          lambda v, w: checks.check_rows(v, w, heads)),
        "keys": grid,
        "paths": list(paths),
        "confirm": _checked(check_confirm, sw.get("confirm", 2), "[sweep] confirm", where),
        "wave": {
            "enabled": enabled,
            "keys": _checked(checks.check_keys, wave.get("keys", 65536), "[wave] keys", where),
            "topk": _checked(_check_topk, wave.get("topk", model.topk if model else 512), "[wave] topk", where),
            "multiples": _int_list(wave.get("multiples", [1, 2]), "[wave] multiples", where),
            "rows": _int_list(wave["rows"], "[wave] rows", where,
                              lambda v, w: checks.check_rows(v, w, heads)) if "rows" in wave else [],
            "tolerance": _checked(check_wave_tolerance, wave.get("tolerance", WAVE_RULE_TOLERANCE),
                                  "[wave] tolerance", where),
        },
    }
    if model is not None:
        out["model"] = model.name
    return out


# ------------------------------------------------------------ the sweep


@dataclass
class CrossoverReport:
    paths: tuple[str, str]
    grid: list[dict]
    crossovers: list[dict]
    recommended: dict[int, int]
    current: dict[int, int]
    wave: list[dict]
    #: The calibration document to write (format 2): ``entry`` for ``heads``
    #: and the other heads' entries of the base calibration.
    calibration: dict
    notes: list[str] = field(default_factory=list)
    results: list = field(default_factory=list, repr=False)
    #: The calibration this run started from (its thresholds and wave rule are kept where not measured).
    calibration_in: str = ""
    #: The heads measured, and this run's calibration entry for them (min_keys, wave_rule, measured, ...).
    heads: int = checks.DEFAULT_HEADS
    entry: dict = field(default_factory=dict)
    #: The heads whose entries ``calibration`` kept from the base calibration.
    kept_heads: list = field(default_factory=list)


def _sm_count(device) -> int | None:
    try:
        import torch

        d = torch.device(device)
        if d.type == "cuda" and torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(d).multi_processor_count)
    except Exception:
        pass
    return None


def check_paths_available(paths: Sequence[str], device) -> None:
    """Raise Unavailable (one line) when a path cannot run on ``device``."""
    from . import paths as paths_mod

    for name in paths:
        reason = paths_mod.get_path(name).unavailable_reason(device)
        if reason:
            raise path_unavailable(name, device, reason)


def check_grid(sweep: dict, name: str = "rows") -> None:
    """A causal sweep times only grid points with keys >= rows: every row
    count needs a key count at or above it (``name`` is what the message
    calls the row counts, e.g. the option that gave them)."""
    if sweep.get("layout", "causal") != "causal" or not sweep["keys"]:
        return
    kmax = max(sweep["keys"])
    bad = [r for r in sweep["rows"] if r > kmax]
    if bad:
        tail = ": no grid point to time" if len(bad) == len(sweep["rows"]) else ""
        raise UsageError(f"{name}: {', '.join(map(str, bad))} {'exceeds' if len(bad) == 1 else 'exceed'} every key "
                         f"count (largest {kmax}); a causal chunk needs keys >= rows{tail}")


def check_sweep(sweep: dict, rows_name: str = "rows") -> dict:
    """The sweep with its key grid sorted, its sizes and options checked
    against the limits and its grid checked (``check_grid``), before anything
    runs: ``UsageError`` naming the field."""
    sweep = _checked_sweep(sweep)
    check_grid(sweep, rows_name)
    return sweep


def _checked_sweep(sweep: dict) -> dict:
    """The sweep with its key grid sorted (its order does not matter) and its
    sizes checked against the limits before anything runs."""
    sweep = dict(sweep)
    sweep["heads"] = heads = checks.check_heads(sweep.get("heads", checks.DEFAULT_HEADS), "heads")
    sweep["keys"] = sorted(set(checks.check_keys(k, "keys") for k in sweep["keys"]))
    for r in sweep["rows"]:
        checks.check_rows(r, "rows", heads)
    for t in sweep["topks"]:
        _check_topk(t, "topks")
    wave = sweep.get("wave", {})
    if wave.get("enabled", True) and "keys" in wave:
        checks.check_keys(wave["keys"], "wave keys")
    layout, dist, options = sweep.get("layout", "causal"), sweep.get("dist", "gaussian"), sweep.get("options", {})
    for keys in sorted({*sweep["keys"], *([wave["keys"]] if wave.get("enabled", True) and "keys" in wave else [])}):
        try:  # e.g. requests or sinks beyond a grid point's keys
            workloads.check_options(layout, dist, None, keys, dict(options))
        except UsageError as e:
            raise UsageError(f"options: at {keys} keys: {e}") from None
    return sweep


#: How far down ``run_crossover`` extends the key grid when A wins at its smallest point.
EXTEND_MIN_KEYS = 1024


def grid_crossovers(grid: Sequence[dict], topks: Sequence[int], rows_list: Sequence[int], confirm: int) -> list[dict]:
    """The crossover per (topk, rows) of the measured grid rows (``find_crossover``),
    with whether A won from the first valid point on (``at_min``) and that point."""
    out = []
    for topk in topks:
        for rows in rows_list:
            pts = sorted((g for g in grid if g["topk"] == topk and g["rows"] == rows), key=lambda g: g["keys"])
            ks = [g["keys"] for g in pts]
            ta = [g["t_a_ms"] if g["t_a_ms"] is not None else math.nan for g in pts]
            tb = [g["t_b_ms"] if g["t_b_ms"] is not None else math.nan for g in pts]
            valid = [k for k, x, y in zip(ks, ta, tb) if math.isfinite(x) and math.isfinite(y)]
            x = find_crossover(ks, ta, tb, confirm=confirm) if valid else None
            out.append({"topk": topk, "rows": rows, "keys": x, "at_min": bool(x is not None and valid and x <= valid[0]),
                        "points": len(valid), "label": describe_crossover(x, valid) if valid else "no data",
                        "first_keys": valid[0] if valid else None})
    return out


def run_crossover(
    sweep: dict,
    *,
    device="cuda",
    paths: Sequence[str] | None = None,
    reps: int | None = None,
    warmup: float = 25.0,
    cold_l2: bool = True,
    graph: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    block_rows: int | None = None,
    sms: int | None = None,
    confirm: int | None = None,
    wave: bool = True,
    calibration: dict | None = None,
    base: dict | None = None,
) -> CrossoverReport:
    """Time ``paths`` (A, B) = (fused, dense) over the sweep grid at the
    sweep's heads (``sweep["heads"]``, default 32), find the crossover per
    (topk, rows), recommend min keys, and measure the wave table.

    ``calibration``: the calibration in effect (default: ``load_calibration()``);
    its entry for these heads (else the default rule) gives the current
    thresholds, the block rows, and what is kept where this run measures
    nothing. ``base``: the calibration whose other heads' entries the written
    document keeps (default: ``calibration``), e.g. the ``--out`` file's.
    Raises Unavailable when a path cannot run here."""
    from . import bench
    from .envinfo import environment

    a, b = tuple(paths or sweep.get("paths") or ("fused", "native"))
    sweep = check_sweep(sweep)
    if block_rows is not None:
        checks.check_int(block_rows, "block_rows", 1, checks.MAX_BLOCK_ROWS)
    if sms is not None:
        checks.check_int(sms, "sms", 1, checks.MAX_SMS)
    conf = check_confirm(sweep.get("confirm", 2) if confirm is None else confirm)
    check_paths_available((a, b), device)
    heads = sweep["heads"]
    cal_full = calibration if calibration is not None else eligibility.load_calibration()
    cal_now = eligibility.calibration_for(cal_full, heads)
    br = int(block_rows if block_rows is not None else cal_now.get("block_rows", eligibility.DEFAULT_BLOCK_ROWS))
    notes: list[str] = []
    if cal_now.get("note"):
        notes.append(cal_now["note"])
    layout = sweep.get("layout", "causal")
    suffix = workloads.heads_suffix(heads)

    def case(name, rows, keys, topk):
        return {"name": name + suffix, "layout": layout, "rows": rows, "keys": keys, "topk": topk,
                "dist": sweep.get("dist", "gaussian"), "seed": sweep.get("seed", 0), "heads": heads,
                **dict(sweep.get("options", {}))}

    def grid_cases(topks, keys_list):
        return [case(f"t{topk}-r{rows}-k{keys}", rows, keys, topk)
                for topk in topks for rows in sweep["rows"] for keys in keys_list
                if not (layout == "causal" and keys < rows)]

    cases = grid_cases(sweep["topks"], sweep["keys"])
    skipped = sum(1 for k in sweep["keys"] for r in sweep["rows"] if layout == "causal" and k < r)
    if skipped:
        notes.append(f"skipped {skipped} grid point(s) per topk with keys < rows (a causal chunk needs keys >= rows)")

    sms_eff = sms if sms is not None else _sm_count(device)
    wave_cfg = sweep.get("wave", {})
    wave_cases = []
    if wave and wave_cfg.get("enabled", True):
        if sms_eff is None:
            notes.append("wave table skipped: no GPU to read the SM count from (give --sms)")
        else:
            for rows in wave_rows(br, sms_eff, wave_cfg.get("multiples", [1, 2]), wave_cfg.get("rows", [])):
                if layout == "causal" and wave_cfg["keys"] < rows:
                    continue
                wave_cases.append(case(f"wave-r{rows}", rows, wave_cfg["keys"], wave_cfg["topk"]))

    total = 2 * (len(cases) + len(wave_cases))
    offset = 0

    def prog(done, _total, label):
        if progress:
            progress(offset + done, total, label)

    kw = dict(device=device, reps=reps, warmup=warmup, cold_l2=cold_l2, graph=graph, progress=prog)
    grid_res = list(bench.run_bench(cases, [a, b], **kw))
    offset = 2 * len(cases)

    def pair(results, case_name):
        ra = next(r for r in results if r.case == case_name and r.path == a)
        rb = next(r for r in results if r.case == case_name and r.path == b)
        return ra, rb

    def grid_rows(cs):
        rows_out = []
        for c in cs:
            ra, rb = pair(grid_res, c["name"])
            rows_out.append({"topk": c["topk"], "rows": c["rows"], "keys": c["keys"],
                             "t_a_ms": ra.median_ms if ra.ok else None, "t_b_ms": rb.median_ms if rb.ok else None,
                             "p20_a_ms": ra.p20_ms if ra.ok else None, "p80_a_ms": ra.p80_ms if ra.ok else None,
                             "p20_b_ms": rb.p20_ms if rb.ok else None, "p80_b_ms": rb.p80_ms if rb.ok else None,
                             "status_a": ra.status, "status_b": rb.status})
        return rows_out

    grid = grid_rows(cases)
    crossovers = grid_crossovers(grid, sweep["topks"], sweep["rows"], conf)

    # A faster from the smallest grid point on: the crossover lies below the
    # grid. Extend it downward (x sqrt(2) steps, multiples of 128) to EXTEND_MIN_KEYS
    # for those topks and report the crossover found there.
    ext_topks = sorted({c["topk"] for c in crossovers if c["at_min"] and c["first_keys"] > EXTEND_MIN_KEYS})
    if ext_topks:
        lo_measured = min(c["first_keys"] for c in crossovers if c["topk"] in ext_topks and c["at_min"])
        below = [k for k in geometric_grid(EXTEND_MIN_KEYS, lo_measured) if k < lo_measured]
        timed = {c["name"] for c in cases}
        ext_cases = [c for c in grid_cases(ext_topks, below) if c["name"] not in timed]
        if ext_cases:
            notes.append(f"{a} faster from the smallest grid point for topk {', '.join(map(str, ext_topks))}: "
                         f"grid extended down to {min(c['keys'] for c in ext_cases)} keys "
                         f"({len({c['keys'] for c in ext_cases})} point(s))")
            total += 2 * len(ext_cases)
            grid_res += list(bench.run_bench(ext_cases, [a, b], **kw))
            offset += 2 * len(ext_cases)
            cases = sorted(cases + ext_cases, key=lambda c: (sweep["topks"].index(c["topk"]),
                                                            sweep["rows"].index(c["rows"]), c["keys"]))
            grid = grid_rows(cases)
            crossovers = grid_crossovers(grid, sweep["topks"], sweep["rows"], conf)
    wave_res = list(bench.run_bench(wave_cases, [a, b], **kw)) if wave_cases else []
    for c in crossovers:
        c.pop("first_keys", None)

    current = {int(k): int(v) for k, v in cal_now["min_keys"].items()}
    recommended: dict[int, int] = {}
    for topk in sweep["topks"]:
        cs = [c for c in crossovers if c["topk"] == topk and c["points"]]
        if not cs:
            continue
        if any(c["keys"] is None for c in cs):
            recommended[topk] = eligibility.recommended_min_keys(None)
        elif all(c["at_min"] for c in cs):  # A wins from the first measured point: that point, as measured
            recommended[topk] = int(max(c["keys"] for c in cs))
        else:
            recommended[topk] = eligibility.recommended_min_keys(max(c["keys"] for c in cs))

    wave_rows_out: list[dict] = []
    wave_rows_rule_on: list[dict] = []  # (the table predicted with the rule on: what an engine's rule is judged by)
    wave_rule_out = bool(cal_now.get("wave_rule", True))  # (kept when no wave row decides it)
    wave_decision = None
    if wave_cases:
        ta, tb = [], []
        for c in wave_cases:
            ra, rb = pair(wave_res, c["name"])
            ta.append(ra.median_ms if ra.ok else math.nan)
            tb.append(rb.median_ms if rb.ok else math.nan)
        cal_for_rule = dict(cal_now)
        cal_for_rule["min_keys"] = {**current, **recommended}
        # The wave rule's decision from the table (its rows the rule sends to
        # dense), then the table's prediction under the calibration written.
        wave_rows_rule_on = wave_table([c["rows"] for c in wave_cases], keys=wave_cfg["keys"],
                                       topk=wave_cfg["topk"], sms=sms_eff, block_rows=br, t_a=ta, t_b=tb,
                                       calibration={**cal_for_rule, "wave_rule": True}, names=(a, b), heads=heads)
        wave_decision = decide_wave_rule(wave_rows_rule_on, wave_cfg.get("tolerance", WAVE_RULE_TOLERANCE))
        if wave_decision["wave_rule"] is not None:
            wave_rule_out = wave_decision["wave_rule"]
        cal_for_rule["wave_rule"] = wave_rule_out
        wave_rows_out = wave_rows_rule_on if wave_rule_out else wave_table(
            [c["rows"] for c in wave_cases], keys=wave_cfg["keys"], topk=wave_cfg["topk"], sms=sms_eff,
            block_rows=br, t_a=ta, t_b=tb, calibration=cal_for_rule, names=(a, b), heads=heads)

    env = environment(device)
    min_keys = {str(t): int(recommended.get(t, current.get(t, SM100_MIN_KEYS.get(t, 1 << 16)))) for t in (512, 1024, 2048)}
    unmeasured = [t for t in (512, 1024, 2048) if t not in recommended]
    source = f"mqa-topk crossover: {a} vs {b}, {heads} heads, layout {layout}, rows {sweep['rows']}"
    if unmeasured:
        source += f"; min_keys for topk {', '.join(map(str, unmeasured))} kept from {cal_now.get('path', 'the previous calibration')}"
    agree = [r["agree"] for r in wave_rows_out if r["agree"] is not None]
    entry = {
        "source": source,
        "gpu": env.get("gpu"),
        "sms": sms_eff,
        "date": env.get("date"),
        "commit": env.get("commit"),
        "block_rows": br,
        "min_keys": min_keys,
        "wave_rule": wave_rule_out,
        "measured": {
            "paths": [a, b],
            "heads": heads,
            "layout": layout,
            "dist": sweep.get("dist", "gaussian"),
            "confirm": conf,
            "method": next((r.method for r in grid_res if r.ok), None),
            "grid": grid,
            "crossovers": crossovers,
            "wave": {"keys": wave_cfg.get("keys"), "topk": wave_cfg.get("topk"), "table": wave_rows_out,
                     "agreement": (sum(agree) / len(agree)) if agree else None, "decision": wave_decision},
            "environment": env,
        },
    }
    if is_engine_path(a) or is_engine_path(b):  # engine-fused vs engine-dense: the constants to set in the engine
        from . import external

        entry["measured"]["engine"] = external.engine_constants(recommended, wave_rows_rule_on)
    base_cal = base if base is not None else cal_full
    doc, kept = eligibility.merge_calibration(base_cal, heads, entry)
    if kept:
        notes.append(f"the calibration written keeps the entries for {', '.join(map(str, kept))} heads from "
                     f"{base_cal.get('path') or 'the base calibration'}")
    return CrossoverReport(paths=(a, b), grid=grid, crossovers=crossovers, recommended=recommended, current=current,
                           wave=wave_rows_out, calibration=doc, notes=notes,
                           results=list(grid_res) + list(wave_res),
                           calibration_in=str(cal_now.get("path") or "the calibration passed in"),
                           heads=heads, entry=entry, kept_heads=kept)


#: The serving engine's own paths: a crossover between them gives the engine's constants.
ENGINE_PATHS = ("engine-fused", "engine-dense")


def is_engine_path(name) -> bool:
    """True for the serving engine's paths (not for DeepGEMM, FlashInfer or a
    user's ``py:`` function, whose crossover says nothing about the engine)."""
    return name in ENGINE_PATHS


def write_calibration(path, calibration: dict) -> Path:
    """Write a calibration JSON (validated first, so a bad one never lands on disk)."""
    import json

    from .bench import _jsonable

    eligibility.validate_calibration(calibration, str(path))
    p = Path(path)
    if p.suffix.lower() != ".json":
        raise UsageError(f"--out {p}: the calibration file name must end in .json")
    try:
        p.write_text(json.dumps(_jsonable(calibration), indent=2) + "\n")
    except OSError as e:
        raise UsageError(f"--out {p}: cannot write ({e.strerror or e})") from None
    checks.output_written(p)
    return p


def plot_crossover(report: CrossoverReport, path) -> str | None:
    """A PNG of t_a/t_b vs keys per (topk, rows) with the crossovers marked.
    Returns None on success, or a one-line reason (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return "--plot: matplotlib is not installed (pip install 'mqa-topk[plot]'); no plot written"
    a, b = report.paths
    fig, ax = plt.subplots(figsize=(8, 5))
    for c in report.crossovers:
        pts = [g for g in report.grid if g["topk"] == c["topk"] and g["rows"] == c["rows"]
               and g["t_a_ms"] is not None and g["t_b_ms"] is not None]
        if not pts:
            continue
        line, = ax.plot([g["keys"] for g in pts], [g["t_a_ms"] / g["t_b_ms"] for g in pts], marker="o",
                        label=f"top-{c['topk']}, rows {c['rows']}: {c['label']}")
        if c["keys"] is not None:
            ax.axvline(c["keys"], color=line.get_color(), linestyle=":", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("keys")
    ax.set_ylabel(f"time {a} / time {b}  (< 1: {a} faster)")
    ax.set_title(f"mqa-topk crossover: {a} vs {b}, {report.heads} heads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        plt.close(fig)
        raise UsageError(f"--plot {path}: cannot write ({e.strerror or e})") from None
    plt.close(fig)
    checks.output_written(path)
    return None
