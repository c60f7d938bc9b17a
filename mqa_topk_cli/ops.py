"""The public ops (SPEC §3). Names mirror the serving engine's, so a caller can
swap them in. Every op checks its contract first (``contract.py``) and raises
``ContractError`` naming the argument; the C++ launchers check again.

The native kernels come from the JIT-built extension (``jit.py``); ops that need
it raise ``Unavailable`` with one clear line when there is no Hopper GPU or no
toolchain.

Heads: every op takes the indexer's heads from its q, ``[rows, H, 128]`` with
H in ``contract.SUPPORTED_HEADS`` (16, 32, 64), and weights ``[rows, H]``
(another H is a ``ContractError`` naming ``q``, weights of other heads one
naming ``weights``). 32 and 64 heads run kernels built for them; 16 heads run
the 32-head kernels on q and weights padded with 16 zero heads (exact: a zero
head adds +0 to every sum), a per-call copy made by the launcher.

Serving-grade calls (no host sync, CUDA-graph capturable)
---------------------------------------------------------
The default call of every op never synchronises with the host and never copies
between host and device: everything checked without looking at tensor contents
(dtype, shape, contiguity, alignment, device, topk) is checked on the host, with
one-line errors as before; the *values* of ``starts``/``ends``
(``0 <= start <= end <= keys``) are checked **on the device**:

- every kernel clamps each row's range (``start' = clamp(start, 0, keys)``,
  ``end' = clamp(end, start', keys)``; start > end is an empty row), so no int32
  value makes it read or write out of bounds, and the fused and dense paths
  still agree on such a row;
- the kernels record the lowest bad row of the device in an error word
  (csrc/include/mqa_topk/common/range_check.cuh); the record reaches the host through
  a mapped mirror that the ops poll without a sync;
- the error is raised as a ``ContractError`` naming ``starts`` or ``ends`` and
  the row (``"starts: must be >= 0 (row 5 has -3; ...)"``) at the next point
  where the host looks: the next op call on that device (which then raises
  instead of launching; the record is consumed), or ``check_errors()``, which
  waits for the device and raises. Until then the bad call's output is that of
  the clamped ranges.
- ``checked=True`` (any op) or ``MQA_TOPK_CHECKED=1`` (read when this module is
  imported) restores the eager check: the values are read back to the host
  before the launch (one sync) and a bad row raises at once, before any kernel
  runs, with the same messages as ``contract.check_ranges``. Not capturable.

Buffers a captured graph uses stay valid for the graph's life: the error word
is allocated once per device, the fused workspace once per (device, topk,
stream) and never from a graph's private pool (a workspace first needed during
capture is allocated with ``cudaMalloc`` outside it); the dense path's logits
buffer is an ordinary allocation, which inside a capture comes from the graph's
pool and is reused by every replay. Replaying a graph after changing its input
tensors' values in place gives the result of an eager call on the new values.
"""
from __future__ import annotations

import ctypes
import os

import torch

from . import contract
from .checks import env_flag, fused_kernel_env
from .contract import check_logits, check_mqa_inputs, check_output
from .eligibility import (  # noqa: F401  (re-exported: the eligibility API lives beside the ops)
    fused_mqa_topk_available,
    fused_mqa_topk_calibration,
    fused_mqa_topk_chunk,
    fused_mqa_topk_min_keys,
    use_fused_mqa_topk,
)
from .errors import ContractError, Unavailable

#: The serving engine's default logits budget (VLLM_SPARSE_INDEXER_MAX_LOGITS_MB).
DEFAULT_MAX_LOGITS_BYTES = 512 << 20
#: Row pitch of the native logits buffer is a multiple of this many fp32 (16 B).
LOGITS_PITCH = 4

#: ``MQA_TOPK_CHECKED=1``: every op call checks the ranges on the host (eager
#: sync-and-raise) unless it passes ``checked=False`` (read when this module is
#: imported; a value that is not a clear boolean is an error naming it).
CHECKED = env_flag("MQA_TOPK_CHECKED")

#: The fused kernels, in the extension's order (csrc/include/mqa_topk/fused/heuristics.h).
FUSED_KERNELS = ("whole", "split", "staged", "hybrid")


