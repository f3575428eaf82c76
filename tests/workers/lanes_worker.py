"""mpi_lanesN on its own: random sizes (growing the shared buffer past its first size, ones
smaller than the lane count, and CPU tensors staged slice by slice), dtypes and reduce ops,
several calls in flight on one lane set with waits in shuffled order, groups of the world and
of a subset; results bit-exact against a reference from every rank's regenerated input. At the
end each rank prints its helpers' pids, so the test can check that none outlives the job and
no /dev/shm file stays."""

from __future__ import annotations

import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import gen, ref_reduce, run_shuffled, same  # noqa: E402

import mcr.comm as dist  # noqa: E402
from mcr.errors import BackendUnavailable  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--ops", type=int, default=60)
ap.add_argument("--seed", type=int, default=3)
ap.add_argument("--device", default="cpu")
args = ap.parse_args()

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
sub = dist.new_group(list(range(n - 1))) if n > 2 else None
shared = random.Random(args.seed)
local = random.Random(args.seed * 31 + r)
R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8,
          torch.int16]
DECLINED: list[int] = []
OPS = {"float": [R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT], "int": [R.SUM, R.MIN, R.MAX, R.BOR]}


class _NotMine:
    """A non-member's stand-in for the call's work, so that every rank keeps the same pending
    count and waits its works at the same points."""

    def wait(self) -> None:
        """Nothing to wait for."""


def issue(i: int):
    be = shared.choice(["mpi_lanes2", "mpi_lanes4"])
    ranks = list(range(n))
    group = None
    if sub is not None and shared.random() < 0.3:
        group, ranks = sub, list(range(n - 1))
    dtype = shared.choice(DTYPES)
    redop = shared.choice(OPS["float" if dtype.is_floating_point else "int"])
    if redop == R.PRODUCT:
        numel = shared.randint(1, 64)
    else:
        # the last: sizes at which CPU tensors are staged slice by slice (lanes.py)
        numel = shared.choice([1, 3, shared.randint(1, 5000), shared.randint(1, 1 << 19),
                               shared.randint(1 << 20, 3 << 20)])
    if r not in ranks:
        return _NotMine(), lambda: None
    parts = [gen(k, numel, dtype, salt=i, exact=True) for k in ranks]
    if redop in (R.BOR,):
        parts = [p.abs() % 8 for p in parts]
    if redop == R.PRODUCT:
        parts = [torch.where(p == 0, torch.ones_like(p), p).clamp(-2, 2) for p in parts]
    want = parts[0].clone()
    if redop == R.BOR:
        for p in parts[1:]:
            want |= p
    else:
        want = ref_reduce(parts, redop)
    t = parts[ranks.index(r)].clone().to(args.device)
    try:
        w = dist.all_reduce(t, op=redop, group=group, backend=be, async_op=True)
    except BackendUnavailable as e:
        # Open MPI's AVX sums of small integers saturate: mcr declines them (mpi.py), before
        # any rank communicates; only those may be refused
        assert "saturates on overflow" in str(e) and redop == R.SUM, e
        DECLINED.append(i)
        return _NotMine(), lambda: None
    return w, lambda: same(f"op {i} {be} {dtype} {redop} x{numel}", t, want.to(args.device))


# Sums that overflow small integers: right (wrapped, as torch) or declined, never saturated
# (Open MPI's AVX reductions saturate them from 64 elements); the dispatcher's own pick is right.
for dtype in (torch.uint8, torch.int8, torch.int16):
    top = torch.iinfo(dtype).max
    want = (torch.full((1024,), top, dtype=torch.int64) * n).to(dtype)
    # the pick on CPU tensors only: on GPU tensors it is NCCL, which ranks sharing a GPU lack
    for be in ("mpi", "mpi_lanes2") + ((None,) if args.device == "cpu" else ()):
        t = torch.full((1024,), top, dtype=dtype, device=args.device)
        try:
            dist.all_reduce(t, backend=be)
        except BackendUnavailable as e:
            # forced: declined; the pick: none left (Gloo has no int16 reductions)
            assert "saturates on overflow" in str(e), e
            continue
        same(f"overflowing sum of {dtype} on {be or 'the pick'}", t, want.to(args.device))

done = run_shuffled(args.ops, issue, shared, local, most=4, chance=0.3)
from mcr import runtime  # noqa: E402

helpers = sorted(pid for p in runtime.get().backends["mpi_lanes2"].set.procs.values()
                 for pid in p.pids)
print(f"rank {r}: LANES OK {done} ops ({len(DECLINED)} declined); helpers {helpers}", flush=True)
dist.destroy_process_group()
