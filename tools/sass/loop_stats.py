#!/usr/bin/env python3
"""Per-loop statistics of the MMA tile loops in a SASS listing (cuobjdump -sass).

    python3 tools/sass/loop_stats.py KERNEL.sass

For every innermost backward-branch loop that holds a QGMMA, prints: its
address range and instruction count, the highest register it touches,
its local-memory instructions (LDL / STL: spills), and for each LDS / SHFL /
S2R / LDC / POPC / VOTE the number of instructions until its destination is
first read (a short distance means the consumer waits for the result: the
"short scoreboard" stalls of ncu). Used on the CPU before any device round
(docs/FUSED.md, session 13): the fused v3 kernel's tile loop runs at the
register cap, and ptxas's schedule of it moves with the code around it.
"""
from __future__ import annotations

import re
import sys

_INS = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\*")
_BRA = re.compile(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)")
_REG = re.compile(r"\bR(\d+)\b")
_MIO = ("LDS", "SHFL", "S2R", "LDC", "POPC", "VOTE", "LDG")


def read(path):
    out = []
    with open(path) as f:
        for line in f:
            m = _INS.match(line)
            if m:
                out.append((int(m.group(1), 16), m.group(2).rstrip(" ;")))
    return out


def split(ins):
    """(predicate, opcode, operands) of one instruction's text."""
    pred = ""
    if ins.startswith("@"):
        pred, ins = ins.split(None, 1)
    parts = ins.split(None, 1)
    ops = [a.strip() for a in parts[1].split(",")] if len(parts) > 1 else []
    return pred, parts[0], ops


def loops(code):
    """Innermost backward branches that enclose a QGMMA: [(lo, hi)]."""
    back = []
    for a, s in code:
        m = _BRA.search(s)
        if m and int(m.group(1), 16) < a:
            back.append((int(m.group(1), 16), a))
    found = set()
    for a, s in code:
        if "QGMMA" in s:
            enc = [(lo, hi) for lo, hi in back if lo <= a <= hi]
            if enc:
                found.add(min(enc, key=lambda r: r[1] - r[0]))
    return sorted(found)


def distances(body):
    res = []
    for i, s in enumerate(body):
        pred, op, ops = split(s)
        if not op.startswith(_MIO) or not ops:
            continue
        dst = _REG.findall(ops[0])
        if not dst:
            continue
        regs = {dst[0]}
        if ".64" in op:
            regs.add(str(int(dst[0]) + 1))
        if ".128" in op:
            regs |= {str(int(dst[0]) + j) for j in range(1, 4)}
        d = None
        for j in range(i + 1, len(body)):
            p2, _, o2 = split(body[j])
            srcs = " ".join(o2[1:]) + " " + p2
            if regs & set(_REG.findall(srcs)):
                d = j - i
                break
        res.append((op.split(".")[0], d))
    return res


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    code = read(argv[1])
    for lo, hi in loops(code):
        body = [s for a, s in code if lo <= a <= hi]
        maxr = max((int(r) for s in body for r in _REG.findall(s)), default=-1)
        local = sum(1 for s in body if re.search(r"\b(LDL|STL)\b", s))
        ds = distances(body)
        near = sum(1 for _, d in ds if d is not None and d < 8)
        lds = [d for o, d in ds if o == "LDS"]
        print(f"loop {lo:#x}-{hi:#x}: {len(body)} instructions, highest R{maxr}, LDL/STL {local}, "
              f"MIO results used < 8 instructions later: {near} of {len(ds)}")
        print("   LDS use distances:", " ".join(str(d) for d in lds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
