"""The public ops (SPEC §3). Names mirror the serving engine's, so a caller can
swap them in. Every op checks its contract first (``contract.py``) and raises
``ContractError`` naming the argument; the C++ launchers check again.

The native kernels come from the JIT-built extension (``jit.py``); ops that need
it raise ``Unavailable`` with one clear line when there is no Hopper GPU or no
toolchain.
"""
from __future__ import annotations

import torch

from . import contract
from .contract import check_logits, check_mqa_inputs, check_output
from .eligibility import (  # noqa: F401  (re-exported: the eligibility API lives beside the ops)
    fused_mqa_topk_available,
    fused_mqa_topk_chunk,
    fused_mqa_topk_min_keys,
    use_fused_mqa_topk,
)
from .errors import ContractError, Unavailable

#: The serving engine's default logits budget (VLLM_SPARSE_INDEXER_MAX_LOGITS_MB).
DEFAULT_MAX_LOGITS_BYTES = 512 << 20
#: Row pitch of the native logits buffer is a multiple of this many fp32 (16 B).
LOGITS_PITCH = 4


def _native():
    from .jit import load_extension

    return load_extension()


def _require_cuda(t: torch.Tensor, op: str) -> None:
    if t.device.type != "cuda":
        raise Unavailable(f"{op}: the native kernel runs on a CUDA (sm_90) GPU; got tensors on {t.device}")


def fused_mqa_topk_key_scales(ue8m0_scales: torch.Tensor) -> torch.Tensor:
    """fp32 per-key scales from UE8M0 ``[keys, 4]`` uint8 scales (four equal
    bytes holding the exponent e): the fp32 ``2**(e-127)`` has bit pattern ``e << 23``."""
    s = ue8m0_scales
    if not isinstance(s, torch.Tensor):
        raise ContractError("ue8m0_scales", f"expected a torch.Tensor, got {type(s).__name__}")
    if s.dtype != torch.uint8 or s.dim() != 2 or s.shape[1] != 4:
        raise ContractError("ue8m0_scales", f"expected uint8 [keys, 4], got {s.dtype} {list(s.shape)}")
    if not s.is_contiguous():
        raise ContractError("ue8m0_scales", "must be contiguous")
    e = s[:, 0].to(torch.int32)
    if s.numel() and not bool((s == s[:, :1]).all()):
        raise ContractError("ue8m0_scales", "the four bytes of each key must be equal (one UE8M0 exponent)")
    bad = (e == 0) | (e == 255)
    if s.numel() and bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ContractError("ue8m0_scales", f"key {i} has exponent {int(e[i])}: exponents 0 (fp32 scale 0.0) and 255 "
                                            f"(fp32 scale inf) are not valid positive scales")
    return (e << 23).view(torch.float32)


def mqa_logits(q, k, scales, weights, starts, ends) -> torch.Tensor:
    """Dense fp32 logits ``[rows, keys]`` (SPEC §1) from the native sm_90a kernel.

    Only ``[starts[r], ends[r])`` of row r is meaningful: inside it the exact
    logit; in the rest of the row's 8-row block span (the block's smallest
    start rounded down to 16, to its largest end) ``-inf``; everything else is
    left unwritten (unspecified). The result may be a view with a row stride
    padded to a multiple of 4 floats.
    """
    rows, keys = check_mqa_inputs(q, k, scales, weights, starts, ends)
    _require_cuda(q, "mqa_logits")
    ext = _native()
    buf = torch.empty((rows, _pitch(keys)), dtype=torch.float32, device=q.device)
    if rows and keys:
        ext.mqa_logits(q, k, scales, weights, starts, ends, buf)
    return buf[:, :keys]


