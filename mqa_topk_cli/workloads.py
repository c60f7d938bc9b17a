"""Inputs of the indexer prefill (SPEC §1): generated workloads, recorded ones,
and workload lists as TOML data.

- ``Workload``: the six input tensors plus ``topk`` (and a label); its
  ``heads`` (16, 32 or 64) is the dim 1 of q.
- ``make_workload(layout, rows, keys, topk, dist, seed, device, heads=32, **opts)``: a
  reproducible synthetic workload with q ``[rows, heads, 128]`` and weights
  ``[rows, heads]``. The random numbers come from a
  ``torch.Generator`` seeded by ``seed`` on the target device's type, so a
  (seed, device type) pair always gives the same tensors (CPU and CUDA streams
  differ from each other).
- ``save_workload`` / ``load_workload`` / ``record``: ``.safetensors`` or
  ``.pt`` files. ``.pt`` files are read with ``torch.load(weights_only=True)``:
  a file holding anything but tensors and plain values is refused, never
  unpickled. Every field is checked; errors are ``UsageError`` naming the file
  and the field.
- ``load_workload_config`` / ``workload_from_case``: ``[[case]]`` tables of a
  TOML file (``configs/verify.toml``) as dicts, and a dict to a ``Workload``.
  A case may give ``heads`` or ``model`` (a preset of ``models.py``: its heads,
  and its topk unless the case gives one).

Names: a generated workload's default name (and a config case's, when it
has none) ends in ``-hH`` when its heads H are not 32 (``heads_suffix``), so
32-head names are those of earlier versions. A recorded file's heads come from
its tensors.

Layouts (SPEC §1): ``causal`` (the last R of N tokens: start 0, end N-R+r+1),
``ragged`` (several requests packed: request i owns keys [off_i, off_i+c_i)
and its q_i rows see [off_i, off_i+c_i-q_i+j+1)), ``full`` (every row sees
[0, N)). Option ``unaligned_starts=True`` moves every row's start forward by
1..255 keys to a position that is no multiple of 16 (where the row has room),
keeping start < end.

Distributions (SPEC §4, the workloads that find bugs): see ``DISTS`` and the
``_dist_*`` functions; each states what it provokes.
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from . import checks, contract
from .contract import DEFAULT_HEADS, FP8, HEAD_DIM, SUPPORTED_HEADS, TOPKS
from .errors import ContractError, UsageError

LAYOUTS = checks.LAYOUTS
DISTS = checks.DISTS
#: Largest finite float8_e4m3fn value; generated values are clamped to it.
FP8_MAX = 448.0
#: Tensor fields of a workload file, in order.
FIELDS = ("q", "k", "scales", "weights", "starts", "ends")
FORMAT_TAG = "mqa-topk-workload"
FORMAT_VERSION = "1"

#: Options ``make_workload`` accepts, by what they apply to.
OPTIONS = {
    "requests": "ragged: number of packed requests (default 4, random lengths)",
    "key_lengths": "ragged: explicit key count c_i of each request",
    "row_lengths": "ragged: explicit row count q_i of each request (q_i <= c_i)",
    "unaligned_starts": "any layout: move each row's start forward by 1..255 keys, off any multiple of 16",
    "tie_mode": "ties: 'boundary' (default; the k-th value shared by hundreds to thousands of keys) or 'whole' (every visible key of every row ties)",
    "near_ties": "ties: the tie group becomes thousands of distinct values within 0.1% of each other (one coarse histogram bin)",
    "sinks": "dsa: number of sink keys at the start of each request (default 4)",
}
#: Keys of a config case that are not generator options.
CASE_FIELDS = ("name", "layout", "rows", "keys", "topk", "dist", "seed", "heads", "model", "file", "description",
               "tags")
#: Fields of a config case naming a recorded workload (its shape and values come from the file).
FILE_CASE_FIELDS = ("name", "file", "description", "tags")
#: Values of the ``tie_mode`` option.
TIE_MODES = ("boundary", "whole")
#: The layout or distribution each option applies to.
_OPTION_APPLIES = {"requests": ("layout", "ragged"), "key_lengths": ("layout", "ragged"),
                   "row_lengths": ("layout", "ragged"), "tie_mode": ("dist", "ties"), "near_ties": ("dist", "ties"),
                   "sinks": ("dist", "dsa")}


# --------------------------------------------------------------------------- heads


def heads_suffix(heads: int) -> str:
    """The name suffix of a workload with ``heads`` heads: ``""`` at the
    default 32 (names of earlier versions unchanged), else ``"-hH"``."""
    return "" if int(heads) == DEFAULT_HEADS else f"-h{int(heads)}"


def name_with_heads(name: str, heads: int) -> str:
    """``name`` with ``heads_suffix(heads)`` appended (once)."""
    suffix = heads_suffix(heads)
    return name if not suffix or name.endswith(suffix) else name + suffix


def case_heads_topk(case: dict) -> tuple[int, int]:
    """(heads, topk) of a generator case dict: its own ``heads`` / ``topk``,
    else those of its ``model`` preset, else 32 heads and top-2048.
    ``UsageError`` naming the field when one is bad."""
    model = case.get("model")
    m = None
    if model is not None:
        from .models import get_model

        m = get_model(model, "model")
    heads = case.get("heads", m.heads if m else DEFAULT_HEADS)
    topk = case.get("topk", m.topk if m else 2048)
    return checks.check_heads(heads, "heads"), topk


# --------------------------------------------------------------------------- Workload

@dataclass
class Workload:
    """One prefill chunk's inputs (shapes and dtypes in SPEC §1 / contract.py)."""

    q: torch.Tensor
    k: torch.Tensor
    scales: torch.Tensor
    weights: torch.Tensor
    starts: torch.Tensor
    ends: torch.Tensor
    topk: int
    name: str = ""
    seed: int | None = None
    layout: str = ""
    dist: str = ""

    @property
    def rows(self) -> int:
        return int(self.q.shape[0])

    @property
    def keys(self) -> int:
        return int(self.k.shape[0])

    @property
    def heads(self) -> int:
        """The indexer's heads: dim 1 of q (16, 32 or 64 under the contract)."""
        return int(self.q.shape[1])

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def lengths(self) -> torch.Tensor:
        """n_r = ends - starts, int64 on the workload's device."""
        return self.ends.to(torch.int64) - self.starts.to(torch.int64)

    @property
    def visible_pairs(self) -> int:
        """Sum over rows of n_r (the (row, key) pairs the op computes)."""
        return int(self.lengths.sum()) if self.rows else 0

    @property
    def flop_per_pair(self) -> int:
        """2 * heads * 128 FLOP per visible (row, key) pair (8192 at 32 heads,
        16384 at 64), as DeepGEMM counts its logits."""
        return 2 * self.heads * HEAD_DIM

    @property
    def flops(self) -> int:
        """2 * heads * 128 FLOP per visible pair."""
        return self.flop_per_pair * self.visible_pairs

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f: getattr(self, f) for f in FIELDS}

    def to(self, device) -> "Workload":
        device = torch.device(device)
        return replace(self, **{f: t.to(device) for f, t in self.tensors().items()})

    def validate(self) -> None:
        """Raises ``ContractError`` (naming the argument) unless the op contract holds."""
        contract.check_mqa_inputs(self.q, self.k, self.scales, self.weights, self.starts, self.ends)
        contract.check_topk(self.topk)

    def describe(self) -> dict:
        n = self.lengths.to("cpu")
        has = n.numel() > 0
        return {
            "name": self.name,
            "layout": self.layout,
            "dist": self.dist,
            "seed": self.seed,
            "rows": self.rows,
            "keys": self.keys,
            "heads": self.heads,
            "topk": int(self.topk),
            "n_min": int(n.min()) if has else 0,
            "n_mean": float(n.double().mean()) if has else 0.0,
            "n_max": int(n.max()) if has else 0,
            "rows_n_lt_topk": int((n < int(self.topk)).sum()) if has else 0,
            "rows_n_zero": int((n == 0).sum()) if has else 0,
            "visible_pairs": self.visible_pairs,
            "gflop": self.flops / 1e9,
            "scales_dtype": str(self.scales.dtype).replace("torch.", ""),
            "bytes": self.nbytes,
            "device": str(self.device),
        }


