"""workloads.py at its edges: record()'s checks (int32 bounds at == and one
past, non-tensor arguments, values), config errors naming the case, and
Workload.to keeping the labels. Each test's docstring names the bug class."""
from __future__ import annotations

import pytest
import torch

from mqa_topk_cli.errors import ContractError, UsageError
from mqa_topk_cli.workloads import FIELDS, load_workload, load_workload_config, make_workload, record


@pytest.fixture(scope="module")
def w():
    return make_workload("causal", rows=3, keys=600, topk=512, seed=2)


def _args(w, **over):
    a = dict(q=w.q, k=w.k, scales=w.scales, weights=w.weights, starts=w.starts, ends=w.ends)
    a.update(over)
    return a


def _contract(arg, fn, *a, match="", **kw):
    with pytest.raises(ContractError) as ei:
        fn(*a, **kw)
    assert ei.value.arg == arg and match in str(ei.value), str(ei.value)


@pytest.mark.parametrize("field", FIELDS)
def test_record_names_a_non_tensor_argument(tmp_path, w, field):
    """Bug class: an error naming the wrong argument (or none)."""
    _contract(field, record, tmp_path / "x.pt", **_args(w, **{field: 1.5}), topk=512,
              match="expected a torch.Tensor, got float")
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("field,value,match", [
    ("starts", -(2**31), "must be >= 0"),          # fits int32: the range check speaks
    ("starts", -(2**31) - 1, "do not fit int32"),
    ("ends", 2**31 - 1, "must be <= keys"),        # fits int32
    ("ends", 2**31, "do not fit int32"),
])
def test_record_int64_ranges_at_the_int32_bounds(tmp_path, w, field, value, match):
    """Bug class: an off-by-one at the int32 bounds of int64 starts/ends (a
    silent wrap-around would record a different range)."""
    t = getattr(w, field).to(torch.int64).clone()
    t[1] = value
    _contract(field, record, tmp_path / "x.pt", **_args(w, **{field: t}), topk=512, match=match)


def test_record_converts_only_starts_and_ends_from_int64(tmp_path, w):
    """Bug class: converting every int64 argument to int32 (a wrong dtype then
    passes under another name, or gets a misleading message)."""
    _contract("weights", record, tmp_path / "x.pt", **_args(w, weights=w.weights.to(torch.int64)), topk=512,
              match="got torch.int64")
    p = record(tmp_path / "ok.pt", **_args(w, starts=w.starts.long(), ends=w.ends.long()), topk=512, name="n")
    back = load_workload(p)
    assert back.starts.dtype == torch.int32 and torch.equal(back.starts, w.starts) and torch.equal(back.ends, w.ends)
    assert back.name == "n" and back.seed is None and back.topk == 512


@pytest.mark.parametrize("field,bad,match", [
    ("weights", lambda t: t.clone().index_fill_(1, torch.tensor([3]), float("nan")), "weights: contains NaN or inf"),
    ("scales", lambda t: t.clone().index_fill_(0, torch.tensor([5]), 0.0), "scales: must be > 0"),
    ("scales", lambda t: t.clone().index_fill_(0, torch.tensor([5]), float("inf")), "scales: contains NaN or inf"),
    ("scales", lambda t: t.clone().index_fill_(0, torch.tensor([5]), -1.0), "scales: must be > 0"),
    ("q", lambda t: t.view(torch.uint8).clone().index_fill_(0, torch.tensor([0]), 0x7F).view(torch.float8_e4m3fn),
     "q: contains NaN"),
    ("k", lambda t: t.view(torch.uint8).clone().index_fill_(0, torch.tensor([9]), 0xFF).view(torch.float8_e4m3fn),
     "k: contains NaN"),
])
def test_record_checks_the_values(tmp_path, w, field, bad, match):
    """Bug class: recording inputs the kernels would turn into NaN logits."""
    _contract(field, record, tmp_path / "x.safetensors", **_args(w, **{field: bad(getattr(w, field))}), topk=512,
              match=match)
    assert not (tmp_path / "x.safetensors").exists()


