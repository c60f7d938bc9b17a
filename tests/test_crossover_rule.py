"""crossover.py's rule pinned at every boundary: the strict "A is faster"
comparison, the confirmation window (a loss at the window's last point
blocks, one past it does not), the log-log interpolation, dropped points, the
wave table at exactly half the SMs, which row count the recommendation takes
and which thresholds the wave prediction uses. Expected values are computed
here from the documented formulas. Each test's docstring names the bug class."""
from __future__ import annotations

import math
import sys
import types

import pytest

import mqa_topk_cli
from mqa_topk_cli import bench, crossover, eligibility, timing
from mqa_topk_cli.contract import MAX_KEYS
from mqa_topk_cli.crossover import (
    dense_rows_per_call,
    describe_crossover,
    find_crossover,
    geometric_grid,
    wave_rows,
    wave_table,
)
from mqa_topk_cli.errors import UsageError

KEYS = [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000]


def _interp(k0, ratio0, k1, ratio1):
    """Where log(ratio) crosses 0, linearly in log(keys) between two points."""
    r0, r1 = math.log(ratio0), math.log(ratio1)
    return math.exp(math.log(k0) + r0 * (math.log(k1) - math.log(k0)) / (r0 - r1))


def _table(ratios):
    t_b = [2.0 + i for i in range(len(ratios))]
    return [r * b for r, b in zip(ratios, t_b)], t_b


# --------------------------------------------------------------------------- find_crossover

def test_equal_times_are_not_a_win():
    """Bug class: ``a <= b`` instead of ``a < b`` (a tie is not "A faster")."""
    t_a, t_b = _table([2.0, 1.0, 1.5, 0.8, 0.7, 0.6, 0.6, 0.6])
    assert find_crossover(KEYS[:8], t_a, t_b, confirm=0) == pytest.approx(_interp(4000, 1.5, 8000, 0.8), rel=1e-12)
    # a tie right before the first win: the crossover is the tied point itself, exactly
    # (1003: exp(log(1003)) rounds above 1003, so an interpolation would not land on it)
    t_a, t_b = _table([2.0, 1.0, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6])
    keys = [500] + [1003] + KEYS[2:]
    assert math.exp(math.log(1003)) > 1003
    x = find_crossover(keys, t_a, t_b)
    assert x == 1003.0
    # A slower by a hair everywhere: never
    t_a, t_b = _table([1.0 + 1e-12] * 8)
    assert find_crossover(KEYS, t_a, t_b, confirm=0) is None
    t_a, t_b = _table([1.0] * 8)
    assert find_crossover(KEYS, t_a, t_b, confirm=0) is None


@pytest.mark.parametrize("confirm", [1, 2, 3])
def test_a_loss_at_the_last_point_of_the_window_blocks(confirm):
    """Bug class: an off-by-one in the confirmation window (checking one point
    too few). A wins from index 1 on except at index 1 + confirm."""
    ratios = [1.5] + [0.8] * 7
    ratios[1 + confirm] = 1.2
    t_a, t_b = _table(ratios)
    x = find_crossover(KEYS, t_a, t_b, confirm=confirm)
    i = 2 + confirm  # the first point whose window holds no loss
    assert x == pytest.approx(_interp(KEYS[i - 1], 1.2, KEYS[i], 0.8), rel=1e-12)


@pytest.mark.parametrize("confirm", [0, 1, 2, 3])
def test_a_loss_one_past_the_window_does_not_block(confirm):
    """Bug class: an off-by-one in the confirmation window (checking one point
    too many, or ignoring ``confirm``)."""
    ratios = [1.5] + [0.8] * 7
    ratios[2 + confirm] = 1.2
    t_a, t_b = _table(ratios)
    assert find_crossover(KEYS, t_a, t_b, confirm=confirm) == pytest.approx(_interp(1000, 1.5, 2000, 0.8), rel=1e-12)


def test_the_window_shrinks_at_the_end_of_the_grid():
    """Bug class: requiring ``confirm`` points that the grid does not have."""
    t_a, t_b = _table([1.5, 1.4, 1.3, 1.2, 1.1, 1.05, 1.2, 0.9])
    assert find_crossover(KEYS, t_a, t_b, confirm=5) == pytest.approx(_interp(64000, 1.2, 128000, 0.9), rel=1e-12)
    t_a, t_b = _table([1.5, 1.4, 1.3, 1.2, 1.1, 1.05, 0.9, 0.9])
    assert find_crossover(KEYS, t_a, t_b, confirm=5) == pytest.approx(_interp(32000, 1.05, 64000, 0.9), rel=1e-12)


def test_crossover_from_the_first_point_and_the_interpolation():
    """Bug class: a wrong interpolation (linear in keys, wrong endpoint, sign)."""
    t_a, t_b = _table([0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5])
    assert find_crossover(KEYS, t_a, t_b) == 1000.0
    t_a, t_b = _table([3.0, 2.0, 1.25, 0.5, 0.5, 0.5, 0.5, 0.5])
    x = find_crossover(KEYS, t_a, t_b)
    assert x == pytest.approx(_interp(4000, 1.25, 8000, 0.5), rel=1e-12)
    assert 4000 < x < math.sqrt(4000 * 8000)  # closer to the point nearer to a ratio of 1


