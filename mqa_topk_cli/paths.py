"""Registry of the implementations ("paths") that verify, bench and crossover
run on a ``Workload``.

| name | what | tie-break | needs |
|---|---|---|---|
| ``reference`` | ``reference.reference_mqa_topk`` (fp32, stable sort) | lowest index | - |
| ``torch`` | plain torch: fp8 ``torch._scaled_mm`` (CPU: fp32 matmul), relu, head sum, mask, ``torch.topk`` | unspecified | - |
| ``native`` | ``ops.dense_mqa_topk_prefill`` (native logits kernel + native top-k) | lowest index | sm_90 GPU + nvcc |
| ``fused`` | ``ops.fused_mqa_topk_prefill`` | lowest index | sm_90 GPU + nvcc + the fused kernel |

Every path: ``run(w, output)`` fills ``output [rows, topk]`` int32;
``logits(w)`` returns the path's own fp32 logits ``[rows, keys]`` (only
``[start, end)`` of each row is meaningful) or None; ``prepare(w)`` returns a
zero-argument closure for timing that runs the path into an output allocated
up front; ``unavailable_reason(device)`` is None when the path can run there.
``jit`` is imported lazily, so CPU-only use never touches CUDA.

External paths (the serving engine's kernels, DeepGEMM, FlashInfer, a user's
``py:MODULE:FUNCTION``) live in ``external.py``; ``get_path`` resolves their
names too. They time their own logits or top-k alone through
``prepare_logits(w)`` / ``prepare_topk(w, logits, output)``.
"""
from __future__ import annotations

import torch

from . import checks, external, ops
from .contract import HEAD_DIM
from .errors import Unavailable, UsageError
from .path_base import PathImpl
from .reference import assemble_reference_logits, ieee_fp32_matmul, reference_mqa_topk


def _check_dense_logits(name: str, w) -> None:
    """Before a path materialises its whole ``[rows, keys]`` fp32 logits (plus
    its chunk intermediates, up to 1 GiB): is there room for them?"""
    pairs = w.rows * w.keys
    checks.check_memory(4 * pairs + min(1 << 30, 256 * pairs), w.device, "rows",
                        f"the {name} path's dense logits [{w.rows}, {w.keys}]")


# --------------------------------------------------------------------------- reference

class ReferencePath(PathImpl):
    name = "reference"
    description = "reference_mqa_topk: fp32 logits (TF32 off) + stable-sort top-k; slow, exact tie rule"
    deterministic_ties = True

    def run(self, w, output):
        output.copy_(reference_mqa_topk(w, "fp32"))

    def logits(self, w):
        _check_dense_logits(self.name, w)
        # The same chunk plan as run(): bitwise the logits the output was ranked on.
        return assemble_reference_logits(w, "fp32")


# --------------------------------------------------------------------------- torch

#: Budget of the torch path's [rows_chunk * heads, keys] fp32 dot products.
TORCH_DOTS_BYTES = 2 << 30