# --------------------------------------------------------------------------- generation

class _Rng:
    """Seeded random numbers on one device (a torch.Generator per workload)."""

    def __init__(self, seed: int, device: torch.device):
        self.device = device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(int(seed))

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float32)

    def rand(self, *shape) -> torch.Tensor:
        return torch.rand(shape, generator=self.gen, device=self.device, dtype=torch.float32)

    def randint(self, low: int, high: int, *shape) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen, device=self.device, dtype=torch.int64)

    def randperm(self, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=self.gen, device=self.device)

    def signs(self, *shape) -> torch.Tensor:
        return self.randint(0, 2, *shape).to(torch.float32) * 2 - 1

    def host_ints(self, low: int, high: int, n: int) -> list[int]:
        """n ints in [low, high) drawn from this generator, as a Python list."""
        if n <= 0:
            return []
        return self.randint(low, high, n).tolist()


def _fp8(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8).contiguous()


def _int(name: str, v, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise UsageError(f"{name}: expected an integer, got {v!r}")
    if v < lo:
        raise UsageError(f"{name}: must be >= {lo}, got {v}")
    return v


def _ragged_lengths(rng: _Rng, rows: int | None, keys: int | None, opts: dict) -> tuple[list[int], list[int]]:
    """(key_lengths c_i, row_lengths q_i) of the packed requests, q_i <= c_i."""
    kl, rl = opts.get("key_lengths"), opts.get("row_lengths")
    if kl is not None or rl is not None:
        _check_lengths(rows, keys, kl, rl)
        return list(kl), list(rl)
    if rows is None or keys is None:
        raise UsageError("rows/keys: required unless key_lengths and row_lengths are given")
    nreq = _int("requests", opts.get("requests", 4), lo=1)
    nreq = min(nreq, keys) if keys else 1
    if keys == 0:
        return [0], [rows]
    # Random composition of keys into nreq positive parts: nreq-1 distinct cut points.
    if nreq > 1:
        cuts = sorted((rng.randperm(keys - 1)[: nreq - 1] + 1).tolist())
    else:
        cuts = []
    bounds = [0, *cuts, keys]
    kl = [bounds[i + 1] - bounds[i] for i in range(nreq)]
    # One row per request when there are enough, the rest in proportion to the
    # remaining keys (floor), the remainder to requests with room.
    base = 1 if rows >= nreq else 0
    cap_total = keys - base * nreq
    rest = rows - base * nreq
    rl = [base + (rest * (c - base) // cap_total if cap_total else 0) for c in kl]
    left = rows - sum(rl)
    i = 0
    while left > 0:
        if rl[i % nreq] < kl[i % nreq]:
            rl[i % nreq] += 1
            left -= 1
        i += 1
    return kl, rl


def _layout(rng: _Rng, layout: str, rows: int | None, keys: int | None, opts: dict):
    """(rows, keys, starts, ends as int64 CPU tensors, request key offsets)."""
    if layout == "ragged":
        kl, rl = _ragged_lengths(rng, rows, keys, opts)
        rows, keys = sum(rl), sum(kl)
        starts, ends, offs = [], [], []
        off = 0
        for c, qn in zip(kl, rl):
            offs.append(off)
            for j in range(qn):
                starts.append(off)
                ends.append(off + c - qn + j + 1)
            off += c
        return rows, keys, torch.tensor(starts, dtype=torch.int64), torch.tensor(ends, dtype=torch.int64), offs
    for name in ("key_lengths", "row_lengths", "requests"):
        if name in opts:
            raise UsageError(f"{name}: applies to the ragged layout only (layout is {layout!r})")
    if rows is None or keys is None:
        raise UsageError("rows/keys: both are required")
    r = torch.arange(rows, dtype=torch.int64)
    if layout == "causal":
        return rows, keys, torch.zeros(rows, dtype=torch.int64), keys - rows + r + 1, [0]
    if layout == "full":
        return rows, keys, torch.zeros(rows, dtype=torch.int64), torch.full((rows,), keys, dtype=torch.int64), [0]
    raise UsageError(f"layout: must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def _unalign(rng: _Rng, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Starts moved forward by 1..255 keys (never past end - 1) to a position
    that is no multiple of 16 (hence of 256) wherever the row has room; rows
    keep at least one key."""
    n = ends - starts
    shift = rng.randint(1, 256, starts.numel()).to("cpu")
    room = torch.clamp(n - 1, min=0)
    new = starts + torch.minimum(shift, room)
    aligned = (new % 16 == 0)
    up = aligned & (new + 1 <= starts + room)
    down = aligned & ~up & (new - 1 > starts)
    return new + up.to(new.dtype) - down.to(new.dtype)


def _base_qk(rng: _Rng, rows: int, keys: int, heads: int, qscale: float = 1.0, kscale: float = 1.0):
    return rng.randn(rows, heads, HEAD_DIM) * qscale, rng.randn(keys, HEAD_DIM) * kscale


def _gauss_weights(rng: _Rng, rows: int, heads: int, neg_fraction: float = 0.1) -> torch.Tensor:
    """|N(0,1)|/32, a fraction of them negated: mostly positive, like the real
    folded head weights."""
    w = rng.randn(rows, heads).abs() / 32
    flip = rng.rand(rows, heads) < neg_fraction
    return torch.where(flip, -w, w)


def _uniform_scales(rng: _Rng, keys: int, lo: float = 0.5, hi: float = 2.0) -> torch.Tensor:
    return lo + (hi - lo) * rng.rand(keys)


def _unit_sign_vector(rng: _Rng) -> torch.Tensor:
    return rng.signs(HEAD_DIM)


def _dist_gaussian(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """q, k ~ N(0, 1) in fp8; weights mostly positive ~|N|/32; scales U(0.5, 2)."""
    q, k = _base_qk(rng, rows, keys, heads)
    return q, k, _uniform_scales(rng, keys), _gauss_weights(rng, rows, heads)


def _dist_dsa(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """DSA-like scores: sink keys (the first ``sinks`` keys of each request)
    with large scores for every row, a locality boost near each row's diagonal
    (rotary-like cos/sin channels of the position: the dot peaks when the key's
    position is the row's last visible one), and three outlier channels 8x
    larger in q and k."""
    nsinks = _int("sinks", opts.get("sinks", 4))
    q, k = _base_qk(rng, rows, keys, heads)
    dev = q.device
    # Locality: channels 0..15 carry cos/sin of position at 8 wavelengths 32..4096.
    kpos = torch.arange(keys, device=dev, dtype=torch.float32)
    rpos = (ends.to(dev) - 1).clamp(min=0).to(torch.float32)
    freqs = 2 * math.pi / torch.logspace(math.log10(32), math.log10(4096), 8, device=dev)
    amp = 3.0
    ka, ra = kpos[:, None] * freqs, rpos[:, None] * freqs
    k[:, 0:16:2], k[:, 1:16:2] = amp * torch.cos(ka), amp * torch.sin(ka)
    qloc = torch.empty(rows, 16, device=dev)
    qloc[:, 0::2], qloc[:, 1::2] = amp * torch.cos(ra), amp * torch.sin(ra)
    q[:, :, :16] = qloc[:, None, :] * (0.5 + rng.rand(rows, heads, 1))
    # Sinks: a shared direction u on channels 16.. that every q leans towards.
    u = torch.zeros(HEAD_DIM, device=dev)
    u[16:] = _unit_sign_vector(rng)[16:]
    q += 0.5 * u
    for off in offs:
        hi = min(off + nsinks, keys)
        if hi > off:
            k[off:hi] = 2.0 * u + 0.25 * rng.randn(hi - off, HEAD_DIM)
    # Outlier channels.
    ch = rng.randperm(HEAD_DIM - 16)[:3] + 16
    q[:, :, ch] *= 8
    k[:, ch] *= 8
    return q, k, _uniform_scales(rng, keys), _gauss_weights(rng, rows, heads)


def _dist_ties(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """Exact ties at the k-th value. Every key is one of: *tie* (one shared k
    row and scale 1.0: bitwise identical logits in any implementation),
    *hot* (a larger multiple of the tie row: above the ties) or *cold* (a
    smaller multiple: below). q leans on the tie row so the order hot > tie >
    cold holds in every row. Hot keys number about k/2 of the longest row, so
    the k-th value of every row with n > k is the tie value, shared by
    hundreds to thousands of keys, some chosen and some not.
    ``tie_mode='whole'``: every key is a tie key (the whole row ties, value > 0).
    ``near_ties=True``: the tie keys differ in one channel by one fp8 step, so
    their logits are distinct but within ~0.1%: thousands of candidates in one
    coarse histogram bin."""
    mode = checks.check_choice(opts.get("tie_mode", "boundary"), "tie_mode", TIE_MODES)
    near = bool(opts.get("near_ties", False))
    dev = rng.device
    t = _unit_sign_vector(rng)  # entries +-1: exact in fp8
    # q[r, h] = c * t + small noise, c > 0: dot(q, level * t) = level * (c*128 + noise.t) > 0.
    c = 0.5 + rng.rand(rows, heads, 1)
    q = c * t + 0.25 * rng.randn(rows, heads, HEAD_DIM)
    n = (ends - starts).to(torch.float64)
    n_ref = max(float(n.max()) if n.numel() else 1.0, 1.0)
    if mode == "whole":
        kind = torch.zeros(keys, dtype=torch.int64, device=dev)  # all tie
    else:
        p_hot = min(0.5 * topk / n_ref, 0.45)
        p_tie = min(max(1.5 * topk / n_ref, 0.3), 1.0 - p_hot)
        u = rng.rand(keys)
        kind = torch.where(u < p_hot, 1, torch.where(u < p_hot + p_tie, 0, -1)).to(dev)
    level = torch.ones(keys, device=dev)
    level = torch.where(kind == 1, 1.5 + 2.5 * rng.rand(keys), level)   # hot: 1.5 .. 4
    level = torch.where(kind == -1, 0.6 * rng.rand(keys), level)        # cold: 0 .. 0.6
    k = level[:, None] * t[None, :]
    scales = torch.where(kind == 0, torch.ones(keys, device=dev), _uniform_scales(rng, keys, 1.0, 1.25))
    if near:
        # Nudge one random channel of each tie key by one fp8 step (1.0 -> 1.125
        # or 0.9375, sign kept): distinct logits, all within ~0.1% of each other.
        ch = rng.randint(0, HEAD_DIM, keys)
        step = torch.where(rng.rand(keys) < 0.5, 1.125, 0.9375)
        rows_idx = torch.arange(keys, device=dev)
        tie = kind == 0
        k[rows_idx[tie], ch[tie]] *= step[tie]
    w = rng.randn(rows, heads).abs() / 32 + 1 / 256  # > 0: keeps the order hot > tie > cold
    return q, k, scales, w


def _dist_zero_weights(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """All weights 0: every logit is exactly 0, the top-k is pure tie-break
    (the lowest indices of the row)."""
    q, k = _base_qk(rng, rows, keys, heads)
    return q, k, _uniform_scales(rng, keys), torch.zeros(rows, heads, device=rng.device)


def _dist_negative_weights(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """All weights < 0: every logit <= 0; the top-k are the least negative
    (keys whose dots are all negative give exactly 0 and win)."""
    q, k = _base_qk(rng, rows, keys, heads)
    return q, k, _uniform_scales(rng, keys), -(rng.randn(rows, heads).abs() / 32 + 1 / 1024)


def _dist_relu_saturated(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """Most dots negative, so most logits are exactly 0 and the k-th value of
    most long rows is 0, shared by thousands of keys: k entries ~ 1 + 0.3 N,
    q entries ~ b_r + 0.3 N with b_r in [-0.12, -0.06] (a few percent of keys
    positive in the least saturated rows)."""
    k = 1.0 + 0.3 * rng.randn(keys, HEAD_DIM)
    b = -0.06 - 0.06 * rng.rand(rows, 1, 1)
    q = b + 0.3 * rng.randn(rows, heads, HEAD_DIM)
    return q, k, _uniform_scales(rng, keys), rng.randn(rows, heads).abs() / 32 + 1 / 1024


def _dist_rising(rng, rows, keys, topk, starts, ends, offs, opts, heads):
    """Scores rising with key position (hot recent keys): q leans on a shared
    direction t, key s = t * (0.25 + 1.75 s/keys) + noise and scales rise
    geometrically 0.5 .. 2: a running threshold must be raised on almost every
    key block scanned in order (the worst case for streaming top-k)."""
    dev = rng.device
    t = _unit_sign_vector(rng)
    pos = torch.arange(keys, device=dev, dtype=torch.float32) / max(keys, 1)
    q = (0.5 + rng.rand(rows, heads, 1)) * t + 0.25 * rng.randn(rows, heads, HEAD_DIM)
    k = (0.25 + 1.75 * pos)[:, None] * t + 0.1 * rng.randn(keys, HEAD_DIM)
    scales = torch.exp2(-1.0 + 2.0 * pos)
    w = rng.randn(rows, heads).abs() / 32 + 1 / 1024
    return q, k, scales, w


def _short_rows(rng: _Rng, keys: int, topk: int, starts: torch.Tensor, ends: torch.Tensor):
    """Rows cycle through n = 0, 1, k-1, k, k+1, random in [2, k), and two rows
    keeping the layout's range; n is clamped to keys; starts random (unaligned)."""
    rows = starts.numel()
    starts, ends = starts.clone(), ends.clone()
    rand_n = rng.host_ints(2, max(topk, 3), rows)
    rand_s = rng.host_ints(0, 1 << 30, rows)
    for r in range(rows):
        pick = r % 8
        if pick >= 6:
            continue
        n = (0, 1, topk - 1, topk, topk + 1, rand_n[r])[pick]
        n = min(n, keys)
        s = rand_s[r] % (keys - n + 1)
        starts[r], ends[r] = s, s + n
    return starts, ends


_DIST_FUNCS = {
    "gaussian": _dist_gaussian,
    "dsa": _dist_dsa,
    "ties": _dist_ties,
    "zero_weights": _dist_zero_weights,
    "negative_weights": _dist_negative_weights,
    "relu_saturated": _dist_relu_saturated,
    "rising": _dist_rising,
    "short_rows": _dist_gaussian,
}


def _check_lengths(rows, keys, kl, rl) -> None:
    """The explicit ragged lengths: both given, non-empty lists of equal
    length of integers >= 0, q_i <= c_i, and their sums equal to ``rows`` /
    ``keys`` where those are given."""
    if kl is None or rl is None:
        raise UsageError("key_lengths/row_lengths: give both (one entry per request)")
    if not isinstance(kl, (list, tuple)) or not isinstance(rl, (list, tuple)) or len(kl) != len(rl) or not kl:
        raise UsageError("key_lengths/row_lengths: must be non-empty lists of equal length")
    for name, lens in (("key_lengths", kl), ("row_lengths", rl)):
        for i, c in enumerate(lens):
            checks.check_int(c, f"{name}[{i}]", 0, checks.MAX_KEYS)
    for i, (c, r) in enumerate(zip(kl, rl)):
        if r > c:
            raise UsageError(f"row_lengths[{i}]: {r} rows exceed the request's {c} keys (q_i <= c_i)")
    if rows is not None and rows != sum(rl):
        raise UsageError(f"rows: {rows} differs from sum(row_lengths) = {sum(rl)}")
    if keys is not None and keys != sum(kl):
        raise UsageError(f"keys: {keys} differs from sum(key_lengths) = {sum(kl)}")


def check_options(layout: str, dist: str, rows, keys, opts: dict) -> None:
    """Checks the generator options ``opts`` (see ``OPTIONS``) before anything
    is generated: each is known, applies to ``layout`` / ``dist``, and has its
    type and range (``requests`` 1..keys, ``sinks`` 0..keys, ``near_ties`` and
    ``unaligned_starts`` true or false, ``tie_mode`` one of ``TIE_MODES``,
    explicit ragged lengths consistent with ``rows`` / ``keys``, which may be
    None when the lengths give them). ``UsageError`` names the option."""
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise UsageError(f"{unknown[0]}: unknown workload option; valid options: {', '.join(OPTIONS)}")
    given = {"layout": layout, "dist": dist}
    for name in OPTIONS:
        if name in opts and name in _OPTION_APPLIES:
            what, want = _OPTION_APPLIES[name]
            if given[what] != want:
                article = "the ragged layout" if what == "layout" else f"dist {want}"
                raise UsageError(f"{name}: applies to {article} only ({what} is {given[what]!r})")
    for name in ("unaligned_starts", "near_ties"):
        if name in opts and not isinstance(opts[name], bool):
            raise UsageError(f"{name}: expected true or false, got {opts[name]!r}")
    if "tie_mode" in opts:
        checks.check_choice(opts["tie_mode"], "tie_mode", TIE_MODES)
    total_keys = keys
    if "key_lengths" in opts or "row_lengths" in opts:
        if "requests" in opts:
            raise UsageError("requests: give either requests or key_lengths/row_lengths (one entry per request)")
        _check_lengths(rows, keys, opts.get("key_lengths"), opts.get("row_lengths"))
        total_keys = sum(opts["key_lengths"])
    limit = total_keys if isinstance(total_keys, int) and not isinstance(total_keys, bool) else checks.MAX_KEYS
    if "requests" in opts:
        checks.check_int(opts["requests"], "requests", 1, limit, " (each request owns at least one key)")
    if "sinks" in opts:
        checks.check_int(opts["sinks"], "sinks", 0, limit, " (sink keys at the start of each request)")


def _planned_size(layout: str, rows, keys, opts: dict) -> tuple[int, int] | None:
    """(rows, keys) a workload will have, known before generating it: the
    arguments, or the sums of a ragged layout's explicit lengths; None when
    they are malformed (``_layout`` then names the bad argument)."""
    if layout == "ragged" and "key_lengths" in opts and "row_lengths" in opts:
        kl, rl = opts["key_lengths"], opts["row_lengths"]
        ints = isinstance(kl, (list, tuple)) and isinstance(rl, (list, tuple)) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in (*kl, *rl))
        return (sum(rl), sum(kl)) if ints else None
    if isinstance(rows, int) and isinstance(keys, int):
        return rows, keys
    return None


def _check_rows_fit(layout: str, rows: int, keys: int, opts: dict) -> None:
    """Causal and (generated) ragged layouts need rows <= keys."""
    if rows <= keys:
        return
    if layout == "causal":
        raise UsageError(f"rows: the causal layout needs rows <= keys (got rows={rows}, keys={keys})")
    if layout == "ragged" and "row_lengths" not in opts:
        raise UsageError(f"rows: the ragged layout needs rows <= keys (each request has q_i <= c_i; "
                         f"got rows={rows}, keys={keys})")


def _check_request(layout, rows, keys, topk, dist, seed, opts: dict,
                   heads: int = DEFAULT_HEADS) -> tuple[int, int] | None:
    """Every check of make_workload's arguments that needs neither a device
    nor memory; returns the planned (rows, keys) when they are known."""
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise UsageError(f"{unknown[0]}: unknown workload option; valid options: {', '.join(OPTIONS)}")
    if layout not in LAYOUTS:
        raise UsageError(f"layout: must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if dist not in DISTS:
        raise UsageError(f"dist: must be one of {', '.join(DISTS)}, got {dist!r}")
    try:
        contract.check_topk(topk)
    except ContractError as e:
        raise UsageError(str(e)) from None
    checks.check_heads(heads)
    if rows is not None:
        checks.check_rows(rows, heads=heads)
    if keys is not None:
        checks.check_keys(keys)
    check_options(layout, dist, rows, keys, opts)
    checks.check_seed(seed)
    size = _planned_size(layout, rows, keys, opts)
    if size is not None:
        _check_rows_fit(layout, *size, opts)
    return size


def check_case(case: dict, device=None) -> None:
    """Checks a generator case dict (as ``workload_from_case`` reads it)
    without generating anything: a bad field is a ``UsageError`` naming it;
    with ``device``, also the memory generating it takes there. A case naming
    a recorded ``file`` is read and checked."""
    if not isinstance(case, dict):
        raise UsageError(f"case: expected a dict, got {type(case).__name__}")
    if "file" in case:
        load_workload(case["file"])
        return
    heads, topk = case_heads_topk(case)
    size = _check_request(case.get("layout", "causal"), case.get("rows"), case.get("keys"), topk,
                          case.get("dist", "gaussian"), case.get("seed", 0),
                          {k: v for k, v in case.items() if k in OPTIONS}, heads)
    if device is not None and size is not None:
        checks.check_generation(*size, torch.device(device), heads)


def make_workload(layout: str = "causal", rows: int | None = 256, keys: int | None = 4096, topk: int = 2048,
                  dist: str = "gaussian", seed: int = 0, device="cpu", name: str = "", heads: int = DEFAULT_HEADS,
                  **opts) -> Workload:
    """A synthetic workload (see the module docstring for layouts, ``DISTS`` and
    ``OPTIONS``) with q ``[rows, heads, 128]`` and weights ``[rows, heads]``.
    Deterministic for a given (arguments, seed, device type); at 32 heads the
    tensors of earlier versions. Raises ``UsageError`` naming the bad argument."""
    size = _check_request(layout, rows, keys, topk, dist, seed, opts, heads)
    seed = int(seed)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device: {device} requested but no CUDA GPU is available")
    if size is not None:  # memory is checked before anything is allocated
        checks.check_generation(*size, dev, heads)
    rng = _Rng(seed, dev)
    rows, keys, starts, ends, offs = _layout(rng, layout, rows, keys, opts)
    checks.check_rows(rows, heads=heads)
    checks.check_keys(keys)
    if dist == "short_rows":
        starts, ends = _short_rows(rng, keys, topk, starts, ends)
    if opts.get("unaligned_starts"):
        starts = _unalign(rng, starts, ends)
    q, k, scales, weights = _DIST_FUNCS[dist](rng, rows, keys, topk, starts, ends, offs, opts, heads)
    w = Workload(
        q=_fp8(q.to(dev)),
        k=_fp8(k.to(dev)),
        scales=scales.to(dev, torch.float32).contiguous(),
        weights=weights.to(dev, torch.float32).contiguous(),
        starts=starts.to(dev, torch.int32).contiguous(),
        ends=ends.to(dev, torch.int32).contiguous(),
        topk=int(topk),
        name=name or f"{layout}-{dist}-r{rows}-k{keys}-t{topk}-s{seed}{heads_suffix(heads)}",
        seed=seed,
        layout=layout,
        dist=dist,
    )
    return w


# --------------------------------------------------------------------------- files

def _file_error(path, msg: str) -> UsageError:
    return UsageError(f"{path}: {msg}")


def _sniff(path: Path) -> str:
    """'pt', 'safetensors', or raise: by suffix, else by the first bytes."""
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        return "safetensors"
    if suffix in (".pt", ".pth"):
        return "pt"
    with open(path, "rb") as f:
        head = f.read(16)
    if head[:4] == b"PK\x03\x04":
        return "pt"
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    raise _file_error(path, "not a recognized workload format (expected a .safetensors or .pt file)")


def _write(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(tensors, str(path), metadata={"format": FORMAT_TAG, "version": FORMAT_VERSION, **meta})
    elif suffix in (".pt", ".pth"):
        torch.save({"format": FORMAT_TAG, "version": FORMAT_VERSION, **tensors, **meta}, str(path))
    else:
        raise _file_error(path, "unknown workload file type: use a .safetensors or .pt suffix")


def _meta_of(w_topk, name, seed) -> dict[str, str]:
    return {"topk": str(int(w_topk)), "name": str(name or ""), "seed": "" if seed is None else str(int(seed))}


def save_workload(w: Workload, path) -> Path:
    """Writes ``w`` (moved to the CPU) as ``.safetensors`` or ``.pt``; returns the path."""
    path = Path(path)
    meta = _meta_of(w.topk, w.name, w.seed)
    meta.update({"layout": w.layout or "", "dist": w.dist or ""})
    _write(path, w.tensors(), meta)
    return path


def record(path, q, k, scales, weights, starts, ends, topk, name: str = "") -> Path:
    """Records one call's inputs from your own code (any device) to ``path``
    (``.safetensors`` or ``.pt``), after checking them against the op contract
    (``ContractError`` naming the argument). ``scales`` may be fp32 ``[keys]``
    or UE8M0 uint8 ``[keys, 4]`` (stored as given). int64 starts/ends are
    stored as int32. Returns the path."""
    from . import ops

    path = Path(path)
    cpu = {}
    for fname, t in zip(FIELDS, (q, k, scales, weights, starts, ends)):
        if not isinstance(t, torch.Tensor):
            raise ContractError(fname, f"expected a torch.Tensor, got {type(t).__name__}")
        t = t.detach().to("cpu").contiguous()
        if fname in ("starts", "ends") and t.dtype == torch.int64:
            if t.numel() and (int(t.max()) >= 2**31 or int(t.min()) < -(2**31)):
                raise ContractError(fname, "values do not fit int32")
            t = t.to(torch.int32)
        cpu[fname] = t
    fp32_scales = cpu["scales"]
    if fp32_scales.dtype == torch.uint8 and fp32_scales.dim() == 2:
        fp32_scales = ops.fused_mqa_topk_key_scales(fp32_scales)
    w = Workload(cpu["q"], cpu["k"], fp32_scales, cpu["weights"], cpu["starts"], cpu["ends"], topk, name=name)
    w.validate()
    if w.rows < 1 or w.keys < 1:  # load_workload refuses such a file
        raise ContractError("q" if w.rows < 1 else "k", f"a workload needs at least one row and one key, got "
                                                         f"{w.rows} rows and {w.keys} keys")
    _check_values(None, w)
    _write(path, cpu, _meta_of(topk, name, None))
    return path


def _check_values(path, w: Workload) -> None:
    """Finite fp8 inputs, finite positive scales, finite weights."""
    def bad(field, msg):
        if path is None:
            raise ContractError(field, msg)
        raise _file_error(path, f"{field}: {msg}")

    for f in ("q", "k"):
        t = getattr(w, f)
        if t.numel() and not bool(torch.isfinite(t.to(torch.float32)).all()):
            bad(f, "contains NaN")
    if w.scales.numel():
        if not bool(torch.isfinite(w.scales).all()):
            bad("scales", "contains NaN or inf")
        if not bool((w.scales > 0).all()):
            bad("scales", "must be > 0 (per-key dequant scales)")
    if w.weights.numel() and not bool(torch.isfinite(w.weights).all()):
        bad("weights", "contains NaN or inf")


def _read_raw(path: Path) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(format, tensors/values dict, metadata) of a workload file, or UsageError."""
    if not path.exists():
        raise _file_error(path, "no such file")
    if not path.is_file():
        raise _file_error(path, "not a regular file")
    fmt = _sniff(path)
    if fmt == "safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = dict(f.metadata() or {})
                # clone: the tensors may be views at unaligned offsets of the file's buffer
                data = {key: f.get_tensor(key).clone() for key in f.keys()}
        except Exception as e:  # safetensors raises its own SafetensorError / OSError
            raise _file_error(path, f"corrupt or unreadable safetensors file ({type(e).__name__}: {e})") from None
        return fmt, data, meta
    import pickle
    import warnings

    try:
        with warnings.catch_warnings():  # e.g. torch's two-line warning about a raw pickle's protocol
            warnings.simplefilter("ignore")
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        text = str(e)
        if re.search(r"unsupported (global|class)|\bGLOBAL\s", text, re.IGNORECASE):
            m = re.search(r"\bGLOBAL\s+([\w.]+)", text)
            what = f" ({m.group(1)})" if m else ""
            raise _file_error(path, f"holds Python objects other than tensors and plain values{what}; refusing to "
                                    f"unpickle it (workload files are loaded with weights_only=True)") from None
        why = _weights_only_reason(text)
        raise _file_error(path, "corrupt .pt file, or a pickle that torch.save did not write; not unpickled "
                                f"(workload files are loaded with weights_only=True){f': {why}' if why else ''}") from None
    except Exception as e:
        why = _weights_only_reason(str(e)) or type(e).__name__
        raise _file_error(path, f"corrupt or unreadable .pt file ({type(e).__name__}: {why})") from None
    if not isinstance(obj, dict):
        raise _file_error(path, f"expected a dict of tensors at the top level, got {type(obj).__name__}")
    meta = {key: v for key, v in obj.items() if not isinstance(v, torch.Tensor)}
    data = {key: v for key, v in obj.items() if isinstance(v, torch.Tensor)}
    return fmt, data, meta


#: Lines of torch's load errors that are advice, not the reason.
_TORCH_ADVICE = ("weights only load failed", "please file an issue", "check the documentation", "re-running")


def _weights_only_reason(text: str) -> str:
    """The first specific line of a torch.load error, without torch's advice
    (which suggests the unsafe ``weights_only=False``: never shown)."""
    for ln in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines():
        ln = ln.strip().removeprefix("WeightsUnpickler error:").strip()
        if ln and "weights_only" not in ln and not ln.lower().startswith(_TORCH_ADVICE):
            return ln
    return ""


def _meta_int(path, meta: dict, key: str, required: bool) -> int | None:
    v = meta.get(key)
    if v is None or v == "":
        if required:
            raise _file_error(path, f"{key}: missing (expected an int in the file's metadata)")
        return None
    if isinstance(v, bool):
        raise _file_error(path, f"{key}: expected an int, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise _file_error(path, f"{key}: expected an int, got {v!r}")


def _field(path, data: dict, name: str) -> torch.Tensor:
    if name not in data:
        present = ", ".join(sorted(data)) or "none"
        raise _file_error(path, f"{name}: missing tensor (the file has: {present})")
    return data[name]


def _load_checked(path: Path) -> tuple[Workload, str, str, dict[str, str]]:
    """(workload on CPU, file format, scales format, each stored tensor's "[shape] dtype") of a file,
    every field checked."""
    from . import ops

    fmt, data, meta = _read_raw(path)
    q, k, scales, weights, starts, ends = (_field(path, data, f) for f in FIELDS)
    stored = {f: f"{list(data[f].shape)} {_dtype_name(data[f].dtype)}" for f in FIELDS}
    fp8_as_u8 = {s.strip() for s in str(meta.get("fp8_as_uint8", "")).split(",") if s.strip()}
    for f, t in (("q", q), ("k", k)):
        if f in fp8_as_u8 and t.dtype == torch.uint8:
            t = t.view(FP8)
        if t.dtype != FP8:
            raise _file_error(path, f"{f}: expected dtype float8_e4m3fn, got {str(t.dtype).replace('torch.', '')}")
        if f == "q":
            q = t
        else:
            k = t
    if q.dim() != 3 or q.shape[1] not in SUPPORTED_HEADS or q.shape[2] != HEAD_DIM:
        raise _file_error(path, f"q: expected shape {contract.Q_SHAPE}, got {list(q.shape)}")
    if k.dim() != 2 or k.shape[1] != HEAD_DIM:
        raise _file_error(path, f"k: expected shape [keys, {HEAD_DIM}], got {list(k.shape)}")
    rows, keys, heads = q.shape[0], k.shape[0], q.shape[1]
    if rows < 1:
        raise _file_error(path, "q: holds 0 rows; a workload needs at least one row (as --rows does)")
    if keys < 1:
        raise _file_error(path, "k: holds 0 keys; a workload needs at least one key (as --keys does)")
    scales_format = "fp32"
    if scales.dtype == torch.uint8:
        if scales.dim() != 2 or tuple(scales.shape) != (keys, 4):
            raise _file_error(path, f"scales: UE8M0 scales must have shape [keys, 4] = [{keys}, 4], got {list(scales.shape)}")
        try:
            scales = ops.fused_mqa_topk_key_scales(scales.contiguous())
        except ContractError as e:
            raise _file_error(path, f"scales: {e}") from None
        scales_format = "ue8m0"
    elif scales.dtype != torch.float32:
        raise _file_error(path, f"scales: expected float32 [keys] or uint8 [keys, 4] (UE8M0), got {str(scales.dtype).replace('torch.', '')}")
    if tuple(scales.shape) != (keys,):
        raise _file_error(path, f"scales: expected shape [keys] = [{keys}], got {list(scales.shape)}")
    if weights.dtype != torch.float32:
        raise _file_error(path, f"weights: expected dtype float32, got {str(weights.dtype).replace('torch.', '')}")
    if tuple(weights.shape) != (rows, heads):
        raise _file_error(path, f"weights: expected shape [rows, heads] = [{rows}, {heads}] (the heads of q), "
                                f"got {list(weights.shape)}")
    checked = []
    for f, t in (("starts", starts), ("ends", ends)):
        if t.dtype not in (torch.int32, torch.int64):
            raise _file_error(path, f"{f}: expected dtype int32, got {str(t.dtype).replace('torch.', '')}")
        if tuple(t.shape) != (rows,):
            raise _file_error(path, f"{f}: expected shape [rows] = [{rows}], got {list(t.shape)}")
        if t.dtype == torch.int64 and t.numel() and (int(t.max()) >= 2**31 or int(t.min()) < -(2**31)):
            raise _file_error(path, f"{f}: values do not fit int32")
        checked.append(t.to(torch.int32))
    starts, ends = checked
    try:
        contract.check_ranges(starts, ends, keys)
    except ContractError as e:
        raise _file_error(path, str(e)) from None
    topk = _meta_int(path, meta, "topk", required=True)
    if topk not in TOPKS:
        raise _file_error(path, f"topk: must be one of {TOPKS}, got {topk}")
    seed = _meta_int(path, meta, "seed", required=False)
    name = meta.get("name") or path.stem
    if not isinstance(name, str):
        raise _file_error(path, f"name: expected a string, got {type(name).__name__}")
    w = Workload(q.contiguous(), k.contiguous(), scales.contiguous(), weights.contiguous(), starts.contiguous(),
                 ends.contiguous(), int(topk), name=name, seed=seed,
                 layout=str(meta.get("layout") or "recorded"), dist=str(meta.get("dist") or ""))
    _check_values(path, w)
    try:
        w.validate()
    except ContractError as e:  # e.g. more keys than the key limit
        raise _file_error(path, str(e)) from None
    return w, fmt, scales_format, stored


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def load_workload(path, device="cpu") -> Workload:
    """Reads a recorded workload (``.safetensors`` or ``.pt``), checks every
    field (``UsageError`` naming the file and field), converts UE8M0 scales to
    fp32, and moves it to ``device``."""
    w, _, _, _ = _load_checked(Path(path))
    return w.to(device) if torch.device(device).type != "cpu" else w


def describe_workload(path) -> dict:
    """``Workload.describe()`` of a file plus its format and size, and under
    ``"tensors"`` each stored tensor's shape and dtype as the file holds it
    (``mqa-topk inspect``)."""
    path = Path(path)
    w, fmt, scales_format, stored = _load_checked(path)
    d = {"file": str(path), "format": fmt, "file_bytes": path.stat().st_size, "scales_format": scales_format}
    d.update(w.describe())
    d["tensors"] = stored
    return d


# --------------------------------------------------------------------------- configs

def _case_error(path, i: int, case: dict, msg: str) -> UsageError:
    label = case.get("name") if isinstance(case, dict) and isinstance(case.get("name"), str) else f"#{i + 1}"
    return UsageError(f"{path}: case {label}: {msg}")


def load_workload_config(path) -> list[dict]:
    """The ``[[case]]`` tables of a TOML file as dicts (``name``, ``layout``,
    ``rows``, ``keys``, ``topk``, ``dist``, ``seed`` and generator options, or
    ``file`` for a recorded workload, resolved relative to the config). An
    optional ``[defaults]`` table fills fields a case leaves out. Malformed
    entries raise ``UsageError`` naming the file, the case and the field."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such config file")
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML ({e})") from None
    unknown_top = sorted(set(doc) - {"case", "defaults"})
    if unknown_top:
        raise UsageError(f"{path}: unknown table {unknown_top[0]!r} (expected [[case]] and optionally [defaults])")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise UsageError(f"{path}: [defaults] must be a table")
    cases = doc.get("case")
    if not isinstance(cases, list) or not cases:
        raise UsageError(f"{path}: no [[case]] entries")
    out, names = [], set()
    for i, raw in enumerate(cases):
        if not isinstance(raw, dict):
            raise UsageError(f"{path}: case #{i + 1}: must be a table")
        if "file" in raw:  # a recorded workload: [defaults] (generator fields) do not apply to it
            for key in raw:
                if key not in FILE_CASE_FIELDS:
                    raise _case_error(path, i, raw, f"{key}: does not apply to a recorded workload (file: its "
                                                    f"shape and values come from the file); fields of a file case: "
                                                    f"{', '.join(FILE_CASE_FIELDS)}")
            case = {**{k: v for k, v in defaults.items() if k in FILE_CASE_FIELDS and k != "name"}, **raw}
        else:
            case = {**defaults, **raw}
        out.append(_normalize_case(path, i, case))
        if out[-1]["name"] in names:
            raise _case_error(path, i, case, f"name: duplicate case name {out[-1]['name']!r}")
        names.add(out[-1]["name"])
    return out


def _normalize_case(path, i: int, case: dict) -> dict:
    c = dict(case)
    for key in c:
        if key not in CASE_FIELDS and key not in OPTIONS:
            raise _case_error(path, i, case, f"{key}: unknown field; valid fields: "
                                             f"{', '.join(CASE_FIELDS)}, and options {', '.join(OPTIONS)}")
    if not isinstance(c.get("description", ""), str):
        raise _case_error(path, i, case, f"description: expected a string, got {c['description']!r}")
    tags = c.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _case_error(path, i, case, f"tags: expected a list of strings, got {tags!r}")
    if "file" in c:
        f = c["file"]
        if not isinstance(f, str) or not f:
            raise _case_error(path, i, case, "file: expected a path string")
        fp = Path(f)
        if not fp.is_absolute():
            fp = Path(path).parent / fp
        if not fp.is_file():
            raise _case_error(path, i, case, f"file: {fp}: no such file")
        c["file"] = str(fp)
        c.setdefault("name", fp.stem)
        c.setdefault("layout", "recorded")
        return c
    c.setdefault("layout", "causal")
    c.setdefault("dist", "gaussian")
    c.setdefault("seed", 0)
    if "model" in c:  # a preset: its heads and topk, unless the case gives them
        from .models import get_model

        try:
            m = get_model(c["model"], "model")
        except UsageError as e:
            raise _case_error(path, i, case, str(e)) from None
        c["model"] = m.name
        c.setdefault("heads", m.heads)
        c.setdefault("topk", m.topk)
    if "heads" in c:
        try:
            checks.check_heads(c["heads"], "heads")
        except UsageError as e:
            raise _case_error(path, i, case, str(e)) from None
    heads = c.get("heads", DEFAULT_HEADS)
    if c["layout"] not in LAYOUTS:
        raise _case_error(path, i, case, f"layout: must be one of {', '.join(LAYOUTS)}, got {c['layout']!r}")
    if c["dist"] not in DISTS:
        raise _case_error(path, i, case, f"dist: must be one of {', '.join(DISTS)}, got {c['dist']!r}")
    if "topk" not in c:
        raise _case_error(path, i, case, "topk: missing")
    if isinstance(c["topk"], bool) or c["topk"] not in TOPKS:
        raise _case_error(path, i, case, f"topk: must be one of {TOPKS}, got {c['topk']!r}")
    if ("key_lengths" in c) != ("row_lengths" in c):
        raise _case_error(path, i, case, "key_lengths/row_lengths: give both (one entry per request)")
    explicit = "key_lengths" in c and "row_lengths" in c
    if explicit:
        for key, lens in (("rows", c["row_lengths"]), ("keys", c["key_lengths"])):
            if not isinstance(lens, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in lens):
                raise _case_error(path, i, case, f"{'row' if key == 'rows' else 'key'}_lengths: expected a list of integers")
            c.setdefault(key, sum(lens))
    for key in ("rows", "keys"):
        if key not in c:
            if explicit:
                continue
            raise _case_error(path, i, case, f"{key}: missing")
        v = c[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise _case_error(path, i, case, f"{key}: expected a positive integer, got {v!r}")
        try:
            checks.check_rows(v, heads=heads) if key == "rows" else checks.check_keys(v)
        except UsageError as e:
            raise _case_error(path, i, case, str(e)) from None
    if isinstance(c["seed"], bool) or not isinstance(c["seed"], int) or c["seed"] < 0:
        raise _case_error(path, i, case, f"seed: expected a non-negative integer, got {c['seed']!r}")
    try:
        checks.check_seed(c["seed"])
    except UsageError as e:
        raise _case_error(path, i, case, str(e)) from None
    if c["layout"] == "causal" and "rows" in c and "keys" in c and c["rows"] > c["keys"]:
        raise _case_error(path, i, case, f"rows: the causal layout needs rows <= keys (got {c['rows']} > {c['keys']})")
    try:
        check_options(c["layout"], c["dist"], c.get("rows"), c.get("keys"),
                      {key: v for key, v in c.items() if key in OPTIONS})
    except UsageError as e:
        raise _case_error(path, i, case, str(e)) from None
    if not isinstance(c.get("name", ""), str):
        raise _case_error(path, i, case, "name: expected a string")
    c.setdefault("name", f"{c['layout']}-{c['dist']}-r{c.get('rows')}-k{c.get('keys')}-t{c['topk']}"
                         f"{heads_suffix(heads)}")
    return c


def with_heads(cases: list[dict], heads: int | None) -> list[dict]:
    """``cases`` with every generated one run at ``heads`` heads (``--heads`` or
    ``--model`` over a config's cases; None: unchanged). A case whose heads
    change gets its name's ``-hH`` suffix changed with them (one that ends in
    the old heads' suffix loses it), so its results stay apart from the
    config's own. Recorded ``file`` cases keep the heads of their tensors."""
    if heads is None:
        return cases
    heads = checks.check_heads(heads, "--heads")
    out = []
    for c in cases:
        if "file" in c:
            out.append(c)
            continue
        own, _ = case_heads_topk(c)
        c = dict(c, heads=heads)
        if own != heads and isinstance(c.get("name"), str) and c["name"]:
            name, old = c["name"], heads_suffix(own)
            if old and name.endswith(old):
                name = name[: -len(old)]
            c["name"] = name_with_heads(name, heads)
        out.append(c)
    return out


def file_cases(files, option: str = "--workload") -> list[dict]:
    """Cases of recorded workload files (``{"name": stem, "file": path}``),
    each read and checked now, before any case runs: a missing or bad file is
    one ``UsageError`` naming it (and ``option``)."""
    out = []
    for f in files:
        p = Path(f)
        if not p.is_file():
            raise UsageError(f"{option} {f}: {'not a regular file' if p.exists() else 'no such file'}")
        load_workload(p)  # (read again when its turn comes)
        out.append({"name": p.stem, "file": str(f)})
    return out


def check_case_files(path, cases: list[dict]) -> None:
    """Reads and checks every recorded workload file that ``cases`` (of the
    config ``path``) name, before any case runs: a missing or corrupt file is
    one ``UsageError`` naming the config, the case and the file."""
    for i, c in enumerate(cases):
        if "file" not in c:
            continue
        try:
            load_workload(c["file"])
        except UsageError as e:
            raise _case_error(path, i, c, f"file: {e}") from None


def workload_from_case(case: dict, device="cpu") -> Workload:
    """A case dict (from ``load_workload_config``, or written by hand) to a
    ``Workload`` on ``device``: generated, or loaded from ``case['file']``."""
    if not isinstance(case, dict):
        raise UsageError(f"case: expected a dict, got {type(case).__name__}")
    if "file" in case:
        w = load_workload(case["file"], device)
        if case.get("name"):
            w.name = str(case["name"])
        return w
    opts = {key: v for key, v in case.items() if key in OPTIONS}
    heads, topk = case_heads_topk(case)
    return make_workload(
        layout=case.get("layout", "causal"),
        rows=case.get("rows"),
        keys=case.get("keys"),
        topk=topk,
        dist=case.get("dist", "gaussian"),
        seed=case.get("seed", 0),
        device=device,
        name=str(case.get("name") or ""),
        heads=heads,
        **opts,
    )


__all__ = [
    "Workload", "LAYOUTS", "DISTS", "OPTIONS", "TIE_MODES", "check_options", "make_workload", "save_workload", "load_workload", "record",
    "heads_suffix", "name_with_heads", "case_heads_topk", "with_heads",
    "describe_workload", "load_workload_config", "file_cases", "check_case_files", "check_case", "workload_from_case",
]