#: ``MQA_TOPK_FUSED_KERNEL`` (read when this module is imported): a kernel
#: every fused call runs instead of the one chosen by shape (unset, empty or
#: "auto": none; anything else is an error naming it).
FUSED_KERNEL = fused_kernel_env()

_ext = None
#: The current raw stream of a device, as an int (the fast private binding when
#: this torch has it).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def _native():
    """The loaded extension (built on first use)."""
    global _ext
    if _ext is None:
        from .jit import load_extension

        _ext = load_extension()
    return _ext


def _require_cuda(t: torch.Tensor, op: str) -> None:
    if not t.is_cuda:
        raise Unavailable(f"{op}: the native kernel runs on a CUDA (sm_90) GPU; got tensors on {t.device}")


# --------------------------------------------------------------------------- device range errors

#: The error word's "clean" value, and the record layout of range_check.cuh.
_RANGE_OK = (1 << 64) - 1
_ROW_MAX = (1 << 28) - 1
_KERNELS = {1: "logits", 2: "top-k", 3: "fused"}
_mirrors: dict = {}  # device index -> ctypes.c_uint64 over the pinned, mapped mirror


def _mirror(ext, index: int):
    m = _mirrors.get(index)
    if m is None:
        m = ctypes.c_uint64.from_address(ext.range_error_mirror_address(index))
        _mirrors[index] = m
    return m


def _poll(ext, index: int) -> None:
    """Raise a bad row an earlier launch recorded on device ``index`` (a read
    of pinned host memory: no sync, nothing enqueued)."""
    m = _mirrors.get(index)
    if m is None:
        m = _mirror(ext, index)
    if m.value != _RANGE_OK:
        _raise_recorded(ext, index, m.value, earlier=True)


def range_error(code: int, where: str = "") -> ContractError:
    """The ``ContractError`` of a packed device record (range_check.cuh:
    row << 36 | condition << 34 | kernel << 32 | the offending int32)."""
    row = code >> 36
    cond = (code >> 34) & 3
    kernel = _KERNELS.get((code >> 32) & 3, "native")
    value = code & 0xFFFFFFFF
    value -= (value >> 31) << 32
    at = f"row >= {row}" if row >= _ROW_MAX else f"row {row}"
    src = f"found on the device by the {kernel} kernel{where}"
    if cond == 0:
        return ContractError("starts", f"must be >= 0 ({at} has {value}; {src})")
    if cond == 1:
        return ContractError("ends", f"must be >= starts ({at} has end {value}; {src})")
    return ContractError("ends", f"must be <= keys ({at} has {value}; {src})")


def _raise_recorded(ext, index: int, mirror_value: int, earlier: bool) -> None:
    if torch.cuda.is_current_stream_capturing():
        code = mirror_value  # no waiting during capture: report what the mirror holds, keep the record
    else:
        torch.cuda.synchronize(index)  # the error path only: the exact (lowest) record
        code = ext.range_error_take(index) or (mirror_value if mirror_value != _RANGE_OK else 0)
    if code:
        raise range_error(code, f" in an earlier call on cuda:{index}" if earlier else "")


def check_errors(device=None) -> None:
    """Waits for the work queued on ``device`` (default: every device an op of
    this module has run on) and raises the ``ContractError`` of the lowest bad
    row (``starts``/``ends`` out of ``0 <= start <= end <= keys``) recorded on
    the device since the last report; the record is then cleared. Returns None
    when there is none. Not callable during CUDA-graph capture (it synchronises)."""
    if device is None:
        indices = list(_mirrors)
    else:
        d = torch.device(device)
        if d.type != "cuda":
            return
        indices = [d.index if d.index is not None else torch.cuda.current_device()]
    if not indices:
        return
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("check_errors: cannot wait for the device during CUDA graph capture")
    ext = _native()
    for index in indices:
        _mirror(ext, index)
        torch.cuda.synchronize(index)
        code = ext.range_error_take(index)
        if code:
            raise range_error(code, f" on cuda:{index}")


