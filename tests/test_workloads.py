"""Generators (every layout x dist), recorded files (round trips and every
malformed-file error) and TOML case lists."""
from __future__ import annotations

import pickle

import pytest
import torch
from safetensors.torch import save_file

from mqa_topk_cli.errors import ContractError, UsageError
from mqa_topk_cli.reference import assemble_reference_logits
from mqa_topk_cli.resources import config_path
from mqa_topk_cli.workloads import (
    DISTS,
    LAYOUTS,
    Workload,
    describe_workload,
    load_workload,
    load_workload_config,
    make_workload,
    record,
    save_workload,
    workload_from_case,
)

FP8 = torch.float8_e4m3fn


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                                                     b.contiguous().view(torch.uint8))


def _same(w1: Workload, w2: Workload) -> bool:
    return all(_bits_equal(a, b) for a, b in zip(w1.tensors().values(), w2.tensors().values()))


# --------------------------------------------------------------------------- generators

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dist", DISTS)
def test_every_layout_and_dist_is_valid_and_reproducible(layout, dist):
    kw = dict(layout=layout, rows=67, keys=1001, topk=512, dist=dist, seed=5)
    w = make_workload(**kw)
    w.validate()
    assert (w.q.dtype, w.k.dtype, w.scales.dtype, w.weights.dtype, w.starts.dtype, w.ends.dtype) == (
        FP8, FP8, torch.float32, torch.float32, torch.int32, torch.int32)
    assert w.q.shape == (67, 32, 128) and w.k.shape == (1001, 128) and w.weights.shape == (67, 32)
    assert w.rows == 67 and w.keys == 1001 and w.topk == 512 and w.seed == 5
    assert bool(torch.isfinite(w.q.float()).all()) and bool(torch.isfinite(w.k.float()).all())
    assert bool((w.scales > 0).all()) and bool(torch.isfinite(w.weights).all())
    assert bool((w.starts >= 0).all()) and bool((w.ends >= w.starts).all()) and bool((w.ends <= w.keys).all())
    assert w.visible_pairs == int((w.ends - w.starts).sum()) and w.flops == 8192 * w.visible_pairs
    assert w.q.float().abs().max() > 0 and w.k.float().abs().max() > 0
    assert _same(w, make_workload(**kw))  # same seed -> same bits
    other = make_workload(**{**kw, "seed": 6})
    assert not _bits_equal(w.q, other.q)


def test_layout_ranges():
    c = make_workload("causal", rows=5, keys=20, topk=512)
    assert c.starts.tolist() == [0] * 5 and c.ends.tolist() == [16, 17, 18, 19, 20]
    f = make_workload("full", rows=3, keys=20, topk=512)
    assert f.starts.tolist() == [0] * 3 and f.ends.tolist() == [20] * 3
    r = make_workload("ragged", rows=None, keys=None, topk=512, key_lengths=[5, 1, 10], row_lengths=[2, 1, 3])
    # request i owns keys [off_i, off_i + c_i); its j-th row sees [off_i, off_i + c_i - q_i + j + 1)
    assert r.rows == 6 and r.keys == 16
    assert r.starts.tolist() == [0, 0, 5, 6, 6, 6]
    assert r.ends.tolist() == [4, 5, 6, 14, 15, 16]
    rr = make_workload("ragged", rows=100, keys=5000, topk=512, requests=6, seed=1)
    assert len(set(rr.starts.tolist())) == 6
    assert rr.describe()["rows"] == 100


def test_unaligned_starts():
    w = make_workload("ragged", rows=200, keys=20000, topk=1024, requests=4, unaligned_starts=True, seed=2)
    base = make_workload("ragged", rows=200, keys=20000, topk=1024, requests=4, seed=2)
    assert bool((w.starts > base.starts).any())
    assert bool((w.starts % 16 != 0).all())  # no start on a 16-key boundary
    c = make_workload("causal", rows=3, keys=20, topk=512, unaligned_starts=True)
    assert bool((c.starts % 16 != 0).all()) and bool((c.starts < c.ends).all())
    one = make_workload("full", rows=3, keys=1, topk=512, unaligned_starts=True)
    assert one.starts.tolist() == [0, 0, 0]  # no room: the row keeps its key
    assert bool((w.ends == base.ends).all()) and bool((w.ends - w.starts >= 1).all())


