"""OSU-style reduce_scatter_tensor through mcr (size = input)."""

from __future__ import annotations

import torch

import mcr.comm as dist
from benchmarks.harness import Bench, Case, Ctx, expect_equal, rank_data, run


def setup(ctx: Ctx, size: int) -> Case:
    """Each rank reduces size bytes and keeps size / n."""
    numel = size // ctx.dtype.itemsize
    per = numel // ctx.n
    inp = rank_data(ctx, numel, ctx.rank)
    out = torch.empty(per, dtype=ctx.dtype, device=ctx.device)

    def check() -> None:
        want = sum(rank_data(ctx, numel, q) for q in range(ctx.n))
        expect_equal("reduce_scatter", out, want[ctx.rank * per:(ctx.rank + 1) * per])
    return Case(lambda be: dist.reduce_scatter_tensor(out, inp, backend=be), check)


BENCH = Bench("reduce_scatter", setup)
if __name__ == "__main__":
    run(BENCH)
