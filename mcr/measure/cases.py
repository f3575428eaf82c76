"""The collectives the tuner and the OSU benchmarks measure: buffers for a size, the call, a check.

Sizes are full-buffer bytes (all-gather output, reduce-scatter input), as nccl-tests counts them.
Every call goes to ctx.group with the backend the engine names (None: mcr's dispatcher decides),
synchronously or as async_op=True followed by wait(), as ctx.calls says.
"""

from __future__ import annotations

from typing import Any

import torch

import mcr.comm as dist

from .engine import Bench, Case, Ctx, expect_equal, rank_data


def _issue(ctx: Ctx, fn: Any, *args: Any, **kw: Any) -> None:
    """One call as the workload makes it: sync, or async_op=True then wait()."""
    if ctx.calls == "async":
        work = fn(*args, group=ctx.group, async_op=True, **kw)
        if work is not None:
            work.wait()
    else:
        fn(*args, group=ctx.group, **kw)


def all_reduce(ctx: Ctx, size: int) -> Case:
    """A buffer of `size` bytes, reduced in place."""
    numel = size // ctx.dtype.itemsize
    buf = rank_data(ctx, numel, ctx.rank)

    def check() -> None:
        buf.copy_(rank_data(ctx, numel, ctx.rank))
        dist.all_reduce(buf, group=ctx.group)
        expect_equal("all_reduce", buf, sum(rank_data(ctx, numel, q) for q in range(ctx.n)))
    return Case(lambda be: _issue(ctx, dist.all_reduce, buf, backend=be), check)


def all_gather(ctx: Ctx, size: int) -> Case:
    """Each rank contributes size / n bytes; under ctx.symm the input is the output's slot."""
    per = size // ctx.dtype.itemsize // ctx.n
    inp = rank_data(ctx, per, ctx.rank)
    out = ctx.out_buffer(per * ctx.n)
    if ctx.symm:
        # ZeRO-3 style: the input is this rank's slot of the (symmetric) output.
        inp = out[ctx.rank * per:(ctx.rank + 1) * per]
        inp.copy_(rank_data(ctx, per, ctx.rank))

    def check() -> None:
        expect_equal("all_gather", out, torch.cat([rank_data(ctx, per, q) for q in range(ctx.n)]))
    return Case(lambda be: _issue(ctx, dist.all_gather_into_tensor, out, inp, backend=be), check)


def reduce_scatter(ctx: Ctx, size: int) -> Case:
    """Each rank reduces size bytes and keeps size / n."""
    numel = size // ctx.dtype.itemsize
    per = numel // ctx.n
    inp = rank_data(ctx, numel, ctx.rank)
    out = torch.empty(per, dtype=ctx.dtype, device=ctx.device)

    def check() -> None:
        want = sum(rank_data(ctx, numel, q) for q in range(ctx.n))
        expect_equal("reduce_scatter", out, want[ctx.rank * per:(ctx.rank + 1) * per])
    return Case(lambda be: _issue(ctx, dist.reduce_scatter_tensor, out, inp, backend=be), check)


def all_to_all(ctx: Ctx, size: int) -> Case:
    """Each rank sends size / n bytes to every rank."""
    numel = size // ctx.dtype.itemsize
    per = numel // ctx.n
    inp = rank_data(ctx, numel, ctx.rank)
    out = ctx.out_buffer(numel)

    def check() -> None:
        want = torch.cat([rank_data(ctx, numel, q)[ctx.rank * per:(ctx.rank + 1) * per]
                          for q in range(ctx.n)])
        expect_equal("all_to_all", out, want)
    return Case(lambda be: _issue(ctx, dist.all_to_all_single, out, inp, backend=be), check)


def skewed_counts(n: int, most: int) -> list[list[int]]:
    """counts[s][r]: elements rank s sends rank r in an uneven all-to-all whose largest block is
    `most`, as MoE routing makes them: each rank's block to one peer is full, the others hold
    0, 1/4, 1/2 or 3/4 of it (an expert may get no tokens)."""
    return [[most if (s + r) % n == 0 else most * ((s * n + r) % 4) // 4 for r in range(n)]
            for s in range(n)]


def all_to_all_uneven(ctx: Ctx, size: int) -> Case:
    """all_to_all_single with split sizes (skewed_counts) whose table key is `size`: group size
    x the largest block, in bytes (mcr keys uneven calls so; size / n must be a power of two
    bytes, as the uneven pass's sizes are)."""
    most = size // ctx.n // ctx.dtype.itemsize
    counts = skewed_counts(ctx.n, most)
    sends = counts[ctx.rank]
    recvs = [counts[q][ctx.rank] for q in range(ctx.n)]
    inp = rank_data(ctx, sum(sends), ctx.rank)
    out = ctx.out_buffer(sum(recvs))

    def check() -> None:
        want = []
        for q in range(ctx.n):
            at = sum(counts[q][:ctx.rank])
            want.append(rank_data(ctx, sum(counts[q]), q)[at:at + counts[q][ctx.rank]])
        expect_equal("all_to_all (uneven)", out, torch.cat(want))
    return Case(lambda be: _issue(ctx, dist.all_to_all_single, out, inp, recvs, sends,
                                  backend=be), check)


def broadcast(ctx: Ctx, size: int) -> Case:
    """The group's first rank's size bytes to every rank."""
    numel = size // ctx.dtype.itemsize
    buf = ctx.out_buffer(numel)
    buf.copy_(rank_data(ctx, numel, ctx.rank))
    root = ctx.global_rank(0)

    def check() -> None:
        expect_equal("broadcast", buf, rank_data(ctx, numel, 0))
    return Case(lambda be: _issue(ctx, dist.broadcast, buf, root, backend=be), check)


BENCHES = {b.op: b for b in (Bench("all_reduce", all_reduce), Bench("all_gather", all_gather),
                             Bench("reduce_scatter", reduce_scatter),
                             Bench("all_to_all", all_to_all), Bench("broadcast", broadcast))}
# The tuner's `splits: uneven` pass, and benchmarks/osu_alltoallv.py.
UNEVEN = Bench("all_to_all", all_to_all_uneven,
               "mcr OSU-style all_to_all with split sizes (OSU's osu_alltoallv)", even=False)