def _pitch(width: int) -> int:
    return max(LOGITS_PITCH, -(-width // LOGITS_PITCH) * LOGITS_PITCH)


def _topk_rows_torch(logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, output: torch.Tensor) -> None:
    """Deterministic top-k per row with torch ops (fallback until the native
    top-k kernel is built): the top-k by (value desc, index asc), written in
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


def top_k_per_row_prefill(logits, starts, ends, output) -> None:
    """Per-row top-k of fp32 logits ``[rows, >= max end]`` over ``[start, end)``;
    writes ``output [rows, topk]`` int32 with indices relative to the start,
    unordered, -1 padded. Ties at the k-th value go to the lowest indices."""
    rows, _ = check_logits(logits, starts, ends)
    check_output(output, rows, logits.device)
    _topk_checked(logits, starts, ends, output)


def _topk_checked(logits, starts, ends, output) -> None:
    """The top-k on inputs that already passed the contract checks."""
    if logits.device.type == "cuda":
        ext = _native()
        if hasattr(ext, "topk_per_row"):
            if logits.shape[0]:
                ext.topk_per_row(logits, starts, ends, output)
            return
    _topk_rows_torch(logits, starts, ends, output)


def dense_mqa_topk_prefill(q, k, scales, weights, starts, ends, output,
                           max_logits_bytes: int = DEFAULT_MAX_LOGITS_BYTES) -> None:
    """The native dense path: ``mqa_logits`` then ``top_k_per_row_prefill``,
    rows chunked so one full-width logits matrix stays under
    ``max_logits_bytes`` (as the serving engine does); each chunk computes only
    the key span ``[min start, max end)`` its rows see."""
    rows, keys = check_mqa_inputs(q, k, scales, weights, starts, ends)
    check_output(output, rows, q.device)
    if not isinstance(max_logits_bytes, int) or max_logits_bytes <= 0:
        raise ContractError("max_logits_bytes", f"must be a positive int, got {max_logits_bytes!r}")
    _require_cuda(q, "dense_mqa_topk_prefill")
    if rows == 0:
        return
    # Everything is checked once above (one host sync for the ranges); the
    # chunks below call the extension directly, so the GPU never waits on
    # Python between chunks, and they share one logits buffer.
    ext = _native()
    full_pitch = _pitch(max(keys, 1))
    chunk = max(1, min(rows, max_logits_bytes // (full_pitch * 4)))
    s_host = starts.to("cpu", torch.int64)
    e_host = ends.to("cpu", torch.int64)
    buf = torch.empty(chunk * full_pitch, dtype=torch.float32, device=q.device)
    for r0 in range(0, rows, chunk):
        sl = slice(r0, min(rows, r0 + chunk))
        n = sl.stop - r0
        # lo rounded down to 16 keys keeps k[lo:] and scales[lo:] 16-byte aligned.
        lo, hi = int(s_host[sl].min()) & ~15, int(e_host[sl].max())
        hi = max(hi, lo)
        st = (starts[sl] - lo).contiguous()
        en = (ends[sl] - lo).contiguous()
        if hi > lo:
            pitch = _pitch(hi - lo)
            logits = buf[: n * pitch].view(n, pitch)
            ext.mqa_logits(q[sl], k[lo:hi], scales[lo:hi], weights[sl], st, en, logits)
            logits = logits[:, : hi - lo]
        else:
            logits = torch.empty((n, 0), dtype=torch.float32, device=q.device)
        _topk_checked(logits, st, en, output[sl])


#: Candidate slots per (warpgroup, row) buffer of the fused kernel, and its
#: workspace layout (csrc/include/mqa_topk/sm90_fused_mqa_topk.cuh): a 64-byte
#: header (block counter, development statistics) + per SM 2 warpgroups x 8 rows x (key, index) x cap words.
def fused_candidate_cap(topk: int) -> int:
    return 3 * topk + 128


def fused_mqa_topk_workspace_bytes(topk: int, num_sms: int) -> int:
    """Bytes of workspace ``fused_mqa_topk_prefill`` needs on a GPU with
    ``num_sms`` SMs (independent of rows and keys)."""
    if topk not in contract.TOPKS:
        raise ContractError("topk", f"must be one of {contract.TOPKS}, got {topk!r}")
    if not isinstance(num_sms, int) or num_sms <= 0:
        raise ContractError("num_sms", f"must be a positive int, got {num_sms!r}")
    return 64 + num_sms * 2 * 8 * 2 * fused_candidate_cap(topk) * 4


_workspaces: dict = {}


def fused_mqa_topk_workspace(device, topk: int) -> torch.Tensor:
    """The fused kernel's workspace for ``topk`` on ``device``, one per (device,
    topk, current stream), allocated once and reused: calls queued on one
    stream run one after another, so they may share it; concurrent streams
    get their own."""
    device = torch.device(device)
    if device.type != "cuda":
        raise Unavailable(f"fused_mqa_topk_workspace: the fused kernel runs on a CUDA (sm_90) GPU; got {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (device.index, topk, torch.cuda.current_stream(device).cuda_stream)
    ws = _workspaces.get(key)
    if ws is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        ws = torch.empty(fused_mqa_topk_workspace_bytes(topk, sms), dtype=torch.uint8, device=device)
        _workspaces[key] = ws
    return ws


def fused_mqa_topk_prefill(q, k, scales, weights, starts, ends, output, workspace=None) -> None:
    """Fused single-launch logits + top-k (SPEC §2): one memset of a 4-byte
    counter and one kernel. Same output convention as
    ``top_k_per_row_prefill``; the logits are bitwise those of ``mqa_logits``,
    so the index sets equal the native dense path's. ``workspace``: a uint8
    CUDA tensor of at least ``fused_mqa_topk_workspace_bytes`` bytes (default:
    one cached per device and topk)."""
    rows, _ = check_mqa_inputs(q, k, scales, weights, starts, ends)
    check_output(output, rows, q.device)
    _require_cuda(q, "fused_mqa_topk_prefill")
    ext = _native()
    if not hasattr(ext, "fused_mqa_topk"):
        raise Unavailable("fused_mqa_topk_prefill: the fused kernel is not built in this version")
    if workspace is None:
        workspace = fused_mqa_topk_workspace(q.device, output.shape[1])
    elif not isinstance(workspace, torch.Tensor):
        raise ContractError("workspace", f"expected a torch.Tensor, got {type(workspace).__name__}")
    ext.fused_mqa_topk(q, k, scales, weights, starts, ends, output, workspace)


__all__ = [
    "DEFAULT_MAX_LOGITS_BYTES", "mqa_logits", "top_k_per_row_prefill", "dense_mqa_topk_prefill",
    "fused_mqa_topk_prefill", "fused_mqa_topk_key_scales", "fused_mqa_topk_workspace",
    "fused_mqa_topk_workspace_bytes", "fused_candidate_cap", "use_fused_mqa_topk", "fused_mqa_topk_chunk",
    "fused_mqa_topk_min_keys", "fused_mqa_topk_available", "contract",
]
