"""Eligibility rules and calibration loading (no GPU needed: explicit sms)."""
from __future__ import annotations

import json

import pytest
import torch

from mqa_topk_cli import eligibility as el
from mqa_topk_cli import ops
from mqa_topk_cli.contract import MAX_KEYS
from mqa_topk_cli.errors import UsageError

SM100 = {512: 32768, 1024: 32768, 2048: 65536}


def _write_cal(path, **over):
    doc = {"format": 1, "gpu": "NVIDIA H200", "sms": 132, "date": "2026-11-29", "commit": "abc1234",
           "block_rows": 8, "min_keys": {"512": 4096, "1024": 6144, "2048": 8192}, "wave_rule": True,
           "measured": {}, "source": "test"}
    doc.update(over)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(autouse=True)
def _no_env(monkeypatch, sm100_cal):
    # Rule tests run against the SM100 thresholds (sm100_cal sets MQA_TOPK_CALIBRATION).
    monkeypatch.delenv("MQA_TOPK_USE_FUSED", raising=False)


def test_shipped_default_is_the_h200_measurement(monkeypatch):
    monkeypatch.delenv("MQA_TOPK_CALIBRATION", raising=False)
    full = el.load_calibration()
    # format 2, the 32- and 64-head measurements (16 heads take the default rule until measured)
    assert full["format"] == 2 and set(full["heads"]) == {32, 64}
    assert el.calibration_for(full, 16).get("fallback") is True
    from mqa_topk_cli.crossover import decide_wave_rule, find_crossover

    for heads in (32, 64):
        cal = el.calibration_for(full, heads)
        assert not cal.get("fallback") and cal["measured"]["heads"] == heads
        assert cal["gpu"] == "NVIDIA H200" and cal["sms"] == 132 and cal["commit"]
        assert cal["source"].startswith("mqa-topk crossover")
        assert cal["block_rows"] == 8 and isinstance(cal["wave_rule"], bool)
        # The wave rule is crossover's decision on the shipped wave table (fused at
        # most (1 + tolerance) x dense's time at every poorly filled last wave: off).
        wave = cal["measured"]["wave"]
        decision = decide_wave_rule(wave["table"], wave["decision"]["tolerance"])
        assert decision["rows_checked"] > 0
        assert decision == wave["decision"] and cal["wave_rule"] == decision["wave_rule"]
        grid = cal["measured"]["grid"]
        assert {g["topk"] for g in grid} == {512, 1024, 2048}
        rows_measured = sorted({g["rows"] for g in grid})
        assert rows_measured == [1024, 8192]
        # Every threshold is what crossover's rule gives on the shipped grid: per
        # row count, the first point from which fused wins there and at the next
        # `confirm` points; the threshold is the largest over the row counts (the
        # first grid point itself when fused wins from it on at every row count;
        # never: MAX_KEYS + 1), rounded up by recommended_min_keys otherwise.
        confirm = cal["measured"]["confirm"]
        for t in (512, 1024, 2048):
            mk = el.fused_mqa_topk_min_keys(t, heads=heads)
            xs, at_min, per_rows = [], [], []
            for r in rows_measured:
                pts = sorted((g["keys"], g["t_a_ms"], g["t_b_ms"]) for g in grid if g["topk"] == t and g["rows"] == r)
                x = find_crossover([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], confirm=confirm)
                xs.append(x)
                at_min.append(x is not None and x <= pts[0][0])
                per_rows.append(pts)
            if any(x is None for x in xs):
                assert mk == MAX_KEYS + 1
            elif all(at_min):
                assert mk == max(xs)
            else:
                assert mk == el.recommended_min_keys(max(xs)) and mk >= max(xs)
            # fused wins at the threshold's grid point and at the next `confirm` ones, at every row count
            if mk <= MAX_KEYS:
                for pts in per_rows:
                    after = [a < b for keys, a, b in pts if keys >= mk]
                    assert all(after[: confirm + 1]), (heads, t, mk)


def test_min_keys_from_a_calibration_named_by_the_env_var(tmp_path, monkeypatch):
    p = _write_cal(tmp_path / "h200.json")
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    assert [el.fused_mqa_topk_min_keys(t) for t in (512, 1024, 2048)] == [4096, 6144, 8192]
    # the rule follows the file: 8192 keys now suffice for top-2048
    assert el.fused_mqa_topk_chunk(8192, 8192, 2048, 8192, 8192, sms=132)
    assert not el.fused_mqa_topk_chunk(8191, 8192, 2048, 8192, 8192, sms=132)
    # changed file is re-read
    _write_cal(p, min_keys={"512": 1024, "1024": 1024, "2048": 2048})
    import os
    os.utime(p, ns=(1, 1))  # a different mtime
    assert el.fused_mqa_topk_min_keys(2048) == 2048


