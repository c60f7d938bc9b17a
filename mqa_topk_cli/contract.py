"""Python-side contract checks of the ops (SPEC §3).

Each check raises ``ContractError`` whose message starts with the argument's
name. The C++ launchers repeat the checks that guard memory safety (shape,
dtype, contiguity, alignment, device), so a caller that bypasses Python still
gets a clean error.

The value checks (``check_ranges``: ``0 <= starts <= ends <= keys``) read the
tensors back, which for CUDA tensors is a host sync: the ops run them on the
host only for CPU tensors or in checked mode (``checked=True`` /
``MQA_TOPK_CHECKED=1``); otherwise the kernels check the ranges on the device
(csrc/include/mqa_topk/common/range_check.cuh) and ``ops`` reports a bad row later.

The checks run on every op call, so each has a fast path: one expression that
accepts correct inputs with few attribute lookups; anything it does not accept
goes through the detailed checks, which name the argument at fault.
"""
from __future__ import annotations

import torch

from .checks import DEFAULT_HEADS, MAX_KEYS, MAX_ROWS, SUPPORTED_HEADS, kernel_heads, max_rows  # noqa: F401  (torch-free)
from .errors import ContractError

#: Heads the ops take: q ``[rows, heads, 128]`` and weights ``[rows, heads]``
#: with heads in SUPPORTED_HEADS (16, 32, 64; checks.py). ``HEADS`` is the
#: default (32), kept under its old name for callers of earlier versions; the
#: ops take the heads of each call from q.
HEADS = DEFAULT_HEADS
HEAD_DIM = 128
_HEADS_SET = frozenset(SUPPORTED_HEADS)
#: rows * heads must stay below this (int32 head-row indices): rows <= max_rows(heads).
_INT32_LIMIT = 1 << 31
#: The q shape of the contract in words (the C++ launchers say the same).
Q_SHAPE = "[rows, heads, 128] with heads " + ", ".join(map(str, SUPPORTED_HEADS[:-1])) + f" or {SUPPORTED_HEADS[-1]}"
TOPKS = (512, 1024, 2048)
FP8 = torch.float8_e4m3fn
_F32 = torch.float32
_I32 = torch.int32


def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ContractError(name, f"expected a torch.Tensor, got {type(t).__name__}")
    return t


