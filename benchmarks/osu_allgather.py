"""OSU-style all_gather_into_tensor through mcr (size = gathered output)."""

from __future__ import annotations

import torch

import mcr.comm as dist
from benchmarks.harness import Bench, Case, Ctx, expect_equal, rank_data, run


def setup(ctx: Ctx, size: int) -> Case:
    """Each rank contributes size / n bytes."""
    per = size // ctx.dtype.itemsize // ctx.n
    inp = rank_data(ctx, per, ctx.rank)
    out = torch.empty(per * ctx.n, dtype=ctx.dtype, device=ctx.device)

    def check() -> None:
        expect_equal("all_gather", out, torch.cat([rank_data(ctx, per, q) for q in range(ctx.n)]))
    return Case(lambda be: dist.all_gather_into_tensor(out, inp, backend=be), check)


BENCH = Bench("all_gather", setup)
if __name__ == "__main__":
    run(BENCH)
