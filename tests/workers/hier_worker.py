"""Hierarchical collectives on one host split into nodes (MCR_LOCAL_SIZE): random ops, sizes,
dtypes and reduce ops through the table's choice (hier across nodes, the intra- and inter-node
libraries it names), hier forced, and flat libraries in between; async waits in shuffled order.
Every result is compared with a reference made from every rank's regenerated input."""

from __future__ import annotations

import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import gen, ref_reduce, run_shuffled, same  # noqa: E402

import mcr.comm as dist  # noqa: E402
from mcr import runtime  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--ops", type=int, default=300)
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--flat", default="gloo", help="flat libraries mixed in (comma list)")
ap.add_argument("--device", default="cpu")
ap.add_argument("--expect", default="", help="op=backend the table must give a 2x2 call")
args = ap.parse_args()

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
world = dist.get_world_group()
assert (world.nodes, world.per_node) == (2, n // 2), (world.nodes, world.per_node)
for pair in filter(None, args.expect.split(",")):
    op, want = pair.split("=")
    got = dist.which_backend(op, 4096, torch.float32, args.device)
    assert got == want, f"the table gives {op} to {got}, expected {want}"
shared = random.Random(args.seed)
local = random.Random(args.seed * 31 + r)
R = dist.ReduceOp
CHOICES = [None, "hier"] + args.flat.split(",")
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


def issue(i: int) -> tuple[object, object]:
    op = shared.choice(["all_gather", "reduce_scatter", "all_reduce"])
    be, dtype = shared.choice(CHOICES), shared.choice(DTYPES)
    if be and "_lanes" in be and op != "all_reduce":
        be = None   # lanes serve all-reduce only
    numel = shared.choice([1, 3, 64, 1000, 4099, 20_011, 100_003])
    redop = shared.choice([R.SUM, R.MAX, R.MIN] + ([R.AVG] if dtype.is_floating_point else []))
    async_op = shared.random() < 0.6
    tag = f"op {i}: {op} {redop} {be} {dtype} {numel} async={async_op}"
    if op == "all_gather":
        parts = [gen(q, numel, dtype, i, exact=True, device=args.device) for q in range(n)]
        out = torch.empty(n * numel, dtype=dtype, device=args.device)
        w = dist.all_gather_into_tensor(out, parts[r], async_op=async_op, backend=be)
        return w, lambda: same(tag, out, torch.cat(parts))
    if op == "reduce_scatter":
        big = [gen(q, n * numel, dtype, i, exact=True, device=args.device) for q in range(n)]
        out = torch.empty(numel, dtype=dtype, device=args.device)
        w = dist.reduce_scatter_tensor(out, big[r], redop, async_op=async_op, backend=be)
        return w, lambda: same(tag, out, ref_reduce(big, redop)[r * numel:(r + 1) * numel])
    parts = [gen(q, numel, dtype, i, exact=True, device=args.device) for q in range(n)]
    t = parts[r].clone()
    w = dist.all_reduce(t, redop, async_op=async_op, backend=be)
    return w, lambda: same(tag, t, ref_reduce(parts, redop))


done = run_shuffled(args.ops, issue, shared, local, 5, 0.25)
assert done == args.ops
disp = runtime.get().dispatcher
# The summary counts the program's calls apart from the parts hier made to serve them.
calls = sum(c for c, _ in disp.served().values())
assert calls == args.ops, f"{calls} calls counted as the program's, it made {args.ops}"
by_hier = sum(c for (_, b), (c, _) in disp.served().items() if b == "hier")
assert by_hier and disp.vias() == ["hier"], (by_hier, disp.vias())
assert sum(c for c, _ in disp.served("hier").values()) >= 2 * by_hier   # two parts at least
served = sorted({b for (_, b) in disp.served()} | {b for (_, b) in disp.served("hier")})
print(f"rank {r}: HIER OK {done} ops; libraries {served}", flush=True)
dist.destroy_process_group()