def _checked(checked) -> bool:
    return CHECKED if checked is None else bool(checked)


def fused_mqa_topk_key_scales(ue8m0_scales: torch.Tensor, *, checked=None) -> torch.Tensor:
    """fp32 per-key scales from UE8M0 ``[keys, 4]`` uint8 scales (four equal
    bytes holding the exponent e): the fp32 ``2**(e-127)`` has bit pattern ``e << 23``.

    The byte values (four equal bytes, exponent not 0 or 255) are checked for
    CPU tensors and in checked mode (``checked=True`` / ``MQA_TOPK_CHECKED=1``);
    on a GPU the default call does not read them back (no host sync), and the
    scale is taken from the first byte."""
    s = ue8m0_scales
    if not isinstance(s, torch.Tensor):
        raise ContractError("ue8m0_scales", f"expected a torch.Tensor, got {type(s).__name__}")
    if s.dtype != torch.uint8 or s.dim() != 2 or s.shape[1] != 4:
        raise ContractError("ue8m0_scales", f"expected uint8 [keys, 4], got {s.dtype} {list(s.shape)}")
    if not s.is_contiguous():
        raise ContractError("ue8m0_scales", "must be contiguous")
    e = s[:, 0].to(torch.int32)
    if s.numel() and (not s.is_cuda or _checked(checked)):
        if not bool((s == s[:, :1]).all()):
            raise ContractError("ue8m0_scales", "the four bytes of each key must be equal (one UE8M0 exponent)")
        bad = (e == 0) | (e == 255)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            raise ContractError("ue8m0_scales", f"key {i} has exponent {int(e[i])}: exponents 0 (fp32 scale 0.0) and "
                                                f"255 (fp32 scale inf) are not valid positive scales")
    return (e << 23).view(torch.float32)


def mqa_logits(q, k, scales, weights, starts, ends, *, checked=None) -> torch.Tensor:
    """Dense fp32 logits ``[rows, keys]`` (SPEC §1) from the native sm_90a kernel.

    Only ``[starts[r], ends[r])`` of row r is meaningful: inside it the exact
    logit; in the rest of the row's 8-row block span (the block's smallest
    start rounded down to 16, to its largest end) ``-inf``; everything else is
    left unwritten (unspecified). The result may be a view with a row stride
    padded to a multiple of 4 floats.

    No host sync (CUDA-graph capturable): bad ``starts``/``ends`` values are
    clamped on the device and reported by a later op call or
    ``check_errors()``; ``checked=True`` (or ``MQA_TOPK_CHECKED=1``) checks
    them on the host first and raises at once (see the module docstring).
    """
    rows, keys = check_mqa_inputs(q, k, scales, weights, starts, ends, check_values=_checked(checked))
    _require_cuda(q, "mqa_logits")
    ext = _native()
    _poll(ext, q.get_device())
    buf = torch.empty((rows, _pitch(keys)), dtype=torch.float32, device=q.device)
    if rows:  # with no keys the launcher only checks the ranges
        ext.mqa_logits(q, k, scales, weights, starts, ends, buf)
    return buf[:, :keys]


