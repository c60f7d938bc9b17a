#!/usr/bin/env bash
# The whole GPU round in one call (device time is scarce: build once, then
# test, verify and bench). Usage: scripts/device-check.sh [stage ...]
#   stages: build probe fused-ab (FUSED_AB=11) v3-ab (V3_AB="8192 65536 --variants 12,13") v3-debug v3-dump (V3_DUMP="12 15") v3-tests fused-variants fused-probe split-probe split-breakdown split-grid split-probe-rising fused-tests verify-fused bench-fused bench-logits-headline bench-fused-grid bench-adversarial bench-small-rows bench-small-rows-staged (STAGED_VARIANTS="109 113 117") bench-small-rows-rules (SHARE_RULES="0 4 8 16") bench-small-rows-hybrid gpu-tests verify verify-ref bench bench-torch bench-split bench-logits bench-topk crossover ncu sanitize sanitize-ranges graph deepgemm  (default: all but crossover/sanitize/sanitize-ranges/graph/deepgemm)
# Set MQA_TOPK_DEV_PROBES=1 for the whole call when a stage needs the dev
# variants (fused-variants, fused-probe, probe): the extension is built once.
# deepgemm: builds DeepGEMM from the ignored .peers/ folder (carry it: ../shared/peers/README.md),
#   then verifies `deepgemm` against `native` and benches their logits side by side (after `build`;
#   the grid is configs/logits-grid.toml, SPEC §6's R x N points; DEEPGEMM_GRID=bench for the bench sweep).
#   graph: the serving-grade tests (CUDA graphs, device range errors), bench --graph and eager of
#     fused,native at the headline and at R=1024 N=8K, and the op-vs-launcher overhead (scripts/op_overhead.py)
# Every stage's output goes to one log, $OUT/device.log (the device tool returns
# at most 8 files); result tables to $OUT/<stage>.csv|json; a summary is printed last.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The image's default C++ compiler links libstdc++ statically (a JIT extension
# built with it crashed in std::regex): build with the system compiler.
[ -x /usr/bin/g++ ] && export CC=/usr/bin/gcc CXX=/usr/bin/g++
export MQA_TOPK_CACHE_DIR=${MQA_TOPK_CACHE_DIR:-/tmp/mqa_topk_cache}
export MAX_JOBS=${MAX_JOBS:-16}
# The build key hashes the compiler flags, and MQA_TOPK_VERBOSE_BUILD adds
# ptxas -v: set it for the whole call, or every stage after `build` rebuilds
# the extension from scratch (2.5 minutes of device time, silently; a stage
# under a short timeout then dies in the rebuild with no output).
export MQA_TOPK_VERBOSE_BUILD=${MQA_TOPK_VERBOSE_BUILD:-1}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build probe gpu-tests verify bench-logits bench-topk bench)
summary=()
run() {  # run NAME CMD...  (each stage under its own time limit, STAGE_TIMEOUT_<name> or 300 s)
  local name=$1; shift
  local var="STAGE_TIMEOUT_${name//-/_}"
  local limit=${!var:-300}
  local t0=$(date +%s)
  echo "=== $name: $*" | tee -a "$OUT/device.log"
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/device.log"
  local rc=${PIPESTATUS[0]}
  summary+=("$name rc=$rc $(( $(date +%s) - t0 ))s")
  return $rc
}
{ date -u; git rev-parse --short HEAD 2>/dev/null || echo "commit ${MQA_TOPK_COMMIT:-unknown}"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv; } >> "$OUT/device.log" 2>&1
python3 -m pip install -q --no-build-isolation --no-deps -e . >> "$OUT/device.log" 2>&1 || { echo "install failed"; tail "$OUT/device.log"; exit 1; }
for s in "${stages[@]}"; do
  case $s in
    build) run build mqa-topk build || break ;;
    probe) run probe python3 scripts/logits_probe.py ;;
    gpu-tests) run gpu-tests python3 -m pytest -q -m gpu -x tests ;;
    fused-variants) run fused-variants env MQA_TOPK_DEV_PROBES=1 sh -c 'python3 -m pytest -q -x tests/test_gpu_fused.py -k dev_variant && python3 scripts/fused_probe.py' ;;
    fused-ab) run fused-ab env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_ab.py ${FUSED_AB:-11} ;;
    v3-ab) run v3-ab env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_v3_ab.py ${V3_AB:-} ;;
    v3-debug) run v3-debug env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_v3_debug.py ${V3_DEBUG:-} ;;
    v3-dump) for v in ${V3_DUMP:-12 15 14 13}; do  # one variant per process, each under its own limit (a hang names itself)
               run v3-dump-$v env MQA_TOPK_DEV_PROBES=1 timeout ${V3_DUMP_TIMEOUT:-40} python3 scripts/fused_v3_debug.py $v --dump-only
             done ;;
    v3-tests) run v3-tests env MQA_TOPK_DEV_PROBES=1 python3 -m pytest -q -x -rf tests/test_gpu_fused.py -k "v3" ;;
    fused-probe) run fused-probe env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_probe.py ;;
    split-probe) run split-probe env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_split_probe.py ;;
    split-breakdown) run split-breakdown env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_split_probe.py --breakdown 65536 64 512 2120 ;;
    split-grid) run split-grid env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_split_probe.py --grid 65536 64 256 512 1064 ;;
    split-probe-rising) run split-probe-rising env MQA_TOPK_DEV_PROBES=1 python3 scripts/fused_split_probe.py --dist rising 65536 64 512 1064 2120 ;;
    bench-adversarial) run bench-adversarial mqa-topk bench --config adversarial --paths fused,native --out "$OUT/bench-adversarial.csv" ;;
    bench-small-rows) run bench-small-rows mqa-topk bench --config small-rows --paths fused,native --out "$OUT/bench-small-rows.csv" ;;
    # (issue 12: the staged kernel forced wherever it applies (<= SMs row blocks), each variant of STAGED_VARIANTS)
    bench-small-rows-staged) for v in ${STAGED_VARIANTS:-109 113 117}; do
                               run bench-small-rows-v$v env MQA_TOPK_FUSED_STAGED=1 MQA_TOPK_FUSED_STAGED_VARIANT=$v \
                                 mqa-topk bench --config small-rows --paths fused,native --out "$OUT/bench-small-rows-v$v.csv"
                             done ;;
    # (issue 12, session 26: the split kernel's share rules, each of SHARE_RULES; 0 the session-12 rule)
    bench-small-rows-rules) RULE_CASES=""
                            for c in r1064-t512 r1064-t1024 r1064-t2048 r1576-t512 r1576-t1024 r1576-t2048 r2120-t512 \
                                     r2120-t1024 r2120-t2048; do RULE_CASES="$RULE_CASES --case $c"; done
                            i=0
                            for r in ${SHARE_RULES:-0 4 8 16}; do
                              i=$((i + 1))
                              run bench-small-rows-rule$r-$i env MQA_TOPK_FUSED_SHARE_RULE=$r \
                                mqa-topk bench --config small-rows --paths fused,native $RULE_CASES --out "$OUT/bench-small-rows-rule$r-$i.csv"
                            done ;;
    # (issue 12, session 26: the hybrid kernel at 1064-2120 rows against the op's default)
    bench-small-rows-hybrid) for h in 0 1 0 1; do
                               i=$((${i:-0} + 1))
                               run bench-small-rows-hybrid$h-$i env MQA_TOPK_FUSED_HYBRID=$h \
                                 mqa-topk bench --config small-rows --paths fused,native --case r1064-t512 --case r1064-t1024 \
                                 --case r1064-t2048 --case r2120-t512 --case r2120-t1024 --case r2120-t2048 \
                                 --out "$OUT/bench-small-rows-hybrid$h-$i.csv"
                             done ;;
    fused-tests) run fused-tests python3 -m pytest -q -rf tests/test_gpu_fused.py ;;
    verify-fused) run verify-fused mqa-topk verify --paths fused,native --out "$OUT/verify-fused.json" ;;
    bench-fused) run bench-fused mqa-topk bench --paths fused,native --out "$OUT/bench-fused.csv" ;;
    # (issue 9's ratio: the logits kernel alone at the headline, in the same call as bench-fused)
    bench-logits-headline) run bench-logits-headline mqa-topk bench --op logits --paths native --out "$OUT/bench-logits-headline.csv" ;;
    bench-fused-grid) run bench-fused-grid mqa-topk bench --config bench --paths fused,native --out "$OUT/bench-fused-grid.csv" ;;
    verify) run verify mqa-topk verify --paths native,torch --out "$OUT/verify.json" ;;
    verify-ref) run verify-ref mqa-topk verify --paths torch,reference --out "$OUT/verify-ref.json" ;;
    bench-split) run bench-split mqa-topk bench --op logits --paths native,torch && run bench-split mqa-topk bench --op topk --paths native,torch ;;
    bench-logits) run bench-logits mqa-topk bench --op logits --config bench --paths native --out "$OUT/bench-logits.csv" ;;
    bench-topk) run bench-topk mqa-topk bench --op topk --config topk-grid --random-logits --paths native,torch --out "$OUT/bench-topk.csv" ;;
    bench) run bench mqa-topk bench --paths native,torch --out "$OUT/bench.csv" ;;
    bench-topk-1024) run bench-topk-1024 env MQA_TOPK_TOPK_THREADS=1024 mqa-topk bench --op topk --config topk-grid --random-logits --paths native --case n64k-k2048 --case n64k-k512 --case n128k-k2048 ;;
    bench-torch) run bench-torch mqa-topk bench --paths torch ;;
    crossover) run crossover mqa-topk crossover --out "$OUT/calibration.json" ;;
    ncu) run ncu ncu --clock-control none -k regex:sm90_fp8 -c 1 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis python3 scripts/ncu_logits.py ;;
    sanitize) run sanitize compute-sanitizer --tool memcheck python3 scripts/sanitize_case.py ;;
    sanitize-ranges) run sanitize-ranges compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitize_ranges.py ;;
    graph) run graph-tests python3 -m pytest -q -m gpu tests/test_gpu_serving.py
           run graph-bench mqa-topk bench --graph --paths fused,native --out "$OUT/bench-graph.csv"
           run graph-bench-small mqa-topk bench --graph --paths fused,native --rows 1024 --keys 8192 --out "$OUT/bench-graph-small.csv"
           run eager-bench-small mqa-topk bench --paths fused,native --rows 1024 --keys 8192 --out "$OUT/bench-eager-small.csv"
           run op-overhead python3 scripts/op_overhead.py --json "$OUT/op-overhead.json" ;;
    deepgemm)
      # DeepGEMM's runtime JIT calls nvcc without -ccbin: put the system compilers first on PATH.
      [ -d .peers/deepgemm ] || { echo "deepgemm: no .peers/deepgemm here (carry .peers)" | tee -a "$OUT/device.log"; summary+=("deepgemm missing .peers"); continue; }
      mkdir -p /tmp/ccbin && for c in gcc cc; do ln -sf /usr/bin/gcc /tmp/ccbin/$c; done && for c in g++ c++; do ln -sf /usr/bin/g++ /tmp/ccbin/$c; done
      export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=/tmp/ccbin:$PATH DG_JIT_CACHE_DIR=/tmp/dg_jit
      run deepgemm-build bash .peers/build_deepgemm.sh /tmp/deepgemm || continue
      export PYTHONPATH=/tmp/deepgemm${PYTHONPATH:+:$PYTHONPATH}
      run deepgemm-verify mqa-topk verify --paths deepgemm,native --other native --out "$OUT/verify-deepgemm.json"
      run deepgemm-bench mqa-topk bench --op logits --paths deepgemm,native --out "$OUT/bench-deepgemm.csv"
      run deepgemm-bench-grid mqa-topk bench --op logits --config ${DEEPGEMM_GRID:-logits-grid} --paths deepgemm,native --out "$OUT/bench-deepgemm-grid.csv"
      run deepgemm-bench-op mqa-topk bench --paths deepgemm,native --out "$OUT/bench-deepgemm-op.csv" ;;
    *) echo "unknown stage $s" ;;
  esac
done
echo; echo "=== summary (${MQA_TOPK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})" | tee -a "$OUT/device.log"; printf '%s\n' "${summary[@]}" | tee -a "$OUT/device.log"
