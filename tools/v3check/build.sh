#!/usr/bin/env bash
# Builds tools/v3check/v3check.cu (torch-free) into build/v3check on any
# machine with nvcc (no GPU needed); carry build/v3check to the GPU machine.
# (BIN=build/other: another output, e.g. BIN=build/v3check_cluster ... -DV3CHECK_CLUSTER.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p build
NVCC=${NVCC:-nvcc}
"$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icsrc/include \
  -Xptxas -v tools/v3check/v3check.cu -o "${BIN:-build/v3check}" "$@" 2> "${BIN:-build/v3check}.ptxas.log"
grep -A2 "v3_kernel\|fused_mqa_topk_kernel\|staged_topk_kernel" "${BIN:-build/v3check}.ptxas.log" | grep -i "registers\|spill" | head -20 || true
ls -la "${BIN:-build/v3check}"
