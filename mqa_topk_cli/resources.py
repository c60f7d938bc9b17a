"""Where the files the tool reads at run time live (csrc/, configs/).

A source checkout or an editable install uses the repository root; a wheel
carries a copy under ``mqa_topk_cli/_data`` (setup.py puts it there).
"""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Directory ``name`` ("csrc" or "configs") as installed or checked out."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"mqa-topk: the packaged '{name}/' directory is missing (broken install?)")


def csrc_dir() -> Path:
    return data_dir("csrc")


def configs_dir() -> Path:
    return data_dir("configs")


def config_path(name_or_path: str) -> Path:
    """A config given as a path, or as a name of a shipped preset (with or without .toml)."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    stem = name_or_path[:-5] if name_or_path.endswith(".toml") else name_or_path
    shipped = configs_dir() / f"{stem}.toml"
    if shipped.is_file():
        return shipped
    raise FileNotFoundError(name_or_path)