def test_failed_points_are_dropped_at_their_exact_boundaries():
    """Bug class: keeping a failed point (time <= 0, NaN, inf, None) or dropping a valid one."""
    base = [1.5, 1.2, 1.1, 0.8, 0.7, 0.6, 0.6, 0.6]
    t_a, t_b = _table(base)
    want = _interp(4000, 1.1, 8000, 0.8)
    for bad in (0.0, -1.0, -0.0, math.nan, math.inf, -math.inf, None):
        a = list(t_a)
        a[3] = bad  # the first winning point failed: the next one starts the window
        assert find_crossover(KEYS, a, t_b) == pytest.approx(_interp(4000, 1.1, 16000, 0.7), rel=1e-12)
        b = list(t_b)
        b[2] = bad  # the last losing point failed: interpolate from the one before
        assert find_crossover(KEYS, t_a, b) == pytest.approx(_interp(2000, 1.2, 8000, 0.8), rel=1e-12)
    tiny = list(t_a)
    tiny[2] = 1e-300  # a tiny positive time is a valid (winning) point
    assert find_crossover(KEYS, tiny, t_b) == pytest.approx(_interp(2000, 1.2, 4000, 1e-300 / t_b[2]), rel=1e-12)
    assert find_crossover(KEYS, t_a, t_b) == pytest.approx(want, rel=1e-12)


def test_find_crossover_argument_checks():
    """Bug class: accepting a grid or a window the rule is not defined for."""
    t = [1.0, 1.0]
    for bad in (-1, True, 2.0, None):
        with pytest.raises(UsageError, match="confirm"):
            find_crossover([1, 2], t, t, confirm=bad)
    assert find_crossover([1, 2], t, t, confirm=0) is None
    for keys in ([2, 2], [2, 1], [0, 1], [-1, 1]):
        with pytest.raises(UsageError, match="strictly increasing"):
            find_crossover(keys, t, t)
    with pytest.raises(UsageError, match="strictly increasing"):
        find_crossover([0], [1.0], [2.0])
    assert find_crossover([1], [1.0], [2.0]) == 1.0
    assert find_crossover([0, 5], [None, 1.0], [2.0, 2.0]) == 5.0  # a dropped point's key is not checked
    with pytest.raises(UsageError, match="differ in length"):
        find_crossover([1, 2, 3], t, t)
    with pytest.raises(UsageError, match="differ in length"):
        find_crossover([1, 2], [1.0], t)
    assert find_crossover([], [], []) is None


def test_describe_crossover_boundaries():
    """Bug class: "<= min" shown for a crossover above the first point, or not at it."""
    assert describe_crossover(None, KEYS) == "never"
    assert describe_crossover(1000.0, KEYS) == "<= 1000"
    assert describe_crossover(999.0, KEYS) == "<= 1000"
    assert describe_crossover(1000.5, KEYS) == "1000" and describe_crossover(1001.0, KEYS) == "1001"
    assert describe_crossover(23170.4, KEYS) == "23170"
    assert describe_crossover(1000.0, [0, 2000, 4000]) == "<= 2000"  # zero keys are no grid point
    assert describe_crossover(3000.0, []) == "3000"


# --------------------------------------------------------------------------- grids

def test_geometric_grid_boundaries():
    """Bug class: an exclusive upper end, wrong rounding, or accepting a grid that never grows."""
    assert geometric_grid(1024, 4096, 2.0) == [1024, 2048, 4096]
    assert geometric_grid(1024, 4095, 2.0) == [1024, 2048]
    assert geometric_grid(1024, 4097, 2.0) == [1024, 2048, 4096]
    assert geometric_grid(100, 1000, 2.0) == [100, 256, 384, 768]  # under align: as is; above: nearest multiple
    assert geometric_grid(64, 64, 3.0, align=32) == [64]
    assert geometric_grid(1, 8, 2.0, align=1) == [1, 2, 4, 8]
    assert geometric_grid(128, 300, 1.1) == [128, 256]  # repeated roundings are dropped
    g = geometric_grid(2048, 262144)
    assert len(g) == 15 and g[0] == 2048 and g[-1] == 262144 and g[2] == 4096
    for lo, hi in ((0, 10), (-1, 10), (10, 9)):
        with pytest.raises(UsageError, match="0 < min <= max"):
            geometric_grid(lo, hi)
    assert geometric_grid(1, 1) == [1]
    with pytest.raises(UsageError, match="factor"):
        geometric_grid(1, 10, 1.0)
    assert geometric_grid(1, 2, 1.5, align=1) == [1, 2]


def test_wave_rows_offsets_and_odd_sizes():
    """Bug class: a wrong offset (B vs S*B/2) or a row count of 0 in the wave table."""
    assert wave_rows(3, 5, (1,)) == [12, 15, 18, 19, 22]  # B*S = 15, S*B/2 = 7 (floor)
    assert wave_rows(8, 1, (1,)) == [4, 8, 12, 16]  # k*B*S - B = 0 is dropped
    assert wave_rows(2, 4, (1, 3)) == [6, 8, 10, 12, 22, 24, 26, 28]
    assert wave_rows(1, 1, (1,)) == [1, 2]  # 0, 1, 2, 0, 1
    for br, sms in ((0, 4), (4, 0), (-1, 4)):
        with pytest.raises(UsageError, match="positive"):
            wave_rows(br, sms)


def test_dense_rows_per_call_boundaries():
    """Bug class: a pitch that is not rounded up to 4 floats, or zero rows per call."""
    assert dense_rows_per_call(65536) == 2048 and dense_rows_per_call(131072) == 1024
    assert dense_rows_per_call(4, 16) == 1 and dense_rows_per_call(4, 32) == 2 and dense_rows_per_call(4, 47) == 2
    assert dense_rows_per_call(5, 32) == 1 and dense_rows_per_call(5, 64) == 2  # 5 keys -> pitch 8
    assert dense_rows_per_call(4, 15) == 1  # never 0
    assert dense_rows_per_call(0, 16) == 1 and dense_rows_per_call(1) == (512 << 20) // 16


