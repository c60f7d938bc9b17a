"""The fused kernel choice (csrc/include/mqa_topk/fused/heuristics.h), compiled
as plain C++ and checked over a table of shapes on the CPU: which kernel each
shape runs by default, which kernels a forced choice can run, and the pieces
per row block of the staged kernel."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ("whole", "split", "staged", "hybrid")


@pytest.fixture(scope="module")
def rule(tmp_path_factory):
    """A function (rows, keys, sms, topk, heads) -> (choice, runs[4], staged pieces, hybrid extra blocks)
    backed by the header compiled with the host compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("heuristics")
    src = d / "rule.cpp"
    src.write_text(
        '#include "mqa_topk/fused/heuristics.h"\n#include <cstdio>\nusing namespace mqa_topk;\n'
        "int main() {\n  int rows, keys, sms, topk, heads;\n"
        '  while (std::scanf("%d %d %d %d %d", &rows, &keys, &sms, &topk, &heads) == 5) {\n'
        "    std::printf(\"%d\", static_cast<int>(choose_fused_kernel(rows, keys, sms, topk, heads)));\n"
        "    for (int k = 0; k < 4; ++k)\n"
        '      std::printf(" %d", fused_kernel_runs(static_cast<FusedKernel>(k), rows, keys, sms) ? 1 : 0);\n'
        '    std::printf(" %d %d\\n", fused_staged_pieces(rows, keys, sms), fused_hybrid_extra_blocks(rows, keys, sms));\n'
        "  }\n}\n"
        # the rule is constexpr: a few answers pinned at compile time too
        "static_assert(choose_fused_kernel(64, 65536, 132, 2048, 32) == FusedKernel::kStaged, \"\");\n"
        "static_assert(choose_fused_kernel(1064, 65536, 132, 2048, 32) == FusedKernel::kHybrid, \"\");\n"
        "static_assert(choose_fused_kernel(8192, 65536, 132, 2048, 32) == FusedKernel::kWhole, \"\");\n")
    exe = d / "rule"
    res = subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", f"-I{ROOT / 'csrc' / 'include'}", str(src), "-o",
                          str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr

    def ask(shapes):
        inp = "".join(f"{r} {k} {s} {t} {h}\n" for r, k, s, t, h in shapes)
        out = subprocess.run([str(exe)], input=inp, capture_output=True, text=True, check=True).stdout.split("\n")
        answers = []
        for line in out[: len(shapes)]:
            v = [int(x) for x in line.split()]
            answers.append((KERNELS[v[0]], tuple(KERNELS[i] for i in range(4) if v[1 + i]), v[5], v[6]))
        return answers

    return ask


# (rows, keys, SMs) -> the default kernel. 132 SMs (H100 / H200): one wave is
# 132 row blocks of 8 rows; the staged kernel takes at most 66 blocks.
TABLE = [
    ((1, 4096, 132), "staged"),
    ((64, 65536, 132), "staged"),
    ((256, 65536, 132), "staged"),
    ((528, 65536, 132), "staged"),  # 66 blocks: SMs / 2
    ((536, 65536, 132), "split"),  # 67 blocks: too many for the staged kernel's pieces, a poor wave
    ((912, 65536, 132), "split"),  # 114 blocks: 132 / 114 > 1.15
    ((920, 65536, 132), "whole"),  # 115 blocks: the wave is full enough
    ((1056, 65536, 132), "whole"),  # one whole wave
    ((1057, 65536, 132), "hybrid"),  # SMs + 1 blocks (one block of one row)
    ((1064, 65536, 132), "hybrid"),
    ((1072, 65536, 132), "hybrid"),  # SMs + 2
    ((1080, 65536, 132), "split"),  # SMs + 3
    ((1576, 65536, 132), "split"),
    ((2112, 65536, 132), "whole"),
    ((2120, 65536, 132), "hybrid"),
    ((8192, 65536, 132), "whole"),  # the headline: 1024 blocks, 7.8 waves
    ((64, 1 << 19, 132), "staged"),  # rows at the staged owner's limit
    ((64, (1 << 19) + 1, 132), "split"),  # past it: the split kernel's pieces
    ((250, 1 << 19, 132), "staged"),  # the staged logits buffer: 250 x 2 MiB = 500 MiB
    ((251, 1 << 19, 132), "split"),  # past 500 MiB: the split kernel (no per-call buffer)
    ((528, 1 << 19, 132), "split"),
    ((1064, (1 << 19) + 1, 132), "split"),
    ((3, 100, 16), "staged"),
    ((72, 100, 16), "split"),  # 9 blocks on 16 SMs
    ((136, 100, 16), "hybrid"),  # 17 blocks
]