def test_record_rejects_ue8m0_exponent_0_and_255(tmp_path, w):
    """Bug class: a UE8M0 scale of 0.0 or inf recorded (SPEC §1: scales > 0)."""
    for e in (0, 255):
        s = torch.full((w.keys, 4), 127, dtype=torch.uint8)
        s[7] = e
        _contract("ue8m0_scales", record, tmp_path / "x.pt", **_args(w, scales=s), topk=512)
    s = torch.full((w.keys, 4), 127, dtype=torch.uint8)
    s[7] = 1
    s[8] = 254
    back = load_workload(record(tmp_path / "ok.pt", **_args(w, scales=s), topk=512))
    assert back.scales[7].item() == 2.0 ** -126 and back.scales[8].item() == 2.0 ** 127 and back.scales[0].item() == 1.0


def test_config_errors_name_the_case_by_name_or_number(tmp_path):
    """Bug class: an error that names the wrong case (or none) in a long config."""
    p = tmp_path / "c.toml"
    ok = 'layout = "full"\nrows = 2\nkeys = 600\ntopk = 512\n'
    p.write_text(f'[[case]]\nname = "first"\n{ok}\n[[case]]\n{ok.replace("topk = 512", "topk = 7")}')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: case #2: topk: must be one of (512, 1024, 2048), got 7"
    p.write_text(f'[[case]]\nname = "first"\n{ok}\n[[case]]\nname = "second"\n{ok.replace("rows = 2", "rows = -1")}')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value).startswith(f"{p}: case second: rows: must be between 1 and ") and \
        str(ei.value).endswith(", got -1")
    p.write_text(f'[[case]]\nname = 5\n{ok}')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: case #1: name: expected a string"


def test_to_keeps_labels_and_moves_every_tensor(w):
    """Bug class: a copy that drops the name/seed/layout/topk or leaves a tensor behind."""
    m = w.to("meta")
    assert all(t.device.type == "meta" for t in m.tensors().values())
    assert (m.name, m.seed, m.layout, m.dist, m.topk) == (w.name, w.seed, w.layout, w.dist, w.topk)
    assert m is not w and w.q.device.type == "cpu"
    c = w.to("cpu")
    assert all(torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
               for a, b in zip(c.tensors().values(), w.tensors().values()))


def test_describe_has_exactly_the_documented_fields(w):
    """Bug class: a renamed or missing key in ``inspect``'s output."""
    d = w.describe()
    assert set(d) == {"name", "layout", "dist", "seed", "rows", "keys", "heads", "topk", "n_min", "n_mean", "n_max",
                      "rows_n_lt_topk", "rows_n_zero", "visible_pairs", "gflop", "scales_dtype", "bytes", "device"}
    assert (d["layout"], d["dist"], d["seed"], d["rows"], d["keys"], d["topk"]) == ("causal", "gaussian", 2, 3, 600, 512)
    assert d["heads"] == 32
    assert (d["n_min"], d["n_max"], d["rows_n_lt_topk"], d["rows_n_zero"]) == (598, 600, 0, 0)
    assert d["n_mean"] == 599.0 and d["visible_pairs"] == 1797 and d["gflop"] == 8192 * 1797 / 1e9
    assert d["device"] == "cpu" and d["bytes"] == 3 * 32 * 128 + 600 * 128 + 600 * 4 + 3 * 32 * 4 + 2 * 3 * 4


@pytest.mark.parametrize("dist", ["rising", "ties"])
def test_queries_lean_on_the_shared_direction(dist):
    """Bug class: a noise term that swamps the shared direction (the scores
    then neither rise nor tie): q = c t + 0.25 N(0, 1) with c >= 0.5 keeps
    cos(q, t) >= 0.5 / sqrt(0.25 + 0.0625) ~ 0.89 (fp8 rounding aside)."""
    r = make_workload("full", rows=6, keys=1000, topk=512, dist=dist, seed=3)
    q = r.q.float()
    t = torch.sign(r.k.float()[-100:].sum(0))  # the sign pattern the keys lean on
    cos = (q @ t) / (q.norm(dim=2) * t.norm())
    assert float(cos.abs().min()) > 0.8


