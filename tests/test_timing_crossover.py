"""timing.time_fn on CPU, crossover detection on synthetic tables, the wave
table, sweep configs, and run_crossover / run_bench with fake paths."""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch

import mqa_topk_cli
from mqa_topk_cli import bench, crossover, eligibility, timing
from mqa_topk_cli.crossover import describe_crossover, find_crossover, geometric_grid, wave_rows, wave_table
from mqa_topk_cli.errors import Unavailable, UsageError

# ------------------------------------------------------------ timing


def test_time_fn_cpu_stats_are_ordered_and_count_calls():
    calls = []
    a = torch.randn(64, 64)

    def fn():
        calls.append(1)
        return a @ a

    t = timing.time_fn(fn, warmup=0, reps=7, device="cpu")
    assert t.reps == 7 and len(t.samples_ms) == 7
    assert 0 < t.min_ms <= t.p20_ms <= t.median_ms <= t.p80_ms
    assert t.min_ms <= t.mean_ms
    assert "cpu" in t.method
    assert len(calls) == 1 + 7  # the first (excluded) call + the timed ones


def test_time_fn_warmup_and_auto_reps_within_bounds():
    n = [0]

    def fn():
        n[0] += 1

    t = timing.time_fn(fn, warmup=2.0, reps=None, device="cpu", min_reps=5, max_reps=12)
    assert 5 <= t.reps <= 12
    assert n[0] > 1 + t.reps  # warm-up ran too


def test_time_fn_rotates_through_input_sets():
    seen = []
    fns = [lambda i=i: seen.append(i) for i in range(3)]
    timing.time_fn(lambda: None, warmup=0, reps=6, rotate=fns, device="cpu")
    assert seen == [0, 1, 2, 0, 1, 2]


def test_time_fn_rejects_bad_arguments():
    with pytest.raises(UsageError, match="reps"):
        timing.time_fn(lambda: None, reps=0, device="cpu")
    with pytest.raises(UsageError, match="warmup"):
        timing.time_fn(lambda: None, warmup=-1, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_time_fn_cuda_without_gpu_is_unavailable():
    with pytest.raises(Unavailable, match="no CUDA GPU"):
        timing.time_fn(lambda: None, device="cuda")


def test_summarize_quantiles_exact():
    t = timing.summarize([5.0, 1.0, 4.0, 2.0, 3.0], "m")
    assert t.median_ms == 3.0 and t.min_ms == 1.0 and t.mean_ms == 3.0
    assert t.p20_ms == pytest.approx(1.8) and t.p80_ms == pytest.approx(4.2)
    assert t.as_dict()["reps"] == 5


# ------------------------------------------------------------ find_crossover

KEYS = [2048, 4096, 8192, 16384, 32768, 65536, 131072]


def _ratio_table(ratios):
    t_b = [1.0 + 0.1 * i for i in range(len(ratios))]
    t_a = [r * b for r, b in zip(ratios, t_b)]
    return t_a, t_b


def test_clean_crossover_interpolated_in_log_keys():
    ratios = [2.0, 1.6, 1.25, 0.8, 0.6, 0.5, 0.45]
    t_a, t_b = _ratio_table(ratios)
    x = find_crossover(KEYS, t_a, t_b)
    # log ratio goes from log(1.25) at 8192 to log(0.8) at 16384: symmetric, so the
    # zero crossing is the geometric mean of the two key counts.
    assert x == pytest.approx(math.sqrt(8192 * 16384), rel=1e-9)
    # an asymmetric step: log(1.5) -> log(0.75)
    t_a, t_b = _ratio_table([2.0, 1.5, 0.75, 0.6, 0.5, 0.5, 0.5])
    frac = math.log(1.5) / (math.log(1.5) - math.log(0.75))
    assert find_crossover(KEYS, t_a, t_b) == pytest.approx(4096 * 2 ** frac, rel=1e-9)


def test_noise_spike_does_not_flip_the_crossover():
    # A wins spuriously at 4096 only; the real crossover is between 16384 and 32768.
    ratios = [1.5, 0.9, 1.4, 1.2, 0.8, 0.7, 0.6]
    t_a, t_b = _ratio_table(ratios)
    x = find_crossover(KEYS, t_a, t_b)
    assert 16384 < x < 32768
    # with no confirmation the spike would count
    assert find_crossover(KEYS, t_a, t_b, confirm=0) < 4096


def test_spike_after_the_confirm_window_is_ignored():
    ratios = [1.5, 1.2, 0.8, 0.7, 0.6, 1.1, 0.5]  # a slow fused point at 65536
    t_a, t_b = _ratio_table(ratios)
    assert 4096 < find_crossover(KEYS, t_a, t_b) < 8192


def test_no_crossover_is_none():
    t_a, t_b = _ratio_table([2.0, 1.8, 1.5, 1.3, 1.2, 1.1, 1.05])
    assert find_crossover(KEYS, t_a, t_b) is None
    # an isolated win in the middle is not a crossover
    t_a, t_b = _ratio_table([2.0, 1.8, 0.9, 1.3, 1.2, 1.1, 1.05])
    assert find_crossover(KEYS, t_a, t_b) is None
    assert describe_crossover(None, KEYS) == "never"


def test_crossover_at_the_first_point():
    t_a, t_b = _ratio_table([0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5])
    x = find_crossover(KEYS, t_a, t_b)
    assert x == KEYS[0]
    assert describe_crossover(x, KEYS) == "<= 2048"


def test_crossover_at_the_last_point():
    t_a, t_b = _ratio_table([2.0, 1.8, 1.5, 1.3, 1.2, 1.25, 0.8])
    x = find_crossover(KEYS, t_a, t_b)
    assert 65536 < x < 131072
    # the last two points win: confirm shrinks to what remains
    t_a, t_b = _ratio_table([2.0, 1.8, 1.5, 1.3, 1.25, 0.8, 0.8])
    assert 32768 < find_crossover(KEYS, t_a, t_b) < 65536


def test_failed_points_are_dropped():
    t_a, t_b = _ratio_table([2.0, 1.6, 1.25, 0.8, 0.6, 0.5, 0.45])
    t_a[3] = math.nan  # the 16384 point failed
    x = find_crossover(KEYS, t_a, t_b)
    assert 8192 < x < 32768
    t_a[4] = None
    assert 8192 < find_crossover(KEYS, t_a, t_b) < 65536


def test_find_crossover_rejects_bad_tables():
    with pytest.raises(UsageError):
        find_crossover([1, 2], [1.0], [1.0, 2.0])
    with pytest.raises(UsageError):
        find_crossover([4, 2, 8], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0])


