"""Native per-row top-k (``top_k_per_row_prefill`` on CUDA) against an exact,
deterministic reference: the top-k by (value desc, index asc), with -0.0 and
+0.0 the same value. Index sets must agree EXACTLY (ties included), the -1
padding count must be exact, reruns and per-row launches bitwise identical.
"""
from __future__ import annotations

import pytest
import torch

from mqa_topk_cli import ops
from mqa_topk_cli.contract import MAX_KEYS, TOPKS

pytestmark = pytest.mark.gpu

IDX_BITS = 22  # indices < MAX_KEYS = 2**22
assert MAX_KEYS == 1 << IDX_BITS


@pytest.fixture(scope="module")
def dev():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    ext = ops._native()
    if not hasattr(ext, "topk_per_row"):
        pytest.fail("the extension has no topk_per_row: the native top-k kernel is not built/registered")
    return torch.device("cuda")


# ---------------------------------------------------------------------------
# Reference


def reference_sets(logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, topk: int) -> list[torch.Tensor]:
    """Per row: the sorted (ascending) int64 indices, relative to start, of the
    min(topk, n) largest logits of [start, end) by (value desc, index asc).

    Exact and tie-free: one int64 composite key per element,
    order_key(value) << 22 | (2**22 - 1 - index), ranked with torch.topk."""
    rows, width = logits.shape
    if rows == 0:
        return []
    dev = logits.device
    s = starts.to(torch.int64)[:, None]
    e = ends.to(torch.int64)[:, None]
    n = (e - s).squeeze(1).cpu()
    if width == 0:
        return [torch.empty(0, dtype=torch.int64) for _ in range(rows)]
    col = torch.arange(width, device=dev, dtype=torch.int64)
    inside = (col >= s) & (col < e)
    x = logits.to(torch.float32).contiguous()
    x = torch.where(x == 0, torch.zeros_like(x), x)  # -0.0 -> +0.0
    bits = x.view(torch.int32).to(torch.int64)
    key = torch.where(bits >= 0, bits + (1 << 31), -1 - bits)  # order-preserving, in [0, 2**32)
    rel = (col - s).clamp(0, (1 << IDX_BITS) - 1)
    comp = key * (1 << IDX_BITS) + ((1 << IDX_BITS) - 1 - rel)
    comp = torch.where(inside, comp, torch.full_like(comp, -1))
    kk = min(topk, width)
    top = torch.topk(comp, kk, dim=1).values.cpu()
    out = []
    for r in range(rows):
        m = min(topk, int(n[r]))
        idx = ((1 << IDX_BITS) - 1) - (top[r, :m] % (1 << IDX_BITS))
        out.append(idx.sort().values)
    return out


def run_topk(logits, starts, ends, topk, poison=-7):
    out = torch.full((logits.shape[0], topk), poison, dtype=torch.int32, device=logits.device)
    ops.top_k_per_row_prefill(logits, starts, ends, out)
    return out


def assert_exact(out, logits, starts, ends, topk, what=""):
    ref = reference_sets(logits, starts, ends, topk)
    out_c = out.cpu().to(torch.int64)
    n = (ends.to(torch.int64) - starts.to(torch.int64)).cpu()
    for r in range(logits.shape[0]):
        m = min(topk, int(n[r]))
        row = out_c[r]
        pad = int((row == -1).sum())
        assert pad == topk - m, f"{what} row {r} (n={int(n[r])}): {pad} entries of -1, expected {topk - m}"
        valid = row[row != -1]
        assert valid.numel() == m, f"{what} row {r}: {valid.numel()} valid entries, expected {m}"
        got = valid.sort().values
        if not torch.equal(got, ref[r]):
            bad = sorted(set(got.tolist()) ^ set(ref[r].tolist()))[:8]
            raise AssertionError(f"{what} row {r} (n={int(n[r])}, k={topk}): index set differs, e.g. {bad}")


def check(logits, starts, ends, topk, what=""):
    """Runs twice (different poison), checks exactness, bitwise reruns and unchanged inputs."""
    before = logits.clone()
    out1 = run_topk(logits, starts, ends, topk, poison=-7)
    out2 = run_topk(logits, starts, ends, topk, poison=-3)
    assert torch.equal(logits.view(torch.int32), before.view(torch.int32)), f"{what}: logits modified"
    assert torch.equal(out1, out2), f"{what}: reruns differ"
    assert_exact(out1, logits, starts, ends, topk, what)
    return out1


# ---------------------------------------------------------------------------
# Row generators (CPU, seeded)