def test_saved_workload_without_labels_loads_as_recorded(tmp_path, w):
    """Bug class: an empty label written as a made-up value."""
    from dataclasses import replace

    p = tmp_path / "x.safetensors"
    from mqa_topk_cli.workloads import save_workload

    save_workload(replace(w, layout="", dist=""), p)
    back = load_workload(p)
    assert back.layout == "recorded" and back.dist == ""
    save_workload(w, p)
    back = load_workload(p)
    assert back.layout == "causal" and back.dist == "gaussian"


@pytest.mark.parametrize("field,dtype,msg", [
    ("weights", torch.float64, "weights: expected dtype float32, got float64"),
    ("starts", torch.float32, "starts: expected dtype int32, got float32"),
    ("ends", torch.int16, "ends: expected dtype int32, got int16"),
    ("scales", torch.float16, "scales: expected float32 [keys] or uint8 [keys, 4] (UE8M0), got float16"),
])
def test_file_dtype_errors_are_exact(tmp_path, w, field, dtype, msg):
    """Bug class: a garbled dtype name in the error (e.g. 'torch.float64' or 'TORCH.')."""
    t = {f: getattr(w, f).clone() for f in FIELDS}
    t[field] = t[field].to(dtype)
    p = tmp_path / "bad.pt"
    torch.save({**t, "topk": 512}, p)
    with pytest.raises(UsageError) as ei:
        load_workload(p)
    assert str(ei.value) == f"{p}: {msg}"


def test_config_case_defaults_and_length_errors(tmp_path):
    """Bug class: a default (layout causal, dist gaussian, seed 0) not applied,
    or a length-list error not naming its case."""
    p = tmp_path / "c.toml"
    p.write_text('[[case]]\nrows = 2\nkeys = 600\ntopk = 512\n')
    (c,) = load_workload_config(p)
    assert (c["layout"], c["dist"], c["seed"], c["name"]) == ("causal", "gaussian", 0, "causal-gaussian-r2-k600-t512")
    p.write_text('[[case]]\nname = "rg"\nlayout = "ragged"\ntopk = 512\nkey_lengths = [600, 700]\nrow_lengths = 3\n')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: case rg: row_lengths: expected a list of integers"
    p.write_text('[[case]]\nname = "rg"\nlayout = "ragged"\ntopk = 512\nkey_lengths = [600, true]\nrow_lengths = [1, 2]\n')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: case rg: key_lengths: expected a list of integers"


def test_unaligned_starts_never_land_on_a_multiple_of_16():
    """Bug class: the one-key nudge off a 16-aligned start going the wrong way
    (a start of 15 shifted by 1 must become 17, not stay 16): 2000 rows
    starting at 15, each with its own random shift."""
    w = make_workload("ragged", rows=None, keys=None, topk=512, key_lengths=[15, 5000], row_lengths=[1, 2000],
                      unaligned_starts=True, seed=0)
    st = w.starts[1:]
    assert bool((st % 16 != 0).all()) and bool((st > 15).all()) and bool((st <= 15 + 255 + 1).all())
    assert bool((st == 17).any())  # some row was nudged up from 16


def test_fp8_conversion_saturates():
    """Bug class: generated values past the e4m3 range not saturating at +-448
    (e4m3fn has no inf; the clamp does not rely on how the cast rounds)."""
    from mqa_topk_cli.workloads import FP8_MAX, _fp8

    x = _fp8(torch.tensor([1000.0, -1000.0, 448.0, 3.0]))
    assert x.dtype == torch.float8_e4m3fn and x.float().tolist() == [448.0, -448.0, 448.0, 3.0] and FP8_MAX == 448.0


def test_make_workload_defaults():
    """Bug class: a default that is not a valid case (the documented defaults: causal, 256 x 4096, top-2048)."""
    d = make_workload()
    assert (d.layout, d.rows, d.keys, d.topk, d.dist, d.seed) == ("causal", 256, 4096, 2048, "gaussian", 0)
    assert d.name == "causal-gaussian-r256-k4096-t2048-s0"