def test_min_keys_for_uncalibrated_topk_uses_the_next_larger():
    cal = el.validate_calibration({"format": 1, "min_keys": {"512": 10, "1024": 20, "2048": 30}})
    assert el.fused_mqa_topk_min_keys(100, calibration=cal) == 10
    assert el.fused_mqa_topk_min_keys(1, calibration=cal) == 10  # any positive topk
    assert el.fused_mqa_topk_min_keys(600, calibration=cal) == 20
    assert el.fused_mqa_topk_min_keys(4096, calibration=cal) == 30
    with pytest.raises(UsageError, match="topk"):
        el.fused_mqa_topk_min_keys(0, calibration=cal)


def test_wave_rule_with_explicit_sms():
    # 132 SMs, 8-row blocks: 1056 rows = 132 blocks, one full wave
    chunk = lambda rows, dense_rows=1 << 30: el.fused_mqa_topk_chunk(65536, 65536, 2048, rows, dense_rows, sms=132)  # noqa: E731
    assert chunk(1056)            # last wave 132
    assert not chunk(1064)        # 133 blocks: last wave of 1 block
    assert not chunk(1056 + 65 * 8)  # last wave 65 < 66
    assert chunk(1056 + 66 * 8)   # last wave 66 = half
    assert not chunk(8)           # a single block leaves 131 SMs idle
    assert chunk(1049)            # 132 blocks (the last one partial): full wave


def test_wave_rule_small_grids():
    assert el.last_wave(8, 132) == 1 and not el.wave_ok(8, 132)
    assert el.last_wave(8 * 66, 132) == 66 and el.wave_ok(8 * 66, 132)
    assert el.last_wave(1, 4) == 1 and not el.wave_ok(1, 4)
    assert el.last_wave(17, 4, block_rows=8) == 3 and el.wave_ok(17, 4, block_rows=8)
    assert el.last_wave(40, 4, block_rows=8) == 1  # 5 blocks: 4 + 1


def test_dense_rows_branch_overrides_the_wave_rule():
    # 1064 rows leave a last wave of one block, but dense needs two logits calls
    assert not el.fused_mqa_topk_chunk(65536, 65536, 2048, 1064, 2048, sms=132)
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 1064, 1024, sms=132)
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 1064, 1063, sms=132)
    assert not el.fused_mqa_topk_chunk(65536, 65536, 2048, 1064, 1064, sms=132)


def test_min_keys_and_key_limit():
    assert not el.fused_mqa_topk_chunk(65535, 65536, 2048, 8192, 2048, sms=132)
    assert el.fused_mqa_topk_chunk(32768, 65536, 1024, 8192, 2048, sms=132)
    assert el.fused_mqa_topk_chunk(65536, MAX_KEYS, 2048, 8192, 2048, sms=132)
    assert not el.fused_mqa_topk_chunk(65536, MAX_KEYS + 1, 2048, 8192, 2048, sms=132)


def test_block_rows_parameter_and_wave_rule_switch(tmp_path):
    # 16-row blocks: 1056 rows are 66 blocks -> half of 132 SMs: ok; 1040 rows = 65 blocks: not
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 1056, 1 << 30, sms=132, block_rows=16)
    assert not el.fused_mqa_topk_chunk(65536, 65536, 2048, 1040, 1 << 30, sms=132, block_rows=16)
    cal = el.load_calibration(_write_cal(tmp_path / "c.json", block_rows=16))
    assert not el.fused_mqa_topk_chunk(65536, 65536, 2048, 1040, 1 << 30, sms=132, calibration=cal)
    cal = el.load_calibration(_write_cal(tmp_path / "c2.json", wave_rule=False))
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 1064, 1 << 30, sms=132, calibration=cal)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_no_gpu_means_not_fused():
    assert el.fused_mqa_topk_available() is False
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 8192, 2048) is False  # sms unknown: dense
    assert not el.use_fused_mqa_topk(query_shape=(32, 128), topk=2048, fp4_cache=False, full_context=True)


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"format": 3, "min_keys": {"512": 1, "1024": 1, "2048": 1}}', "format"),
        ('{"format": 2, "min_keys": {"512": 1, "1024": 1, "2048": 1}}', "'heads' must be an object"),
        ('{"format": 2, "heads": {"48": {"min_keys": {"512": 1, "1024": 1, "2048": 1}}}}', "heads key '48'"),
        ('{"format": 2, "heads": {"64": {"min_keys": {"512": 1, "1024": 1}}}}', "min_keys lacks topk 2048"),
        ('{"format": 1, "min_keys": {"512": 1, "1024": 1}}', "2048"),
        ('{"format": 1, "min_keys": {"512": -4, "1024": 1, "2048": 1}}', "positive"),
        ('{"format": 1, "min_keys": {"512": "8K", "1024": 1, "2048": 1}}', "positive"),
        ('{"format": 1, "min_keys": {"x": 1, "512": 1, "1024": 1, "2048": 1}}', "not a topk"),
        ('{"format": 1, "min_keys": {"512": 1, "1024": 1, "2048": 1}, "block_rows": 0}', "block_rows"),
        ('{"format": 1, "min_keys": {"512": 1, "1024": 1, "2048": 1}, "wave_rule": "yes"}', "wave_rule"),
    ],
)
def test_malformed_calibration_is_a_usage_error_naming_the_file(tmp_path, monkeypatch, content, match):
    p = tmp_path / "broken-cal.json"
    p.write_text(content)
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(p))
    with pytest.raises(UsageError, match=match) as ei:
        el.fused_mqa_topk_min_keys(2048)
    assert "broken-cal.json" in str(ei.value)


