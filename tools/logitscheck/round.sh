#!/usr/bin/env bash
# One device round of the carried build/logitscheck (no extension build): the
# steps of a steps file (one logitscheck command line per line, an optional
# "T=seconds " prefix; "!" runs the rest as a shell command), each under a
# hard time limit; output in $OUT/logitscheck.log.
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=build/logitscheck
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader >> "$OUT/logitscheck.log"
git rev-parse --short HEAD >> "$OUT/logitscheck.log" 2>/dev/null
while read -r line; do
  [ -z "$line" ] || [ "${line#\#}" != "$line" ] && continue
  t=60
  case $line in T=*) t=${line%% *}; t=${t#T=}; line=${line#* } ;; esac
  echo "=== $line" | tee -a "$OUT/logitscheck.log"
  case $line in
    !*) timeout -s KILL "$t" bash -c "${line#!}" 2>&1 | tee -a "$OUT/logitscheck.log" ;;
    *) timeout -s KILL "$t" $B $line 2>&1 | tee -a "$OUT/logitscheck.log" ;;
  esac
  echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/logitscheck.log"
done < "${1:?steps file}"
