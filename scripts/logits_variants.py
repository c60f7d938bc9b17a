"""Times the development variants of the logits kernel (MQA_TOPK_DEV_PROBES=1):
0 real (8 rows, 2 math warpgroups, 8 stages), 1 no epilogue arithmetic, 2 no
MMA, 3 four rows x four warpgroups x 4 stages, 4 eight rows with 5 stages."""
import sys

import torch

sys.path.insert(0, "scripts")
from logits_probe import cold_time, make  # noqa: E402

from mqa_topk_cli import ops  # noqa: E402

ext = ops._native()
names = {0: "real", 1: "no-epilogue", 2: "no-mma", 3: "rows4-wg4", 4: "stages=5"}
for rows, keys in ((8192, 65536), (8192, 8192), (1024, 65536)):
    q, k, scales, w, starts, ends = make(rows, keys, 7)
    out = torch.empty((rows, keys), device="cuda")
    pairs = (ends - starts).sum().item()
    for v, name in names.items():
        ms = cold_time(lambda: ext.mqa_logits_probe(v, q, k, scales, w, starts, ends, out))
        print(f"R={rows} N={keys} {name:>12}: {ms:.3f} ms  {8192 * pairs / ms / 1e12:.3f} PF/s", flush=True)