# --------------------------------------------------------------------------- wave table

@pytest.fixture
def cal():
    return eligibility.validate_calibration({"format": 1, "min_keys": {"512": 1024, "1024": 1024, "2048": 1024},
                                             "block_rows": 8, "wave_rule": True})


def test_wave_table_boundary_at_exactly_half_the_sms(cal):
    """Bug class: ``2 * last_wave > sms`` instead of ``>=`` (exactly half the
    SMs busy is enough), in the table and in the rule it predicts with."""
    rows = [8 * (132 + 65), 8 * (132 + 66), 8 * (132 + 67)]  # last waves 65, 66, 67 of 132
    t = wave_table(rows, keys=4096, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1 << 20)
    assert [r["last_wave"] for r in t] == [65, 66, 67]
    assert [r["wave_ok"] for r in t] == [False, True, True]
    assert [r["predicted"] for r in t] == ["dense", "fused", "fused"]
    # an odd SM count: 2 * 2 < 5 <= 2 * 3
    t = wave_table([8 * 7, 8 * 8], keys=4096, topk=512, sms=5, block_rows=8, calibration=cal, dense_rows=1 << 20)
    assert [(r["last_wave"], r["wave_ok"]) for r in t] == [(2, False), (3, True)]
    # a partial last block counts as a block
    t = wave_table([8 * 132 + 1, 8 * 132], keys=4096, topk=512, sms=132, block_rows=8, calibration=cal,
                   dense_rows=1 << 20)
    assert [(r["blocks"], r["last_wave"]) for r in t] == [(133, 1), (132, 132)]


def test_wave_table_dense_rows_and_min_keys(cal):
    """Bug class: the prediction ignoring the dense chunking or the min-keys
    threshold, or the default dense rows not following the key count."""
    row = 8 * 133  # last wave of one block
    t = wave_table([row], keys=131072, topk=512, sms=132, block_rows=8, calibration=cal)
    assert t[0]["dense_rows"] == 1024 and t[0]["predicted"] == "fused"  # 1064 rows > 1024: dense needs two calls
    t = wave_table([row], keys=65536, topk=512, sms=132, block_rows=8, calibration=cal)
    assert t[0]["dense_rows"] == 2048 and t[0]["predicted"] == "dense"
    assert wave_table([row], keys=4096, topk=512, sms=132, block_rows=8, calibration=cal,
                      dense_rows=row)[0]["predicted"] == "dense"
    assert wave_table([row], keys=4096, topk=512, sms=132, block_rows=8, calibration=cal,
                      dense_rows=row - 1)[0]["predicted"] == "fused"
    high = eligibility.validate_calibration({"format": 1, "min_keys": {"512": 4097, "1024": 1, "2048": 1}})
    assert wave_table([8 * 132], keys=4096, topk=512, sms=132, block_rows=8, calibration=high,
                      dense_rows=1 << 20)[0]["predicted"] == "dense"
    at = eligibility.validate_calibration({"format": 1, "min_keys": {"512": 4096, "1024": 1, "2048": 1}})
    assert wave_table([8 * 132], keys=4096, topk=512, sms=132, block_rows=8, calibration=at,
                      dense_rows=1 << 20)[0]["predicted"] == "fused"


def test_wave_table_measured_winner(cal):
    """Bug class: a tie or a failed timing counted as a fused win."""
    rows = [8 * 132] * 5
    t = wave_table(rows, keys=4096, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1 << 20,
                   t_a=[1.0, 2.0, 2.0, math.nan, None], t_b=[2.0, 1.0, 2.0, 1.0, 1.0], names=("A", "B"))
    assert [r["measured"] for r in t] == ["A", "B", "B", None, None]
    assert [r["agree"] for r in t] == [True, False, False, None, None]
    assert [r["predicted"] for r in t] == ["A"] * 5
    half = wave_table(rows[:1], keys=4096, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1 << 20,
                      t_a=[1.0])
    assert half[0]["measured"] is None and half[0]["agree"] is None  # one side not timed: no verdict
    assert t[0]["t_a_ms"] == 1.0 and t[0]["t_b_ms"] == 2.0 and math.isnan(wave_table(
        rows[:1], keys=4096, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1)[0]["t_a_ms"])


# --------------------------------------------------------------------------- run_crossover with fake paths

class _W:
    def __init__(self, case):
        self.name = case["name"]
        self.rows, self.keys, self.topk = case["rows"], case["keys"], case["topk"]
        self.heads = case.get("heads", 32)
        self.visible_pairs = self.rows * self.keys
        self.device = "cpu"


class _P:
    def __init__(self, name, ms):
        self.name, self.ms = name, ms
        self.description = "fake"
        self.deterministic_ties = True
        self.requires_cuda = False

    def unavailable_reason(self, device):
        return None

    def prepare(self, w):
        fn = lambda: None  # noqa: E731
        fn.ms = self.ms(w)
        return fn


