"""Every native op on corrupted row ranges, for compute-sanitizer (memcheck):
negative starts, ends past the keys, start > end, INT32_MAX/MIN, in one row of
small causal and random-range cases (rows not a multiple of the 8-row block,
the dense path chunked so the bad row is in a later chunk). No launch may
read or write out of bounds (memcheck reports it); each call must leave the
error for ops.check_errors() with the right argument and row (checked here:
exit 1 otherwise).

    compute-sanitizer --tool memcheck python3 scripts/sanitize_ranges.py
"""
import re
import sys

import torch

from mqa_topk_cli import ops
from mqa_topk_cli.errors import ContractError
from mqa_topk_cli.workloads import make_workload


def make(rows, keys, seed, layout):
    if layout == "random":  # (packed requests with unaligned starts; every row sees the one key of a tiny call)
        layout = "ragged" if rows <= keys else "full"
    w = make_workload(layout, rows=rows, keys=keys, topk=512, seed=seed, device="cuda")
    return w.q, w.k, w.scales, w.weights, w.starts, w.ends

INT_MAX, INT_MIN = 2**31 - 1, -2**31


def corrupt(kind, starts, ends, keys, row):
    """Corrupts row `row` in place; returns (argument, row) expected in the error."""
    if kind == "negative_start":
        starts[row] = -7
        return "starts"
    if kind == "int_min_start":
        starts[row] = INT_MIN
        return "starts"
    if kind == "end_past_keys":
        ends[row] = keys + 9
        return "ends"
    if kind == "int_max_end":
        ends[row] = INT_MAX
        return "ends"
    if kind == "start_after_end":
        starts[row] = min(int(ends[row]) + 5, keys)
        if int(starts[row]) <= int(ends[row]):
            ends[row] = int(starts[row]) - 1
        return "ends"
    if kind == "int_max_start":
        starts[row] = INT_MAX
        return "ends"
    if kind == "everything_bad":  # every row bad, several ways; row 0 is reported
        starts.copy_(torch.randint(INT_MIN, INT_MAX, starts.shape, dtype=torch.int64).to(torch.int32))
        ends.copy_(torch.randint(INT_MIN, INT_MAX, ends.shape, dtype=torch.int64).to(torch.int32))
        starts[0] = -1
        return "starts"
    raise AssertionError(kind)


KINDS = ("negative_start", "int_min_start", "end_past_keys", "int_max_end", "start_after_end", "int_max_start",
         "everything_bad")
failures = []
runs = 0
for rows, keys, layout, row in ((67, 1000, "causal", 41), (37, 3001, "random", 36), (5, 1, "random", 0),
                                (19, 20000, "causal", 17)):
    q, k, scales, w, starts0, ends0 = make(rows, keys, 11, layout)
    good_logits = ops.mqa_logits(q, k, scales, w, starts0, ends0)
    for kind in KINDS:
        want_row = 0 if kind == "everything_bad" else row
        chunk = 8 * ops._pitch(keys) * 4  # 8-row chunks: the bad row sits in a later chunk
        calls = {
            "mqa_logits": lambda s, e: ops.mqa_logits(q, k, scales, w, s, e),
            "top_k_per_row_prefill": lambda s, e: ops.top_k_per_row_prefill(
                good_logits, s, e, torch.empty((rows, 2048), dtype=torch.int32, device="cuda")),
            "dense_mqa_topk_prefill": lambda s, e: ops.dense_mqa_topk_prefill(
                q, k, scales, w, s, e, torch.empty((rows, 512), dtype=torch.int32, device="cuda")),
            "dense_mqa_topk_prefill(chunked)": lambda s, e: ops.dense_mqa_topk_prefill(
                q, k, scales, w, s, e, torch.empty((rows, 1024), dtype=torch.int32, device="cuda"),
                max_logits_bytes=chunk),
        }
        for topk in ((512, 2048) if rows == 67 else (2048,)):
            for kernel in ops.FUSED_KERNELS:
                if kernel == "hybrid" or (kernel == "staged" and rows > 8 * 66):
                    continue  # (these shapes are never SMs + 1 or 2 row blocks)
                calls[f"fused_mqa_topk_prefill(topk={topk}, {kernel})"] = (
                    lambda s, e, topk=topk, kernel=kernel: ops.fused_mqa_topk_prefill(
                        q, k, scales, w, s, e, torch.empty((rows, topk), dtype=torch.int32, device="cuda"),
                        kernel=kernel))
        for name, fn in calls.items():
            starts, ends = starts0.clone(), ends0.clone()
            arg = corrupt(kind, starts, ends, keys, row)
            print(f"{name} {kind} rows={rows} keys={keys}", flush=True)  # (the call a memcheck report follows)
            fn(starts, ends)
            torch.cuda.synchronize()
            runs += 1
            try:
                ops.check_errors()
                failures.append(f"{name} {kind} rows={rows} keys={keys}: no error reported")
            except ContractError as exc:
                m = re.match(r"^(\w+): .*\(row (\d+) ", str(exc))
                if not m or m.group(1) != arg or int(m.group(2)) != want_row:
                    failures.append(f"{name} {kind} rows={rows} keys={keys}: expected {arg} row {want_row}, "
                                    f"got {exc}")
torch.cuda.synchronize()
for f in failures:
    print("FAIL", f)
print(f"sanitize ranges: {runs} corrupted calls, {len(failures)} failures")
sys.exit(1 if failures else 0)
