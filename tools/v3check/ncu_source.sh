#!/usr/bin/env bash
# Warp-stall samples per SASS instruction of one fused v3 launch (ncu's source
# page; the carried build/v3check, built with -lineinfo): where the split
# kernel's warps wait. Usage: ncu_source.sh "V3CHECK ARGS" [NAME]
#   e.g. tools/v3check/ncu_source.sh "timeline 66 64 65536 2048 causal gaussian grid=128" r64
# $OUT/NAME-top.txt starts with the samples per function, unnamed (segments in
# address order); to name them, here afterwards: tools/sass/one_config.sh
# CONFIG; nvdisasm -c build/sass/CONFIG.cubin > X.dis; python3
# tools/sass/functions.py X.dis > F.txt; python3 tools/v3check/ncu_top.py
# <(zcat NAME-source.csv.gz) 70 F.txt
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
args=$1; name=${2:-ncu}
ncu --clock-control none -k regex:v3_kernel --launch-skip 1 -c 1 --section WarpStateStats --section SourceCounters \
  --section LaunchStats -f -o "$OUT/$name" build/v3check $args > "$OUT/$name.log" 2>&1
ncu --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name-source.csv" 2>> "$OUT/$name.log"
ncu --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name-details.txt" 2>> "$OUT/$name.log"
python3 tools/v3check/ncu_top.py "$OUT/$name-source.csv" 70 > "$OUT/$name-top.txt" 2>> "$OUT/$name.log"
gzip -f "$OUT/$name-source.csv"
rm -f "$OUT/$name.ncu-rep"