def test_geometric_grid():
    g = geometric_grid(2048, 262144)
    assert g[0] == 2048 and g[-1] == 262144 and len(g) == 15
    assert all(b > a for a, b in zip(g, g[1:]))
    assert all(k % 128 == 0 for k in g)
    with pytest.raises(UsageError):
        geometric_grid(100, 50)


# ------------------------------------------------------------ wave rule


def test_wave_rows_around_multiples_of_block_rows_times_sms():
    rows = wave_rows(8, 132, (1, 2))
    assert rows == [1048, 1056, 1064, 1576, 1584, 2104, 2112, 2120, 2632, 2640]


def test_wave_table_predictions_and_agreement(sm100_cal):
    rows = wave_rows(8, 132, (1,))
    cal = eligibility.load_calibration()
    # far above the dense rows per call of 64K keys? no: dense_rows large -> pure wave rule
    table = wave_table(rows, keys=65536, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1 << 20)
    by_rows = {r["rows"]: r for r in table}
    assert by_rows[1048]["last_wave"] == 131 and by_rows[1048]["predicted"] == "fused"
    assert by_rows[1056]["last_wave"] == 132 and by_rows[1056]["wave_ok"]
    assert by_rows[1064]["last_wave"] == 1 and by_rows[1064]["predicted"] == "dense"
    assert by_rows[1576]["last_wave"] == 65 and not by_rows[1576]["wave_ok"]
    assert by_rows[1584]["last_wave"] == 66 and by_rows[1584]["predicted"] == "fused"
    # measured winners: agreement is computed per row
    t_a = [1.0, 1.0, 3.0, 2.0, 1.0]
    t_b = [2.0, 2.0, 2.0, 1.0, 2.0]
    table = wave_table(rows, keys=65536, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1 << 20,
                       t_a=t_a, t_b=t_b)
    assert [r["agree"] for r in table] == [True, True, True, True, True]
    table = wave_table(rows, keys=65536, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1 << 20,
                       t_a=[3.0] * 5, t_b=[1.0] * 5)
    assert [r["measured"] for r in table] == ["dense"] * 5
    assert [r["agree"] for r in table] == [False, False, True, True, False]
    # the dense-chunking branch: more rows than one dense logits call -> fused predicted
    table = wave_table([1064], keys=65536, topk=512, sms=132, block_rows=8, calibration=cal, dense_rows=1024)
    assert table[0]["predicted"] == "fused"


def test_dense_rows_per_call_matches_the_512mib_budget():
    assert crossover.dense_rows_per_call(65536) == 2048
    assert crossover.dense_rows_per_call(131072) == 1024


# ------------------------------------------------------------ sweep config


