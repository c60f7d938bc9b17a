#!/usr/bin/env bash
# Compiles what the extension is built from, on any machine with nvcc (CI runs
# it on a CPU machine): every kernel translation unit (csrc/kernels/*.cu,
# torch-free) for sm_90a, printing each kernel's registers and spills; the
# ops' host launchers and the binding (csrc/*.cpp) against the installed
# torch's headers (syntax only; skipped without torch); the development
# harnesses in dev/. Fails on any compile error.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "compile-check: nvcc not found (set NVCC)"; exit 1; }
CUDA_INC=""  # (cuda_runtime.h, for the host launchers)
for d in "${CUDA_HOME:-}/include" "$(dirname "$(readlink -f "$NVCC")")/../include" /usr/local/cuda/include; do
  [ -f "$d/cuda_runtime.h" ] && { CUDA_INC=$d; break; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
FLAGS=(-std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Icsrc -Icsrc/include)
status=0
pids=()
for tu in csrc/kernels/*.cu; do  # (two at a time: each takes 10-60 s)
  name=$(basename "$tu" .cu)
  ( "$NVCC" "${FLAGS[@]}" -Xptxas -v -c "$tu" -o "$out/$name.o" > "$out/$name.log" 2>&1 && echo ok > "$out/$name.ok" ) &
  pids+=($!)
  if [ ${#pids[@]} -ge ${JOBS:-2} ]; then wait "${pids[0]}" || true; pids=("${pids[@]:1}"); fi
done
wait || true
for tu in csrc/kernels/*.cu; do
  name=$(basename "$tu" .cu)
  echo "== $tu"
  if [ -f "$out/$name.ok" ]; then
    grep -E "Compiling entry|registers|spill" "$out/$name.log" | sed -E 's/^ptxas info *: //' | grep -v "0 bytes spill stores, 0 bytes spill loads" || true
  else
    cat "$out/$name.log"; status=1
  fi
done
# The host launchers: syntax-checked against torch's headers. A CPU-only torch
# wheel lacks the header its CUDA build generates (c10/cuda/impl/cuda_cmake_macros.h);
# an equivalent one-line stand-in is provided then.
if TORCH_INC=$(python3 -c "from torch.utils.cpp_extension import include_paths; print(' '.join(include_paths()))" 2>/dev/null); then
  mkdir -p "$out/stub/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$out/stub/c10/cuda/impl/cuda_cmake_macros.h"
  PY_INC=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  inc=(); for d in $TORCH_INC; do inc+=(-I"$d"); done
  for src in csrc/*.cpp; do
    echo "== $src"
    if ! "${CXX:-g++}" -std=c++17 -fsyntax-only -w -DTORCH_EXTENSION_NAME=mqa_topk_ext -Icsrc -Icsrc/include \
        "${inc[@]}" -I"$PY_INC" -I"$CUDA_INC" -idirafter "$out/stub" "$src" 2> "$out/cpp.log"; then
      cat "$out/cpp.log"; status=1
    fi
  done
else
  echo "== csrc/*.cpp: skipped (no torch)"
fi
# The development harnesses (dev/): compiled so they cannot rot (dev/kernelcheck/build.sh links them).
for tu in dev/*/*.cu; do
  [ -e "$tu" ] || continue
  echo "== $tu"
  if ! "$NVCC" "${FLAGS[@]}" -c "$tu" -o "$out/$(basename "$tu" .cu).o" 2> "$out/log"; then
    cat "$out/log"; status=1
  fi
done
[ $status -eq 0 ] && echo "compile-check: every kernel, launcher and harness compiles for sm_90a"
exit $status
