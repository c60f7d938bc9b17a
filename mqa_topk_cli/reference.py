"""The exact answer (SPEC §1), as pure functions: no global state, no kernels.

- ``reference_logits``: logits of selected rows over all keys or a key range,
  ``-inf`` outside each row's ``[start, end)``. The dot products are computed
  in float64, where they are **exact in any summation order**: an e4m3 value
  is a multiple of 2**-9 below 2**9, so a product is a multiple of 2**-18
  below 2**18, and a 128-term sum (and every partial sum) is a multiple of
  2**-18 below 2**25: 43 bits, inside float64's 53. The head sum then runs in
  float64 in a fixed order (h = 0..H-1 for the H heads of q, one exactly
  rounded multiply and add per element, no BLAS), times the scale, and is rounded once to fp32 for
  ``precision="fp32"`` (kept in float64 for ``"fp64"``). So the result does
  not depend on chunking or on matrix shapes, and keys with bitwise-identical
  k rows and scales get bitwise-identical logits (as in any implementation
  whose per-key reduction order is fixed). TF32 is switched off inside.
- ``reference_topk``: the exact top-k of each row by (value desc, index asc)
  over ``[start, end)``: a stable descending sort, so equal values keep
  ascending index order. Indices relative to the start, ``-1`` padded, in
  that sorted order.
- ``reference_mqa_topk``: both, chunked over rows.

Everything runs on the device of the inputs, chunked so the intermediates
stay under ``max_bytes`` (default 1 GiB) at any size.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from .contract import HEAD_DIM

#: Default bound on the intermediates of one chunk.
DEFAULT_MAX_BYTES = 1 << 30
_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


@contextmanager
def ieee_fp32_matmul():
    """fp32 matmuls in full IEEE precision (no TF32) inside the block; the
    previous setting is restored after."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        prev = m.fp32_precision
        m.fp32_precision = "ieee"
        try:
            yield
        finally:
            m.fp32_precision = prev
    else:  # pragma: no cover - older torch
        prev = m.allow_tf32
        m.allow_tf32 = False
        try:
            yield
        finally:
            m.allow_tf32 = prev


def _dtype(precision: str) -> torch.dtype:
    try:
        return _DTYPES[precision]
    except KeyError:
        raise ValueError(f"precision: must be 'fp32' or 'fp64', got {precision!r}") from None


def _span(sel, n: int, what: str) -> tuple[int, int]:
    """(lo, hi) of a slice / (lo, hi) pair / None over range(n)."""
    if sel is None:
        return 0, n
    if isinstance(sel, slice):
        lo, hi, step = sel.indices(n)
        if step != 1:
            raise ValueError(f"{what}: slices must have step 1")
        return lo, max(lo, hi)
    lo, hi = (int(x) for x in sel)
    if not 0 <= lo <= hi <= n:
        raise ValueError(f"{what}: ({lo}, {hi}) is outside [0, {n}]")
    return lo, hi


