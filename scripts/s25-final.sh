#!/usr/bin/env bash
# Session 25's last device round, most needed first (a call cut short by its time limit still returns
# what is under $OUT): the op round on the compiled defaults (build, GPU tests, memcheck, verify), issue
# 12's small-row table, `mqa-topk crossover` (wave table + calibration), the headline bench, then the
# shares variants forced at every row count and the small-row bench with the staged kernels off.
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
STAGE_TIMEOUT_gpu_tests=300 bash scripts/device-check.sh build gpu-tests sanitize verify-fused bench-small-rows \
  crossover bench-fused > /dev/null 2>&1
rm -f "$OUT/verify-fused.json"  # (its summary is in device.log; the device tool returns at most 8 files)
grep -h "passed\|failed\|ERROR SUMMARY\|checks passed\|mismatch" "$OUT/device.log" | tail -6
grep -h " rc=" "$OUT/device.log" | tail -8
STAGED_VARIANTS="${STAGED_VARIANTS:-121 119}" bash scripts/device-check.sh bench-small-rows-staged > /dev/null 2>&1
MQA_TOPK_FUSED_STAGED=0 timeout 120 mqa-topk bench --config small-rows --paths fused,native \
  --out "$OUT/bench-small-rows-staged0.csv" >> "$OUT/device.log" 2>&1
echo "done"