@pytest.fixture
def fake(monkeypatch):
    """native = keys/500 ms. fused: top-512 (and top-2048 at 8 rows) keys/1000
    + c ms with c = 10 at 8 rows, 20 at 16 rows, so it wins from about 1000 c
    keys; top-1024 keys/2000 ms (faster everywhere); top-2048 at 16 rows
    keys/400 ms (never faster)."""
    def fused(w):
        if w.topk == 2048 and w.rows == 16:
            return w.keys / 400  # always slower
        if w.topk == 1024:
            return w.keys / 1000 * 0.5  # faster everywhere
        return w.keys / 1000 + (10 if w.rows == 8 else 20)

    reg = {"fused": _P("fused", fused), "native": _P("native", lambda w: w.keys / 500)}
    # crossover imports `external` lazily, and external imports the real paths
    # module: import it first, so this file also passes when run on its own.
    import mqa_topk_cli.external  # noqa: F401
    mod = types.ModuleType("mqa_topk_cli.paths")
    mod.PATHS = reg
    mod.get_path = lambda name: reg[name]
    monkeypatch.setitem(sys.modules, "mqa_topk_cli.paths", mod)
    monkeypatch.setattr(mqa_topk_cli, "paths", mod, raising=False)
    monkeypatch.setattr(bench, "time_fn", lambda fn, **kw: timing.summarize([fn.ms] * 3, "fake"))
    monkeypatch.setattr(bench, "_materialize", lambda case, device: _W(case))
    monkeypatch.setattr(bench.gc, "collect", lambda *a: 0)  # nothing to free between fake cases; saves ~0.1 s each
    return reg


def _sweep(**over):
    sw = {"layout": "full", "dist": "gaussian", "seed": 0, "options": {}, "topks": [512, 1024, 2048],
          "rows": [8, 16], "keys": KEYS[:7], "paths": ["fused", "native"], "confirm": 2,
          "wave": {"enabled": True, "keys": 16000, "topk": 512, "multiples": [1]}}
    sw.update(over)
    return sw


def _x(c):
    """The crossover of fused = k/1000 + c vs native = k/500 on KEYS[:7]: between the grid points around 1000 c."""
    ks = KEYS[:7]
    i = next(j for j, k in enumerate(ks) if k / 1000 + c < k / 500)
    ratio = lambda k: (k / 1000 + c) / (k / 500)  # noqa: E731
    return _interp(ks[i - 1], ratio(ks[i - 1]), ks[i], ratio(ks[i]))


def test_recommendation_takes_the_largest_crossover_over_the_row_counts(fake, cal):
    """Bug class: recommending from the smallest (or the first) row count's
    crossover: the fused path must win at every measured row count."""
    rep = crossover.run_crossover(_sweep(), device="cpu", sms=4, block_rows=2, calibration=cal)
    by = {(c["topk"], c["rows"]): c for c in rep.crossovers}
    assert by[(512, 8)]["keys"] == pytest.approx(_x(10), rel=1e-12)
    assert by[(512, 16)]["keys"] == pytest.approx(_x(20), rel=1e-12)
    assert rep.recommended[512] == eligibility.recommended_min_keys(_x(20))
    assert rep.recommended[512] == math.ceil(_x(20) / 256) * 256
    # top-2048: never at 16 rows -> never fused, although 8 rows have a crossover
    assert by[(2048, 16)]["keys"] is None and by[(2048, 16)]["label"] == "never"
    assert rep.recommended[2048] == MAX_KEYS + 1
    # top-1024: faster from the first grid point at every row count -> that point, not rounded up
    assert all(by[(1024, r)]["at_min"] for r in (8, 16)) and by[(1024, 8)]["label"] == "<= 1000"
    assert rep.recommended[1024] == 1000
    assert rep.entry["min_keys"] == {"512": rep.recommended[512], "1024": 1000, "2048": MAX_KEYS + 1}
    assert not by[(512, 8)]["at_min"] and by[(512, 8)]["points"] == 7


def test_one_row_count_at_the_first_point_and_one_above_takes_the_rounded_larger(fake, cal, monkeypatch):
    """Bug class: the "faster from the first point" shortcut taken when only some row counts are."""
    monkeypatch.setattr(crossover, "EXTEND_MIN_KEYS", 12000)  # no downward extension here
    rep = crossover.run_crossover(_sweep(topks=[512], keys=[12000, 16000, 32000, 64000]), device="cpu", sms=4,
                                  block_rows=2, calibration=cal)
    by = {c["rows"]: c for c in rep.crossovers}
    assert by[8]["at_min"] and by[8]["keys"] == 12000.0 and not by[16]["at_min"]
    ratio = lambda k: (k / 1000 + 20) / (k / 500)  # noqa: E731
    x16 = _interp(16000, ratio(16000), 32000, ratio(32000))
    assert rep.recommended[512] == math.ceil(x16 / 256) * 256


def test_wave_prediction_uses_the_recommended_thresholds(fake):
    """Bug class: predicting the wave table with the old calibration's
    thresholds instead of the ones this run recommends."""
    never = eligibility.validate_calibration({"format": 1, "min_keys": {"512": 1 << 30, "1024": 1 << 30,
                                                                          "2048": 1 << 30}, "block_rows": 2})
    wave = {"enabled": True, "keys": 32000, "topk": 512, "multiples": [1]}
    rep = crossover.run_crossover(_sweep(topks=[512], wave=wave), device="cpu", sms=4, calibration=never)
    assert rep.recommended[512] < 32000  # so the wave table's 32000 keys are above the new threshold
    rows = wave_rows(2, 4, (1,))
    assert [r["rows"] for r in rep.wave] == rows
    # fused won at every wave row here, so the rule is off and every row is predicted fused: the new
    # thresholds (below 32000 keys) let them all through
    assert rep.entry["wave_rule"] is False
    assert [r["predicted"] for r in rep.wave] == ["fused"] * len(rows)
    assert rep.entry["block_rows"] == 2 and rep.entry["min_keys"]["1024"] == 1 << 30
    # where fused loses at the rows the rule sends to dense, the rule stays on and predicts with the thresholds
    slow = {r for r in rows if 2 * eligibility.last_wave(r, 4, 2) < 4}
    base = fake["fused"].ms
    fake["fused"].ms = lambda w: 1e6 if w.rows in slow and w.keys == 32000 else base(w)
    rep = crossover.run_crossover(_sweep(topks=[512], wave=wave), device="cpu", sms=4, calibration=never)
    want = ["fused" if 2 * eligibility.last_wave(r, 4, 2) >= 4 else "native" for r in rows]
    assert "native" in want and "fused" in want
    assert rep.entry["wave_rule"] is True
    assert [r["predicted"] for r in rep.wave] == want
    fake["fused"].ms = base
    # a topk this run did not measure keeps the current threshold in the wave prediction
    rep = crossover.run_crossover(_sweep(topks=[1024], wave=wave), device="cpu", sms=4, calibration=never)
    assert [r["predicted"] for r in rep.wave] == ["native"] * len(rows)