def test_missing_calibration_file_names_it_and_the_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("MQA_TOPK_CALIBRATION", str(tmp_path / "nope.json"))
    with pytest.raises(UsageError, match=r"nope\.json.*MQA_TOPK_CALIBRATION"):
        el.load_calibration()


def test_use_fused_rules(monkeypatch):
    monkeypatch.setattr(el, "fused_mqa_topk_available", lambda: True)
    ok = dict(query_shape=(32, 128), topk=2048, fp4_cache=False, full_context=True)
    assert el.use_fused_mqa_topk(**ok)
    for heads in (16, 32, 64):  # every supported heads count may take the fused kernel
        assert el.use_fused_mqa_topk(**{**ok, "query_shape": (heads, 128)})
    for bad in ((48, 128), (8, 128), (128, 128), (32, 64), (64, 64), (32,), (32, 128, 1), (True, 128)):
        assert not el.use_fused_mqa_topk(**{**ok, "query_shape": bad}), bad
    assert not el.use_fused_mqa_topk(**{**ok, "topk": 256})
    assert not el.use_fused_mqa_topk(**{**ok, "fp4_cache": True})
    assert not el.use_fused_mqa_topk(**{**ok, "full_context": False})
    assert not el.use_fused_mqa_topk(**ok, candidate_selection=True)
    for off in ("0", "false", "OFF", "no"):
        monkeypatch.setenv("MQA_TOPK_USE_FUSED", off)
        assert not el.use_fused_mqa_topk(**ok)
    monkeypatch.setenv("MQA_TOPK_USE_FUSED", "1")
    assert el.use_fused_mqa_topk(**ok)
    monkeypatch.setattr(el, "fused_mqa_topk_available", lambda: False)
    assert not el.use_fused_mqa_topk(**ok)


def test_ops_reexports_the_eligibility_api():
    for name in ("fused_mqa_topk_available", "fused_mqa_topk_chunk", "fused_mqa_topk_min_keys", "use_fused_mqa_topk"):
        assert getattr(ops, name) is getattr(el, name)


def test_recommended_min_keys():
    assert el.recommended_min_keys(None) == MAX_KEYS + 1
    assert el.recommended_min_keys(10000.4) == 10240
    assert el.recommended_min_keys(2048.0) == 2048
    assert el.recommended_min_keys(10.0) == 256


def test_calibration_error_messages_name_the_file_and_field():
    """Bug class: an error that names the wrong file or field, or misquotes the value."""
    with pytest.raises(UsageError) as ei:
        el.validate_calibration({"format": 3, "min_keys": {}}, "cal.json")
    assert str(ei.value) == "calibration file cal.json: unsupported 'format' 3 (expected 2, or 1)"
    for bad in (0, -3, True, "132"):
        with pytest.raises(UsageError) as ei:
            el.validate_calibration({"format": 1, "min_keys": {"512": 1, "1024": 1, "2048": 1}, "sms": bad}, "c.json")
        assert str(ei.value) == f"calibration file c.json: 'sms' must be a positive integer, got {bad!r}"
    ok = el.validate_calibration({"format": 1, "min_keys": {"512": 1, "1024": 1, "2048": 1}, "sms": 1}, "c.json")
    assert ok["sms"] == 1 and ok["path"] == "c.json" and ok["block_rows"] == 8 and ok["wave_rule"] is True


def test_a_raw_calibration_without_wave_rule_keeps_the_wave_check():
    """Bug class: a missing 'wave_rule' read as off (the wave check is on by default)."""
    raw = {"min_keys": {512: 1024, 1024: 1024, 2048: 1024}}
    assert not el.fused_mqa_topk_chunk(4096, 4096, 512, 8, 1 << 20, sms=132, calibration=raw)  # one block of 132 SMs
    assert el.fused_mqa_topk_chunk(4096, 4096, 512, 8 * 66, 1 << 20, sms=132, calibration=raw)
    assert el.fused_mqa_topk_chunk(4096, 4096, 512, 8, 1 << 20, sms=132, calibration={**raw, "wave_rule": False})


