"""External paths: the serving engine's own kernels, DeepGEMM's logits,
FlashInfer's top-k and a user's own function, verified, benched and crossed
over like the built-in paths of ``paths.py``.

- ``engine-fused``: the engine's ``fused_mqa_topk_prefill``, through its
  Python wrapper (which allocates its own workspace). Needs vllm with the
  fused op, an SM100-family GPU, and 32 heads (``ENGINE_FUSED_HEADS``).
- ``engine-dense``: the engine's logits op (DeepGEMM, through
  ``vllm.utils.deep_gemm``), then its ``top_k_per_row_prefill``, rows chunked
  under ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (default 512). Needs vllm and
  DeepGEMM, an SM90 or SM100 GPU.
- ``deepgemm``: DeepGEMM's ``fp8_mqa_logits``, then our top-k, rows chunked
  under 512 MiB; ``--op logits``: DeepGEMM alone. Needs deep_gemm, an SM90 or
  SM100 GPU (the whole op also our sm_90 top-k), and 32 or 64 heads.
- ``flashinfer-topk``: our logits, then FlashInfer's ``top_k_ragged_transform``;
  ``--op topk``: FlashInfer alone. Needs flashinfer, a CUDA GPU, and rows
  that start at key 0.
- ``py:MODULE:FUNCTION[@KIND]``: a user's function following the op contract
  of SPEC §3 (README: "A user's own path"). Needs the module importable.

Heads: every adapter passes the workload's q ``[rows, H, 128]`` and weights
``[rows, H]`` as they are (DeepGEMM takes H from q). DeepGEMM's logits take 32
or 64 heads (``DEEPGEMM_HEADS``): at 16 heads ``deepgemm`` and ``engine-dense``
(whose logits are DeepGEMM's) report the workload unavailable, with the
reason, as a status (``unavailable: ...``), not an error.

Packages are imported lazily, when a path is asked whether it can run or is
run, never at import of this module. ``unavailable_reason`` says in one line
everything that stops a path: the GPU (``device_capability``), the package
(not installed), the op (missing from the installed version).

Tie rules: the engine's top-k takes ties at the k-th score in atomic order and
its fused kernel compares 24-bit scores, so both engine paths claim no tie
rule and no identical reruns (``deterministic_output = False``): verify
reports their ties as tie-equivalent and checks every rerun on its own.
``deepgemm`` runs our top-k (lowest index wins) on DeepGEMM's logits and
exposes those logits, so verify holds it to the tie rule.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
from typing import Callable

import torch

from . import ops
from .contract import MAX_KEYS, TOPKS
from .errors import Unavailable, UsageError
from .path_base import PathImpl

ENGINE_FUSED_MODULE = "vllm.model_executor.kernels.attention.dsa.fused_mqa_topk"
ENGINE_DEEPGEMM_MODULE = "vllm.utils.deep_gemm"
ENGINE_OPS_MODULE = "vllm._custom_ops"
DEEPGEMM_MODULE = "deep_gemm"
FLASHINFER_MODULE = "flashinfer"
#: The engine's logits budget of one prefill chunk, in MiB (vllm/envs.py; default 512).
ENGINE_LOGITS_MB_ENV = "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB"
ENGINE_LOGITS_MB_DEFAULT = 512
#: The engine's published fused_mqa_topk_min_keys(topk): 32K, or 64K for top-2048
#: (docs.vllm.ai, latest: vllm/model_executor/kernels/attention/dsa/fused_mqa_topk.py).
ENGINE_DOCUMENTED_MIN_KEYS = {512: 1 << 15, 1024: 1 << 15, 2048: 1 << 16}
#: Extra columns of DeepGEMM's logits row (its stride is align(keys + 256, 256) floats).
DEEPGEMM_ROW_PAD = 256
#: Heads DeepGEMM's fp8_mqa_logits takes (q [rows, 32|64, 128]; csrc/apis/attention.hpp).
DEEPGEMM_HEADS = (32, 64)
#: Heads the engine's fused SM100 kernel takes (a 64-head model runs its dense path there).
ENGINE_FUSED_HEADS = (32,)
USER_KINDS = ("mqa_topk", "logits", "topk")
_USER_SPEC = re.compile(r"^py:([A-Za-z_][\w.]*):([A-Za-z_]\w*)(?:@(\w+))?$")


# --------------------------------------------------------------------------- environment probes


def device_capability(device) -> tuple[int, int] | None:
    """(major, minor) of ``device`` when it is a CUDA GPU here, else None.
    The one place the adapters learn the GPU's architecture (tests stand in
    other GPUs by replacing it)."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        return None
    if d.type != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(d)
    return int(major), int(minor)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def try_import(module: str):
    """(module, None), or (None, a one-line reason: not installed, or the
    installed package lacks that module, or its import failed)."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module), None
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing == top or not missing:
            return None, f"{top} is not installed"
        if module == missing or module.startswith(missing + "."):
            return None, f"the installed {top} has no module {missing} (op missing)"
        return None, f"importing {module} failed (no module named {missing!r})"
    except Exception as e:  # noqa: BLE001 -- a broken install is a reason, not a crash
        return None, f"importing {module} failed ({type(e).__name__}: {_first_line(e)})"


def _gpu_problem(device, majors: tuple[int, ...] | None) -> str | None:
    cap = device_capability(device)
    if cap is None:
        d = torch.device(device)
        if d.type == "cuda":
            return "no CUDA GPU here"
        return f"the device is {d}"
    if majors is not None and cap[0] not in majors:
        return f"this GPU is sm_{cap[0]}{cap[1]}"
    return None


def engine_logits_budget() -> int:
    """Bytes of one logits chunk of the engine's dense path: $VLLM_SPARSE_INDEXER_MAX_LOGITS_MB MiB (default 512)."""
    raw = os.environ.get(ENGINE_LOGITS_MB_ENV, "").strip()
    if not raw:
        return ENGINE_LOGITS_MB_DEFAULT << 20
    try:
        mb = int(raw)
    except ValueError:
        mb = 0
    if mb <= 0:
        raise UsageError(f"${ENGINE_LOGITS_MB_ENV}: must be a positive integer (MiB), got {raw!r}")
    return mb << 20


