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
python3 scripts/ratio_table.py "$OUT"/bench-small-rows-hybrid*.csv
bash scripts/device-check.sh sanitize > /dev/null 2>&1
grep -h "ERROR SUMMARY\|sanitize rc" "$OUT/device.log" | tail -2