def test_awkward_sizes():
    for kw in (dict(layout="causal", rows=1, keys=1), dict(layout="full", rows=3, keys=1),
               dict(layout="ragged", rows=1, keys=1), dict(layout="causal", rows=1023, keys=1023)):
        w = make_workload(topk=2048, **kw)
        w.validate()
        assert w.rows == kw["rows"] and w.keys == kw["keys"]


def _boundary_stats(w):
    """Per row with n > k: (keys tied at the k-th value, how many of them the top-k takes)."""
    logits = assemble_reference_logits(w)
    out = []
    for r in range(w.rows):
        row = logits[r, int(w.starts[r]):int(w.ends[r])]
        if row.numel() <= w.topk:
            continue
        kth = row.topk(w.topk).values[-1]
        tied = int((row == kth).sum())
        out.append((tied, w.topk - int((row > kth).sum())))
    return out


def test_ties_produce_hundreds_to_thousands_of_exact_ties_at_the_boundary():
    w = make_workload("causal", rows=24, keys=4096, topk=512, dist="ties", seed=0)
    stats = _boundary_stats(w)
    assert len(stats) == 24
    assert min(t for t, _ in stats) >= 500  # keys sharing the k-th value
    assert min(c for _, c in stats) >= 100  # ... of which the top-k takes some
    assert min(t - c for t, c in stats) >= 100  # ... and leaves some out
    big = make_workload("causal", rows=4, keys=16384, topk=2048, dist="ties", seed=1)
    assert min(t for t, _ in _boundary_stats(big)) >= 2000


def test_ties_whole_rows_and_near_ties():
    w = make_workload("ragged", rows=20, keys=3000, topk=512, dist="ties", seed=0, tie_mode="whole")
    logits = assemble_reference_logits(w)
    for r in range(w.rows):
        row = logits[r, int(w.starts[r]):int(w.ends[r])]
        assert torch.unique(row).numel() == 1 and float(row[0]) > 0
    n = make_workload("causal", rows=8, keys=4096, topk=512, dist="ties", seed=0, near_ties=True)
    logits = assemble_reference_logits(n)
    for r in range(n.rows):
        row = logits[r, :int(n.ends[r])]
        kth = row.topk(512).values[-1]
        near = row[(row - kth).abs() <= 2e-3 * kth]
        assert near.numel() >= 1000  # one coarse-histogram bin holds > 1000 candidates
        assert torch.unique(near).numel() >= 50  # ... that are not all equal
    with pytest.raises(UsageError, match="tie_mode"):
        make_workload("causal", rows=2, keys=600, topk=512, dist="ties", tie_mode="sometimes")


def test_short_rows_cover_the_edge_lengths():
    for topk in (512, 2048):
        w = make_workload("full", rows=40, keys=3000, topk=topk, dist="short_rows", seed=3)
        n = set((w.ends - w.starts).tolist())
        assert {0, 1, topk - 1, topk, topk + 1} <= n or topk + 1 > 3000
        assert {0, 1}.issubset(n) and (min(topk, 3000)) in n
    w = make_workload("full", rows=16, keys=3000, topk=2048, dist="short_rows", seed=3)
    n = (w.ends - w.starts).tolist()
    assert {0, 1, 2047, 2048, 2049} <= set(n)
    assert any(x % 16 for x in w.starts.tolist())