def test_chunk_rule_argument_errors():
    """Bug class: a zero SM count or block size reaching a division (ZeroDivisionError) instead of a clear error."""
    for bad in (0, -1, True, 1.5):
        with pytest.raises(UsageError) as ei:
            el.fused_mqa_topk_chunk(65536, 65536, 2048, 8, 8, sms=bad)
        assert str(ei.value) == f"sms: must be a positive int, got {bad!r}"
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 8, 8, sms=1)  # one SM: every wave is full
    for bad in (0, -8):
        with pytest.raises(UsageError) as ei:
            el.fused_mqa_topk_chunk(65536, 65536, 2048, 8, 8, sms=132, block_rows=bad)
        assert str(ei.value) == f"block_rows: must be a positive int, got {bad!r}"
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 132, 8, sms=132, block_rows=1)


def test_missing_calibration_given_by_path_does_not_blame_the_env_var(tmp_path, monkeypatch):
    """Bug class: an error pointing at $MQA_TOPK_CALIBRATION when the path came from the caller."""
    p = tmp_path / "nope.json"
    with pytest.raises(UsageError) as ei:
        el.load_calibration(p)
    assert str(ei.value) == f"calibration file {p}: not found"
    monkeypatch.delenv("MQA_TOPK_CALIBRATION")
    monkeypatch.setattr(el, "DEFAULT_CALIBRATION", p)
    with pytest.raises(UsageError) as ei:
        el.load_calibration()
    assert str(ei.value) == f"calibration file {p}: not found"
    with pytest.raises(UsageError) as ei:
        el.validate_calibration({"format": 1, "min_keys": [512]}, "x.json")
    assert str(ei.value) == 'calibration file x.json: \'min_keys\' must be an object {"512": int, ...}'


def test_chunk_rule_reads_the_gpus_sm_count_when_not_given(monkeypatch):
    """Bug class: the SM count of the current GPU ignored when ``sms`` is left out."""
    monkeypatch.setattr(el, "_sm_count", lambda: 132)
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 8 * 66, 1 << 20)
    assert not el.fused_mqa_topk_chunk(65536, 65536, 2048, 8 * 65, 1 << 20)
    monkeypatch.setattr(el, "_sm_count", lambda: None)
    assert el.fused_mqa_topk_chunk(65536, 65536, 2048, 8 * 66, 1 << 20) is False


def test_validate_calibration_default_name():
    """Bug class: a garbled default name or type in the error."""
    with pytest.raises(UsageError) as ei:
        el.validate_calibration([1, 2])
    assert str(ei.value) == "calibration file <calibration>: expected a JSON object, got list"


def test_min_keys_rejects_non_int_topk():
    """Bug class: a bool or a string topk accepted (or crashing with a TypeError)."""
    cal = el.validate_calibration({"format": 1, "min_keys": {"512": 10, "1024": 20, "2048": 30}})
    for bad in (True, "512", 512.0, None):
        with pytest.raises(UsageError) as ei:
            el.fused_mqa_topk_min_keys(bad, calibration=cal)
        assert str(ei.value) == f"topk: must be a positive int, got {bad!r}"


def test_two_calibration_files_with_the_same_size_and_time_are_not_confused(tmp_path):
    """Bug class: a calibration cache keyed without the file's path (another
    file with the same size and modification time would be served)."""
    a = _write_cal(tmp_path / "a.json", min_keys={"512": 1111, "1024": 1111, "2048": 1111})
    b = _write_cal(tmp_path / "b.json", min_keys={"512": 2222, "1024": 2222, "2048": 2222})
    for p in (a, b):
        import os
        os.utime(p, ns=(10**18, 10**18))
    assert a.stat().st_size == b.stat().st_size
    assert el.load_calibration(a)["min_keys"][512] == 1111
    assert el.load_calibration(b)["min_keys"][512] == 2222


def test_calibration_field_messages_are_exact():
    """Bug class: messages that lose the field name or garble the list of missing topks."""
    def msg(doc):
        with pytest.raises(UsageError) as ei:
            el.validate_calibration(doc, "c.json")
        return str(ei.value)

    mk = {"512": 1, "1024": 1, "2048": 1}
    assert msg({"format": 1, "min_keys": {**mk, "512": -4}}) == \
        "calibration file c.json: min_keys['512'] must be a positive integer, got -4"
    assert msg({"format": 1, "min_keys": {"512": 1}}) == "calibration file c.json: min_keys lacks topk 1024, 2048"
    assert msg({"format": 1, "min_keys": mk, "block_rows": 0}) == \
        "calibration file c.json: 'block_rows' must be a positive integer, got 0"