def ue8m0_form(scales: torch.Tensor) -> torch.Tensor | None:
    """The UE8M0 form ``[keys, 4]`` uint8 (four equal exponent bytes, as SM100
    indexer caches store them) of fp32 scales that are all positive normal
    powers of two; None when any scale is not (one host sync)."""
    if scales.dtype != torch.float32 or scales.dim() != 1:
        return None
    bits = scales.contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    ok = (bits > 0) & ((bits & 0x7FFFFF) == 0) & (exp > 0) & (exp < 255)
    if not bool(ok.all()):
        return None
    return exp.to(torch.uint8)[:, None].expand(-1, 4).contiguous()


# --------------------------------------------------------------------------- shared pieces


def _row_chunks(rows: int, width: int, budget_bytes: int) -> list[slice]:
    """Row slices whose fp32 logits [chunk, width] stay under the budget."""
    per = max(1, budget_bytes // (max(int(width), 1) * 4))
    return [slice(a, min(rows, a + per)) for a in range(0, rows, per)]


def _chunks(w, width: int, budget_bytes: int) -> list[tuple]:
    """(rows slice, q, weights, starts, ends) per chunk; slices of contiguous
    tensors stay contiguous."""
    return [(sl, w.q[sl], w.weights[sl], w.starts[sl], w.ends[sl]) for sl in _row_chunks(w.rows, width, budget_bytes)]


def _assemble(w, chunks, logits_call) -> torch.Tensor:
    """The logits of every row with the same chunk plan as the run: [rows, keys]
    fp32 (only [start, end) of each row is meaningful)."""
    out = torch.full((w.rows, w.keys), float("nan"), dtype=torch.float32, device=w.device)
    for sl, q, wt, st, en in chunks:
        out[sl] = logits_call(q, w.k, w.scales, wt, st, en)[:, : w.keys]
    return out


def _our_topk(logits, starts, ends, output) -> None:
    """Our top-k (lowest index wins at ties). The inputs come from a workload
    that passed the contract, so the checked op's body runs without its
    host-syncing range check when this version of ops has one."""
    checked = getattr(ops, "_topk_checked", None)
    if checked is None:
        ops.top_k_per_row_prefill(logits, starts, ends, output)
    else:
        checked(logits, starts, ends, output)


def _our_logits_call(device) -> Callable:
    """Our logits: the native kernel on a GPU where it is built, else the fp32 reference."""
    if torch.device(device).type == "cuda":
        from . import jit

        if jit.native_available() is None:
            return ops.mqa_logits
    from .reference import reference_logits

    return lambda q, k, s, wt, st, en: reference_logits(q, k, s, wt, st, en, precision="fp32")


# --------------------------------------------------------------------------- base


class _CallMaker:
    """run / prepare for a path whose ``_make(w, output)`` returns the call."""

    def run(self, w, output):
        self._make(w, output)()

    def prepare(self, w):
        out = self.new_output(w)
        fn = self._make(w, out)
        fn.output = out  # type: ignore[attr-defined]
        return fn


class ExternalPath(_CallMaker, PathImpl):
    """A path running someone else's code. Subclasses set ``majors`` (GPU major
    versions it runs on, None = any CUDA GPU), ``needs`` (what it needs, for
    the one-line reason), ``_op_problems`` and ``_make(w, output)``, a closure
    that writes the path's answer into ``output``."""

    requires_cuda = True
    majors: tuple[int, ...] | None = None
    needs = ""

    def _op_problems(self) -> list[str]:
        return []

    def unavailable_reason(self, device) -> str | None:
        problems = list(dict.fromkeys([p for p in (_gpu_problem(device, self.majors),) if p] + self._op_problems()))
        return f"{self.name}: needs {self.needs}: {'; '.join(problems)}" if problems else None

    def _module(self, module: str):
        mod, why = try_import(module)
        if mod is None:
            raise Unavailable(f"{self.name}: {why}")
        return mod

    def _make(self, w, output: torch.Tensor) -> Callable[[], None]:
        raise NotImplementedError

    def prepare_logits(self, w):
        raise Unavailable(f"{self.name}: has no logits op of its own")

    def prepare_topk(self, w, logits, output):
        raise Unavailable(f"{self.name}: has no top-k op of its own")


def _require_deepgemm_heads(name: str, w) -> None:
    """``Unavailable`` (a status, not an error) when DeepGEMM's logits cannot
    take the workload's heads."""
    heads = int(w.heads)
    if heads not in DEEPGEMM_HEADS:
        raise Unavailable(f"{name}: DeepGEMM's fp8_mqa_logits takes {' or '.join(map(str, DEEPGEMM_HEADS))} "
                          f"heads; this workload has {heads}")


def _missing_ops(module: str, names: tuple[str, ...], any_of: bool = False) -> list[str]:
    mod, why = try_import(module)
    if mod is None:
        return [why]
    missing = [n for n in names if not callable(getattr(mod, n, None))]
    if any_of and len(missing) < len(names):
        return []
    if missing:
        what = " or ".join(missing) if any_of else ", ".join(missing)
        return [f"{module} has no {what} (op missing)"]
    return []


# --------------------------------------------------------------------------- the serving engine


class EngineFusedPath(ExternalPath):
    """The engine's single-launch fused kernel, called through its wrapper.

    Signatures (vllm-project/vllm, vllm/model_executor/kernels/attention/dsa/fused_mqa_topk.py):
    ``fused_mqa_topk_prefill(q, k, scales, weights, starts, ends, output)``
    (the docs.vllm.ai "latest" version: top-k 512/1024/2048, returns None;
    the version stored at commit e20c9a86 takes top-2048 only, has a keyword
    ``rows_start_at_zero`` and returns False for inputs it declines, which
    is reported as unavailable), ``fused_mqa_topk_available()``,
    ``fused_mqa_topk_key_scales(scales [keys, 4] uint8) -> fp32 [keys]``.
    Where the workload's scales are powers of two (the UE8M0 form SM100 caches
    carry), they are passed in that form through the engine's own converter,
    as its indexer does; otherwise as fp32."""

    name = "engine-fused"
    description = "the serving engine's fused_mqa_topk_prefill (SM100 family), through its Python wrapper"
    majors = (10,)
    needs = "an SM100-family (Blackwell) GPU and the serving engine (vllm) with its fused op"
    deterministic_ties = False  # ties at the k-th score in arbitrary order (24-bit scores)
    deterministic_output = False

    def _op_problems(self):
        return _missing_ops(ENGINE_FUSED_MODULE, ("fused_mqa_topk_prefill",))

    def unavailable_reason(self, device):
        reason = super().unavailable_reason(device)
        if reason:
            return reason
        avail = getattr(self._module(ENGINE_FUSED_MODULE), "fused_mqa_topk_available", None)
        if callable(avail) and not avail():
            return f"{self.name}: the engine's fused op is not compiled in (fused_mqa_topk_available() is False)"
        return None

    def _make(self, w, output):
        heads = int(w.heads)
        if heads not in ENGINE_FUSED_HEADS:
            raise Unavailable(f"{self.name}: the engine's fused kernel takes "
                              f"{' or '.join(map(str, ENGINE_FUSED_HEADS))} heads; this workload has {heads}")
        mod = self._module(ENGINE_FUSED_MODULE)
        op = mod.fused_mqa_topk_prefill
        convert = getattr(mod, "fused_mqa_topk_key_scales", None)
        ue8m0 = ue8m0_form(w.scales) if callable(convert) else None
        q, k, scales, wt, st, en = w.q, w.k, w.scales, w.weights, w.starts, w.ends
        name = self.name

        def fn() -> None:
            s = scales if ue8m0 is None else convert(ue8m0)
            if op(q, k, s, wt, st, en, output) is False:
                raise Unavailable(f"{name}: the engine declined these inputs (fused_mqa_topk_prefill returned False; "
                                  f"some versions take top-2048 only)")

        return fn


class EngineDensePath(ExternalPath):
    """The engine's dense prefill path, as its indexer runs it.

    vllm-project/vllm, vllm/model_executor/layers/sparse_attn_indexer.py
    (prefill of ``sparse_attn_indexer``): the index buffer is filled with -1,
    then per chunk ``logits = fp8_fp4_mqa_logits((q, None), (k, k_scale),
    weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=False)`` and
    ``ops.top_k_per_row_prefill(logits, cu_seqlen_ks, cu_seqlen_ke,
    topk_indices, num_rows, logits.stride(0), logits.stride(1), topk_tokens)``.
    vllm/utils/deep_gemm.py: ``fp8_fp4_mqa_logits`` (newer) or
    ``fp8_mqa_logits(q, (k, k_scales), weights, cu_seqlen_ks, cu_seqlen_ke)``
    (older). vllm/_custom_ops.py: ``top_k_per_row_prefill(logits,
    cu_seqlen_ks, cu_seqlen_ke, raw_topk_indices, num_rows, stride0, stride1,
    topk_tokens) -> None``. vllm/envs.py: ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB``
    (default 512), the bound of one chunk's fp32 logits ``[rows, keys]``."""

    name = "engine-dense"
    description = "the serving engine's dense path: its logits op (DeepGEMM) + its top_k_per_row_prefill, chunked"
    majors = (9, 10)
    needs = "an SM90 or SM100 GPU and the serving engine (vllm) with DeepGEMM"
    deterministic_ties = False  # its top-k takes ties in atomic order
    deterministic_output = False

    def _op_problems(self):
        return (_missing_ops(ENGINE_DEEPGEMM_MODULE, ("fp8_fp4_mqa_logits", "fp8_mqa_logits"), any_of=True)
                + _missing_ops(ENGINE_OPS_MODULE, ("top_k_per_row_prefill",)))

    def _logits_call(self) -> Callable:
        dg = self._module(ENGINE_DEEPGEMM_MODULE)
        new = getattr(dg, "fp8_fp4_mqa_logits", None)
        if callable(new):
            return lambda q, k, s, wt, st, en: new((q, None), (k, s), wt, st, en, clean_logits=False)
        old = getattr(dg, "fp8_mqa_logits", None)
        if callable(old):
            return lambda q, k, s, wt, st, en: old(q, (k, s), wt, st, en)
        raise Unavailable(f"{self.name}: {ENGINE_DEEPGEMM_MODULE} has no fp8_fp4_mqa_logits or fp8_mqa_logits "
                          f"(op missing)")

    def _topk_call(self) -> Callable:
        topk = self._module(ENGINE_OPS_MODULE).top_k_per_row_prefill
        return lambda lg, st, en, out: topk(lg, st, en, out, lg.shape[0], lg.stride(0), lg.stride(1), out.shape[1])

    def _make(self, w, output):
        _require_deepgemm_heads(self.name, w)
        logits_call, topk_call = self._logits_call(), self._topk_call()
        chunks = _chunks(w, w.keys, engine_logits_budget())
        k, scales = w.k, w.scales

        def fn() -> None:
            output.fill_(-1)  # the engine pre-fills its index buffer; its top-k writes the valid entries
            for sl, q, wt, st, en in chunks:
                topk_call(logits_call(q, k, scales, wt, st, en), st, en, output[sl])

        return fn

    def logits(self, w):
        _require_deepgemm_heads(self.name, w)
        return _assemble(w, _chunks(w, w.keys, engine_logits_budget()), self._logits_call())

    def prepare_logits(self, w):
        _require_deepgemm_heads(self.name, w)
        call = self._logits_call()
        args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        return lambda: call(*args)

    def prepare_topk(self, w, logits, output):
        call = self._topk_call()
        st, en = w.starts, w.ends

        def fn() -> None:
            output.fill_(-1)
            call(logits, st, en, output)

        return fn


# --------------------------------------------------------------------------- DeepGEMM


class DeepGemmPath(ExternalPath):
    """DeepGEMM's logits with our top-k, so a Hopper user sees its logits
    kernel against ours.

    deepseek-ai/DeepGEMM (54e2261), csrc/apis/attention.hpp, ``register_apis``
    (legacy API): ``fp8_mqa_logits(q, kv=(k, k_scales), weights,
    cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0)``
    with q ``[rows, 32|64, 128]`` e4m3 contiguous, k ``[keys, 128]`` e4m3,
    k_scales ``[keys]`` fp32, weights ``[rows, heads]`` fp32, starts/ends int32
    ``[rows]``; returns fp32 ``[rows, keys]``, a view whose row stride is
    ``align(keys + 256, 256)``; runs on SM90 and SM100. The workload's q and
    weights are passed as they are (DeepGEMM takes the heads from q); a
    16-head workload is reported unavailable (``DEEPGEMM_HEADS``). Called with
    ``clean_logits=False`` (as the engine calls it): our top-k reads only
    ``[start, end)`` of each row."""

    name = "deepgemm"
    description = "DeepGEMM fp8_mqa_logits + our top-k, rows chunked under 512 MiB (--op logits: DeepGEMM alone)"
    majors = (9, 10)
    needs = "an SM90 or SM100 GPU and DeepGEMM (deep_gemm)"
    deterministic_ties = True  # our top-k on DeepGEMM's own logits, which logits() exposes
    deterministic_output = True

    def _op_problems(self):
        return _missing_ops(DEEPGEMM_MODULE, ("fp8_mqa_logits",))

    def _logits_call(self) -> Callable:
        f = self._module(DEEPGEMM_MODULE).fp8_mqa_logits
        return lambda q, k, s, wt, st, en: f(q, (k, s), wt, st, en, clean_logits=False)

    def _plan(self, w):
        return _chunks(w, w.keys + DEEPGEMM_ROW_PAD, ops.DEFAULT_MAX_LOGITS_BYTES)

    def _make(self, w, output):
        _require_deepgemm_heads(self.name, w)
        call = self._logits_call()
        chunks = self._plan(w)
        k, scales = w.k, w.scales

        def fn() -> None:
            for sl, q, wt, st, en in chunks:
                _our_topk(call(q, k, scales, wt, st, en), st, en, output[sl])

        return fn

    def logits(self, w):
        _require_deepgemm_heads(self.name, w)
        return _assemble(w, self._plan(w), self._logits_call())

    def prepare_logits(self, w):
        _require_deepgemm_heads(self.name, w)
        call = self._logits_call()
        args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        return lambda: call(*args)


# --------------------------------------------------------------------------- FlashInfer


class FlashInferTopkPath(ExternalPath):
    """FlashInfer's per-row top-k on our logits.

    flashinfer-ai/flashinfer, flashinfer/topk.py: ``top_k_ragged_transform(
    input, offsets, lengths, k, deterministic=False) -> int32 [rows, k]``: per
    row the top-k of ``input[i, :lengths[i]]`` plus ``offsets[i]``, -1 where
    fewer than k (csrc/topk.cu: ``input`` contiguous ``[rows, max_len]``).
    With offsets 0 and lengths = ends it is our contract for rows that start
    at key 0 (causal and full chunks). Its other ops do not fit:
    ``top_k(input, k)`` ranks whole rows and returns int64 without -1
    padding; ``top_k_page_table_transform`` maps through a page table. A row
    starting later (ragged batches) has no form here: such workloads are
    reported unavailable. Called with ``deterministic=True`` where the
    installed version has it (ours is deterministic); its tie order is not
    the lowest-index rule."""

    name = "flashinfer-topk"
    description = "our logits + FlashInfer top_k_ragged_transform (--op topk: FlashInfer alone); rows must start at 0"
    needs = "a CUDA GPU and FlashInfer (flashinfer) with top_k_ragged_transform"
    deterministic_ties = False
    deterministic_output = False

    def _op_problems(self):
        return _missing_ops(FLASHINFER_MODULE, ("top_k_ragged_transform",))

    def _topk_call(self) -> Callable:
        f = self._module(FLASHINFER_MODULE).top_k_ragged_transform
        try:
            det = "deterministic" in inspect.signature(f).parameters
        except (TypeError, ValueError):
            det = False
        kw = {"deterministic": True} if det else {}
        return lambda lg, zeros, en, k: f(lg, zeros, en, k, **kw)

    def _require_zero_starts(self, w) -> None:
        if w.rows and bool((w.starts != 0).any()):
            raise Unavailable(f"{self.name}: FlashInfer's top_k_ragged_transform ranks [0, length) of each row; "
                              f"this workload has rows starting after key 0 (ragged), which it cannot express")

    def _make(self, w, output):
        self._require_zero_starts(w)
        call, logits_call = self._topk_call(), _our_logits_call(w.device)
        chunks = _chunks(w, w.keys, ops.DEFAULT_MAX_LOGITS_BYTES)
        zeros = torch.zeros(w.rows, dtype=torch.int32, device=w.device)
        k, scales, topk = w.k, w.scales, int(output.shape[1])

        def fn() -> None:
            for sl, q, wt, st, en in chunks:
                lg = logits_call(q, k, scales, wt, st, en)
                output[sl].copy_(call(lg if lg.is_contiguous() else lg.contiguous(), zeros[sl], en, topk))

        return fn

    def logits(self, w):
        return _assemble(w, _chunks(w, w.keys, ops.DEFAULT_MAX_LOGITS_BYTES), _our_logits_call(w.device))

    def prepare_topk(self, w, logits, output):
        self._require_zero_starts(w)
        call = self._topk_call()
        lg = logits if logits.is_contiguous() else logits.contiguous()  # outside the timing
        zeros = torch.zeros(w.rows, dtype=torch.int32, device=w.device)
        en, topk = w.ends, int(output.shape[1])
        return lambda: call(lg, zeros, en, topk)


# --------------------------------------------------------------------------- a user's own function


def _infer_kind(fn) -> str | None:
    """mqa_topk / logits / topk from the count of required positional
    parameters (7, 6, 4); None when the signature does not say."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)
    return {7: "mqa_topk", 6: "logits", 4: "topk"}.get(n)


class UserPath(_CallMaker, PathImpl):
    """``py:MODULE:FUNCTION[@KIND]``: a user's function following the op
    contract (SPEC §3; README "A user's own path"). KIND (default: from the
    function's required positional parameters, 7 / 6 / 4):

    - ``mqa_topk``: ``FUNCTION(q, k, scales, weights, starts, ends, output) -> None``, the whole op;
    - ``logits``: ``FUNCTION(q, k, scales, weights, starts, ends) -> fp32 [rows, >= keys]``,
      followed by our top-k (rows chunked under 512 MiB);
    - ``topk``: ``FUNCTION(logits, starts, ends, output) -> None``, fed our logits.

    Optional attributes of the function: ``lowest_index_ties = True`` (it
    claims the tie rule: verify checks it), ``identical_reruns = False``
    (reruns may differ in order or tie choices: each run is checked on its own)."""

    requires_cuda = False

    def __init__(self, spec: str):
        m = _USER_SPEC.match(spec) if isinstance(spec, str) else None
        if m is None or (m.group(3) is not None and m.group(3) not in USER_KINDS):
            raise UsageError(f"path {spec!r}: expected py:MODULE:FUNCTION or py:MODULE:FUNCTION@KIND "
                             f"with KIND one of {', '.join(USER_KINDS)}")
        self.name = spec
        self.module, self.function, self.declared_kind = m.groups()
        self.description = f"{self.module}.{self.function} (a user's function)"

    def _resolve(self) -> tuple[Callable, str]:
        mod, why = try_import(self.module)
        if mod is None:
            hint = "; is its folder on PYTHONPATH?" if "not installed" in why else ""
            raise Unavailable(f"{self.name}: cannot import {self.module} ({why}{hint})")
        fn = getattr(mod, self.function, None)
        if fn is None:
            raise Unavailable(f"{self.name}: module {self.module} has no {self.function} (op missing)")
        if not callable(fn):
            raise Unavailable(f"{self.name}: {self.module}.{self.function} is not callable")
        kind = self.declared_kind or _infer_kind(fn)
        if kind is None:
            raise Unavailable(f"{self.name}: cannot tell which op {self.function} implements from its signature "
                              f"(7, 6 or 4 required positional parameters); add @mqa_topk, @logits or @topk")
        return fn, kind

    def _attr(self, name: str, default: bool) -> bool:
        try:
            fn, _ = self._resolve()
        except Unavailable:
            return default
        return bool(getattr(fn, name, default))

    @property
    def deterministic_ties(self) -> bool:  # type: ignore[override]
        return self._attr("lowest_index_ties", False)

    @property
    def deterministic_output(self) -> bool:  # type: ignore[override]
        return self._attr("identical_reruns", True)

    def unavailable_reason(self, device) -> str | None:
        try:
            self._resolve()
        except Unavailable as e:
            return str(e)
        return None

    def _plan(self, w):
        return _chunks(w, w.keys, ops.DEFAULT_MAX_LOGITS_BYTES)

    def _make(self, w, output):
        fn, kind = self._resolve()
        q, k, scales, wt, st, en = w.q, w.k, w.scales, w.weights, w.starts, w.ends
        if kind == "mqa_topk":
            return lambda: fn(q, k, scales, wt, st, en, output)
        chunks = self._plan(w)
        if kind == "logits":
            def run_logits() -> None:
                for sl, q_, wt_, st_, en_ in chunks:
                    ops.top_k_per_row_prefill(fn(q_, k, scales, wt_, st_, en_), st_, en_, output[sl])

            return run_logits
        ours = _our_logits_call(w.device)

        def run_topk() -> None:
            for sl, q_, wt_, st_, en_ in chunks:
                fn(ours(q_, k, scales, wt_, st_, en_), st_, en_, output[sl])

        return run_topk


    def logits(self, w):
        fn, kind = self._resolve()
        if kind == "mqa_topk":
            return None
        return _assemble(w, self._plan(w), fn if kind == "logits" else _our_logits_call(w.device))

    def prepare_logits(self, w):
        fn, kind = self._resolve()
        if kind != "logits":
            raise Unavailable(f"{self.name}: a {kind} function has no logits op of its own (declare @logits)")
        args = (w.q, w.k, w.scales, w.weights, w.starts, w.ends)
        return lambda: fn(*args)

    def prepare_topk(self, w, logits, output):
        fn, kind = self._resolve()
        if kind != "topk":
            raise Unavailable(f"{self.name}: a {kind} function has no top-k op of its own (declare @topk)")
        st, en = w.starts, w.ends
        return lambda: fn(logits, st, en, output)


# --------------------------------------------------------------------------- registry


EXTERNAL: dict[str, ExternalPath] = {p.name: p for p in (EngineFusedPath(), EngineDensePath(), DeepGemmPath(),
                                                          FlashInferTopkPath())}


def lookup(name) -> PathImpl | None:
    """The external path ``name`` (a named adapter or a ``py:`` spec), or None
    when the name is neither. A malformed ``py:`` spec is a ``UsageError``."""
    if not isinstance(name, str):
        return None
    if name in EXTERNAL:
        return EXTERNAL[name]
    if name.startswith("py:"):
        return UserPath(name)
    return None


def is_external(name) -> bool:
    return isinstance(name, str) and (name in EXTERNAL or name.startswith("py:"))


def require_available(names, device) -> None:
    """``Unavailable`` (one line) for the first external path of ``names`` that
    cannot run on ``device``; built-in paths are left to the command."""
    for n in names:
        p = lookup(n)
        if p is None:
            continue
        reason = p.unavailable_reason(device)
        if reason:
            raise Unavailable(reason)


# --------------------------------------------------------------------------- engine constants


def engine_defaults() -> tuple[dict[int, int], str]:
    """The engine's current min keys per topk and where they come from: the
    installed engine's ``fused_mqa_topk_min_keys`` when it has one, else its
    published values (32K; 64K for top-2048)."""
    mod, why = try_import(ENGINE_FUSED_MODULE)
    f = getattr(mod, "fused_mqa_topk_min_keys", None) if mod is not None else None
    if callable(f):
        try:
            return ({t: int(f(t)) for t in TOPKS},
                    f"the installed engine ({ENGINE_FUSED_MODULE}.fused_mqa_topk_min_keys)")
        except Exception as e:  # noqa: BLE001 -- fall back to the published values, saying why
            why = f"its fused_mqa_topk_min_keys raised {type(e).__name__}"
    elif mod is not None:
        why = "the installed engine has no fused_mqa_topk_min_keys"
    return dict(ENGINE_DOCUMENTED_MIN_KEYS), f"vllm's published fused_mqa_topk_min_keys ({why})"


def engine_constants(recommended: dict[int, int], wave: list[dict]) -> dict:
    """What to set in the engine from a crossover run: min keys per measured
    topk beside the engine's current defaults, and whether the wave rule
    (``2 * last_wave >= sms`` unless dense needs several logits calls)
    predicted every measured winner."""
    defaults, source = engine_defaults()
    checked = [r for r in wave if r.get("agree") is not None]
    wrong = [r for r in checked if not r["agree"]]
    return {
        "min_keys": {str(t): int(v) for t, v in sorted(recommended.items())},
        "defaults": {str(t): int(v) for t, v in sorted(defaults.items())},
        "defaults_source": source,
        "wave_rule_held": (not wrong) if checked else None,
        "wave_rows_checked": len(checked),
        "wave_rows_wrong": [{k: r[k] for k in ("rows", "predicted", "measured")} for r in wrong],
    }


def _keys_label(v: int) -> str:
    if v > MAX_KEYS:
        return "never (keep dense)"
    return f"{v} ({v / 1024:g}K)" if v % 1024 == 0 else str(v)


def engine_constants_lines(info: dict, paths: tuple[str, str]) -> list[str]:
    """The printed form of ``engine_constants``."""
    a, b = paths
    lines = [f"engine constants from this run ({a} vs {b}); current values from {info['defaults_source']}:"]
    mk, dflt = info["min_keys"], info["defaults"]
    if mk:
        for t, v in mk.items():
            lines.append(f"  fused_mqa_topk_min_keys({t}) = {_keys_label(int(v))}   "
                         f"(engine now: {_keys_label(int(dflt[t]))})")
    else:
        lines.append("  fused_mqa_topk_min_keys: no topk measured on both paths")
    held = info["wave_rule_held"]
    if held is None:
        lines.append("  wave rule: not measured (no wave table)")
    elif held:
        lines.append(f"  wave rule (2 * last_wave >= sms, or more rows than one dense logits call): held at all "
                     f"{info['wave_rows_checked']} row counts; keep it")
    else:
        rows = ", ".join(f"{r['rows']} (predicted {r['predicted']}, measured {r['measured']})"
                         for r in info["wave_rows_wrong"])
        lines.append(f"  wave rule: did not hold at {len(info['wave_rows_wrong'])} of {info['wave_rows_checked']} "
                     f"row counts: {rows}")
    return lines


__all__ = ["EXTERNAL", "ExternalPath", "EngineFusedPath", "EngineDensePath", "DeepGemmPath", "FlashInferTopkPath",
           "UserPath", "lookup", "is_external", "require_available", "device_capability", "try_import",
           "ue8m0_form", "engine_logits_budget", "engine_defaults", "engine_constants", "engine_constants_lines",
           "USER_KINDS", "DEEPGEMM_HEADS"]
