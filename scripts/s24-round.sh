#!/usr/bin/env bash
# Session 24's device round in one call: the v3check steps (carried build/v3check_cluster), then the op round
# (build, GPU tests, memcheck, verifies, small-row benches with the staged variants forced).
export OUT=${OUT:-$PWD/device-out}
bash tools/v3check/round.sh "${STEPS:-tools/v3check/steps-s24a.txt}" > /dev/null 2>&1
export CC=/usr/bin/gcc CXX=/usr/bin/g++
STAGE_TIMEOUT_gpu_tests=300 STAGED_VARIANTS="${STAGED_VARIANTS:-101 105 107}" bash scripts/device-check.sh ${STAGES:-build gpu-tests sanitize verify-fused bench-small-rows bench-small-rows-staged} > /dev/null 2>&1
grep -v "^  (v" "$OUT/v3check.log" | grep -v "^\[\|^rc=0" | grep -v "^check .*wrong rows 0, reruns differing in order 0, in set 0" | tail -c 7000
grep -h "passed\|failed\|ERROR SUMMARY\|rows identical\|mismatch" "$OUT/device.log" | tail -8
tail -12 "$OUT/device.log"
