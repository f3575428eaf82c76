"""Special values give torch's answer on every path mcr may choose: each rank's tensor holds
NaN, +-Inf and -0.0 at rank-dependent places (and int32 values whose sum wraps); all_reduce,
all_reduce_coalesced, reduce_scatter_tensor and reduce by MAX, MIN, SUM and AVG (floats), SUM
and MAX (int32), through each backend forced (those that decline a call are counted, not
failed) and auto, against torch's own reduction of every rank's tensor (NaN propagates, +Inf
and -Inf make NaN, integers wrap). Float sums add small integers, which every dtype holds
exactly in any order, so a library's summation order cannot hide a wrong special value; zeros
compare by value (a sum of -0.0 is -0.0 or +0.0 by where the summation starts).

Each rank prints `rank R: SPECIAL OK <checks> checks, <declined> declined` at the end."""

from __future__ import annotations

import argparse

import torch

import mcr.comm as dist
from mcr.errors import BackendUnavailable

R = dist.ReduceOp
ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu")
ap.add_argument("--backends", default="gloo,mpi,mpi_lanes2,gloo_lanes2,auto")
args = ap.parse_args()
dist.init_distributed(verbose=False)
me, n = dist.get_rank(), dist.get_world_size()
dev = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" \
    else torch.device("cpu")
SPECIAL = (float("nan"), float("inf"), float("-inf"), -0.0, 0.0)
SUMS = (R.SUM, R.AVG)


def inputs(rank: int, dtype: torch.dtype, numel: int, exact: bool = False) -> torch.Tensor:
    """Rank's tensor: random values (exact: integers from -8 to 8), with special values at
    places that depend on the rank (up to 4 ranks, 7 places apart, place 3 shared)."""
    g = torch.Generator().manual_seed(1000 + rank)
    if not dtype.is_floating_point:
        return torch.randint(2 ** 30, 2 ** 31 - 1, (numel,), generator=g, dtype=dtype)
    x = torch.randint(-8, 9, (numel,), generator=g).double() if exact else \
        torch.randn(numel, generator=g, dtype=torch.float64)
    for i in range(numel):
        # Places of this rank's own (no peer's special value there), and places every rank
        # fills, each with another special value: +Inf meets -Inf, NaN meets Inf, -0.0 meets 0.0.
        if (i + rank) % 7 == 0 or i % 7 == 3:
            x[i] = SPECIAL[(i // 7 + rank) % len(SPECIAL)]
    return x.to(dtype)


def want(op: object, dtype: torch.dtype, numel: int) -> torch.Tensor:
    every = torch.stack([inputs(r, dtype, numel, op in SUMS) for r in range(n)])
    if op in SUMS:
        total = every.sum(0, dtype=dtype)
        return total if op is R.SUM else total / n     # exact where n is a power of 2
    return every.amax(0) if op is R.MAX else every.amin(0)


def same(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0, equal_nan=True, msg=lambda m:
                               f"rank {me}: {name}: {m}")


checks = declined = 0
for be in args.backends.split(","):
    kw = {} if be == "auto" else {"backend": be}
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32):
        for op in ((R.MAX, R.MIN, *SUMS) if dtype.is_floating_point else (R.SUM, R.MAX)):
            numel = 7 * n * 5
            ref = want(op, dtype, numel)
            name = f"{be} {dtype} {op}"
            mine = inputs(me, dtype, numel, op in SUMS and dtype.is_floating_point)
            for call in ("all_reduce", "all_reduce_coalesced", "reduce_scatter_tensor",
                         "reduce"):
                try:
                    if call == "all_reduce":
                        t = mine.to(dev, copy=True)
                        dist.all_reduce(t, op, **kw)
                        same(f"all_reduce {name}", t, ref)
                    elif call == "all_reduce_coalesced":
                        ts = list(mine.to(dev, copy=True).split([numel - 9, 9]))
                        dist.all_reduce_coalesced(ts, op, **kw)
                        same(f"all_reduce_coalesced {name}", torch.cat(ts), ref)
                    elif call == "reduce_scatter_tensor":
                        out = torch.empty(numel // n, dtype=dtype, device=dev)
                        dist.reduce_scatter_tensor(out, mine.to(dev, copy=True), op, **kw)
                        same(f"reduce_scatter_tensor {name}", out, ref.view(n, -1)[me])
                    elif op is not R.AVG:        # torch's reduce takes no AVG
                        t = mine.to(dev, copy=True)
                        dist.reduce(t, 0, op, **kw)
                        same(f"reduce {name}", t, ref if me == 0 else mine)
                    checks += 1
                except BackendUnavailable:
                    declined += 1
# Parameters and their views (a slice, a transpose) are written in place as torch's calls
# write them, though autograd refuses in-place writes to them (they were a RuntimeError).
for be in args.backends.split(","):
    kw = {} if be == "auto" else {"backend": be}
    for view in (lambda p: p, lambda p: p[:, :3], lambda p: p.t()):
        for op in (R.SUM, R.MAX):
            p = torch.nn.Parameter(torch.full((4, 6), float(me + 1), device=dev))
            try:
                dist.all_reduce(view(p), op, **kw)
            except BackendUnavailable:
                declined += 1
                continue
            want_p = torch.full((4, 6), float(me + 1))      # outside the view: as it was
            view(want_p).fill_(n * (n + 1) / 2 if op is R.SUM else n)
            same(f"all_reduce of a parameter view {be} {op}", p.detach(), want_p)
            checks += 1
    outs = [torch.nn.Parameter(torch.zeros(3, device=dev)) for _ in range(n)]
    try:
        dist.all_gather(outs, torch.full((3,), float(me), device=dev), **kw)
        same(f"all_gather into parameters {be}", torch.stack([o.detach() for o in outs]),
             torch.arange(n, dtype=torch.float32).repeat_interleave(3).view(n, 3))
        checks += 1
    except BackendUnavailable:
        declined += 1
# Gloo (and MPI under mpirun) serve every float case: at least 4 calls x 3 dtypes x 3 ops.
assert checks >= 36, f"rank {me}: only {checks} checks ran ({declined} declined)"
print(f"rank {me}: SPECIAL OK {checks} checks, {declined} declined", flush=True)
dist.destroy_process_group()
