#!/usr/bin/env bash
# One device round of the carried build/v3check (no extension build): the
# steps of a steps file (default tools/v3check/steps.txt; one v3check command
# line per line, an optional "T=seconds " prefix; "!" runs the rest as a shell
# command), each under a hard time
# limit; output in $OUT/v3check.log.
# (B / LOG: another carried harness and its log name.)
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=${B:-build/v3check}
LOG="$OUT/${LOG:-v3check.log}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader >> "$LOG"
git rev-parse --short HEAD >> "$LOG" 2>/dev/null
while read -r line; do
  [ -z "$line" ] || [ "${line#\#}" != "$line" ] && continue
  t=60
  case $line in T=*) t=${line%% *}; t=${t#T=}; line=${line#* } ;; esac
  echo "=== $line" | tee -a "$LOG"
  case $line in
    # "!cmd": a shell command, e.g. !compute-sanitizer --tool racecheck build/v3check check 12 ...
    !*) timeout -s KILL "$t" bash -c "${line#!}" 2>&1 | tee -a "$LOG" ;;
    *) timeout -s KILL "$t" $B $line 2>&1 | tee -a "$LOG" ;;
  esac
  echo "rc=${PIPESTATUS[0]}" | tee -a "$LOG"
done < "${1:-tools/v3check/steps.txt}"