def _dtype(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dtype != dtype:
        raise ContractError(name, f"expected dtype {dtype}, got {t.dtype}")


def _shape(name: str, t: torch.Tensor, shape: tuple, what: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ContractError(name, f"expected shape {what} = {list(shape)}, got {list(t.shape)}")


def _contig(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ContractError(name, "must be contiguous")


def _aligned(name: str, t: torch.Tensor, align: int = 16) -> None:
    if t.numel() and t.data_ptr() % align:
        raise ContractError(name, f"data pointer must be {align}-byte aligned")


def check_heads(heads, name: str = "heads") -> int:
    """``heads`` when it is one of ``SUPPORTED_HEADS``, else ``ContractError`` naming ``name``."""
    if isinstance(heads, bool) or not isinstance(heads, int) or heads not in _HEADS_SET:
        raise ContractError(name, f"must be one of {SUPPORTED_HEADS}, got {heads!r}")
    return heads


def mqa_heads(q) -> int:
    """The heads of a q tensor that passed ``check_mqa_inputs`` (its dim 1)."""
    return int(q.shape[1])


def check_topk(topk) -> int:
    if isinstance(topk, bool) or not isinstance(topk, int) or topk not in TOPKS:
        raise ContractError("topk", f"must be one of {TOPKS}, got {topk!r}")
    return topk


def check_ranges(starts: torch.Tensor, ends: torch.Tensor, keys: int) -> None:
    """0 <= starts <= ends <= keys, elementwise (reads the values back)."""
    if starts.numel() == 0:
        return
    s = starts.to("cpu", torch.int64)
    e = ends.to("cpu", torch.int64)
    if int(s.min()) < 0:
        r = int(torch.nonzero(s < 0)[0])
        raise ContractError("starts", f"must be >= 0 (row {r} has {int(s[r])})")
    bad = torch.nonzero(e < s)
    if bad.numel():
        r = int(bad[0])
        raise ContractError("ends", f"must be >= starts (row {r}: start {int(s[r])}, end {int(e[r])})")
    bad = torch.nonzero(e > keys)
    if bad.numel():
        r = int(bad[0])
        raise ContractError("ends", f"must be <= keys = {keys} (row {r} has {int(e[r])})")


def _mqa_inputs_ok(q, k, scales, weights, starts, ends) -> bool:
    """True when the inputs pass every check of ``_check_mqa_inputs_slow``
    (never when one would fail; False just means "look closer"). CUDA tensors
    only: CPU inputs take the detailed checks (they are not the fast path)."""
    try:
        qs = q.shape
        ks = k.shape
        rows = qs[0]
        keys = ks[0]
        dev = q.get_device()
        return (q.dtype is FP8 and k.dtype is FP8 and scales.dtype is _F32 and weights.dtype is _F32
                and starts.dtype is _I32 and ends.dtype is _I32
                and len(qs) == 3 and qs[1] in _HEADS_SET and qs[2] == HEAD_DIM and rows * qs[1] < _INT32_LIMIT
                and len(ks) == 2 and ks[1] == HEAD_DIM and keys <= MAX_KEYS
                and scales.shape == (keys,) and weights.shape == (rows, qs[1])
                and starts.shape == (rows,) and ends.shape == (rows,)
                and q.is_contiguous() and k.is_contiguous() and scales.is_contiguous()
                and weights.is_contiguous() and starts.is_contiguous() and ends.is_contiguous()
                and not ((q.data_ptr() | k.data_ptr() | scales.data_ptr() | weights.data_ptr()) & 15)
                and q.is_cuda and k.is_cuda and scales.is_cuda and weights.is_cuda and starts.is_cuda and ends.is_cuda
                and k.get_device() == dev and scales.get_device() == dev and weights.get_device() == dev
                and starts.get_device() == dev and ends.get_device() == dev)
    except (AttributeError, IndexError, TypeError):
        return False


def check_mqa_inputs(q, k, scales, weights, starts, ends, *, check_values: bool = True) -> tuple[int, int]:
    """Checks the shared inputs of the logits/fused ops; returns (rows, keys).
    ``check_values``: also check the starts/ends values on the host (for CUDA
    tensors a device-to-host copy and sync); CPU tensors are always checked."""
    if _mqa_inputs_ok(q, k, scales, weights, starts, ends):
        rows, keys = q.shape[0], k.shape[0]
    else:
        rows, keys = _check_mqa_inputs_slow(q, k, scales, weights, starts, ends)
    if check_values or not starts.is_cuda:
        check_ranges(starts, ends, keys)
    return rows, keys


def _check_mqa_inputs_slow(q, k, scales, weights, starts, ends) -> tuple[int, int]:
    q = _tensor("q", q)
    k = _tensor("k", k)
    scales = _tensor("scales", scales)
    weights = _tensor("weights", weights)
    starts = _tensor("starts", starts)
    ends = _tensor("ends", ends)
    _dtype("q", q, FP8)
    if q.dim() != 3 or q.shape[1] not in _HEADS_SET or q.shape[2] != HEAD_DIM:
        raise ContractError("q", f"expected shape {Q_SHAPE}, got {list(q.shape)}")
    rows, heads = q.shape[0], q.shape[1]
    if rows > max_rows(heads):
        raise ContractError("q", f"{rows} rows exceeds the limit of {max_rows(heads)} at {heads} heads "
                                 f"(rows * {kernel_heads(heads)} must fit int32"
                                 + ("; 16 heads run as 32)" if heads < 32 else ")"))
    _dtype("k", k, FP8)
    if k.dim() != 2 or k.shape[1] != HEAD_DIM:
        raise ContractError("k", f"expected shape [keys, {HEAD_DIM}], got {list(k.shape)}")
    keys = k.shape[0]
    if keys > MAX_KEYS:
        raise ContractError("k", f"{keys} keys exceeds the limit of {MAX_KEYS}")
    if scales.dtype == torch.uint8 and scales.dim() == 2 and scales.shape[1] == 4:
        raise ContractError("scales", "got UE8M0 [keys, 4] uint8 scales; convert them with fused_mqa_topk_key_scales() first")
    _dtype("scales", scales, torch.float32)
    _shape("scales", scales, (keys,), "[keys]")
    _dtype("weights", weights, torch.float32)
    if tuple(weights.shape) != (rows, heads):
        raise ContractError("weights", f"expected shape [rows, heads] = {[rows, heads]} (the heads of q), "
                                       f"got {list(weights.shape)}")
    for name, t in (("starts", starts), ("ends", ends)):
        _dtype(name, t, torch.int32)
        _shape(name, t, (rows,), "[rows]")
    for name, t in (("q", q), ("k", k), ("scales", scales), ("weights", weights), ("starts", starts), ("ends", ends)):
        _contig(name, t)
    for name, t in (("q", q), ("k", k), ("scales", scales), ("weights", weights)):
        _aligned(name, t)
    dev = q.device
    for name, t in (("k", k), ("scales", scales), ("weights", weights), ("starts", starts), ("ends", ends)):
        if t.device != dev:
            raise ContractError(name, f"must be on the same device as q ({dev}), got {t.device}")
    return rows, keys


def check_output(output, rows: int, device: torch.device) -> int:
    """output: [rows, topk] int32, contiguous, 16-byte aligned; returns topk."""
    try:
        os_ = output.shape
        if (output.dtype is _I32 and len(os_) == 2 and os_[0] == rows and os_[1] in TOPKS
                and output.is_contiguous() and not output.data_ptr() & 15 and output.device == device):
            return os_[1]
    except (AttributeError, TypeError):
        pass
    output = _tensor("output", output)
    _dtype("output", output, torch.int32)
    if output.dim() != 2 or output.shape[0] != rows:
        raise ContractError("output", f"expected shape [rows={rows}, topk], got {list(output.shape)}")
    if output.shape[1] not in TOPKS:
        raise ContractError("output", f"topk (dim 1) must be one of {TOPKS}, got {output.shape[1]}")
    _contig("output", output)
    _aligned("output", output)
    if output.device != device:
        raise ContractError("output", f"must be on {device}, got {output.device}")
    return int(output.shape[1])


def check_logits(logits, starts, ends, *, check_values: bool = True) -> tuple[int, int]:
    """logits: fp32 [rows, width] (row stride may exceed width, unit column stride);
    starts/ends int32 [rows] with ends <= width (values checked on the host as
    in ``check_mqa_inputs``). Returns (rows, width)."""
    rows_width = _logits_ok(logits, starts, ends)
    if rows_width is None:
        rows_width = _check_logits_slow(logits, starts, ends)
    if check_values or not starts.is_cuda:
        check_ranges(starts, ends, rows_width[1])
    return rows_width


def _logits_ok(logits, starts, ends):
    """(rows, width) when the inputs pass every check of ``_check_logits_slow``, else None."""
    try:
        ls = logits.shape
        if len(ls) != 2:
            return None
        rows, width = ls
        dev = logits.get_device()
        if (logits.dtype is _F32 and starts.dtype is _I32 and ends.dtype is _I32 and width <= MAX_KEYS
                and logits.stride(1) == 1 and (rows <= 1 or logits.stride(0) >= width)
                and starts.shape == (rows,) and ends.shape == (rows,)
                and starts.is_contiguous() and ends.is_contiguous()
                and logits.is_cuda and starts.is_cuda and ends.is_cuda
                and starts.get_device() == dev and ends.get_device() == dev):
            return rows, width
    except (AttributeError, TypeError, ValueError):
        pass
    return None


def _check_logits_slow(logits, starts, ends) -> tuple[int, int]:
    logits = _tensor("logits", logits)
    starts = _tensor("starts", starts)
    ends = _tensor("ends", ends)
    _dtype("logits", logits, torch.float32)
    if logits.dim() != 2:
        raise ContractError("logits", f"expected shape [rows, width], got {list(logits.shape)}")
    if logits.stride(1) != 1 or (logits.shape[0] > 1 and logits.stride(0) < logits.shape[1]):
        raise ContractError("logits", "rows must be dense (column stride 1, row stride >= width)")
    rows, width = logits.shape
    for name, t in (("starts", starts), ("ends", ends)):
        _dtype(name, t, torch.int32)
        _shape(name, t, (rows,), "[rows]")
        _contig(name, t)
        if t.device != logits.device:
            raise ContractError(name, f"must be on the same device as logits ({logits.device}), got {t.device}")
    if width > MAX_KEYS:
        raise ContractError("logits", f"width {width} exceeds the key limit {MAX_KEYS}")
    return rows, width
