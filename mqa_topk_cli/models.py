"""Model presets: the indexer shape of models a user recognises.

A preset fixes what a model's sparse-attention indexer computes per call:
its heads (q ``[rows, heads, 128]``, weights ``[rows, heads]``) and its
top-k. ``mqa-topk bench|verify|crossover --model NAME`` and a config's
``model = "NAME"`` take both from here; ``--heads`` / ``heads =`` and
``--topk`` / ``topk =`` override them. Rows, keys and layout are not a
model's: they come from the workload (the headline case by default).

The figures are the models' published indexer configurations (SPEC §1,
"Heads"): DeepSeek-V3.2 ``index_n_heads: 64``, ``index_topk: 2048``;
DeepSeek-V4 64 heads with top-512 (Flash) and top-1024 (Pro); GLM-5's
indexer 32 heads, top-2048 (the seed kernel's shape, and this tool's
default).

Torch-free and dependency-free: the CLI lists the presets in its help.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError


@dataclass(frozen=True)
class Model:
    """One preset: ``name`` (what ``--model`` takes), the indexer's ``heads``
    and ``topk``, and a one-line ``description``."""

    name: str
    heads: int
    topk: int
    description: str


#: The presets, by name (the order of ``--help``).
MODELS: dict[str, Model] = {m.name: m for m in (
    Model("deepseek-v3.2", 64, 2048, "DeepSeek-V3.2 lightning indexer: 64 heads, top-2048"),
    Model("deepseek-v4-flash", 64, 512, "DeepSeek-V4 Flash indexer: 64 heads, top-512"),
    Model("deepseek-v4-pro", 64, 1024, "DeepSeek-V4 Pro indexer: 64 heads, top-1024"),
    Model("glm-5", 32, 2048, "GLM-5 indexer: 32 heads, top-2048"),
)}

#: The names ``--model`` accepts.
MODEL_NAMES = tuple(MODELS)


def get_model(name, what: str = "--model") -> Model:
    """The preset ``name`` (case-insensitive); ``UsageError`` naming ``what``
    and listing the presets otherwise."""
    if isinstance(name, str) and name.strip().lower() in MODELS:
        return MODELS[name.strip().lower()]
    raise UsageError(f"{what}: unknown model {name!r}; presets: {', '.join(MODEL_NAMES)}")


def models_help() -> str:
    """One line per preset, for ``--help`` and the README."""
    return "; ".join(f"{m.name} ({m.heads} heads, top-{m.topk})" for m in MODELS.values())


__all__ = ["Model", "MODELS", "MODEL_NAMES", "get_model", "models_help"]
