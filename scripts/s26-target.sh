#!/usr/bin/env bash
# Session 26, issue 12: the split kernel's gate target at 1064-2120 rows (MQA_TOPK_FUSED_TARGET, a
# development knob: the gate's candidate target; default 1.5 k + 256), alternating, each through
# `mqa-topk bench` (cold L2 medians), fused and native in the same call.
export OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export CC=/usr/bin/gcc CXX=/usr/bin/g++
bash scripts/device-check.sh build > /dev/null 2>&1
grep -h " rc=" "$OUT/device.log" | tail -1
c2048="--case r1064-t2048 --case r1576-t2048 --case r2120-t2048"
c1024="--case r1064-t1024 --case r1576-t1024 --case r2120-t1024"
i=0
for spec in "t2048:0" "t2048:2560" "t2048:2816" "t2048:3072" "t1024:0" "t1024:1536" "t2048:0" "t2048:2560" \
            "t2048:2816" "t1024:0" "t1024:1536"; do
  i=$((i + 1)); k=${spec%%:*}; t=${spec##*:}
  cases=$c2048; [ "$k" = t1024 ] && cases=$c1024
  if [ "$t" = 0 ]; then unset MQA_TOPK_FUSED_TARGET; else export MQA_TOPK_FUSED_TARGET=$t; fi
  timeout 120 mqa-topk bench --config small-rows --paths fused,native $cases \
    --out "$OUT/target-$i-$k-$t.csv" >> "$OUT/device.log" 2>&1 || echo "bench $spec failed"
done
unset MQA_TOPK_FUSED_TARGET
python3 - <<'PY'
import glob, os, re, pandas as pd
rows = []
for f in glob.glob(os.environ["OUT"] + "/target-*.csv"):
    i, k, t = re.match(r".*target-(\d+)-(t\d+)-(\d+)\.csv", f).groups()
    d = pd.read_csv(f)
    p = d.pivot_table(index=["rows", "topk"], columns="path", values="median_ms").reset_index()
    for _, r in p.iterrows():
        rows.append(dict(run=int(i), target=int(t), rows=r["rows"], topk=r["topk"], fused=r["fused"],
                         native=r["native"], ratio=r["fused"] / r["native"]))
df = pd.DataFrame(rows).sort_values(["topk", "rows", "target", "run"])
print(df.round(4).to_string(index=False))
PY
