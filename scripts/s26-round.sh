#!/usr/bin/env bash
# Session 26's first device round (issue 12, 1064 rows): build, the split kernel's share rules checked
# (GPU tests of the split kernels and the new rule, memcheck), then the rules timed at 1064-2120 rows
# (SHARE_RULES, alternating, cold L2 medians through `mqa-topk bench`).
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
bash scripts/device-check.sh build > /dev/null 2>&1
timeout 200 python3 -m pytest -q -rf tests/test_gpu_fused.py -k "share_rule or split_large or split_dispatch" \
  > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -3 "$OUT/tests.log"
bash scripts/device-check.sh sanitize > /dev/null 2>&1
grep -h "ERROR SUMMARY" "$OUT/device.log" | tail -1
SHARE_RULES="${SHARE_RULES:-0 4 8 16 0 4}" bash scripts/device-check.sh bench-small-rows-rules > /dev/null 2>&1
grep -h " rc=" "$OUT/device.log" | tail -10
python3 scripts/ratio_table.py "$OUT"/bench-small-rows-rule*.csv