def test_causal_points_with_fewer_keys_than_rows_are_skipped_and_counted(fake, cal):
    """Bug class: timing impossible causal cases, or miscounting the skipped ones."""
    rep = crossover.run_crossover(_sweep(layout="causal", topks=[512], rows=[1500, 3000], keys=[1000, 2000, 4000],
                                         wave={"enabled": True, "keys": 1000, "topk": 512, "multiples": [1]}),
                                  device="cpu", sms=4, block_rows=2, calibration=cal)
    assert [(g["rows"], g["keys"]) for g in rep.grid] == [(1500, 2000), (1500, 4000), (3000, 4000)]
    assert "skipped 3 grid point(s) per topk" in " ".join(rep.notes)
    assert [r["rows"] for r in rep.wave] == [r for r in wave_rows(2, 4, (1,)) if r <= 1000]
    full = crossover.run_crossover(_sweep(topks=[512], rows=[1500], keys=[1000, 2000]), device="cpu", sms=4,
                                   block_rows=2, calibration=cal)
    assert len(full.grid) == 2 and not any("skipped" in n for n in full.notes)


def test_load_sweep_key_grid_defaults_and_options(tmp_path):
    """Bug class: a sweep config's defaults (factor sqrt 2, align 128) or
    generator options not applied."""
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\ntopks = [512]\nkeys = {min = 1024, max = 4096}\noptions = {unaligned_starts = true}\n')
    sw = crossover.load_sweep(p)
    assert sw["keys"] == geometric_grid(1024, 4096) == [1024, 1408, 2048, 2944, 4096]
    assert sw["options"] == {"unaligned_starts": True}
    assert (sw["layout"], sw["dist"], sw["seed"], sw["rows"], sw["paths"], sw["confirm"]) == (
        "causal", "gaussian", 0, [8192], ["fused", "native"], 2)
    assert sw["wave"] == {"enabled": True, "keys": 65536, "topk": 512, "multiples": [1, 2], "rows": [],
                          "tolerance": 0.03}
    p.write_text('[sweep]\nkeys = {min = 1000, max = 8000, factor = 2.0, align = 1000}\n')
    assert crossover.load_sweep(p)["keys"] == [1000, 2000, 4000, 8000]
    p.write_text('[sweep]\nkeys = {max = 8000}\n')
    with pytest.raises(UsageError, match="keys needs 'min'"):
        crossover.load_sweep(p)