def test_shipped_crossover_config():
    from mqa_topk_cli.resources import config_path

    sw = crossover.load_sweep(config_path("crossover"))
    assert sw["topks"] == [512, 1024, 2048]
    assert sw["rows"] == [1024, 8192]  # one wave of blocks and many waves
    assert sw["keys"][0] == 2048 and sw["keys"][-1] == 262144
    assert sw["paths"] == ["fused", "native"]
    assert sw["layout"] == "full"  # a causal 8192-row grid could not reach below 8192 keys


def test_malformed_sweep_config_names_the_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[sweep\ntopks = 3")
    with pytest.raises(UsageError, match="bad.toml"):
        crossover.load_sweep(p)
    p.write_text("[sweep]\ntopks = [512]\nkeys = [1024, -5]\n")
    with pytest.raises(UsageError, match="keys"):
        crossover.load_sweep(p)
    p.write_text("[other]\n")
    with pytest.raises(UsageError, match=r"\[sweep\]"):
        crossover.load_sweep(p)


# ------------------------------------------------------------ sweeps with fake paths


class _FakeWorkload:
    def __init__(self, case):
        self.name = case["name"]
        self.rows, self.keys, self.topk = case["rows"], case["keys"], case["topk"]
        self.heads = case.get("heads", 32)
        self.visible_pairs = self.rows * self.keys
        self.device = "cpu"


class _FakePath:
    def __init__(self, name, ms=None, fail=None, reason=None):
        self.name, self._ms, self._fail, self._reason = name, ms, fail, reason
        self.description = "fake"
        self.deterministic_ties = True
        self.requires_cuda = False

    def unavailable_reason(self, device):
        return self._reason

    def prepare(self, w):
        if self._fail is not None and self._fail(w):
            raise self._fail(w)
        fn = lambda: None  # noqa: E731
        fn.ms = self._ms(w)
        return fn

    def logits(self, w):
        return None

    def run(self, w, output):
        pass


def _fake_time_fn(fn, **kw):
    return timing.summarize([fn.ms] * 3, "fake")


@pytest.fixture
def fake_paths(monkeypatch):
    """A registry of fake paths with synthetic times: fused = keys/1000 + 10 (ms),
    dense = keys/500; the fused path wins from 10000 keys."""
    import mqa_topk_cli.external  # noqa: F401 -- imports the real paths module before it is replaced

    reg = {
        "fused": _FakePath("fused", ms=lambda w: w.keys / 1000 + 10),
        "native": _FakePath("native", ms=lambda w: w.keys / 500),
        "torch": _FakePath("torch", ms=lambda w: w.keys / 250),
        "broken": _FakePath("broken", ms=lambda w: 1.0,
                            fail=lambda w: RuntimeError("CUDA out of memory. Tried to allocate 2 GiB") if w.keys > 4000 else None),
        "absent": _FakePath("absent", ms=lambda w: 1.0, reason="needs an sm_90 GPU"),
    }
    mod = types.ModuleType("mqa_topk_cli.paths")
    mod.PATHS = reg

    def get_path(name):
        if name not in reg:
            raise UsageError(f"path: unknown path {name!r}")
        return reg[name]

    mod.get_path = get_path
    monkeypatch.setitem(sys.modules, "mqa_topk_cli.paths", mod)
    monkeypatch.setattr(mqa_topk_cli, "paths", mod, raising=False)
    monkeypatch.setattr(bench, "time_fn", _fake_time_fn)
    monkeypatch.setattr(bench, "_materialize", lambda case, device: _FakeWorkload(case))
    return reg


def test_run_bench_labels_failures_and_goes_on(fake_paths):
    cases = [{"name": "small", "layout": "causal", "rows": 8, "keys": 2000, "topk": 512},
             {"name": "big", "layout": "causal", "rows": 8, "keys": 8000, "topk": 512}]
    res = bench.run_bench(cases, ["native", "broken", "absent", "torch"], device="cpu")
    st = {(r.case, r.path): r for r in res}
    assert st[("small", "broken")].status == "ok"
    assert st[("big", "broken")].status == "OOM"
    assert st[("big", "absent")].status == "unavailable: needs an sm_90 GPU"
    assert st[("big", "torch")].status == "ok"  # the sweep went on
    r = st[("big", "native")]
    assert r.median_ms == pytest.approx(16.0)
    assert r.tflops == pytest.approx(8192 * 8 * 8000 / 16e-3 / 1e12)
    assert st[("big", "torch")].speedup == pytest.approx(0.5) and st[("big", "torch")].baseline == "native"
    assert math.isnan(st[("big", "broken")].speedup)


def test_cpu_sweep_collects_garbage_only_after_a_failure(fake_paths, monkeypatch):
    # gc.collect takes ~0.1 s with torch loaded: a CPU sweep of tiny cases must
    # not pay it per step (refcounting frees the tensors); a failure's traceback
    # may hold tensors in a cycle, so a failed step is still followed by one.
    import gc

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    cases = [{"name": f"c{k}", "layout": "causal", "rows": 8, "keys": k, "topk": 512} for k in (1000, 2000, 3000)]
    res = bench.run_bench(cases, ["native", "torch"], device="cpu")
    assert all(r.ok for r in res) and calls == []
    res = bench.run_bench(cases[:1] + [dict(cases[0], name="big", keys=8000)], ["broken"], device="cpu")
    assert [r.status for r in res] == ["ok", "OOM"] and len(calls) == 1
    calls.clear()
    bench._free("cuda")  # on a GPU every step is followed by a collection (then empty_cache when there is one)
    assert len(calls) == 1


def test_run_crossover_with_synthetic_paths(sm100_cal, fake_paths):
    sweep = {"layout": "causal", "dist": "gaussian", "seed": 0, "options": {}, "topks": [512, 2048], "rows": [8],
             "keys": [1000, 2000, 4000, 8000, 16000, 32000, 64000], "paths": ["fused", "native"], "confirm": 2,
             "wave": {"enabled": True, "keys": 64000, "topk": 512, "multiples": [1, 2]}}
    rep = crossover.run_crossover(sweep, device="cpu", sms=4, block_rows=2)
    # fused/native = (k/1000 + 20) / (k/500): crosses 1 at k = 10000 (between 8000 and 16000)
    for c in rep.crossovers:
        assert 8000 < c["keys"] < 16000
    assert set(rep.recommended) == {512, 2048}
    assert all(v % 256 == 0 and 8000 < v <= 16384 for v in rep.recommended.values())
    doc = eligibility.validate_calibration(rep.calibration)
    assert doc["format"] == 2 and set(doc["heads"]) == {32} and rep.heads == 32
    cal = rep.entry
    assert rep.calibration["heads"]["32"]["min_keys"] == cal["min_keys"]
    assert cal["block_rows"] == 2 and cal["sms"] == 4 and "format" not in cal
    assert cal["min_keys"]["1024"] == 32768  # not measured: kept from the current calibration
    assert "1024" in cal["source"]
    assert len(cal["measured"]["grid"]) == 14
    assert rep.wave and [r["rows"] for r in rep.wave] == wave_rows(2, 4, (1, 2))
    assert all(r["measured"] == "fused" for r in rep.wave)  # at 64000 keys fused is faster at every row count


def test_run_crossover_refuses_an_unavailable_path(fake_paths):
    sweep = crossover.load_sweep(__import__("mqa_topk_cli.resources", fromlist=["x"]).config_path("crossover"))
    with pytest.raises(Unavailable, match="absent"):
        crossover.run_crossover(sweep, device="cpu", paths=("absent", "native"))


def test_write_calibration_round_trip(tmp_path, fake_paths, monkeypatch):
    sweep = {"layout": "full", "topks": [512, 1024, 2048], "rows": [8], "keys": [1000, 4000, 16000, 64000],
             "paths": ["fused", "native"], "confirm": 1, "wave": {"enabled": False}}
    rep = crossover.run_crossover(sweep, device="cpu", sms=4)
    p = crossover.write_calibration(tmp_path / "cal.json", rep.calibration)
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    cal = eligibility.calibration_for(eligibility.load_calibration(), 32)
    assert cal["min_keys"] == {t: rep.recommended[t] for t in (512, 1024, 2048)}
    assert eligibility.fused_mqa_topk_min_keys(1024) == rep.recommended[1024]
    with pytest.raises(UsageError, match=".json"):
        crossover.write_calibration(tmp_path / "cal.txt", rep.calibration)


def test_plot_is_written_or_explained(tmp_path, fake_paths, monkeypatch):
    sweep = {"layout": "full", "topks": [512], "rows": [8], "keys": [1000, 4000, 16000, 64000],
             "paths": ["fused", "native"], "confirm": 1, "wave": {"enabled": False}}
    rep = crossover.run_crossover(sweep, device="cpu", sms=4)
    out = tmp_path / "x.png"
    # matplotlib is in the test extra: the plot is really drawn
    assert crossover.plot_crossover(rep, out) is None
    import matplotlib.image

    img = matplotlib.image.imread(str(out))
    assert img.shape[:2] == (5 * 120, 8 * 120)  # figsize 8x5 at 120 dpi
    assert float(img[..., :3].std()) > 0.05  # not a blank canvas: axes, a line, a legend
    # without matplotlib: one line says so and nothing is written
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    missing = tmp_path / "y.png"
    why = crossover.plot_crossover(rep, missing)
    assert "matplotlib is not installed" in why and "\n" not in why and not missing.exists()
