#!/usr/bin/env bash
# Compiles one fused v3 configuration (a type of sm90_fused_mqa_topk_v3.cuh,
# e.g. Sm90FusedV3Default) to a cubin on any machine with nvcc (no GPU), and
# prints its tile loops' statistics (loop_stats.py) and ptxas's spill line.
#   tools/sass/one_config.sh CONFIG [OUTDIR]      (about 40 s)
set -euo pipefail
cfg=$1; out=${2:-build/sass}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
src="$out/$cfg.cu"
cat > "$src" <<CU
#include "mqa_topk/sm90_fused_mqa_topk_v3.cuh"
template <class Cfg>
cudaError_t one_config_launch() {
  return mqa_topk::launch_sm90_fused_mqa_topk_v3<Cfg>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                      nullptr, 0, 0, 2048, 132, nullptr);
}
template cudaError_t one_config_launch<mqa_topk::$cfg>();
CU
${NVCC:-nvcc} -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I"$root/csrc/include" \
  -Xptxas -v -cubin "$src" -o "$out/$cfg.cubin" 2> "$out/$cfg.ptxas.log"
cuobjdump -sass "$out/$cfg.cubin" > "$out/$cfg.sass"
python3 "$root/tools/sass/loop_stats.py" "$out/$cfg.sass"
grep -A1 "Function properties for _ZN8mqa_topk29" "$out/$cfg.ptxas.log" | tail -1