class TorchPath(PathImpl):
    """What a user without custom kernels runs. CUDA: per row chunk,
    ``torch._scaled_mm`` of q ``[rows*heads, 128]`` fp8 with k^T (column-major)
    fp8 to fp32 (unit scales; keys padded to a multiple of 16), relu, x
    weights, sum over heads (bmm), x scales, -inf outside ``[start, end)``,
    ``torch.topk``. CPU: the same with an fp32 matmul of the upcast inputs.
    Rows are chunked so the dot products stay under ``TORCH_DOTS_BYTES`` and
    the logits under ``ops.DEFAULT_MAX_LOGITS_BYTES``; each chunk computes only
    the key span its rows see. ``torch.topk`` takes ties in no specified order."""

    name = "torch"
    description = "torch ops: _scaled_mm fp8 (CPU: fp32 matmul), relu, head sum, mask, torch.topk"
    deterministic_ties = False

    def _plan(self, w):
        """[(r0, r1, lo, hi)] row chunks with the key span each one sees."""
        rows = w.rows
        st = w.starts.to("cpu", torch.int64)
        en = w.ends.to("cpu", torch.int64)
        width = max(-(-w.keys // 16) * 16, 16)
        rc = max(1, min(TORCH_DOTS_BYTES // (w.heads * width * 4), ops.DEFAULT_MAX_LOGITS_BYTES // (width * 4)))
        plan = []
        for a in range(0, rows, rc):
            b = min(rows, a + rc)
            lo, hi = int(st[a:b].min()), int(en[a:b].max())
            plan.append((a, b, lo, max(lo, hi)))
        return plan

    @staticmethod
    def _padded_keys(w):
        """k padded with zero rows to a multiple of 16 keys (for _scaled_mm)."""
        keys = w.keys
        kp = -(-keys // 16) * 16
        if kp == keys:
            return w.k
        pad = torch.zeros((kp, HEAD_DIM), dtype=w.k.dtype, device=w.k.device)
        pad[:keys] = w.k
        return pad

    def _chunk_logits(self, w, kpad, a, b, lo, hi):
        """Logits [b-a, span] of rows a:b over keys lo:lo+span (span >= hi-lo,
        a multiple of 16 on CUDA), -inf outside each row's range."""
        dev = w.device
        nr = b - a
        heads = w.heads
        if dev.type == "cuda":
            span = -(-(hi - lo) // 16) * 16
            if lo + span > kpad.shape[0]:
                lo_k = kpad.shape[0] - span  # shift the window left; the mask below handles it
            else:
                lo_k = lo
            one = torch.ones((), dtype=torch.float32, device=dev)
            a_op = w.q[a:b].reshape(nr * heads, HEAD_DIM)
            b_op = kpad[lo_k:lo_k + span].t()  # [128, span] column-major
            dots = torch._scaled_mm(a_op, b_op, scale_a=one, scale_b=one, out_dtype=torch.float32)
        else:
            lo_k, span = lo, hi - lo
            dots = w.q[a:b].to(torch.float32).reshape(nr * heads, HEAD_DIM) @ w.k[lo:hi].to(torch.float32).T
        dots.relu_()
        logits = torch.bmm(w.weights[a:b].unsqueeze(1), dots.view(nr, heads, span)).squeeze(1)
        del dots
        logits *= w.scales[lo_k:lo_k + span] if lo_k + span <= w.keys else torch.nn.functional.pad(
            w.scales[lo_k:], (0, lo_k + span - w.keys), value=1.0)
        col = torch.arange(lo_k, lo_k + span, device=dev)
        s = w.starts[a:b].to(torch.int64)[:, None]
        e = w.ends[a:b].to(torch.int64)[:, None]
        logits.masked_fill_((col < s) | (col >= e), float("-inf"))
        return logits, lo_k

    def _run_plan(self, w, kpad, plan, output):
        topk = output.shape[1]
        output.fill_(-1)
        with ieee_fp32_matmul():
            for a, b, lo, hi in plan:
                if hi <= lo:
                    continue
                logits, lo_k = self._chunk_logits(w, kpad, a, b, lo, hi)
                kk = min(topk, logits.shape[1])
                idx = torch.topk(logits, kk, dim=1, sorted=False).indices
                s = w.starts[a:b].to(torch.int64)[:, None]
                n = (w.ends[a:b].to(torch.int64) - w.starts[a:b].to(torch.int64))[:, None]
                rel = idx + (lo_k - s)
                ok = (rel >= 0) & (rel < n)
                output[a:b, :kk] = torch.where(ok, rel, torch.full_like(rel, -1)).to(torch.int32)

    def run(self, w, output):
        self._run_plan(w, self._padded_keys(w) if w.device.type == "cuda" else w.k, self._plan(w), output)

    def prepare(self, w):
        out = self.new_output(w)
        kpad = self._padded_keys(w) if w.device.type == "cuda" else w.k
        plan = self._plan(w)

        def fn() -> None:
            self._run_plan(w, kpad, plan, out)

        fn.output = out  # type: ignore[attr-defined]
        return fn

    def logits(self, w):
        """The torch path's fp32 logits [rows, keys] (-inf outside the ranges)."""
        _check_dense_logits(self.name, w)
        kpad = self._padded_keys(w) if w.device.type == "cuda" else w.k
        out = torch.full((w.rows, w.keys), float("-inf"), dtype=torch.float32, device=w.device)
        with ieee_fp32_matmul():
            for a, b, lo, hi in self._plan(w):
                if hi <= lo:
                    continue
                logits, lo_k = self._chunk_logits(w, kpad, a, b, lo, hi)
                out[a:b, lo:hi] = logits[:, lo - lo_k:hi - lo_k]
        return out


# --------------------------------------------------------------------------- native / fused

class _KernelPath(PathImpl):
    """A path whose whole run is one op of ``ops`` on the workload's tensors."""

    deterministic_ties = True
    requires_cuda = True
    op_name = ""  # the ops function that runs the path

    def _native_reason(self, device):
        base = super().unavailable_reason(device)
        if base:
            return base
        from . import jit

        reason = jit.native_available()
        return f"{self.name}: {reason}" if reason else None

    def unavailable_reason(self, device):
        return self._native_reason(device)

    def run(self, w, output):
        getattr(ops, self.op_name)(w.q, w.k, w.scales, w.weights, w.starts, w.ends, output)

    def prepare(self, w):
        out = self.new_output(w)
        op = getattr(ops, self.op_name)
        q, k, scales, weights, starts, ends = w.q, w.k, w.scales, w.weights, w.starts, w.ends

        def fn() -> None:
            op(q, k, scales, weights, starts, ends, out)

        fn.output = out  # type: ignore[attr-defined]
        return fn


class NativePath(_KernelPath):
    name = "native"
    description = "ops.dense_mqa_topk_prefill: native sm_90a logits kernel + native top-k, rows chunked"
    op_name = "dense_mqa_topk_prefill"

    def logits(self, w):
        return ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)


class FusedPath(_KernelPath):
    name = "fused"
    description = "ops.fused_mqa_topk_prefill: one launch, logits tile by tile with on-the-fly top-k"
    op_name = "fused_mqa_topk_prefill"

    def unavailable_reason(self, device):
        reason = self._native_reason(device)
        if reason:
            return reason
        from . import jit

        try:
            ext = jit.load_extension()
        except Unavailable as e:
            return f"fused: {e}"
        if not hasattr(ext, "fused_mqa_topk"):
            return "fused: not built in this version"
        return None


# --------------------------------------------------------------------------- registry

PATHS: dict[str, PathImpl] = {p.name: p for p in (ReferencePath(), TorchPath(), NativePath(), FusedPath())}


def get_path(name) -> PathImpl:
    """The registered path ``name`` (a ``PathImpl`` is returned as is);
    ``UsageError`` listing the valid names otherwise."""
    if isinstance(name, PathImpl):
        return name
    try:
        return PATHS[name]
    except (KeyError, TypeError):
        pass
    found = external.lookup(name)  # a malformed py: spec raises UsageError here
    if found is None:
        raise UsageError(f"path: unknown path {name!r}; valid paths: {', '.join(all_path_names())}, "
                         f"or py:MODULE:FUNCTION[@KIND]")
    return found


def all_path_names() -> list[str]:
    """The built-in paths, then the named external ones (``external.py``)."""
    return list(PATHS) + list(external.EXTERNAL)


def available_paths(device=None) -> list[str]:
    """Names of the paths that can run on ``device`` (default: cuda if
    available, else cpu)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return [n for n, p in PATHS.items() if p.unavailable_reason(device) is None]


__all__ = ["PathImpl", "PATHS", "get_path", "all_path_names", "available_paths", "ReferencePath", "TorchPath",
           "NativePath", "FusedPath", "TORCH_DOTS_BYTES"]
