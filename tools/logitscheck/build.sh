#!/usr/bin/env bash
# Builds tools/logitscheck/logitscheck.cu (torch-free) into build/logitscheck on
# any machine with nvcc (no GPU needed); carry build/logitscheck to the GPU
# machine and run a steps file with tools/logitscheck/round.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p build
NVCC=${NVCC:-nvcc}
"$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icsrc/include \
  -Xptxas -v tools/logitscheck/logitscheck.cu -o build/logitscheck "$@" 2> build/logitscheck.ptxas.log
grep -A2 "v2_kernel" build/logitscheck.ptxas.log | grep -i "spill" | head -20 || true
ls -la build/logitscheck