def test_default_kernel_over_a_table_of_shapes(rule):
    got = rule([(r, k, s, 2048, 32) for (r, k, s), _ in TABLE])
    for ((r, k, s), want), (choice, _, _, _) in zip(TABLE, got):
        assert choice == want, f"{r} rows x {k} keys on {s} SMs: {choice}, want {want}"


def test_choice_does_not_depend_on_topk(rule):
    shapes = [(r, k, s) for (r, k, s), _ in TABLE]
    by_topk = [rule([(r, k, s, t, 32) for r, k, s in shapes]) for t in (512, 1024, 2048)]
    assert by_topk[0] == by_topk[1] == by_topk[2]


def test_the_default_always_runs_the_shape(rule):
    shapes = [(r, k, s, 2048, 32) for r in (1, 7, 8, 9, 63, 64, 65, 520, 1055, 1056, 1057, 1071, 1073, 3000, 8192)
              for k in (1, 128, 4096, 65536, 1 << 19, (1 << 19) + 1, 1 << 22) for s in (1, 2, 16, 132)]
    for (r, k, s, _, _), (choice, can, pieces, extra) in zip(shapes, rule(shapes)):
        assert choice in can, (r, k, s, choice, can)
        assert "whole" in can and "split" in can  # these run any shape
        assert ("staged" in can) == (pieces > 0) and ("hybrid" in can) == (extra > 0)


def test_no_call_needs_more_than_512_mib_beyond_the_workspace(rule):
    """The staged kernel's per-call logits buffer stays within 500 MiB (the
    hybrid kernel's, 8-16 rows of at most 2^19 keys, within 32 MiB): at every
    shape where it runs, rows x keys x 4 bytes (rows padded to 16 bytes)."""
    shapes = [(r, k, s, 2048, 32) for r in (1, 8, 64, 100, 250, 251, 256, 512, 528, 1024, 2112)
              for k in (4096, 65536, 1 << 18, 400000, 1 << 19) for s in (132, 264)]
    for (r, k, s, _, _), (_, can, _, extra) in zip(shapes, rule(shapes)):
        if "staged" in can:
            assert r * ((k + 3) // 4 * 4) * 4 <= 500 << 20, (r, k, s)
        if "hybrid" in can:
            assert 8 * extra * ((k + 3) // 4 * 4) * 4 <= 32 << 20, (r, k, s)


def test_staged_pieces_and_hybrid_extra_blocks(rule):
    # pieces per block: SMs / blocks, at most 16; none past one wave or the owner's bitmaps
    cases = {(64, 65536, 132): (16, 0), (256, 65536, 132): (4, 0), (512, 65536, 132): (2, 0),
             (1056, 9, 132): (1, 0), (1064, 9, 132): (0, 1), (1072, 9, 132): (0, 2), (1080, 9, 132): (0, 0),
             (8, 1 << 20, 132): (0, 0), (0, 100, 132): (0, 0), (8, 0, 132): (0, 0), (2120, 65536, 132): (0, 1)}
    got = rule([(r, k, s, 512, 32) for r, k, s in cases])
    for (shape, want), (_, _, pieces, extra) in zip(cases.items(), got):
        assert (pieces, extra) == want, shape
