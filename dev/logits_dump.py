"""Development aid: the dense logits kernel's output on a few fixed workloads,
saved to one file, so that two trees' kernels can be compared bitwise
(`python3 dev/logits_dump.py OUT.pt`, once per tree; then
`python3 dev/logits_dump.py --compare A.pt B.pt`). Only each row's range is
compared (the rest is zeroed: unspecified in the op's contract)."""
import sys

import torch

if sys.argv[1] == "--compare":
    a, b = torch.load(sys.argv[2]), torch.load(sys.argv[3])
    for name in a:
        x, y = a[name].view(torch.int32), b[name].view(torch.int32)
        print(f"{name}: bitwise equal {torch.equal(x, y)} ({int((x != y).sum())} of {x.numel()} words differ)")
    sys.exit(0)
from mqa_topk_cli import ops  # noqa: E402
from mqa_topk_cli.workloads import make_workload  # noqa: E402

out = {}
for layout, rows, keys, dist in (("causal", 2048, 16384, "gaussian"), ("ragged", 1000, 20000, "ties"),
                                 ("causal", 512, 8192, "negative_weights"), ("causal", 1024, 70000, "dsa")):
    for heads in (32, 64):
        w = make_workload(layout, rows=rows, keys=keys, topk=512, dist=dist, seed=5, device="cuda", heads=heads)
        lg = ops.mqa_logits(w.q, w.k, w.scales, w.weights, w.starts, w.ends)[:, :keys]
        col = torch.arange(keys, device="cuda")[None, :]
        inside = (col >= w.starts[:, None].long()) & (col < w.ends[:, None].long())
        lg = torch.where(inside, lg, torch.zeros_like(lg))
        out[f"{layout}-{rows}x{keys}-{dist}-h{heads}"] = lg.contiguous().cpu()
torch.save(out, sys.argv[1])