def test_value_distributions_do_what_they_say():
    z = make_workload("causal", rows=4, keys=600, topk=512, dist="zero_weights")
    lz = assemble_reference_logits(z)
    assert bool((lz[torch.isfinite(lz)] == 0).all())
    ng = make_workload("causal", rows=4, keys=600, topk=512, dist="negative_weights")
    ln = assemble_reference_logits(ng)
    assert bool((ln[torch.isfinite(ln)] <= 0).all())
    rs = make_workload("causal", rows=8, keys=2000, topk=512, dist="relu_saturated")
    lr = assemble_reference_logits(rs)
    fin = lr[torch.isfinite(lr)]
    assert float((fin == 0).float().mean()) >= 0.8 and bool((fin > 0).any())
    ri = make_workload("full", rows=8, keys=4000, topk=512, dist="rising")
    li = assemble_reference_logits(ri)
    assert bool((li[:, 3000:].mean(1) > 2 * li[:, :1000].mean(1)).all())
    d = make_workload("causal", rows=16, keys=4000, topk=512, dist="dsa", seed=1)
    ld = assemble_reference_logits(d)
    top = ld.topk(512, dim=1).indices
    sinks_in_top = (top < 4).sum(1)
    assert float(sinks_in_top.float().mean()) >= 3  # sink keys rank in the top-k
    diag = d.ends.long() - 1
    near_diag = ((top - diag[:, None]).abs() < 32).sum(1)
    assert float(near_diag.float().mean()) >= 8  # locality: keys near the diagonal are over-represented


def test_generator_argument_errors():
    with pytest.raises(UsageError, match="layout"):
        make_workload("diagonal", rows=2, keys=10, topk=512)
    with pytest.raises(UsageError, match="dist"):
        make_workload("causal", rows=2, keys=10, topk=512, dist="uniform")
    with pytest.raises(UsageError, match="topk"):
        make_workload("causal", rows=2, keys=10, topk=100)
    with pytest.raises(UsageError, match="bogus"):
        make_workload("causal", rows=2, keys=10, topk=512, bogus=1)
    with pytest.raises(UsageError, match="rows"):
        make_workload("causal", rows=11, keys=10, topk=512)
    with pytest.raises(UsageError, match="keys"):
        make_workload("full", rows=1, keys=0, topk=512)
    with pytest.raises(UsageError, match="row_lengths"):
        make_workload("ragged", rows=None, keys=None, topk=512, key_lengths=[3], row_lengths=[4])
    with pytest.raises(UsageError, match="requests"):
        make_workload("causal", rows=2, keys=10, topk=512, requests=2)


def test_to_describe_and_validate(tiny):
    d = tiny.describe()
    for key in ("rows", "keys", "topk", "n_min", "n_mean", "n_max", "rows_n_lt_topk", "visible_pairs",
                "scales_dtype", "bytes"):
        assert key in d
    assert d["n_min"] == 688 and d["n_max"] == 700 and d["rows_n_lt_topk"] == 0 and d["scales_dtype"] == "float32"
    assert tiny.to("cpu").device.type == "cpu"
    bad = Workload(tiny.q, tiny.k, tiny.scales, tiny.weights, tiny.starts, tiny.ends + 1, 512)
    with pytest.raises(ContractError, match="^ends"):
        bad.validate()
    with pytest.raises(ContractError, match="^topk"):
        Workload(tiny.q, tiny.k, tiny.scales, tiny.weights, tiny.starts, tiny.ends, 500).validate()


# --------------------------------------------------------------------------- recorded files

@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_round_trip(tmp_path, suffix, make):
    w = make(layout="ragged", rows=9, keys=900, topk=1024, dist="gaussian", seed=7, unaligned_starts=True)
    p = save_workload(w, tmp_path / f"w{suffix}")
    back = load_workload(p)
    assert _same(w, back) and back.topk == 1024 and back.seed == 7 and back.name == w.name
    d = describe_workload(p)
    assert d["format"] == suffix[1:] and d["scales_format"] == "fp32" and d["rows"] == 9 and d["keys"] == 900
    assert d["file_bytes"] == p.stat().st_size


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_record_with_ue8m0_scales_and_int64_ranges(tmp_path, suffix, tiny):
    e = torch.randint(120, 135, (tiny.keys,), dtype=torch.int32)
    ue8m0 = e.to(torch.uint8)[:, None].repeat(1, 4).contiguous()
    p = record(tmp_path / f"rec{suffix}", tiny.q, tiny.k, ue8m0, tiny.weights, tiny.starts.long(), tiny.ends.long(),
               512, name="mine")
    back = load_workload(p)
    assert torch.equal(back.scales, torch.exp2(e.double() - 127).float())
    assert back.starts.dtype == torch.int32 and back.name == "mine" and back.topk == 512
    assert describe_workload(p)["scales_format"] == "ue8m0"
    with pytest.raises(ContractError, match="^weights"):
        record(tmp_path / "bad.pt", tiny.q, tiny.k, tiny.scales, tiny.weights[:, :16], tiny.starts, tiny.ends, 512)
    with pytest.raises(ContractError, match="^topk"):
        record(tmp_path / "bad.pt", tiny.q, tiny.k, tiny.scales, tiny.weights, tiny.starts, tiny.ends, 4096)