def gen_row(kind: str, n: int, k: int, g: torch.Generator) -> torch.Tensor:
    if n == 0:
        return torch.empty(0)
    if kind == "gauss":
        return torch.randn(n, generator=g)
    if kind == "equal":
        return torch.full((n,), 1.5)
    if kind == "zeros":  # +0.0 and -0.0 mixed: one value
        sign = torch.randint(0, 2, (n,), generator=g).bool()
        return torch.where(sign, torch.tensor(0.0), torch.tensor(-0.0))
    if kind == "few":  # five distinct values
        return torch.randint(-2, 3, (n,), generator=g).float()
    if kind == "boundary_ties":  # k/2 large values, up to 5000 ties at 0.5 straddling the k-th, rest below
        x = -1.0 - torch.rand(n, generator=g)
        big = min(n, k // 2)
        ties = min(n - big, 5000)
        x[:big] = 2.0 + torch.rand(big, generator=g)
        x[big:big + ties] = 0.5
        return x[torch.randperm(n, generator=g)]
    if kind == "ninf":  # mostly -inf: fewer finite values than k, the rest ties at -inf
        x = torch.full((n,), float("-inf"))
        pos = torch.randint(0, n, (min(n, 100),), generator=g)
        x[pos] = torch.randn(pos.numel(), generator=g)
        return x
    if kind == "extreme":
        vals = torch.tensor([3e38, -3e38, float("inf"), float("-inf"), 1e-40, -1e-40, 0.0, -0.0,
                             1e-45, -1e-45, 1.0, -1.0], dtype=torch.float32)
        return vals[torch.randint(0, vals.numel(), (n,), generator=g)]
    if kind == "rising":
        return torch.arange(n, dtype=torch.float32)
    if kind == "falling":
        return torch.arange(n, 0, -1, dtype=torch.float32)
    if kind == "band10":  # 1024 adjacent floats: one coarse bin, ties resolved at the full key
        return 1.0 + torch.randint(0, 1024, (n,), generator=g).float() * 2.0 ** -23
    if kind == "band21":  # 2M adjacent floats: one coarse bin, resolved by the second level
        return 1.0 + torch.randint(0, 1 << 21, (n,), generator=g).float() * 2.0 ** -23
    if kind == "negband":
        return -(1.0 + torch.randint(0, 300, (n,), generator=g).float() * 2.0 ** -23)
    if kind == "relu":  # 95 % exact zeros (relu-saturated)
        x = torch.randn(n, generator=g).abs()
        return torch.where(torch.rand(n, generator=g) < 0.05, x, torch.zeros(()))
    if kind == "relu_sparse":  # fewer positives than k: zeros (+/-) decide by index
        x = torch.randn(n, generator=g).abs()
        z = torch.where(torch.rand(n, generator=g) < 0.5, torch.tensor(0.0), torch.tensor(-0.0))
        return torch.where(torch.rand(n, generator=g) < 0.005, x, z)
    if kind == "negative":
        return -torch.rand(n, generator=g) * 100.0
    raise ValueError(kind)


KINDS = ["gauss", "equal", "zeros", "few", "boundary_ties", "ninf", "extreme", "rising", "falling",
         "band10", "band21", "negband", "relu", "relu_sparse", "negative"]


def make_batch(kind, ns, k, width, g, *, ld_pad=0, col_offset=0):
    """Rows of the given lengths at random (mostly unaligned) starts inside a
    [rows, width] view at column col_offset of a [rows, width + ld_pad]
    storage (row stride width + ld_pad). Outside [start, end) the storage
    holds garbage (NaN, 3e38) that would change the answer if it were read."""
    assert 0 <= col_offset <= ld_pad
    rows = len(ns)
    store = torch.full((rows, width + ld_pad), float("nan"))
    store[:, ::7] = 3e38
    starts = torch.zeros(rows, dtype=torch.int32)
    ends = torch.zeros(rows, dtype=torch.int32)
    for r, n in enumerate(ns):
        st = int(torch.randint(0, width - n + 1, (1,), generator=g)) if width > n else 0
        starts[r], ends[r] = st, st + n
        store[r, col_offset + st:col_offset + st + n] = gen_row(kind, n, k, g)
    return store, starts, ends


def to_dev(store, starts, ends, width, col_offset, dev):
    s = store.to(dev)
    logits = s[:, col_offset:col_offset + width]
    return logits, starts.to(dev), ends.to(dev)


# ---------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("topk", TOPKS)
def test_gaussian_rows_of_many_lengths(dev, topk):
    g = torch.Generator().manual_seed(topk)
    width = 70001
    ns = [0, 1, 3, topk - 1, topk, topk + 1, 2 * topk, 4097, 9001, 32768, 65536, width]
    ns += [int(x) for x in torch.randint(0, width + 1, (20,), generator=g)]
    store, st, en = make_batch("gauss", ns, topk, width, g)
    logits, st, en = to_dev(store, st, en, width, 0, dev)
    check(logits, st, en, topk, "gauss")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("topk", [512, 2048])
def test_adversarial_rows(dev, kind, topk):
    g = torch.Generator().manual_seed(100 * KINDS.index(kind) + topk)
    width = 140001  # > one 128K-index emission segment
    ns = [0, 1, topk - 1, topk, topk + 1, 3000, 9001, 65536 + 3, 131072, 131073, width]
    store, st, en = make_batch(kind, ns, topk, width, g)
    logits, st, en = to_dev(store, st, en, width, 0, dev)
    check(logits, st, en, topk, kind)


@pytest.mark.parametrize("kind", ["gauss", "equal", "boundary_ties", "band10", "rising"])
def test_unaligned_view_with_odd_row_stride(dev, kind):
    """Row stride > width and odd, and a view starting 3 floats into its storage."""
    g = torch.Generator().manual_seed(7)
    width, topk = 20000, 1024
    ns = [0, 5, 1023, 1024, 1025, 4099, 12345, width]
    store, st, en = make_batch(kind, ns, topk, width, g, ld_pad=13, col_offset=3)
    logits, st, en = to_dev(store, st, en, width, 3, dev)
    assert logits.stride(0) == width + 13 and logits.storage_offset() == 3
    check(logits, st, en, topk, f"view/{kind}")


@pytest.mark.parametrize("kind", ["gauss", "equal", "zeros", "rising", "band21"])
def test_long_rows(dev, kind):
    g = torch.Generator().manual_seed(11)
    width, topk = (1 << 20) + 5, 2048
    ns = [1 << 20, (1 << 20) - 3]
    store, st, en = make_batch(kind, ns, topk, width, g)
    logits, st, en = to_dev(store, st, en, width, 0, dev)
    check(logits, st, en, topk, f"long/{kind}")


def test_row_at_the_key_limit(dev):
    g = torch.Generator().manual_seed(12)
    n = MAX_KEYS
    x = torch.randn(n, generator=g)
    x[-5000:] = 10.0  # a tie class at the top, straddling k
    logits = x.to(dev)[None, :]
    st = torch.zeros(1, dtype=torch.int32, device=dev)
    en = torch.full((1,), n, dtype=torch.int32, device=dev)
    check(logits, st, en, 2048, "max-keys")


def test_batch_invariant_and_deterministic(dev):
    """A row's output does not depend on which other rows share the launch."""
    g = torch.Generator().manual_seed(13)
    width, topk = 30000, 512
    rows = []
    for kind in ["gauss", "equal", "boundary_ties", "band10", "relu_sparse", "extreme"]:
        store, st, en = make_batch(kind, [0, 700, 5000, 29999], topk, width, g)
        rows.append((store, st, en))
    store = torch.cat([r[0] for r in rows])
    st = torch.cat([r[1] for r in rows])
    en = torch.cat([r[2] for r in rows])
    logits, st, en = to_dev(store, st, en, width, 0, dev)
    full = check(logits, st, en, topk, "batch")
    for r in range(logits.shape[0]):
        one = run_topk(logits[r:r + 1], st[r:r + 1], en[r:r + 1], topk)
        assert torch.equal(one[0], full[r]), f"row {r}: differs when launched alone"
    for _ in range(3):
        assert torch.equal(run_topk(logits, st, en, topk, poison=-5), full)


def test_padding_is_exact_for_short_rows(dev):
    topk = 2048
    width = 3000
    ns = list(range(0, 2100, 97)) + [2047, 2048, 2049, 3000]
    g = torch.Generator().manual_seed(14)
    store, st, en = make_batch("gauss", ns, topk, width, g)
    logits, st, en = to_dev(store, st, en, width, 0, dev)
    out = check(logits, st, en, topk, "short")
    for r, n in enumerate(ns):
        assert int((out[r] == -1).sum()) == max(0, topk - n)


def test_empty_shapes(dev):
    for rows, width in [(0, 100), (4, 0)]:
        logits = torch.empty((rows, width), device=dev)
        st = torch.zeros(rows, dtype=torch.int32, device=dev)
        en = torch.zeros(rows, dtype=torch.int32, device=dev)
        out = run_topk(logits, st, en, 512)
        assert out.shape == (rows, 512) and bool((out == -1).all())


def test_native_launcher_rejects_bad_output(dev):
    """The C++ launcher checks the contract itself (callers may bypass Python)."""
    ext = ops._native()
    logits = torch.randn(2, 100, device=dev)
    st = torch.zeros(2, dtype=torch.int32, device=dev)
    en = torch.full((2,), 100, dtype=torch.int32, device=dev)
    with pytest.raises(ValueError, match="^output"):
        ext.topk_per_row(logits, st, en, torch.empty((2, 100), dtype=torch.int32, device=dev))
    with pytest.raises(ValueError, match="^output"):
        ext.topk_per_row(logits, st, en, torch.empty((2, 512), dtype=torch.int64, device=dev))
    with pytest.raises(ValueError, match="^logits"):
        ext.topk_per_row(logits.double(), st, en, torch.empty((2, 512), dtype=torch.int32, device=dev))
    with pytest.raises(ValueError, match="^starts"):
        ext.topk_per_row(logits, st.long(), en, torch.empty((2, 512), dtype=torch.int32, device=dev))
