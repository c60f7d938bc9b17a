#!/usr/bin/env bash
# Session 26's closing check of the final commit (host-side changes after the measured build): build,
# the staged / hybrid / split-dispatch GPU tests, memcheck.
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/device-check.sh build > /dev/null 2>&1
timeout 150 python3 -m pytest -q -rf tests/test_gpu_fused.py -k "staged or hybrid or dispatch" > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$OUT/tests.log"
bash scripts/device-check.sh sanitize > /dev/null 2>&1
grep -h "ERROR SUMMARY\| rc=" "$OUT/device.log" | tail -4