def test_safetensors_fp8_is_native_and_uint8_fallback_loads(tmp_path, tiny):
    from safetensors import safe_open

    p = save_workload(tiny, tmp_path / "w.safetensors")
    with safe_open(str(p), framework="pt") as f:
        assert f.get_slice("q").get_dtype() == "F8_E4M3"
        assert f.metadata()["topk"] == "512"
    # a file written by a safetensors without float8: uint8 views plus a flag
    t = {k: v for k, v in tiny.tensors().items()}
    t["q"], t["k"] = tiny.q.view(torch.uint8), tiny.k.view(torch.uint8)
    save_file(t, str(tmp_path / "u8.safetensors"), metadata={"topk": "512", "fp8_as_uint8": "q,k"})
    assert _same(load_workload(tmp_path / "u8.safetensors"), tiny)
    save_file(t, str(tmp_path / "u8noflag.safetensors"), metadata={"topk": "512"})
    with pytest.raises(UsageError, match="q: expected dtype float8_e4m3fn, got uint8"):
        load_workload(tmp_path / "u8noflag.safetensors")


def _tensors(w):
    return {k: v.clone() for k, v in w.tensors().items()}


def _write(tmp_path, name, tensors, meta=None, fmt="pt"):
    p = tmp_path / f"{name}.{fmt}"
    meta = {"topk": "512"} if meta is None else meta
    if fmt == "pt":
        torch.save({**tensors, **meta}, p)
    else:
        save_file(tensors, str(p), metadata=meta)
    return p


def _expect(p, *needles):
    with pytest.raises(UsageError) as ei:
        load_workload(p)
    msg = str(ei.value)
    assert str(p) in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_missing_and_unreadable_files(tmp_path):
    _expect(tmp_path / "nope.pt", "no such file")
    (tmp_path / "garbage.pt").write_bytes(b"\x80\x02garbage that is not a pickle at all" * 3)
    _expect(tmp_path / "garbage.pt", "corrupt")
    (tmp_path / "garbage.safetensors").write_bytes(b"not a workload at all")
    _expect(tmp_path / "garbage.safetensors", "corrupt")
    (tmp_path / "garbage.bin").write_bytes(b"\x00\x01\x02 random bytes")
    _expect(tmp_path / "garbage.bin", "not a recognized workload format")
    (tmp_path / "dir.pt").mkdir()
    _expect(tmp_path / "dir.pt", "not a regular file")


def test_truncated_files(tmp_path, tiny):
    for fmt in ("pt", "safetensors"):
        p = save_workload(tiny, tmp_path / f"full.{fmt}")
        cut = tmp_path / f"cut.{fmt}"
        cut.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        _expect(cut, "corrupt")


def test_pickle_with_objects_is_refused(tmp_path, tiny):
    class Evil:
        def __reduce__(self):
            return (print, ("this must never run",))

    p = tmp_path / "evil.pt"
    torch.save({**_tensors(tiny), "topk": 512, "payload": Evil()}, p)
    _expect(p, "refusing to unpickle")
    raw = tmp_path / "raw.pt"
    with open(raw, "wb") as f:
        pickle.dump({"q": 1, "payload": Evil()}, f, protocol=2)
    with pytest.raises(UsageError, match="raw.pt"):
        load_workload(raw)
    torch.save(tiny.q, tmp_path / "just_a_tensor.pt")
    _expect(tmp_path / "just_a_tensor.pt", "expected a dict")


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
@pytest.mark.parametrize("field", ["q", "k", "scales", "weights", "starts", "ends"])
def test_missing_tensor(tmp_path, tiny, fmt, field):
    t = _tensors(tiny)
    del t[field]
    _expect(_write(tmp_path, f"no_{field}", t, fmt=fmt), f"{field}: missing tensor")


