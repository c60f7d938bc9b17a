#!/usr/bin/env python3
"""Summarises `ncu --page source --csv --print-source sass` output of one kernel
(tools/v3check/ncu_source.sh): the samples per function (the kernel's body
and each noinline call: where the split phases' time goes), then the SASS
instructions with the most warp-stall samples, each with its address, its
instruction and its top stall reasons.
Usage: ncu_top.py SOURCE.csv [N] [FUNCS]
FUNCS: tools/sass/functions.py's listing of the same configuration (offset,
size, name per line) names the functions; without it the listing is cut
after each function's closing branch to itself (unnamed segments, in address
order, with their sizes: those of functions.py's listing, padding aside)."""
import csv
import re
import sys


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def addr(r):
    try:
        return int(str(r.get("Address", "0")), 16)
    except ValueError:
        return -1


def per_function(rows, allc, reasons, total, funcs_path):
    """Samples and top stall reasons per function (FUNCS) or per RET-ended segment."""
    base = addr(rows[0])
    if funcs_path:
        funcs = []
        for line in open(funcs_path):
            f = line.split()
            if len(f) >= 3 and f[0].startswith("0x"):
                funcs.append((int(f[0], 16), " ".join(f[2:])))
        funcs.sort()
        def name_of(off):
            nm = "?"
            for a, n in funcs:
                if a <= off:
                    nm = n
            return nm
        keyed = [(name_of(addr(r) - base), r) for r in rows]
    else:
        keyed, seg = [], 0
        for r in rows:  # (each function's code ends with a branch to itself after its EXIT / RET)
            keyed.append((f"segment {seg}", r))
            src = str(r.get("Source", ""))
            m = re.search(r"\bBRA\s+(?:`\(\S+\)\s*)?0x([0-9a-f]+)", src)
            if m and int(m.group(1), 16) == addr(r) and "@" not in src:
                seg += 1
    groups = {}
    order = []
    for k, r in keyed:
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    print("per function (samples, share, instructions, top stall reasons):")
    for k in order:
        g = groups[k]
        smp = sum(num(r[allc]) for r in g)
        rs = sorted(((sum(num(r[c]) for r in g), c) for c in reasons if "Not Issued" not in c), reverse=True)[:4]
        why = ", ".join(f"{c}={v:.0f}" for v, c in rs if v > 0)
        print(f"  {k[:40]:40} {smp:8.0f} {100 * smp / max(total, 1):5.1f}% {len(g):7d}  {why}")


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
    per_function(rows, allc, reasons, total, sys.argv[3] if len(sys.argv) > 3 else None)
    top = sorted(rows, key=lambda r: -num(r[allc]))[:n]
    for r in top:
        rs = sorted(((num(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c}={v:.0f}" for v, c in rs if v > 0)
        print(f"{r.get('Address', '?'):>8} {num(r[allc]):8.0f} {100 * num(r[allc]) / max(total, 1):5.1f}%  "
              f"{r.get('Source', '')[:70]:70}  {why}")


if __name__ == "__main__":
    main()
