#!/usr/bin/env bash
# Session 25's device round in one call (machine starts are scarce): the v3check steps (carried
# build/v3check_cluster), the op round (build, GPU tests, memcheck, verify), the small-row bench with each
# staged variant of STAGED_VARIANTS forced, then -- with the variant of the lowest mean fused / native
# ratio over 64-512 rows picked by scripts/pick_staged.py and set through MQA_TOPK_FUSED_STAGED_VARIANT
# (the same kernel as making it kFusedStagedVariant) -- the small-row bench under the op's own dispatch,
# the headline bench and `mqa-topk crossover` (the wave table and the calibration). For the op's compiled
# defaults, most needed first, use scripts/s25-final.sh.
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
[ -n "${STEPS:-}" ] && bash tools/v3check/round.sh "$STEPS" > /dev/null 2>&1
export CC=/usr/bin/gcc CXX=/usr/bin/g++
STAGE_TIMEOUT_gpu_tests=300 STAGED_VARIANTS="${STAGED_VARIANTS:-109}" bash scripts/device-check.sh \
  build gpu-tests sanitize verify-fused bench-small-rows-staged > /dev/null 2>&1
best=$(python3 scripts/pick_staged.py "$OUT" ${STAGED_VARIANTS:-109} 2>> "$OUT/device.log")
echo "picked staged variant: ${best:-none}" | tee -a "$OUT/device.log"
[ -n "$best" ] && MQA_TOPK_FUSED_STAGED_VARIANT=$best bash scripts/device-check.sh ${FINAL_STAGES:-bench-small-rows bench-fused crossover} > /dev/null 2>&1
rm -f "$OUT/verify-fused.json"  # (its summary is in device.log; the device tool returns at most 8 files)
[ -f "$OUT/v3check.log" ] && grep -v "^  (v" "$OUT/v3check.log" | grep -v "^\[\|^rc=0" | grep -v "^check .*wrong rows 0, reruns differing in order 0, in set 0" | tail -c 6000
grep -h "passed\|failed\|ERROR SUMMARY\|rows identical\|mismatch\|picked" "$OUT/device.log" | tail -10
grep -h "rc=" "$OUT/device.log" | tail -14
