"""Prints fused / native per (rows, topk) for bench CSVs: `python3 scripts/ratio_table.py FILE...`
(the device round scripts' summary; each file as `mqa-topk bench --paths fused,native --out` wrote it,
or several such merged with `variant` / `rep` columns: one ratio column per (variant, rep))."""
import os
import sys

import pandas as pd

for f in sorted(sys.argv[1:]):
    d = pd.read_csv(f)
    keys = [c for c in ("variant", "rep") if c in d.columns]
    print(os.path.basename(f), d["env_gpu"].iloc[0])
    if not keys:
        p = d.pivot_table(index=["rows", "topk"], columns="path", values="median_ms")
        p["ratio"] = p["fused"] / p["native"]
        print(p.round(4).to_string())
        continue
    p = d.pivot_table(index=["rows", "topk"], columns=keys + ["path"], values="median_ms")
    groups = sorted({c[:-1] for c in p.columns})
    r = pd.DataFrame({g: p[g + ("fused",)] / p[g + ("native",)] for g in groups})
    print("fused / native by (" + ", ".join(keys) + ")")
    print(r.round(3).to_string())