def test_sweep_layout_defaults_to_causal(fake, cal):
    """Bug class: a sweep without a layout not treated as causal (impossible
    causal points with fewer keys than rows then get timed)."""
    sw = _sweep(topks=[512], rows=[1500], keys=[1000, 2000], wave={"enabled": False})
    del sw["layout"]
    rep = crossover.run_crossover(sw, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert [g["keys"] for g in rep.grid] == [2000] and "skipped 1 grid point(s) per topk" in " ".join(rep.notes)
    assert rep.entry["measured"]["layout"] == "causal"


def test_cases_carry_the_sweep_and_the_calibration_the_environment(fake, cal, monkeypatch, tmp_path):
    """Bug class: a sweep's layout/dist/seed/options not passed to the cases,
    or the calibration stamped with the wrong environment or agreement."""
    import mqa_topk_cli.envinfo as envinfo

    seen = []
    monkeypatch.setattr(bench, "_materialize", lambda case, device: seen.append(dict(case)) or _W(case))
    monkeypatch.setattr(envinfo, "environment", lambda device=None: {"gpu": "G", "date": "D", "commit": "C"})
    sw = _sweep(topks=[512], rows=[8], keys=[1000, 64000], dist="ties", seed=7, options={"near_ties": True},
                wave={"enabled": True, "keys": 32000, "topk": 512, "multiples": [1]})
    rep = crossover.run_crossover(sw, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert {(c["layout"], c["dist"], c["seed"], c["near_ties"]) for c in seen} == {("full", "ties", 7, True)}
    del sw["dist"], sw["seed"]
    sw["options"] = {}  # near_ties applies to dist ties only (issue 47: refused, no longer ignored)
    seen.clear()
    crossover.run_crossover(sw, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert {(c["dist"], c["seed"]) for c in seen} == {("gaussian", 0)}
    cal_out = rep.entry
    assert (cal_out["gpu"], cal_out["date"], cal_out["commit"]) == ("G", "D", "C")
    agree = [r["agree"] for r in rep.wave]
    assert cal_out["measured"]["wave"]["agreement"] == sum(agree) / len(agree)
    assert cal_out["measured"]["environment"] == {"gpu": "G", "date": "D", "commit": "C"}


def test_write_calibration_errors_name_the_file(tmp_path, cal):
    """Bug class: a bad calibration written to disk, or an error naming the wrong file."""
    good = {"format": 1, "min_keys": {"512": 1, "1024": 1, "2048": 1}}
    bad = {"format": 1, "min_keys": {"512": 1}}
    with pytest.raises(UsageError) as ei:
        crossover.write_calibration(tmp_path / "c.json", bad)
    assert str(ei.value).startswith(f"calibration file {tmp_path / 'c.json'}: ") and not (tmp_path / "c.json").exists()
    with pytest.raises(UsageError) as ei:
        crossover.write_calibration(tmp_path / "missing" / "c.json", good)
    assert str(ei.value) == f"--out {tmp_path / 'missing' / 'c.json'}: cannot write (No such file or directory)"
    assert crossover.write_calibration(tmp_path / "c.JSON", good).is_file()


def test_load_sweep_lists_and_errors_name_the_file(tmp_path):
    """Bug class: a key list not deduplicated/sorted, or an error without the file's name."""
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\nkeys = [3000, 1000, 1000]\nrows = 16\n')
    sw = crossover.load_sweep(p)
    assert sw["keys"] == [1000, 3000] and sw["rows"] == [16] and sw["options"] == {}
    p.write_text('[sweep]\nkeys = [1000]\ntopks = [512, 0]\n')
    with pytest.raises(UsageError) as ei:
        crossover.load_sweep(p)
    assert str(ei.value) == f"--config {p}: [sweep] topks must be a non-empty list of positive integers, got [512, 0]"
    p.write_text('[sweep]\nkeys = [1000]\npaths = ["fused"]\n')
    with pytest.raises(UsageError) as ei:
        crossover.load_sweep(p)
    assert str(ei.value) == f"--config {p}: [sweep] paths must name two paths, got ['fused']"


def test_wave_rows_equal_to_the_wave_keys_are_kept_in_a_causal_sweep(fake, cal):
    """Bug class: ``<=`` instead of ``<`` when skipping causal wave rows (rows == keys is a valid causal chunk)."""
    sw = _sweep(layout="causal", topks=[512], rows=[8], keys=[1000, 2000],
                wave={"enabled": True, "keys": 8, "topk": 512, "multiples": [1]})
    del sw["options"]  # a sweep without generator options
    rep = crossover.run_crossover(sw, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert [r["rows"] for r in rep.wave] == [6, 8]  # of wave_rows(2, 4) = [6, 8, 10, 12]


def test_progress_and_the_measured_record(fake):
    """Bug class: progress reported wrongly, or the calibration's record of the
    run (method, wave topk, thresholds of unmeasured topks) garbled."""
    raw = {"min_keys": {512: 1 << 30, 1024: 5000}, "block_rows": 2}  # a raw calibration without top-2048
    seen = []
    rep = crossover.run_crossover(_sweep(topks=[512], rows=[8], keys=[1000, 64000]), device="cpu", sms=4,
                                  calibration=raw, progress=lambda done, total, label: seen.append((done, total)))
    total = 2 * (2 + len(wave_rows(2, 4, (1,))))
    assert seen and all(t == total for _, t in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1][0] == total
    m = rep.entry["measured"]
    assert m["method"] == "fake" and m["wave"]["topk"] == 512 and m["wave"]["keys"] == 16000
    assert rep.entry["min_keys"] == {"512": rep.recommended[512], "1024": 5000, "2048": 65536}


def test_load_sweep_wave_multiples_and_key_errors(tmp_path):
    """Bug class: the [wave] table's multiples ignored, or key errors without the file."""
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\nkeys = [1000]\n[wave]\nmultiples = [3]\nenabled = false\n')
    sw = crossover.load_sweep(p)
    assert sw["wave"]["multiples"] == [3] and sw["wave"]["enabled"] is False
    p.write_text('[sweep]\nkeys = {min = "x", max = 10}\n')
    with pytest.raises(UsageError) as ei:
        crossover.load_sweep(p)
    assert str(ei.value).startswith(f"--config {p}: [sweep] keys: ")
    p.write_text('[sweep]\nkeys = [1000, -5]\n')
    with pytest.raises(UsageError) as ei:
        crossover.load_sweep(p)
    assert str(ei.value) == f"--config {p}: [sweep] keys must be a non-empty list of positive integers, got [1000, -5]"


def test_sweep_wave_table_defaults_and_confirm_override(fake, cal, monkeypatch):
    """Bug class: a sweep without a [wave] table crashing, a wave table without
    'enabled' skipped, or the confirm window not taken from the sweep / the argument."""
    sw = _sweep(topks=[512], rows=[8], keys=[1000, 64000])
    del sw["wave"]
    rep = crossover.run_crossover(sw, device="cpu", calibration=cal)  # no --sms on a CPU: the wave table is skipped
    assert rep.wave == [] and any("wave table skipped" in n for n in rep.notes)
    sw["wave"] = {"keys": 32000, "topk": 512, "multiples": [1]}
    rep = crossover.run_crossover(sw, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert [r["rows"] for r in rep.wave] == wave_rows(2, 4, (1,))
    sw["confirm"] = 1
    assert crossover.run_crossover(sw, device="cpu", sms=4, calibration=cal, wave=False).entry["measured"][
        "confirm"] == 1
    assert crossover.run_crossover(sw, device="cpu", sms=4, calibration=cal, wave=False, confirm=0).entry[
        "measured"]["confirm"] == 0
    import inspect

    assert inspect.signature(crossover.run_crossover).parameters["device"].default == "cuda"


def test_failed_grid_points_are_not_counted(fake, cal):
    """Bug class: a point where only one path was timed counted as a measured point."""
    fake["fused"].ms = lambda w: (_ for _ in ()).throw(RuntimeError("boom")) if w.keys == 2000 else w.keys / 1000 * 0.5
    rep = crossover.run_crossover(_sweep(topks=[512], rows=[8], keys=[1000, 2000, 4000]), device="cpu",
                                  calibration=cal, wave=False)
    c = rep.crossovers[0]
    assert c["points"] == 2 and c["at_min"] and c["label"] == "<= 1000"
    assert [g["status_a"] for g in rep.grid] == ["ok", "error: RuntimeError: boom", "ok"]
    t = wave_table([8], keys=4096, topk=512, sms=4, block_rows=2, calibration=cal, dense_rows=1 << 20)
    assert math.isnan(t[0]["t_a_ms"]) and math.isnan(t[0]["t_b_ms"]) and t[0]["measured"] is None



def test_wave_multiples_default_and_the_measured_paths(fake, cal):
    """Bug class: a wrong default set of wave multiples (1 and 2), or the
    calibration recording the wrong paths."""
    sw = _sweep(topks=[512], rows=[8], keys=[1000, 64000], wave={"keys": 64000, "topk": 512})
    rep = crossover.run_crossover(sw, device="cpu", sms=4, block_rows=2, calibration=cal)
    assert [r["rows"] for r in rep.wave] == wave_rows(2, 4, (1, 2)) == [6, 8, 10, 12, 14, 16, 18, 20]
    assert rep.entry["measured"]["paths"] == ["fused", "native"] and rep.paths == ("fused", "native")


def test_plot_message_without_matplotlib_is_exact(monkeypatch, tmp_path):
    """Bug class: a garbled one-line reason."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rep = crossover.CrossoverReport(paths=("a", "b"), grid=[], crossovers=[], recommended={}, current={}, wave=[],
                                    calibration={})
    assert crossover.plot_crossover(rep, tmp_path / "p.png") == \
        "--plot: matplotlib is not installed (pip install 'mqa-topk[plot]'); no plot written"


def test_load_sweep_reads_layout_dist_seed_and_rejects_empty_lists(tmp_path):
    """Bug class: a sweep's dist/layout/seed read under the wrong key (the
    defaults silently used), or an empty list accepted as a grid."""
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\nkeys = [1000]\nlayout = "full"\ndist = "ties"\nseed = 3\n')
    sw = crossover.load_sweep(p)
    assert (sw["layout"], sw["dist"], sw["seed"]) == ("full", "ties", 3)
    for field in ("rows", "topks"):
        p.write_text(f'[sweep]\nkeys = [1000]\n{field} = []\n')
        with pytest.raises(UsageError) as ei:
            crossover.load_sweep(p)
        assert str(ei.value) == f"--config {p}: [sweep] {field} must be a non-empty list of positive integers, got []"


# --------------------------------------------------------------------------- the wave rule's decision

def _wrow(rows, wave_ok, a, b, dense_rows=1 << 20):
    return {"rows": rows, "wave_ok": wave_ok, "dense_rows": dense_rows, "t_a_ms": a, "t_b_ms": b}


def test_decide_wave_rule_looks_only_at_the_rows_the_rule_sends_to_dense():
    """Bug class: rows whose last wave is full enough, rows past one dense
    logits call, or untimed rows deciding the rule."""
    t = [_wrow(8, True, 9.0, 1.0), _wrow(10, False, 1.0, 1.0), _wrow(12, False, 5.0, 1.0, dense_rows=11),
         _wrow(14, False, math.nan, 1.0), _wrow(16, False, None, 1.0)]
    d = crossover.decide_wave_rule(t, 0.0)
    assert d == {"wave_rule": False, "tolerance": 0.0, "rows_checked": 1, "worst_rows": 10, "worst_ratio": 1.0}
    none = crossover.decide_wave_rule([_wrow(8, True, 9.0, 1.0), _wrow(14, False, math.nan, 1.0)])
    assert none["wave_rule"] is None and none["rows_checked"] == 0 and none["worst_rows"] is None


def test_decide_wave_rule_tolerance_boundary_and_worst_row():
    """Bug class: ``>=`` instead of ``>`` at the tolerance, or the worst row
    not the slowest ratio."""
    t = [_wrow(10, False, 1.02, 1.0), _wrow(12, False, 0.5, 1.0), _wrow(14, False, 1.03, 1.0)]
    at = crossover.decide_wave_rule(t, 0.03)
    assert at["wave_rule"] is False and at["worst_rows"] == 14 and at["worst_ratio"] == pytest.approx(1.03)
    assert at["rows_checked"] == 3
    over = crossover.decide_wave_rule(t + [_wrow(16, False, 1.031, 1.0)], 0.03)
    assert over["wave_rule"] is True and over["worst_rows"] == 16
    assert crossover.decide_wave_rule(t, 0.0)["wave_rule"] is True
    for bad in (-0.1, 1.0, True, "0.1"):
        with pytest.raises(UsageError, match="tolerance"):
            crossover.decide_wave_rule(t, bad)


def test_an_undecided_wave_rule_keeps_the_current_calibration(fake):
    """Bug class: the calibration written with the rule on (or off) although
    no row the rule sends to dense was timed."""
    off = eligibility.validate_calibration({"format": 1, "min_keys": {"512": 1, "1024": 1, "2048": 1},
                                            "block_rows": 2, "wave_rule": False})
    wave = {"enabled": True, "keys": 64000, "topk": 512, "multiples": [1]}
    rep = crossover.run_crossover(_sweep(topks=[512], wave=wave), device="cpu", sms=4, calibration=off, wave=False)
    assert rep.wave == [] and rep.entry["wave_rule"] is False
    on = {**off, "wave_rule": True}
    rep = crossover.run_crossover(_sweep(topks=[512], wave=wave), device="cpu", sms=4, calibration=on, wave=False)
    assert rep.entry["wave_rule"] is True
    # measured (fused faster at 64000 keys everywhere): decided off, whatever the calibration said
    rep = crossover.run_crossover(_sweep(topks=[512], wave=wave), device="cpu", sms=4, calibration=on)
    dec = rep.entry["measured"]["wave"]["decision"]
    assert dec["wave_rule"] is False and rep.entry["wave_rule"] is False
    assert dec["rows_checked"] == sum(1 for r in rep.wave if not r["wave_ok"]) > 0
    # at 16000 keys fused loses at every row but the 8-row one: decided on
    rep = crossover.run_crossover(_sweep(topks=[512], wave={**wave, "keys": 16000}), device="cpu", sms=4,
                                  calibration=off)
    assert rep.entry["measured"]["wave"]["decision"]["wave_rule"] is True and rep.entry["wave_rule"]


def test_wave_rows_extra_rows_and_the_sweep_keys(tmp_path):
    """Bug class: the [wave] rows not merged (or duplicated) into the table,
    or a bad tolerance accepted."""
    assert wave_rows(2, 4, (1,), extra=(3, 8, 100)) == sorted(set(wave_rows(2, 4, (1,))) | {3, 100})
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\nkeys = [1000]\n[wave]\nrows = [64, 256]\ntolerance = 0.05\n')
    sw = crossover.load_sweep(p)
    assert sw["wave"]["rows"] == [64, 256] and sw["wave"]["tolerance"] == 0.05
    p.write_text('[sweep]\nkeys = [1000]\n')
    assert crossover.load_sweep(p)["wave"]["rows"] == [] and crossover.load_sweep(p)["wave"]["tolerance"] == 0.03
    for bad in ("1.5", "-0.01", "true", '"x"'):
        p.write_text(f'[sweep]\nkeys = [1000]\n[wave]\ntolerance = {bad}\n')
        with pytest.raises(UsageError, match=r"\[wave\] tolerance"):
            crossover.load_sweep(p)


def test_wave_decision_line_says_what_was_written():
    """Bug class: a printed decision that contradicts the calibration."""
    on = {"wave_rule": True, "tolerance": 0.03, "rows_checked": 4, "worst_rows": 1064, "worst_ratio": 1.08}
    off = {**on, "wave_rule": False, "worst_ratio": 0.97}
    assert crossover.wave_decision_line(on, True).startswith("wave rule: on (fused took more than 1.03x dense's")
    assert "1.080x at 1064 rows" in crossover.wave_decision_line(on, True)
    assert crossover.wave_decision_line(off, False).startswith("wave rule: off (fused took at most 1.03x dense's")
    assert crossover.wave_decision_line(None, False) == (
        "wave rule: off, kept from the current calibration (no timed row is one the rule sends to dense: this run "
        "does not decide it)")


def test_grid_extends_downward_when_a_wins_at_its_smallest_point(fake, cal):
    """Bug class: a crossover reported as "<= min" although it lies below the
    grid (issue 45: the real crossover must be found), the extension timing
    topks that already have a crossover, or the extended points not used."""
    fake["fused"].ms = lambda w: w.keys / 2000 + 2 if w.topk == 1024 else w.keys / 1000 + 10
    rep = crossover.run_crossover(_sweep(topks=[512, 1024], rows=[8], keys=[4000, 8000, 16000, 32000, 64000],
                                         wave={"enabled": False}), device="cpu", calibration=cal)
    below = [k for k in geometric_grid(crossover.EXTEND_MIN_KEYS, 4000) if k < 4000]
    assert below == [1024, 1408, 2048, 2944]
    assert [g["keys"] for g in rep.grid if g["topk"] == 1024] == below + [4000, 8000, 16000, 32000, 64000]
    assert [g["keys"] for g in rep.grid if g["topk"] == 512] == [4000, 8000, 16000, 32000, 64000]
    c = next(c for c in rep.crossovers if c["topk"] == 1024)
    ratio = lambda k: (k / 2000 + 2) / (k / 500)  # noqa: E731
    assert c["keys"] == pytest.approx(_interp(1024, ratio(1024), 1408, ratio(1408)), rel=1e-12)
    assert not c["at_min"] and "first_keys" not in c
    assert rep.recommended[1024] == eligibility.recommended_min_keys(c["keys"])
    assert any("extended down to 1024 keys (4 point(s))" in n for n in rep.notes)
    # A wins at the extension's lowest point too: reported there, and no further
    fake["fused"].ms = lambda w: w.keys / 2000 if w.topk == 1024 else w.keys / 1000 + 10
    rep = crossover.run_crossover(_sweep(topks=[1024], rows=[8], keys=[4000, 8000, 16000], wave={"enabled": False}),
                                  device="cpu", calibration=cal)
    c = rep.crossovers[0]
    assert c["at_min"] and c["keys"] == 1024 and c["label"] == "<= 1024" and rep.recommended[1024] == 1024
    # the grid's smallest point at or below 1024 keys: nothing to extend
    rep = crossover.run_crossover(_sweep(topks=[1024], rows=[8], keys=[1000, 2000, 4000], wave={"enabled": False}),
                                  device="cpu", calibration=cal)
    assert [g["keys"] for g in rep.grid] == [1000, 2000, 4000] and not any("extended" in n for n in rep.notes)
