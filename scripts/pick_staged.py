#!/usr/bin/env python3
"""Print the staged variant whose forced small-row bench has the lowest mean
fused / native median ratio over the rows where the staged kernel runs by
default (at most SMs / 2 row blocks: 64-512 rows here).

    python3 scripts/pick_staged.py OUT_DIR VARIANT [VARIANT ...]

Reads OUT_DIR/bench-small-rows-v<VARIANT>.csv (scripts/device-check.sh
bench-small-rows-staged); prints nothing (exit 1) when none is complete.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def mean_ratio(csv: Path, max_rows: int = 528) -> float | None:
    d = pd.read_csv(csv)
    d = d[(d.status == "ok") & (d.rows <= max_rows)]
    p = d.pivot_table(index=["rows", "topk"], columns="path", values="median_ms")
    if "fused" not in p or "native" not in p or p.empty or p.isna().any().any():
        return None
    return float((p.fused / p.native).mean())


def main(argv: list[str]) -> int:
    out, variants = Path(argv[1]), argv[2:]
    scores = {}
    for v in variants:
        f = out / f"bench-small-rows-v{v}.csv"
        r = mean_ratio(f) if f.exists() else None
        print(f"variant {v}: mean fused/native over 64-512 rows {r}", file=sys.stderr)
        if r is not None:
            scores[v] = r
    if not scores:
        return 1
    print(min(scores, key=scores.get))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