def reference_logits(q, k, scales, weights, starts, ends, *, precision: str = "fp32", rows=None, key_range=None,
                     max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
    """Logits ``[len(rows), hi - lo]`` (fp32 or fp64) of rows ``rows`` (a slice,
    default all) over keys ``key_range = (lo, hi)`` (or a slice; default all):
    ``out[i, j] = scales[s] * sum_h weights[r, h] * relu(dot(q[r, h], k[s]))``
    for r = rows.start + i, s = lo + j, when ``starts[r] <= s < ends[r]``, else
    ``-inf``."""
    dtype = _dtype(precision)
    r0, r1 = _span(rows, q.shape[0], "rows")
    lo, hi = _span(key_range, k.shape[0], "key_range")
    nr, nk = r1 - r0, hi - lo
    dev = q.device
    heads = int(q.shape[1])  # (16, 32 or 64 under the contract; any H is computed the same way)
    out = torch.empty((nr, nk), dtype=dtype, device=dev)
    if nr == 0 or nk == 0:
        return out
    # Per row: the [heads, keys] float64 dots, their weighted copy and the sum.
    per_row = heads * nk * 8 * 2 + nk * 8
    if per_row <= max_bytes:
        rc, kc = max(1, min(nr, max_bytes // per_row)), nk
    else:
        rc, kc = 1, max(1, max_bytes // (heads * 8 * 2 + 8))
    kf = k[lo:hi].to(torch.float64)
    sc = scales[lo:hi].to(torch.float64)
    st = starts.to(torch.int64)
    en = ends.to(torch.int64)
    with ieee_fp32_matmul():
        for a in range(r0, r1, rc):
            b = min(r1, a + rc)
            qf = q[a:b].to(torch.float64).reshape((b - a) * heads, HEAD_DIM)
            wf = weights[a:b].to(torch.float64)  # [rc, heads]
            s = st[a:b, None]
            e = en[a:b, None]
            for c in range(0, nk, kc):
                d = min(nk, c + kc)
                dots = torch.relu_(qf @ kf[c:d].T).view(b - a, heads, d - c)  # exact
                acc = torch.zeros((b - a, d - c), dtype=torch.float64, device=dev)
                for h in range(heads):  # fixed order, elementwise: no shape-dependent rounding
                    acc += wf[:, h:h + 1] * dots[:, h]
                acc *= sc[c:d]
                col = torch.arange(lo + c, lo + d, device=dev)
                acc.masked_fill_((col < s) | (col >= e), float("-inf"))
                out[a - r0:b - r0, c:d] = acc
                del dots, acc
    return out


def reference_topk(logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, topk: int, *,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
    """Exact top-k per row of ``logits [rows, width]`` (column = key index)
    over ``[starts[r], ends[r])`` (``ends <= width``): the first ``min(topk, n_r)``
    keys in (value desc, index asc) order, relative to the start, then ``-1``.
    Returns ``[rows, topk]`` int32 sorted in that order. NaN ranks above every
    number (torch.sort's order); callers check logits are NaN-free."""
    rows, width = logits.shape
    dev = logits.device
    out = torch.full((rows, topk), -1, dtype=torch.int32, device=dev)
    kk = min(topk, width)
    if rows == 0 or kk == 0:
        return out
    st = starts.to(device=dev, dtype=torch.int64)
    en = ends.to(device=dev, dtype=torch.int64)
    rc = max(1, min(rows, max_bytes // (24 * width)))  # values, int64 order, mask, copies
    col = torch.arange(width, device=dev)
    pos = torch.arange(kk, device=dev)
    for a in range(0, rows, rc):
        b = min(rows, a + rc)
        s, e = st[a:b, None], en[a:b, None]
        inside = (col >= s) & (col < e)
        x = torch.where(inside, logits[a:b], torch.full((), float("-inf"), dtype=logits.dtype, device=dev))
        order = torch.sort(x, dim=1, descending=True, stable=True).indices
        if bool((inside & (x == float("-inf"))).any()):
            # A -inf inside the range ties with the masked outside keys: a
            # second stable sort moves every inside key ahead of every outside one.
            ins = inside.gather(1, order).to(torch.int8)
            order = order.gather(1, torch.sort(ins, dim=1, descending=True, stable=True).indices)
        need = torch.clamp(e - s, min=0, max=topk)
        top = order[:, :kk]
        rel = torch.where(pos < need, top - s, torch.full_like(top, -1))
        out[a:b, :kk] = rel.to(torch.int32)
        del inside, x, order
    return out


def _row_chunk(w, precision: str, row_chunk: int | None, max_bytes: int) -> int:
    if row_chunk is not None:
        if row_chunk < 1:
            raise ValueError(f"row_chunk: must be >= 1, got {row_chunk}")
        return int(row_chunk)
    esize = 8 if precision == "fp64" else 4
    return max(1, (max_bytes // 4) // (max(w.keys, 1) * esize))


def iter_reference_logits(w, precision: str = "fp32", row_chunk: int | None = None, *,
                          max_bytes: int = DEFAULT_MAX_BYTES):
    """Yields ``(r0, r1, lo, hi, logits)`` over row chunks of workload ``w``:
    ``logits = reference_logits(rows=slice(r0, r1), key_range=(lo, hi))`` where
    ``[lo, hi)`` is the key span the chunk's rows see. The one chunk plan shared
    by ``reference_mqa_topk`` and ``assemble_reference_logits`` (the same
    shapes give the same fp32 roundings)."""
    rows = w.rows
    if rows == 0:
        return
    st = w.starts.to("cpu", torch.int64)
    en = w.ends.to("cpu", torch.int64)
    rc = _row_chunk(w, precision, row_chunk, max_bytes)
    for a in range(0, rows, rc):
        b = min(rows, a + rc)
        lo, hi = int(st[a:b].min()), int(en[a:b].max())
        hi = max(lo, hi)
        yield a, b, lo, hi, reference_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends, precision=precision,
                                             rows=slice(a, b), key_range=(lo, hi), max_bytes=max_bytes)


def reference_mqa_topk(w, precision: str = "fp32", row_chunk: int | None = None, *,
                       max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
    """``reference_topk(reference_logits(...))`` of workload ``w``, chunked over
    rows (each chunk computes only the key span its rows see). ``[rows, topk]``
    int32 on the workload's device, sorted by (value desc, index asc)."""
    topk = int(w.topk)
    out = torch.full((w.rows, topk), -1, dtype=torch.int32, device=w.device)
    for a, b, lo, hi, logits in iter_reference_logits(w, precision, row_chunk, max_bytes=max_bytes):
        out[a:b] = reference_topk(logits, w.starts[a:b] - lo, w.ends[a:b] - lo, topk, max_bytes=max_bytes)
        del logits
    return out


def assemble_reference_logits(w, precision: str = "fp32", row_chunk: int | None = None, *,
                              max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
    """The logits ``reference_mqa_topk`` selects from, as one ``[rows, keys]``
    tensor (-inf outside each row's range): bitwise the values it ranked."""
    dtype = _dtype(precision)
    out = torch.full((w.rows, w.keys), float("-inf"), dtype=dtype, device=w.device)
    for a, b, lo, hi, logits in iter_reference_logits(w, precision, row_chunk, max_bytes=max_bytes):
        out[a:b, lo:hi] = logits
    return out


__all__ = ["reference_logits", "reference_topk", "reference_mqa_topk", "iter_reference_logits",
           "assemble_reference_logits", "ieee_fp32_matmul", "DEFAULT_MAX_BYTES"]
