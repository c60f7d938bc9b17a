"""What a serving engine imports: the ops (and the contract, eligibility, JIT
and error modules behind them) load without the tool's own dependencies
(click, rich, pandas)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("click", "rich", "pandas"):
            raise ImportError(f"{name} is blocked")
        return None
sys.meta_path.insert(0, Block())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_ops_import_without_the_tools_dependencies():
    res = _run("import mqa_topk_cli.ops as ops, mqa_topk_cli.eligibility, mqa_topk_cli.jit, mqa_topk_cli.contract\n"
               "import mqa_topk_cli.errors, mqa_topk_cli.reference\n"
               "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich', 'pandas'))\n"
               "assert not bad, bad\n"
               "assert ops.fused_mqa_topk_workspace_bytes(2048, 132) > 0\n"
               "print('ok')")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_the_blocker_blocks():
    """The check above can fail: the CLI does need them."""
    res = _run("import mqa_topk_cli.cli")
    assert res.returncode != 0 and "is blocked" in res.stderr