@pytest.mark.parametrize("dist,lo,hi", [
    ("gaussian", -1.0, 1.0), ("ties", 0.0, 1.0), ("rising", 0.0, 1.0), ("relu_saturated", 0.0, 1.0),
    ("negative_weights", -1.0, 0.0), ("dsa", -1.0, 1.0),
])
def test_weights_are_in_the_documented_range(dist, lo, hi):
    """Bug class: a weight term off by orders of magnitude (|N|/32 + 1/1024, sign by dist)."""
    w = make_workload("full", rows=16, keys=600, topk=512, dist=dist, seed=1)
    assert float(w.weights.min()) > lo and float(w.weights.max()) < hi
    if lo == 0.0:  # |N|/32 + 1/1024 (ties: + 1/256) is at least the constant, exactly
        assert float(w.weights.min()) >= (1 / 256 if dist == "ties" else 1 / 1024)
    if hi == 0.0:
        assert float(w.weights.max()) <= -1 / 1024


def test_dsa_sink_count():
    """Bug class: the 'sinks' option ignored: the first ``sinks`` keys share the sink direction."""
    def cos(k, i, j):
        a, b = k[i, 16:].float(), k[j, 16:].float()
        return float(a @ b / (a.norm() * b.norm()))

    d4 = make_workload("full", rows=4, keys=600, topk=512, dist="dsa", seed=1)
    d6 = make_workload("full", rows=4, keys=600, topk=512, dist="dsa", seed=1, sinks=6)
    assert cos(d4.k, 0, 3) > 0.9 and cos(d4.k, 0, 5) < 0.5
    assert cos(d6.k, 0, 5) > 0.9 and cos(d6.k, 0, 7) < 0.5


def test_ragged_only_options_are_refused_for_other_layouts():
    """Bug class: an option that only applies to one layout silently ignored elsewhere."""
    for name, v in (("key_lengths", [10]), ("row_lengths", [2]), ("requests", 2)):
        with pytest.raises(UsageError) as ei:
            make_workload("full", rows=2, keys=10, topk=512, **{name: v})
        assert str(ei.value) == f"{name}: applies to the ragged layout only (layout is 'full')"


def test_int64_ranges_in_a_file_load(tmp_path, w):
    """Bug class: an int32-range check on int64 starts/ends that rejects ordinary values."""
    t = {f: getattr(w, f).clone() for f in FIELDS}
    t["starts"], t["ends"] = t["starts"].long(), t["ends"].long()
    p = tmp_path / "i64.pt"
    torch.save({**t, "topk": 512}, p)
    back = load_workload(p)
    assert back.starts.dtype == torch.int32 and torch.equal(back.ends, w.ends)
    t["ends"][0] = 2**31
    torch.save({**t, "topk": 512}, p)
    with pytest.raises(UsageError, match="ends: values do not fit int32"):
        load_workload(p)


def test_defaults_table_must_be_a_table(tmp_path):
    """Bug class: a malformed [defaults] accepted or reported without the file."""
    p = tmp_path / "c.toml"
    p.write_text('defaults = 3\n[[case]]\nrows = 2\nkeys = 600\ntopk = 512\n')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: [defaults] must be a table"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_workload_without_a_gpu_is_a_usage_error():
    """Bug class: a CUDA request on a CPU machine crashing inside torch instead of one clear line."""
    with pytest.raises(UsageError) as ei:
        make_workload("full", rows=1, keys=1, topk=512, device="cuda")
    assert str(ei.value) == "device: cuda requested but no CUDA GPU is available"


def test_rising_keys_and_scales():
    """Bug class: key noise that swamps the rising direction, or scales outside the documented 0.5 .. 2."""
    r = make_workload("full", rows=2, keys=1000, topk=512, dist="rising", seed=3)
    k = r.k.float()
    t = torch.sign(k[-100:].sum(0))
    cos = (k @ t) / (k.norm(dim=1) * t.norm())
    assert float(cos.min()) > 0.85
    assert r.scales[0].item() == 0.5 and 1.99 < r.scales[-1].item() < 2.0
    assert bool((r.scales[1:] > r.scales[:-1]).all())