def _pitch(width: int) -> int:
    return max(LOGITS_PITCH, -(-width // LOGITS_PITCH) * LOGITS_PITCH)


def _topk_rows_torch(logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, output: torch.Tensor) -> None:
    """Deterministic top-k per row with torch ops (the CPU path of
    ``top_k_per_row_prefill``): the top-k by (value desc, index asc), written in
    ascending index order, relative to the start, -1 padded."""
    rows, width = logits.shape
    topk = output.shape[1]
    if rows == 0:
        return
    if width == 0:
        output.fill_(-1)
        return
    dev = logits.device
    col = torch.arange(width, device=dev)
    s = starts.to(torch.int64)[:, None]
    e = ends.to(torch.int64)[:, None]
    inside = (col >= s) & (col < e)
    n = (e - s).squeeze(1)
    kk = min(topk, width)
    # Rank by value among the row's visible keys; -inf outside (NaN-free logits assumed).
    masked = torch.where(inside, logits, torch.full_like(logits, float("-inf")))
    vals = torch.topk(masked, kk, dim=1, sorted=True).values
    need = torch.clamp(n, max=topk)  # entries to output per row
    kth = vals.gather(1, torch.clamp(need - 1, min=0)[:, None])  # k-th largest value
    above = inside & (masked > kth)
    eq = inside & (masked == kth)
    n_above = above.sum(1, keepdim=True)
    take_eq = eq & (torch.cumsum(eq.to(torch.int32), dim=1) <= (need[:, None] - n_above))
    chosen = (above | take_eq) & (need[:, None] > 0)
    idx = torch.where(chosen, col.expand(rows, width), torch.full_like(col, width).expand(rows, width))
    first = torch.topk(idx, kk, dim=1, largest=False, sorted=True).values
    rel = torch.where(first < width, first - s, torch.full_like(first, -1)).to(torch.int32)
    output.fill_(-1)
    output[:, :kk] = rel


def top_k_per_row_prefill(logits, starts, ends, output, *, checked=None) -> None:
    """Per-row top-k of fp32 logits ``[rows, >= max end]`` over ``[start, end)``;
    writes ``output [rows, topk]`` int32 with indices relative to the start,
    unordered, -1 padded. Ties at the k-th value go to the lowest indices.

    No host sync (CUDA-graph capturable): a bad range is clamped to
    ``[0, width]`` on the device and reported later, ``checked=True`` checks it
    on the host first (see the module docstring)."""
    rows, _ = check_logits(logits, starts, ends, check_values=_checked(checked))
    check_output(output, rows, logits.device)
    if logits.is_cuda:
        ext = _native()
        if hasattr(ext, "topk_per_row"):
            _poll(ext, logits.get_device())
            if rows:
                ext.topk_per_row(logits, starts, ends, output)
            return
    _topk_rows_torch(logits, starts, ends, output)


def dense_mqa_topk_prefill(q, k, scales, weights, starts, ends, output,
                           max_logits_bytes: int = DEFAULT_MAX_LOGITS_BYTES, *, checked=None) -> None:
    """The native dense path: ``mqa_logits`` then ``top_k_per_row_prefill``,
    rows chunked so one full-width logits matrix stays under
    ``max_logits_bytes`` (as the serving engine does). The logits kernel
    computes only the key span each 8-row block sees; the top-k reads only
    ``[start, end)`` of each row.

    No host sync (CUDA-graph capturable): ranges are checked on the device
    (``checked=True`` checks them on the host first; see the module docstring).
    The logits buffer (at most ``max_logits_bytes``) is allocated per call from
    torch's caching allocator (inside a capture: from the graph's pool)."""
    rows, keys = check_mqa_inputs(q, k, scales, weights, starts, ends, check_values=_checked(checked))
    check_output(output, rows, q.device)
    if not isinstance(max_logits_bytes, int) or max_logits_bytes <= 0:
        raise ContractError("max_logits_bytes", f"must be a positive int, got {max_logits_bytes!r}")
    _require_cuda(q, "dense_mqa_topk_prefill")
    if rows == 0:
        return
    ext = _native()
    _poll(ext, q.get_device())
    # The chunks call the extension directly and share one logits buffer; the
    # row offset (last argument) makes the kernels report absolute rows.
    pitch = _pitch(keys)
    chunk = max(1, min(rows, max_logits_bytes // (pitch * 4)))
    buf = torch.empty((chunk, pitch), dtype=torch.float32, device=q.device)
    if chunk == rows:
        ext.mqa_logits(q, k, scales, weights, starts, ends, buf, 0)
        ext.topk_per_row(buf[:, :keys], starts, ends, output, 0)
        return
    for r0 in range(0, rows, chunk):
        r1 = min(rows, r0 + chunk)
        logits = buf[: r1 - r0]
        st, en = starts[r0:r1], ends[r0:r1]
        ext.mqa_logits(q[r0:r1], k, scales, weights[r0:r1], st, en, logits, r0)
        ext.topk_per_row(logits[:, :keys], st, en, output[r0:r1], r0)


def fused_mqa_topk_workspace_bytes(topk: int, num_sms: int) -> int:
    """Bytes of workspace ``fused_mqa_topk_prefill`` needs on a GPU with
    ``num_sms`` SMs (independent of rows and keys; csrc/kernels/fused_dispatch.cu):
    the larger of the split kernel's layout (fused_blocks_workspace_bytes: a
    128-byte header, per SM 8 counter words and 3 x 256 record words, then 3
    candidate regions per SM of 8 rows x 8 segments x (key, index) x cap
    words, cap = (k + 1920) / 4 rounded up to 4, then per region two 8-row x
    256-bin histograms) and the hybrid kernel's whole part (the header and one
    region per CTA of its grid, SMs + 32); the first from 16 SMs on."""
    if topk not in contract.TOPKS:
        raise ContractError("topk", f"must be one of {contract.TOPKS}, got {topk!r}")
    if not isinstance(num_sms, int) or isinstance(num_sms, bool) or num_sms <= 0:
        raise ContractError("num_sms", f"must be a positive int, got {num_sms!r}")
    cap = ((topk + 1920) // 4 + 3) & ~3
    region = 8 * 8 * 2 * cap * 4
    split = 128 + num_sms * (8 + 3 * 256) * 4 + 3 * num_sms * region + 3 * num_sms * 2 * 8 * 256 * 4
    hybrid = 128 + (num_sms + 32) * region
    return max(split, hybrid)


_workspaces: dict = {}


def fused_mqa_topk_workspace(device, topk: int) -> torch.Tensor:
    """The fused kernel's workspace for ``topk`` on ``device``, one per (device,
    topk, current stream), allocated once and reused: calls queued on one
    stream run one after another, so they may share it; concurrent streams
    get their own. One first needed during CUDA-graph capture is allocated
    outside the graph's memory pool (``cudaMalloc``), so it outlives the graph
    and eager calls on that stream can share it."""
    device = torch.device(device)
    if device.type != "cuda":
        raise Unavailable(f"fused_mqa_topk_workspace: the fused kernel runs on a CUDA (sm_90) GPU; got {device}")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _workspace(index, topk)


def _workspace(index: int, topk: int) -> torch.Tensor:
    key = (index, topk, _raw_stream(index))
    ws = _workspaces.get(key)
    if ws is None:
        device = torch.device("cuda", index)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        nbytes = fused_mqa_topk_workspace_bytes(topk, sms)
        with torch.cuda.device(device):
            capturing = torch.cuda.is_current_stream_capturing()
        if capturing:
            ws = _native().empty_outside_capture(nbytes, index)
        else:
            ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
        _workspaces[key] = ws
    return ws


def fused_mqa_topk_prefill(q, k, scales, weights, starts, ends, output, workspace=None, *, checked=None,
                           kernel: str | None = None) -> None:
    """Fused single-launch logits + top-k: one kernel (after memsets of the
    workspace header and, for the staged and hybrid kernels, of their
    per-call buffer's counters). Same output convention as ``top_k_per_row_prefill``; the
    logits are bitwise those of ``mqa_logits``, so the index sets equal the
    native dense path's. ``workspace``: a uint8 CUDA tensor of at least
    ``fused_mqa_topk_workspace_bytes`` bytes (default: one cached per device,
    topk and stream, ``fused_mqa_topk_workspace``); a smaller one is an error.

    ``kernel``: None runs the kernel chosen by shape (``fused_mqa_topk_kernel``)
    or ``MQA_TOPK_FUSED_KERNEL``'s; ``"whole"``, ``"split"``, ``"staged"`` or
    ``"hybrid"`` forces one (an error where it cannot run the shape). Every
    kernel gives the same index sets.

    No host sync (CUDA-graph capturable): ranges are checked on the device
    (``checked=True`` checks them on the host first; see the module docstring)."""
    rows, _ = check_mqa_inputs(q, k, scales, weights, starts, ends, check_values=_checked(checked))
    check_output(output, rows, q.device)
    if kernel is None and FUSED_KERNEL is not None:
        if FUSED_KERNEL not in FUSED_KERNELS:
            raise ContractError("MQA_TOPK_FUSED_KERNEL",
                                f"must be one of {', '.join(FUSED_KERNELS)} or auto, got {FUSED_KERNEL!r}")
        kernel = FUSED_KERNEL
    if kernel is not None and kernel not in FUSED_KERNELS:
        raise ContractError("kernel", f"must be one of {', '.join(FUSED_KERNELS)} or None, got {kernel!r}")
    _require_cuda(q, "fused_mqa_topk_prefill")
    ext = _native()
    index = q.get_device()
    _poll(ext, index)
    if workspace is None:
        workspace = _workspace(index, output.shape[1])
    elif not isinstance(workspace, torch.Tensor):
        raise ContractError("workspace", f"expected a torch.Tensor, got {type(workspace).__name__}")
    ext.fused_mqa_topk(q, k, scales, weights, starts, ends, output, workspace,
                       -1 if kernel is None else FUSED_KERNELS.index(kernel))


def _fused_choice(rows: int, keys: int, topk: int, device, heads: int):
    contract.check_heads(heads)
    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda":
        raise Unavailable(f"fused_mqa_topk_kernel: the fused kernels run on a CUDA (sm_90) GPU; got {device}")
    index = device.index if device.index is not None else torch.cuda.current_device()
    name, nbytes = _native().fused_mqa_topk_choice(int(rows), int(keys), int(topk), int(heads), index)
    return str(name), int(nbytes)


def fused_mqa_topk_kernel(rows: int, keys: int, topk: int, device=None, heads: int = contract.DEFAULT_HEADS) -> str:
    """The fused kernel a call of this shape runs by default on ``device``
    (csrc/include/mqa_topk/fused/heuristics.h): "whole", "split", "staged" or
    "hybrid". ``heads``: the heads of the call's q (16, 32 or 64; a call
    takes them from ``q.shape[1]``)."""
    return _fused_choice(rows, keys, topk, device, heads)[0]


#: The most a fused call allocates beyond its fixed workspace (the staged
#: kernel's logits buffer is at most 500 MiB, kStagedMaxLogitsBytes; the hybrid
#: kernel's far less).
FUSED_CALL_BYTES_CAP = 512 << 20


def fused_mqa_topk_padding_bytes(rows: int, heads: int) -> int:
    """Bytes of the copies of q and weights padded to 32 heads that a call at
    ``heads`` heads holds (16 heads: ``rows * 32 * (128 + 4)``; else 0). While
    they are built, a zero half of q (``rows * 16 * 128`` bytes) also exists
    for a moment."""
    kh = contract.kernel_heads(heads)
    return int(rows) * kh * (contract.HEAD_DIM + 4) if kh != heads else 0


def fused_mqa_topk_call_bytes(rows: int, keys: int, topk: int, device=None,
                              heads: int = contract.DEFAULT_HEADS) -> int:
    """Bytes a fused call of this shape allocates beyond the fixed workspace,
    from the caching allocator: the staged or hybrid kernel's per-call buffer
    (0 for the whole and split kernels; at most ``FUSED_CALL_BYTES_CAP``),
    plus at 16 heads the padded copies of q and weights
    (``fused_mqa_topk_padding_bytes``). ``heads`` as in ``fused_mqa_topk_kernel``."""
    return _fused_choice(rows, keys, topk, device, heads)[1] + fused_mqa_topk_padding_bytes(rows, heads)


__all__ = [
    "DEFAULT_MAX_LOGITS_BYTES", "mqa_logits", "top_k_per_row_prefill", "dense_mqa_topk_prefill",
    "fused_mqa_topk_prefill", "fused_mqa_topk_key_scales", "fused_mqa_topk_workspace",
    "fused_mqa_topk_workspace_bytes", "fused_mqa_topk_kernel", "fused_mqa_topk_call_bytes",
    "fused_mqa_topk_padding_bytes", "fused_mqa_topk_calibration", "FUSED_CALL_BYTES_CAP", "FUSED_KERNELS", "FUSED_KERNEL", "use_fused_mqa_topk", "fused_mqa_topk_chunk",
    "fused_mqa_topk_min_keys", "fused_mqa_topk_available", "contract", "check_errors", "range_error", "CHECKED",
]
