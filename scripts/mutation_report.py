"""Helper of scripts/mutation.sh: draws a sample of mutmut's mutants and
reports the score per module with every surviving mutant's diff.

    python scripts/mutation_report.py sample --n 60 --seed 1 verify crossover ...
    python scripts/mutation_report.py report [--names FILE] [--mutmut PATH] verify crossover ...

Reads mutmut's result files (mutants/mqa_topk_cli/<module>.py.meta). Score =
killed / (killed + survived), where "survived" includes mutants no test
reached; a timeout counts as killed (the mutant hangs a test). Survivors
listed in scripts/mutation_equivalent.txt (by function and diff, so the entry
outlives mutmut's renumbering) are proven equivalent: they are shown but
left out of the behavioural score. Writes mutants/report.md.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants" / "mqa_topk_cli"
EQUIVALENT = ROOT / "scripts" / "mutation_equivalent.txt"

KILLED = {1, 3}
TIMEOUT = {24, -24, 36, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def _meta(module: str) -> dict:
    p = MUTANTS / f"{module}.py.meta"
    if not p.is_file():
        sys.exit(f"{p}: missing (run scripts/mutation.sh first)")
    return json.loads(p.read_text())["exit_code_by_key"]


def _function(name: str) -> str:
    return re.sub(r"__mutmut_\d+$", "", name)


def cmd_sample(args) -> None:
    rng = random.Random(args.seed)
    for m in args.modules:
        keys = sorted(_meta(m))
        for k in sorted(rng.sample(keys, min(args.n, len(keys)))):
            print(k)


def _diff(mutmut: str, name: str) -> list[str]:
    out = subprocess.run([mutmut, "show", name], capture_output=True, text=True, cwd=ROOT).stdout
    return [ln for ln in out.splitlines() if ln[:1] in ("-", "+") and not ln.startswith(("---", "+++"))]


def _norm(line: str) -> str:
    """A diff line with its indentation dropped: ``-`` or ``+`` then the code."""
    return line[0] + " " + line[1:].strip()


def _equivalent() -> dict[tuple[str, tuple[str, ...]], str]:
    """(function, diff lines) -> reason, from scripts/mutation_equivalent.txt:
    blocks of ``function: <name>`` (e.g. ``verify.x__finish``), the diff's
    ``-``/``+`` lines (indentation ignored) and ``why: <reason>``."""
    out: dict = {}
    if not EQUIVALENT.is_file():
        return out
    fn, lines = None, []
    for raw in EQUIVALENT.read_text().splitlines():
        if raw.startswith("function: "):
            fn, lines = raw[len("function: "):].strip(), []
        elif raw[:1] in ("-", "+"):
            lines.append(_norm(raw))
        elif raw.startswith("why: ") and fn:
            out[(fn, tuple(lines))] = raw[len("why: "):].strip()
            fn, lines = None, []
    return out


def cmd_report(args) -> None:
    names = None
    if args.names:
        names = {ln.strip() for ln in Path(args.names).read_text().splitlines() if ln.strip()}
    eq = _equivalent()
    rows, survivors = [], []
    tot = dict(killed=0, survived=0, equivalent=0, unchecked=0)
    for m in args.modules:
        codes = {k: v for k, v in _meta(m).items() if names is None or k in names}
        killed = sum(1 for v in codes.values() if v in KILLED or v in TIMEOUT)
        unchecked = sum(1 for v in codes.values() if v is None)
        surv = sorted(k for k, v in codes.items() if v is not None and v not in KILLED and v not in TIMEOUT)
        n_eq = 0
        for k in surv:
            d = _diff(args.mutmut, k)
            why = eq.get((_function(k).split(".", 1)[-1], tuple(_norm(x) for x in d)))
            n_eq += why is not None
            survivors.append((m, k, codes[k], d, why))
        n_surv = len(surv) - n_eq
        score = killed / (killed + n_surv) if killed + n_surv else 1.0
        rows.append((m, len(codes), killed, n_surv, n_eq, unchecked, score))
        for key, v in (("killed", killed), ("survived", n_surv), ("equivalent", n_eq), ("unchecked", unchecked)):
            tot[key] += v
    overall = tot["killed"] / (tot["killed"] + tot["survived"]) if tot["killed"] + tot["survived"] else 1.0
    lines = ["| module | mutants | killed | survived | equivalent | not run | score |", "|---|---|---|---|---|---|---|"]
    for m, n, k, s, e, u, sc in rows:
        lines.append(f"| {m} | {n} | {k} | {s} | {e} | {u} | {100 * sc:.1f}% |")
    lines.append(f"| **all** | {sum(r[1] for r in rows)} | {tot['killed']} | {tot['survived']} | {tot['equivalent']} "
                 f"| {tot['unchecked']} | **{100 * overall:.1f}%** |")
    table = "\n".join(lines)
    print(table)
    md = [f"# mutation report ({'sample: ' + args.names if names is not None else 'every mutant'})", "", table, "",
          "## surviving mutants", ""]
    for m, k, code, d, why in survivors:
        status = "no test reached it" if code in NO_TESTS else ("survived" if code in SURVIVED else f"exit {code}")
        md.append(f"### {k} ({status}{'; equivalent: ' + why if why else ''})")
        md += ["```diff", *d, "```", ""]
    (ROOT / "mutants" / "report.md").write_text("\n".join(md) + "\n")
    print(f"survivors and their diffs: {ROOT / 'mutants' / 'report.md'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("modules", nargs="+")
    r = sub.add_parser("report")
    r.add_argument("--names")
    r.add_argument("--mutmut", default="mutmut")
    r.add_argument("modules", nargs="+")
    args = ap.parse_args()
    {"sample": cmd_sample, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
