#!/usr/bin/env bash
# Session 26's last device round, most needed first (a call cut short still returns what is under $OUT):
# the op round (build, GPU tests, memcheck, verify), issue 12's small-row table, `mqa-topk crossover`
# (wave table + calibration), the headline bench, then the small-row table again (its 1064-row cells'
# run-to-run spread).
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
nvidia-smi --query-gpu=name --format=csv,noheader
STAGE_TIMEOUT_gpu_tests=300 bash scripts/device-check.sh build gpu-tests sanitize verify-fused bench-small-rows \
  crossover bench-fused > /dev/null 2>&1
rm -f "$OUT/verify-fused.json"  # (its summary is in device.log; the device tool returns at most 8 files)
grep -h "passed\|failed\|ERROR SUMMARY\|checks passed\|mismatch" "$OUT/device.log" | tail -6
grep -h " rc=" "$OUT/device.log" | tail -8
timeout 120 mqa-topk bench --config small-rows --paths fused,native --out "$OUT/bench-small-rows-2.csv" \
  >> "$OUT/device.log" 2>&1
python3 scripts/ratio_table.py "$OUT"/bench-*.csv
echo "done"
