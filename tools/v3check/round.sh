#!/usr/bin/env bash
# One device round of the carried build/v3check (no extension build): the
# steps of a steps file (default tools/v3check/steps.txt; one v3check command
# line per line, an optional "T=seconds " prefix; "!" runs the rest as a shell
# command), each under a hard time
# limit; output in $OUT/v3check.log.
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=build/v3check
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader >> "$OUT/v3check.log"
git rev-parse --short HEAD >> "$OUT/v3check.log" 2>/dev/null
while read -r line; do
  [ -z "$line" ] || [ "${line#\#}" != "$line" ] && continue
  t=60
  case $line in T=*) t=${line%% *}; t=${t#T=}; line=${line#* } ;; esac
  echo "=== $line" | tee -a "$OUT/v3check.log"
  case $line in
    # "!cmd": a shell command, e.g. !compute-sanitizer --tool racecheck build/v3check check 12 ...
    !*) timeout -s KILL "$t" bash -c "${line#!}" 2>&1 | tee -a "$OUT/v3check.log" ;;
    *) timeout -s KILL "$t" $B $line 2>&1 | tee -a "$OUT/v3check.log" ;;
  esac
  echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/v3check.log"
done < "${1:-tools/v3check/steps.txt}"
