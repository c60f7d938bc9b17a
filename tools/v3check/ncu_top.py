#!/usr/bin/env python3
"""Summarises `ncu --page source --csv --print-source sass` output of one kernel
(tools/v3check/ncu_source.sh): the SASS instructions with the most warp-stall
samples, each with its address, its instruction and its top stall reasons.
Usage: ncu_top.py SOURCE.csv [N]"""
import csv
import sys


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if "Address" in l and "Source" in l)
    rows = list(csv.DictReader(lines[start:]))
    cols = list(rows[0].keys())
    allc = next(c for c in cols if "Sampling" in c and "All" in c)
    reasons = [c for c in cols if c.startswith("stall_") or "Stall" in c and c != allc and "Sampling" not in c]
    total = sum(num(r[allc]) for r in rows)
    print(f"{len(rows)} instructions, {total:.0f} samples; columns: {', '.join(cols)}")
    top = sorted(rows, key=lambda r: -num(r[allc]))[:n]
    for r in top:
        rs = sorted(((num(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c}={v:.0f}" for v, c in rs if v > 0)
        print(f"{r.get('Address', '?'):>8} {num(r[allc]):8.0f} {100 * num(r[allc]) / max(total, 1):5.1f}%  "
              f"{r.get('Source', '')[:70]:70}  {why}")


if __name__ == "__main__":
    main()
