#!/usr/bin/env bash
# The GPU run in one call (device time is scarce: build once, then test,
# verify, sanitize and bench). Usage: scripts/device-check.sh [stage ...]
#   build       mqa-topk build (the extension, once; every later stage reuses it)
#   gpu-tests   pytest -m gpu (every op and fused kernel, CUDA graphs, device range errors)
#   verify      mqa-topk verify --paths fused,native (the default workloads)
#   sanitize    compute-sanitizer memcheck over scripts/sanitize_cases.py and sanitize_ranges.py
#   headline    the headline: fused and native (bench), the logits kernel alone with the fp8 GEMM ceiling (bench --op logits)
#   small-rows  configs/small-rows.toml, fused and native
#   grid        configs/bench.toml, fused and native
#   adversarial configs/adversarial.toml, fused and native
#   logits-grid configs/logits-grid.toml, the logits kernel alone
#   topk        configs/topk-grid.toml, the top-k alone on random logits
#   crossover   mqa-topk crossover (writes $OUT/calibration.json)
#   crossover-heads  mqa-topk crossover at 32 and then 64 heads into one $OUT/calibration.json
#               (CROSSOVER_ARGS: extra crossover options for both stages, e.g. a shorter --keys grid)
#   verify-heads     verify --paths fused,native at 64 and at 16 heads
#   heads-headline   the headline at 64 heads (--model deepseek-v3.2): fused, native, logits alone
#   heads       dev/heads_check.py: the kernels at 16, 32 and 64 heads (exact sets, logits against
#               float64, every fused kernel) and the headline timed per heads
#   ncu         Nsight Compute on the headline's fused whole kernel and dense logits kernel (NCU_HEADS, default
#               32): speed of light, pipe and shared-memory use, warp stall reasons, scheduler and instruction
#               statistics, into device.log and ncu-*.txt
#   ncu-src     Nsight Compute source counters of the same two kernels: per-SASS-instruction executed counts
#               and warp stall samples (ncu-src-*.csv, and the reports)
#   logits-bound dev/logits_bound.py: the dense kernel, the same loop without its epilogue arithmetic,
#               and the fp8 GEMM ceiling, interleaved (a second extension built with a -D flag)
#   fused-bound dev/fused_bound.py: the fused kernel with its per-tile weight loads, with one per row,
#               with none (probe builds), and the logits kernel alone, interleaved
#   probe       dev/adversarial_probe.py: the block kernels' rare-path counts and fused / dense time per
#               adversarial input (builds its own extension with MQA_TOPK_FUSED_DIAGNOSTICS)
#   deepgemm    DeepGEMM's logits beside ours over the logits grid at 32 and 64 heads (DG_HEADS), and the
#               whole op (needs the ignored .peers/ folder carried: ../shared/peers/README.md)
#   (default: build gpu-tests verify sanitize headline small-rows)
# OLD=DIR (absolute): also builds the tree in DIR and runs the bench stages
# on it (an older checkout or a variant, e.g. `git archive TAG | tar -x -C
# .ab/old`, carried along; run from its own directory, so its package and csrc
# are the ones imported), each right after the current tree's, for a
# comparison in one call. Several trees: OLD=DIR1:DIR2 (stage suffixes old,
# old2, ...); OLD_COMMIT=NAME1:NAME2 names them in their tables (else "old
# tree N").
# VARIANTS="NAME=VAR=VALUE[,VAR=VALUE...] NAME2=...": the bench, verify and
# verify-heads stages run again on this tree's extension under each variant's environment
# (a kernel choice read from the environment, e.g. an experiment's switch:
# every variant in one build), as stage NAME-<variant>, their tables named
# <commit>+<variant>.
# Every stage's output goes to $OUT/device.log (it comes back first), result
# tables to <stage>.csv|json in $OUT/results, packed at the end into
# $OUT/results.tar.gz (a call returns at most 8 files); a calibration to
# $OUT/calibration.json; a summary is printed last.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
RES="$OUT/results"
mkdir -p "$OUT" "$RES"
export PYTHONUNBUFFERED=1
# The image's default C++ compiler links libstdc++ statically (a JIT extension
# built with it crashed in std::regex): build with the system compiler.
[ -x /usr/bin/g++ ] && export CC=/usr/bin/gcc CXX=/usr/bin/g++
export MQA_TOPK_CACHE_DIR=${MQA_TOPK_CACHE_DIR:-/tmp/mqa_topk_cache}
export MAX_JOBS=${MAX_JOBS:-16}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build gpu-tests verify sanitize headline small-rows)
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
IFS=: read -ra old_dirs <<< "${OLD:-}"
IFS=: read -ra old_names <<< "${OLD_COMMIT:-}"
old_suffix() { [ "$1" -eq 0 ] && echo old || echo "old$(( $1 + 1 ))"; }
# on_olds NAME CMD...: CMD run in each OLD tree as stage NAME-<suffix>, with its own extension cache and name
on_olds() {
  local name=$1; shift
  local i sfx
  for i in "${!old_dirs[@]}"; do
    sfx=$(old_suffix "$i")
    run "$name-$sfx" env -C "${old_dirs[$i]}" MQA_TOPK_CACHE_DIR="/tmp/mqa_topk_cache_$sfx" \
      MQA_TOPK_COMMIT="${old_names[$i]:-old tree $(( i + 1 ))}" "${@//@SFX@/$sfx}"
  done
}
read -ra variants <<< "${VARIANTS:-}"
commit=${MQA_TOPK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
ncu_bin=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}  # (the ncu stages)
# on_variants NAME CMD...: CMD on this tree under each variant's environment, as stage NAME-<variant>
on_variants() {
  local name=$1; shift
  local v vname
  for v in "${variants[@]}"; do
    vname=${v%%=*}
    IFS=, read -ra venv <<< "${v#*=}"
    run "$name-$vname" env "${venv[@]}" MQA_TOPK_COMMIT="$commit+$vname" \
      "${@//@VAR@/$vname}"
  done
}
# bench NAME ARGS...: mqa-topk bench on this tree (its variants and each OLD tree, interleaved)
bench() {
  local name=$1; shift
  run "$name" mqa-topk bench "$@" --out "$RES/$name.csv"
  on_variants "$name" mqa-topk bench "$@" --out "$RES/$name-@VAR@.csv"
  on_olds "$name" python3 -m mqa_topk_cli bench "$@" --out "$RES/$name-@SFX@.csv"
}
# verify NAME ARGS...: mqa-topk verify --paths fused,native on this tree and its variants
verify() {
  local name=$1; shift
  run "$name" mqa-topk verify --paths fused,native "$@" --out "$RES/$name.json"
  on_variants "$name" mqa-topk verify --paths fused,native "$@" --out "$RES/$name-@VAR@.json"
}
{ date -u; git rev-parse --short HEAD 2>/dev/null || echo "commit ${MQA_TOPK_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv; } >> "$OUT/device.log" 2>&1
python3 -m pip install -q --no-build-isolation --no-deps -e . >> "$OUT/device.log" 2>&1 || { echo "install failed"; tail "$OUT/device.log"; exit 1; }
for s in "${stages[@]}"; do
  case $s in
    build) # (the OLD trees' extensions build at the same time as this tree's, the compile jobs split)
           per=$(( MAX_JOBS / (${#old_dirs[@]} + 1) )); [ "$per" -lt 2 ] && per=2
           pids=()
           for i in "${!old_dirs[@]}"; do
             sfx=$(old_suffix "$i")
             env -C "${old_dirs[$i]}" MQA_TOPK_CACHE_DIR="/tmp/mqa_topk_cache_$sfx" MAX_JOBS=$per \
               python3 -c "from mqa_topk_cli import jit; jit.load_extension()" > "$OUT/build-$sfx.log" 2>&1 &
             pids+=($!)
           done
           MAX_JOBS=$per run build mqa-topk build; rc=$?
           for p in "${pids[@]}"; do wait "$p"; done
           [ "$rc" -eq 0 ] || break
           on_olds build python3 -m mqa_topk_cli build ;;
    gpu-tests) run gpu-tests python3 -m pytest -q -m gpu -x -rf tests ;;
    verify) verify verify ;;
    verify-heads) for h in 64 16; do verify verify-h$h --heads $h; done ;;
    heads-headline) bench headline-h64 --model deepseek-v3.2 --paths fused,native
                    bench headline-h64-logits --model deepseek-v3.2 --op logits --paths native ;;
    sanitize) run sanitize compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitize_cases.py
              run sanitize-ranges compute-sanitizer --tool memcheck --print-limit 4 --error-exitcode 3 python3 scripts/sanitize_ranges.py ;;
    headline) bench headline --paths fused,native
              bench headline-logits --op logits --paths native ;;
    small-rows) bench small-rows --config small-rows --paths fused,native ;;
    grid) bench grid --config bench --paths fused,native ;;
    adversarial) bench adversarial --config adversarial --paths fused,native ;;
    logits-grid) bench logits-grid --op logits --config logits-grid --paths native ;;
    topk) bench topk --op topk --config topk-grid --random-logits --paths native ;;
    heads) run heads python3 dev/heads_check.py ;;
    probe) run probe python3 dev/adversarial_probe.py ;;
    logits-bound) run logits-bound python3 dev/logits_bound.py ;;
    fused-bound) run fused-bound python3 dev/fused_bound.py ;;
    ncu) for op in fused logits; do
           [ $op = fused ] && kre=sm90_fused_blocks || kre=sm90_fp8_mqa_logits
           run ncu-$op "$ncu_bin" --clock-control none -k regex:$kre -s 1 -c 1 --section SpeedOfLight \
             --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
             --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
             --log-file "$RES/ncu-$op.txt" python3 scripts/ncu_ops.py $op 8192 65536 2048 --heads "${NCU_HEADS:-32}" \
             $([ $op = fused ] && echo --kernel whole)
           cat "$RES/ncu-$op.txt" >> "$OUT/device.log"
         done ;;
    ncu-src) for op in fused logits; do  # per-SASS-instruction samples (warp stall reasons) and executed counts
           [ $op = fused ] && kre=sm90_fused_blocks || kre=sm90_fp8_mqa_logits
           run ncu-src-$op "$ncu_bin" --clock-control none -k regex:$kre -s 1 -c 1 --section SourceCounters \
             --section WarpStateStats --export "$RES/ncu-src-$op" --force-overwrite \
             python3 scripts/ncu_ops.py $op 8192 65536 2048 --heads "${NCU_HEADS:-32}" $([ $op = fused ] && echo --kernel whole)
           "$ncu_bin" -i "$RES/ncu-src-$op.ncu-rep" --page source --csv --print-source sass > "$RES/ncu-src-$op.csv" 2>&1
           head -c 3000 "$RES/ncu-src-$op.csv" >> "$OUT/device.log"
         done ;;
    crossover) run crossover mqa-topk crossover ${CROSSOVER_ARGS:-} --out "$OUT/calibration.json" --results "$RES/crossover.csv" ;;
    crossover-heads)  # 32 then 64 heads into one calibration file (--out merges the heads' entries)
                    for h in 32 64; do
                      run crossover-h$h mqa-topk crossover --heads $h ${CROSSOVER_ARGS:-} --out "$OUT/calibration.json" \
                        --results "$RES/crossover-h$h.csv"
                    done ;;
    deepgemm)
      # DeepGEMM's runtime JIT calls nvcc without -ccbin: put the system compilers first on PATH.
      [ -d .peers/deepgemm ] || { echo "deepgemm: no .peers/deepgemm here (carry .peers)" | tee -a "$OUT/device.log"; summary+=("deepgemm missing .peers"); continue; }
      mkdir -p /tmp/ccbin && for c in gcc cc; do ln -sf /usr/bin/gcc /tmp/ccbin/$c; done && for c in g++ c++; do ln -sf /usr/bin/g++ /tmp/ccbin/$c; done
      export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=/tmp/ccbin:$PATH DG_JIT_CACHE_DIR=/tmp/dg_jit
      run deepgemm-build bash .peers/build_deepgemm.sh /tmp/deepgemm || continue
      export PYTHONPATH=/tmp/deepgemm${PYTHONPATH:+:$PYTHONPATH}
      run deepgemm-verify mqa-topk verify --paths deepgemm,native --other native --out "$RES/verify-deepgemm.json"
      for h in ${DG_HEADS:-32 64}; do  # (DeepGEMM's SM90 logits take 32 and 64 heads)
        run deepgemm-bench-grid-h$h mqa-topk bench --op logits --config logits-grid --heads $h --paths deepgemm,native \
          --out "$RES/deepgemm-grid-h$h.csv"
      done
      run deepgemm-bench-op mqa-topk bench --paths deepgemm,fused,native --out "$RES/deepgemm-op.csv" ;;
    *) echo "unknown stage $s" ;;
  esac
done
tar -czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$RES"
echo; echo "=== summary ($commit)" | tee -a "$OUT/device.log"; printf '%s\n' "${summary[@]}" | tee -a "$OUT/device.log"