def test_near_ties_nudge_both_ways():
    """Bug class: near ties nudged in one direction only (1.0 -> 1.125 or 0.9375, at random)."""
    n = make_workload("full", rows=2, keys=2000, topk=512, dist="ties", seed=0, near_ties=True)
    mags = set(n.k.float().abs().flatten().tolist())
    assert {1.125, 0.9375, 1.0} <= mags


def test_ragged_rows_never_exceed_a_requests_keys():
    """Bug class: giving every request more rows than its keys (q_i <= c_i must hold)."""
    for seed in range(5):
        w = make_workload("ragged", rows=10, keys=12, topk=512, requests=10, seed=seed)
        w.validate()
        assert w.rows == 10 and w.keys == 12 and bool((w.ends > w.starts).all())


def test_file_cases_and_generated_case_defaults(tmp_path):
    """Bug class: a file case without its layout label, a wrong default layout for a
    generated case, or a garbled message for a bad file entry."""
    p = tmp_path / "c.toml"
    (tmp_path / "w.pt").write_bytes(b"")  # the file must exist (issue 13: checked when the config is read)
    p.write_text('[[case]]\nfile = "w.pt"\n')
    (c,) = load_workload_config(p)
    assert c["layout"] == "recorded" and c["name"] == "w" and c["file"] == str(tmp_path / "w.pt")
    p.write_text('[[case]]\nfile = 5\n')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: case #1: file: expected a path string"
    from mqa_topk_cli.workloads import workload_from_case

    w = workload_from_case({"rows": 2, "keys": 600, "topk": 512})
    assert (w.layout, w.dist, w.seed) == ("causal", "gaussian", 0)


def test_file_name_metadata_and_generator_argument_messages(tmp_path, w):
    """Bug class: garbled messages for a bad name in a file or a bad generator argument."""
    t = {f: getattr(w, f).clone() for f in FIELDS}
    p = tmp_path / "n.pt"
    torch.save({**t, "topk": 512, "name": 5}, p)
    with pytest.raises(UsageError) as ei:
        load_workload(p)
    assert str(ei.value) == f"{p}: name: expected a string, got int"
    with pytest.raises(UsageError) as ei:
        make_workload("ragged", rows=None, keys=100, topk=512)
    assert str(ei.value) == "rows/keys: required unless key_lengths and row_lengths are given"
    with pytest.raises(UsageError) as ei:
        make_workload("ragged", rows=2, keys=100, topk=512, requests=0)
    assert str(ei.value) == "requests: must be between 1 and 100 (each request owns at least one key), got 0"


def test_ties_hot_key_share():
    """Bug class: a wrong share of hot keys (about k/2 of the longest row are
    hot, above the tie value), which moves the k-th value off the ties."""
    w = make_workload("causal", rows=4, keys=4096, topk=512, dist="ties", seed=0)
    level = w.k.float().abs()[:, 0]  # every key is level * (+-1, ...)
    hot = int((level >= 1.5).sum())
    assert 150 < hot < 400  # p_hot = 0.5 * 512 / 4096 = 1/16 of 4096 keys = 256 expected


def test_config_seed_and_ragged_sum_messages(tmp_path):
    """Bug class: a bool or a string accepted as a seed, or a garbled mismatch message."""
    p = tmp_path / "c.toml"
    for bad in ("true", '"7"', "1.5"):
        p.write_text(f'[[case]]\nrows = 2\nkeys = 600\ntopk = 512\nseed = {bad}\n')
        with pytest.raises(UsageError) as ei:
            load_workload_config(p)
        assert str(ei.value).startswith(f"{p}: case #1: seed: expected a non-negative integer, got ")
    with pytest.raises(UsageError) as ei:
        make_workload("ragged", rows=5, keys=None, topk=512, key_lengths=[3, 3], row_lengths=[1, 2])
    assert str(ei.value) == "rows: 5 differs from sum(row_lengths) = 3"
    with pytest.raises(UsageError, match="^rows: must be between 1 and "):  # one rule: at least one row
        make_workload("full", rows=0, keys=17, topk=512)
    one = make_workload("full", rows=1, keys=17, topk=512).describe()
    assert (one["rows_n_zero"], one["rows_n_lt_topk"], one["n_min"], one["n_mean"]) == (0, 1, 17, 17.0)


