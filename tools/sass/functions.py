#!/usr/bin/env python3
"""The kernel's noinline functions in a SASS listing with labels, in address
order, with their sizes: which of the fused v3 kernel's 66K instructions are
the tile loops' body and which the split protocol's calls (session 21).

    nvdisasm -c KERNEL.cubin > KERNEL.dis     (any cubin of one configuration,
                                               e.g. tools/sass/one_config.sh's)
    python3 tools/sass/functions.py KERNEL.dis

Prints, per function (the kernel's own body first): its first address, its
size in instructions and its demangled-enough name. nvdisasm labels each
noinline device function with `$<kernel>$<function>:`; the CUDA math
library's slow paths appear as `$__internal_...`. The same order and sizes
let tools/v3check/ncu_top.py's per-segment totals be named.
"""
from __future__ import annotations

import re
import sys

_INS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/")
_LABEL = re.compile(r"^(\$\S+|[A-Za-z_]\S*):\s*$")


def short(label: str) -> str:
    names = re.findall(r"mqa_topk\d+(\w+?)I", label)
    if names:
        return names[-1]
    m = re.search(r"__internal_\d+_\$(\w+)", label)
    return m.group(1) if m else label[:60]


def functions(lines):
    """(first address, label) of the kernel and of every labelled function."""
    starts = []
    pending = None
    for line in lines:
        m = _LABEL.match(line)
        if m and (m.group(1).startswith("$") or m.group(1).startswith("_Z")):
            pending = m.group(1)
            continue
        a = _INS.match(line)
        if a and pending is not None:
            starts.append((int(a.group(1), 16), pending))
            pending = None
    return starts


def main() -> int:
    lines = open(sys.argv[1]).read().splitlines()
    last = 0
    for line in lines:
        a = _INS.match(line)
        if a:
            last = int(a.group(1), 16)
    starts = sorted(functions(lines))
    if not starts:
        print("no labelled functions (run nvdisasm -c on a cubin)")
        return 1
    ends = [a for a, _ in starts[1:]] + [last + 16]
    for (a, name), e in zip(starts, ends):
        print(f"0x{a:06x} {((e - a) // 16):7d}  {short(name) if name.startswith('$') else 'kernel body'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