@pytest.mark.parametrize("field,dtype,needle", [
    ("q", torch.float32, "q: expected dtype float8_e4m3fn"),
    ("k", torch.bfloat16, "k: expected dtype float8_e4m3fn"),
    ("scales", torch.float16, "scales: expected float32"),
    ("weights", torch.float64, "weights: expected dtype float32"),
    ("starts", torch.float32, "starts: expected dtype int32"),
    ("ends", torch.int16, "ends: expected dtype int32"),
])
def test_wrong_dtype(tmp_path, tiny, field, dtype, needle):
    t = _tensors(tiny)
    t[field] = t[field].to(torch.float32).to(dtype)
    _expect(_write(tmp_path, f"dtype_{field}", t), needle)


@pytest.mark.parametrize("field,make_bad,needle", [
    ("q", lambda t: t[:, :24], "q: expected shape [rows, heads, 128] with heads 16, 32 or 64, got [13, 24, 128]"),
    ("q", lambda t: t[:, :, :64], "q: expected shape [rows, heads, 128] with heads 16, 32 or 64, got [13, 32, 64]"),
    ("weights", lambda t: torch.cat([t, t], 1),
     "weights: expected shape [rows, heads] = [13, 32] (the heads of q), got [13, 64]"),
    ("k", lambda t: t[:, :64].contiguous(), "k: expected shape [keys, 128]"),
    ("scales", lambda t: torch.cat([t, t[:1]]), "scales: expected shape [keys] = [700]"),
    ("scales", lambda t: torch.full((t.shape[0], 3), 127, dtype=torch.uint8), "scales: UE8M0 scales must have shape"),
    ("weights", lambda t: t[:, :31].contiguous(), "weights: expected shape [rows, heads] = [13, 32]"),
    ("starts", lambda t: t[:5], "starts: expected shape [rows] = [13]"),
    ("ends", lambda t: t[None], "ends: expected shape [rows] = [13]"),
])
def test_wrong_shape(tmp_path, tiny, field, make_bad, needle):
    t = _tensors(tiny)
    t[field] = make_bad(t[field]).contiguous()
    _expect(_write(tmp_path, f"shape_{field}", t), needle)


@pytest.mark.parametrize("change,needle", [
    (lambda t: t["ends"].add_(1), "ends: must be <= keys = 700"),
    (lambda t: t["starts"].sub_(1), "starts: must be >= 0"),
    (lambda t: t["starts"].copy_(t["ends"] + 1), "ends: must be >= starts"),
    (lambda t: t["scales"].__setitem__(3, 0.0), "scales: must be > 0"),
    (lambda t: t["scales"].__setitem__(3, float("nan")), "scales: contains NaN"),
    (lambda t: t["weights"].__setitem__((1, 1), float("inf")), "weights: contains NaN or inf"),
    (lambda t: t["q"].view(torch.uint8).__setitem__((0, 0, 0), 0x7F), "q: contains NaN"),
])
def test_bad_values(tmp_path, tiny, change, needle):
    t = _tensors(tiny)
    change(t)
    _expect(_write(tmp_path, "bad_values", t), needle)


def test_bad_ue8m0_scales(tmp_path, tiny):
    t = _tensors(tiny)
    s = torch.full((tiny.keys, 4), 127, dtype=torch.uint8)
    s[5, 2] = 128
    t["scales"] = s
    _expect(_write(tmp_path, "ue8m0", t), "scales:", "four bytes")


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
@pytest.mark.parametrize("meta,needle", [
    ({}, "topk: missing"),
    ({"topk": "100"}, "topk: must be one of"),
    ({"topk": "many"}, "topk: expected an int"),
    ({"topk": "512", "seed": "x"}, "seed: expected an int"),
])
def test_bad_topk_metadata(tmp_path, tiny, fmt, meta, needle):
    _expect(_write(tmp_path, "meta", _tensors(tiny), meta, fmt), needle)


