#!/usr/bin/env bash
# Session 27's device round (issue 12: the staged owner's next-row variants 123 / 125 against 117), one call:
# the v3check steps (carried build/v3check_cluster: exactness, owner timelines, times), the op round (build,
# GPU tests, memcheck, verify), then the small-row cases of 64-512 rows with each staged variant of
# STAGED_VARIANTS forced, twice interleaved (one CSV: bench-staged-ab.csv, column rep), and their ratio tables;
# on an H200 also issue 12's table under the op's dispatch, the crossover and the headline.
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
nvidia-smi --query-gpu=name --format=csv,noheader
[ -n "${STEPS:-}" ] && [ -x build/v3check_cluster ] && bash tools/v3check/round.sh "$STEPS" > /dev/null 2>&1
if [ -n "${LEAN:-}" ]; then  # (LEAN=1: a dev variant's round: build, the staged tests, memcheck)
  bash scripts/device-check.sh build sanitize > /dev/null 2>&1
  timeout 240 python3 -m pytest -q -m gpu -x tests/test_gpu_fused.py -k staged >> "$OUT/device.log" 2>&1
  echo "staged gpu tests rc=$?" >> "$OUT/device.log"
else
  STAGE_TIMEOUT_gpu_tests=300 bash scripts/device-check.sh build gpu-tests sanitize verify-fused > /dev/null 2>&1
  rm -f "$OUT/verify-fused.json"  # (its summary is in device.log; the device tool returns at most 8 files)
fi
cases=""
for r in 64 256 512; do for t in 512 1024 2048; do cases="$cases --case r$r-t$t"; done; done
for rep in 1 2; do
  for v in ${STAGED_VARIANTS:-117 123 125}; do
    MQA_TOPK_FUSED_STAGED=1 MQA_TOPK_FUSED_STAGED_VARIANT=$v timeout 120 mqa-topk bench --config small-rows \
      --paths fused,native $cases --out "$OUT/ab-v$v-$rep.csv" >> "$OUT/device.log" 2>&1
  done
done
python3 - "$OUT" <<'PY'
import glob, os, sys
import pandas as pd
out = sys.argv[1]
parts = []
for f in sorted(glob.glob(os.path.join(out, "ab-v*-*.csv"))):
    v, rep = os.path.basename(f)[4:-4].split("-")
    d = pd.read_csv(f); d["variant"] = int(v); d["rep"] = int(rep); parts.append(d); os.remove(f)
if parts:
    pd.concat(parts).to_csv(os.path.join(out, "bench-staged-ab.csv"), index=False)
PY
[ -f "$OUT/bench-staged-ab.csv" ] && python3 scripts/ratio_table.py "$OUT/bench-staged-ab.csv"
# On an H200 (issue 12's acceptance GPU): the op's own dispatch too (small-row table, crossover, headline).
if [ "${H200_EXTRAS:-1}" = 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash scripts/device-check.sh bench-small-rows crossover bench-fused > /dev/null 2>&1
  python3 scripts/ratio_table.py "$OUT"/bench-small-rows.csv "$OUT"/bench-fused.csv
fi
[ -f "$OUT/v3check.log" ] && grep -v "^  (v" "$OUT/v3check.log" | grep -v "^\[\|^rc=0" | grep -v "^check .*wrong rows 0, reruns differing in order 0, in set 0" | tail -c 5000
grep -h "passed\|failed\|ERROR SUMMARY\|checks passed\|mismatch" "$OUT/device.log" | tail -6
grep -h " rc=\|tests rc=" "$OUT/device.log" | tail -6
