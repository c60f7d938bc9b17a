#!/usr/bin/env bash
# Compiles every kernel for sm_90a through the torch-free translation units in
# csrc/ci/ (CI runs this on a CPU machine with nvcc). Prints each kernel's
# registers / shared memory / spills; fails on any compile error.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "compile-check: nvcc not found (set NVCC)"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for tu in csrc/ci/*.cu; do
  echo "== $tu"
  if ! "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -Icsrc/include \
      -c "$tu" -o "$out/$(basename "$tu").o" 2> "$out/log"; then
    cat "$out/log"; status=1; continue
  fi
  grep -E "Compiling entry|registers|spill" "$out/log" | sed -E 's/^ptxas info *: //' || true
done
# The torch-free device harness (tools/v3check, a development tool): compiled
# and linked here so it cannot rot.
echo "== tools/v3check/v3check.cu"
if ! "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icsrc/include \
    tools/v3check/v3check.cu -o "$out/v3check" 2> "$out/log"; then
  cat "$out/log"; status=1
fi
# The split merge's microbenchmark (tools/gatherbench, a development tool), likewise.
echo "== tools/gatherbench/gatherbench.cu"
if ! "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icsrc/include \
    tools/gatherbench/gatherbench.cu -o "$out/gatherbench" 2> "$out/log"; then
  cat "$out/log"; status=1
fi
# The dependent-load latency probe (tools/latprobe, a development tool), likewise.
echo "== tools/latprobe/latprobe.cu"
if ! "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tools/latprobe/latprobe.cu -o "$out/latprobe" \
    2> "$out/log"; then
  cat "$out/log"; status=1
fi
# The cluster probe (tools/clusterprobe, a development tool), likewise.
echo "== tools/clusterprobe/clusterprobe.cu"
if ! "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tools/clusterprobe/clusterprobe.cu \
    -o "$out/clusterprobe" 2> "$out/log"; then
  cat "$out/log"; status=1
fi
[ $status -eq 0 ] && echo "compile-check: every kernel compiles for sm_90a"
exit $status