def test_pt_topk_as_bool_is_rejected(tmp_path, tiny):
    _expect(_write(tmp_path, "boolk", _tensors(tiny), {"topk": True}), "topk: expected an int")


def test_save_needs_a_known_suffix(tmp_path, tiny):
    with pytest.raises(UsageError, match="suffix"):
        save_workload(tiny, tmp_path / "w.npz")


# --------------------------------------------------------------------------- configs

def test_shipped_verify_config():
    cases = load_workload_config(config_path("verify"))
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)) >= 20
    dists = {c["dist"] for c in cases}
    assert dists == set(DISTS)
    assert {c["topk"] for c in cases} == {512, 1024, 2048}
    assert any(c["keys"] == 1 for c in cases) and any(c["rows"] % 64 and c["rows"] > 64 for c in cases)
    assert any(c.get("unaligned_starts") for c in cases) and any(c.get("tie_mode") == "whole" for c in cases)
    for c in cases:
        assert c["rows"] <= 1024 and c["keys"] <= 1 << 22
        if c["rows"] * c["keys"] <= 200_000:  # build the small ones here
            w = workload_from_case(c)
            w.validate()
            assert (w.rows, w.keys, w.topk) == (c["rows"], c["keys"], c["topk"])


def _cfg(tmp_path, text, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = 'name = "a"\nlayout = "causal"\nrows = 4\nkeys = 600\ntopk = 512\n'


@pytest.mark.parametrize("body,needle", [
    ("this is = not [ toml", "not valid TOML"),
    ("[other]\nx = 1\n", "unknown table"),
    ("", "no [[case]]"),
    ("[[case]]\n" + GOOD + "colour = 'red'\n", "colour: unknown field"),
    ("[[case]]\n" + GOOD.replace('"causal"', '"diag"'), "layout: must be one of"),
    ("[[case]]\n" + GOOD.replace("topk = 512\n", ""), "topk: missing"),
    ("[[case]]\n" + GOOD.replace("topk = 512", "topk = 7"), "topk: must be one of"),
    ("[[case]]\n" + GOOD.replace("rows = 4", "rows = 4000"), "rows: the causal layout needs rows <= keys"),
    ("[[case]]\n" + GOOD.replace("keys = 600", 'keys = "many"'), "keys: expected a positive integer"),
    ("[[case]]\n" + GOOD + "dist = 'uniform'\n", "dist: must be one of"),
    ("[[case]]\n" + GOOD + "seed = -1\n", "seed: expected a non-negative integer"),
    ("[[case]]\n" + GOOD + "[[case]]\n" + GOOD, "duplicate case name"),
])
def test_malformed_configs(tmp_path, body, needle):
    p = _cfg(tmp_path, body)
    with pytest.raises(UsageError) as ei:
        load_workload_config(p)
    assert str(p) in str(ei.value) and needle in str(ei.value), str(ei.value)
    with pytest.raises(UsageError, match="no such config"):
        load_workload_config(tmp_path / "missing.toml")


def test_config_defaults_options_and_recorded_files(tmp_path, tiny):
    save_workload(tiny, tmp_path / "rec.safetensors")
    p = _cfg(tmp_path, '[defaults]\ntopk = 1024\nseed = 3\n\n[[case]]\nname = "r"\nlayout = "ragged"\nrows = 10\n'
                       'keys = 2000\nrequests = 2\nunaligned_starts = true\n\n[[case]]\nfile = "rec.safetensors"\n'
                       '\n[[case]]\nlayout = "ragged"\ntopk = 512\nkey_lengths = [600, 700]\nrow_lengths = [3, 4]\n')
    c1, c2, c3 = load_workload_config(p)
    assert c1["topk"] == 1024 and c1["seed"] == 3 and c1["requests"] == 2
    w1 = workload_from_case(c1)
    assert w1.topk == 1024 and w1.rows == 10 and len(set(w1.starts.tolist())) > 2
    w2 = workload_from_case(c2)
    assert _same(w2, tiny) and c2["name"] == "rec"
    assert (c3["rows"], c3["keys"]) == (7, 1300)
    assert workload_from_case(c3).keys == 1300