# --------------------------------------------------------------------------- survivor classes of the seed-13 run

def test_a_missing_topk_names_an_unnamed_case_by_number(tmp_path):
    """Bug class: the "topk: missing" error naming no case (or the wrong one) in a long config."""
    p = tmp_path / "c.toml"
    ok = 'layout = "full"\nrows = 2\nkeys = 600\n'
    p.write_text(f'[[case]]\n{ok}topk = 512\n\n[[case]]\n{ok}')
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(ei.value) == f"{p}: case #2: topk: missing"


def test_ragged_length_lists_errors_say_what_is_wrong():
    """Bug class: a ragged config error without its message (a bare UsageError)."""
    with pytest.raises(UsageError) as ei:
        make_workload("ragged", topk=512, key_lengths=[600])
    assert str(ei.value) == "key_lengths/row_lengths: give both (one entry per request)"
    with pytest.raises(UsageError) as ei:
        make_workload("ragged", topk=512, key_lengths=[600, 700], row_lengths=[3])
    assert str(ei.value) == "key_lengths/row_lengths: must be non-empty lists of equal length"


def test_a_pickled_python_object_is_named(tmp_path):
    """Bug class: the refusal to unpickle a non-tensor object not saying which
    object (the GLOBAL that torch's weights-only loader rejected)."""
    import argparse

    p = tmp_path / "w.pt"
    torch.save({"q": argparse.Namespace(a=1)}, p)
    with pytest.raises(UsageError) as ei:
        load_workload(p)
    assert str(ei.value) == (f"{p}: holds Python objects other than tensors and plain values (argparse.Namespace); "
                             f"refusing to unpickle it (workload files are loaded with weights_only=True)")


def test_an_unnamed_config_case_gets_the_generated_name():
    """Bug class: a case without a name given a placeholder instead of the generator's descriptive name."""
    from mqa_topk_cli.workloads import workload_from_case

    w = workload_from_case({"layout": "causal", "rows": 2, "keys": 600, "topk": 512}, "cpu")
    assert w.name == make_workload("causal", rows=2, keys=600, topk=512).name == "causal-gaussian-r2-k600-t512-s0"
    assert workload_from_case({"layout": "causal", "rows": 2, "keys": 600, "topk": 512, "name": "n"}, "cpu").name == "n"


def test_rising_keys_carry_their_own_noise():
    """Bug class: the rising generator's noise (0.1 N(0, 1) per key and
    channel) drawn once and shared by every key: neighbouring keys, whose
    positions differ by 1/keys, then come out (nearly) equal. With noise of
    their own, two keys differ by 0.1 * sqrt(2) * sqrt(2 / pi) ~ 0.11 per
    channel on average; the shared draw gives < 0.01."""
    w = make_workload("full", rows=8, keys=2000, topk=512, dist="rising", seed=0)
    k = w.k.float()
    d = (k[1:] - k[:-1]).abs().mean(1)
    assert float(d.min()) > 0.04 and 0.08 < float(d.mean()) < 0.15


def test_dsa_locality_magnitude_is_drawn_per_row_and_head():
    """Bug class: the dsa generator's locality magnitude (0.5 + U[0, 1) per
    row and head on channels 0..15) drawn per head only and shared by all
    rows: the head-1 / head-0 ratio on a row's largest locality channel is
    then one value for every row instead of spreading over [1/3, 3]."""
    w = make_workload("full", rows=64, keys=2000, topk=512, dist="dsa", seed=0)
    q = w.q.float()[:, :, :16]
    c = q.abs().sum(1).argmax(1)  # per row, its largest locality channel
    v = q[torch.arange(w.rows), :, c]  # [rows, heads]
    ratio = v[:, 1] / v[:, 0]
    assert float(ratio.min()) > 0.3 and float(ratio.max()) < 3.3  # 1/3 .. 3, fp8 rounding aside
    assert float(ratio.std()) > 0.2 and ratio.unique().numel() > 10
