"""Prints fused / native per (rows, topk) for bench CSVs: `python3 scripts/ratio_table.py FILE...`
(the device round scripts' summary; each file as `mqa-topk bench --paths fused,native --out` wrote it)."""
import os
import sys

import pandas as pd

for f in sorted(sys.argv[1:]):
    d = pd.read_csv(f)
    p = d.pivot_table(index=["rows", "topk"], columns="path", values="median_ms")
    p["ratio"] = p["fused"] / p["native"]
    print(os.path.basename(f), d["env_gpu"].iloc[0])
    print(p.round(4).to_string())
