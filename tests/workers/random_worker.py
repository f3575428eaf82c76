"""Randomized mixed-library run: random op, size and forced backend; async waited out of order.

Every rank draws the same sequence of (op, size, backend, async) from a shared seed, so the
collectives match; each rank then waits its pending async ops in its own shuffled order.
`--own-async`: each rank draws async for itself, so the same call is synchronous on some ranks
and asynchronous on others (legal in torch.distributed).
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import WaitAll, gen, ref_reduce, run_shuffled, same  # noqa: E402

import mcr.comm as dist  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--ops", type=int, default=2000)
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--device", default="cpu")
ap.add_argument("--backends", default="gloo,mpi")
ap.add_argument("--own-async", action="store_true")
args = ap.parse_args()

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
dev = args.device
shared = random.Random(args.seed)            # same on every rank: what to call
local = random.Random(args.seed * 31 + r)    # this rank's wait order
R = dist.ReduceOp
BACKENDS = args.backends.split(",")
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "gather", "scatter", "p2p", "barrier"]
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


def issue(i: int) -> tuple[object, object]:
    """Issue op i; return (work or None, check callable)."""
    op, be, dtype = shared.choice(OPS), shared.choice(BACKENDS), shared.choice(DTYPES)
    numel = shared.choice([1, 2, 7, 64, 1000, 4099, 65536, 100_003])
    async_op = shared.random() < 0.5
    if args.own_async:
        async_op = local.random() < 0.5
    root = shared.randrange(n)
    parts = [gen(q, numel, dtype, i, exact=True, device=dev) for q in range(n)]
    tag = f"op {i}: {op} {be} {dtype} {numel} async={async_op}"
    if op == "all_reduce":
        t = parts[r].clone()
        w = dist.all_reduce(t, group=None, async_op=async_op, backend=be)
        return w, lambda: same(tag, t, ref_reduce(parts, R.SUM))
    if op == "all_gather":
        out = torch.empty(n * numel, dtype=dtype, device=dev)
        w = dist.all_gather_into_tensor(out, parts[r], async_op=async_op, backend=be)
        return w, lambda: same(tag, out, torch.cat(parts))
    if op == "reduce_scatter":
        big = [gen(q, n * numel, dtype, i, exact=True, device=dev) for q in range(n)]
        out = torch.empty(numel, dtype=dtype, device=dev)
        w = dist.reduce_scatter_tensor(out, big[r], async_op=async_op, backend=be)
        return w, lambda: same(tag, out, ref_reduce(big, R.SUM)[r * numel:(r + 1) * numel])
    if op == "all_to_all":
        big = [gen(q, n * numel, dtype, i, device=dev) for q in range(n)]
        out = torch.empty(n * numel, dtype=dtype, device=dev)
        w = dist.all_to_all_single(out, big[r], async_op=async_op, backend=be)
        want = torch.cat([big[q][r * numel:(r + 1) * numel] for q in range(n)])
        return w, lambda: same(tag, out, want)
    if op == "broadcast":
        t = parts[r].clone()
        w = dist.broadcast(t, root, async_op=async_op, backend=be)
        return w, lambda: same(tag, t, parts[root])
    if op == "reduce":
        t = parts[r].clone()
        w = dist.reduce(t, root, async_op=async_op, backend=be)
        return w, lambda: same(tag, t, ref_reduce(parts, R.SUM)) if r == root else None
    if op == "gather":
        lst = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(n)] if r == root \
            else None
        w = dist.gather(parts[r], lst, root, async_op=async_op, backend=be)
        return w, lambda: [same(tag, lst[q], parts[q]) for q in range(n)] if r == root else None
    if op == "scatter":
        t = torch.empty(numel, dtype=dtype, device=dev)
        w = dist.scatter(t, parts if r == root else None, root, async_op=async_op, backend=be)
        return w, lambda: same(tag, t, parts[r])
    if op == "p2p":
        got = torch.empty(numel, dtype=dtype, device=dev)
        send = lambda: dist.isend(parts[r], (r + 1) % n, backend=be, tag=i % 1000)  # noqa: E731
        recv = lambda: dist.irecv(got, (r - 1) % n, backend=be, tag=i % 1000)  # noqa: E731
        ws = [send(), recv()] if r % 2 == 0 else [recv(), send()]  # NCCL pair setup order
        return WaitAll(ws), lambda: same(tag, got, parts[(r - 1) % n])
    w = dist.barrier(async_op=async_op, backend=be)
    return w, lambda: None


done = run_shuffled(args.ops, issue, shared, local, 6, 0.2)
assert done == args.ops, (done, args.ops)
print(f"rank {r}: RANDOM OK {done} ops", flush=True)
dist.destroy_process_group()
