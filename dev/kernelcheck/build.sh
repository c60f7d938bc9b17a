#!/usr/bin/env bash
# Builds dev/kernelcheck (the harness linked with the kernels' own translation
# units, csrc/kernels/*.cu) into build/kernelcheck/kernelcheck on any machine
# with nvcc; carry build/kernelcheck to the GPU machine and run it there:
#   build/kernelcheck/kernelcheck check auto,whole,split 8192 65536 2048 causal gaussian
#   build/kernelcheck/kernelcheck time auto 8192 65536 2048 causal gaussian
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/kernelcheck
mkdir -p "$out"
NVCC=${NVCC:-nvcc}
FLAGS=(-std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Icsrc -Icsrc/include)
objs=()
for tu in csrc/kernels/*.cu dev/kernelcheck/kernelcheck.cu; do
  o="$out/$(basename "$tu" .cu).o"
  objs+=("$o")
  [ "$o" -nt "$tu" ] && [ -z "$(find csrc/include csrc/kernels -newer "$o" -print -quit)" ] && continue
  echo "nvcc $tu"
  "$NVCC" "${FLAGS[@]}" -c "$tu" -o "$o" &
  [ "$(jobs -r | wc -l)" -ge "${JOBS:-2}" ] && wait -n
done
wait
"$NVCC" "${FLAGS[@]}" "${objs[@]}" -o "$out/kernelcheck"
echo "built $out/kernelcheck"
