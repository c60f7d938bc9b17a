#!/usr/bin/env bash
# Session 26, issue 12: the hybrid kernel's first device round: build, its GPU tests (and the staged
# memcheck, then it timed against the op's default at 1064 / 2120 rows.
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/device-check.sh build > /dev/null 2>&1
grep -h "rc=\|error" "$OUT/device.log" | tail -5
timeout 240 python3 -m pytest -q -rf -x tests/test_gpu_fused.py -k "hybrid" > "$OUT/tests-hybrid.log" 2>&1
echo "hybrid tests rc=$?"; tail -4 "$OUT/tests-hybrid.log"
bash scripts/device-check.sh bench-small-rows-hybrid > /dev/null 2>&1
python3 - <<'PY'
import glob, os, pandas as pd
for f in sorted(glob.glob(os.environ["OUT"] + "/bench-small-rows-hybrid*.csv")):
    d = pd.read_csv(f)
    p = d.pivot_table(index=["rows", "topk"], columns="path", values="median_ms")
    p["ratio"] = p["fused"] / p["native"]
    print(os.path.basename(f)); print(p.round(4).to_string())
PY
bash scripts/device-check.sh sanitize > /dev/null 2>&1
grep -h "ERROR SUMMARY\|sanitize rc" "$OUT/device.log" | tail -2
