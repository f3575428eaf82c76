"""OSU-style all_gather_into_tensor through mcr (size = gathered output)."""

from __future__ import annotations

import torch

import mcr.comm as dist
from benchmarks.harness import Bench, Case, Ctx, expect_equal, rank_data, run


def setup(ctx: Ctx, size: int) -> Case:
    """Each rank contributes size / n bytes."""
    per = size // ctx.dtype.itemsize // ctx.n
    inp = rank_data(ctx, per, ctx.rank)
    out = ctx.out_buffer(per * ctx.n)
    if ctx.symm:
        # ZeRO-3 style: the input is this rank's slot of the (symmetric) output.
        inp = out[ctx.rank * per:(ctx.rank + 1) * per]
        inp.copy_(rank_data(ctx, per, ctx.rank))

    def check() -> None:
        expect_equal("all_gather", out, torch.cat([rank_data(ctx, per, q) for q in range(ctx.n)]))
    return Case(lambda be: dist.all_gather_into_tensor(out, inp, backend=be), check)


BENCH = Bench("all_gather", setup)
if __name__ == "__main__":
    run(BENCH)
