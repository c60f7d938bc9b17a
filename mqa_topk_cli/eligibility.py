"""Fused-vs-dense eligibility (placeholder; completed by the tool work)."""
from __future__ import annotations


def fused_mqa_topk_available() -> bool:
    return False


def fused_mqa_topk_min_keys(topk: int) -> int:
    return 1 << 16 if topk > 1024 else 1 << 15


def fused_mqa_topk_chunk(max_seqlen_k, keys, topk, rows, dense_rows) -> bool:
    return False


def use_fused_mqa_topk(**kwargs) -> bool:
    return False
