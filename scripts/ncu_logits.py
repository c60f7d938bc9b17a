"""One native logits launch (R=1024, N=32K causal) for Nsight Compute:
ncu --clock-control none -k regex:sm90_fp8 -c 1 --section WarpStateStats ... python3 scripts/ncu_logits.py"""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402

q, k, scales, w, starts, ends = make(1024, 32768, 3)
out = torch.empty((1024, 32768), device="cuda")
ops._native().mqa_logits(q, k, scales, w, starts, ends, out)
torch.cuda.synchronize()
