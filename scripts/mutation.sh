#!/usr/bin/env bash
# Mutation testing of the checker and the rules (docs/TESTING.md): mutmut
# (pinned below; config in pyproject.toml [tool.mutmut]) over verify, crossover,
# eligibility, contract, ops (Python side), reference, timing and workloads.
#
#   scripts/mutation.sh                     every mutant (about 8400; hours on 2 cores)
#   scripts/mutation.sh --sample 60         60 mutants per module, drawn with --seed
#   scripts/mutation.sh --sample 60 --seed 2 --children 2 verify crossover
#
# mutmut runs the selected tests once to learn which tests call which
# function; each mutant then runs only the tests that exercise its function
# (fastest first, stopping at the first failure). Starts from a fresh
# mutants/ (results are not carried over). Prints the score per module and
# writes mutants/report.md: the score and every surviving mutant's diff.
# Needs the pinned mutmut: pip install -e '.[test,mutation]'.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
MUTMUT_VERSION=3.8.1
SAMPLE=0
SEED=1
CHILDREN=2
MODULES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --sample) SAMPLE=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        --children) CHILDREN=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) MODULES+=("$1"); shift ;;
    esac
done
[ ${#MODULES[@]} -gt 0 ] || MODULES=(verify crossover eligibility contract ops reference timing workloads)

have=$($PY -c "import importlib.metadata as m; print(m.version('mutmut'))" 2>/dev/null || true)
if [ "$have" != "$MUTMUT_VERSION" ]; then
    echo "needs mutmut==$MUTMUT_VERSION (found: ${have:-none}): pip install -e '.[test,mutation]'" >&2
    exit 2
fi
MUTMUT=$(dirname "$($PY -c 'import sys; print(sys.executable)')")/mutmut
[ -x "$MUTMUT" ] || MUTMUT=mutmut

# One thread per test process: the machine's cores go to the parallel mutants
# (and torch's thread pool is not fork-safe). No GPU: the CPU tests only.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=""
rm -rf mutants

patterns=()
for m in "${MODULES[@]}"; do patterns+=("mqa_topk_cli.$m.*"); done
if [ "$SAMPLE" -gt 0 ]; then
    # Generate every mutant and collect the test statistics (a filter that
    # matches no mutant stops mutmut right after both), then draw the sample
    # from the generated names.
    nice -n 10 "$MUTMUT" run --max-children "$CHILDREN" "no-such-mutant" >mutants.log 2>&1 || true
    mv mutants.log mutants/generate.log
    [ -f mutants/mutmut-stats.json ] || { tail -n 20 mutants/generate.log >&2; exit 1; }
    mapfile -t names < <($PY scripts/mutation_report.py sample --n "$SAMPLE" --seed "$SEED" "${MODULES[@]}")
    printf '%s\n' "${names[@]}" > mutants/sample.txt
    echo "sample: ${#names[@]} mutants (seed $SEED), listed in mutants/sample.txt"
    nice -n 10 "$MUTMUT" run --max-children "$CHILDREN" "${names[@]}" | tail -n 3
    $PY scripts/mutation_report.py report --names mutants/sample.txt --mutmut "$MUTMUT" "${MODULES[@]}"
else
    nice -n 10 "$MUTMUT" run --max-children "$CHILDREN" "${patterns[@]}" | tail -n 3
    $PY scripts/mutation_report.py report --mutmut "$MUTMUT" "${MODULES[@]}"
fi
