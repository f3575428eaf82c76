"""OSU-style all_to_all_single (equal splits) through mcr (size = whole buffer per rank)."""

from __future__ import annotations

import torch

import mcr.comm as dist
from benchmarks.harness import Bench, Case, Ctx, expect_equal, rank_data, run


def setup(ctx: Ctx, size: int) -> Case:
    """Each rank sends size / n bytes to every rank."""
    numel = size // ctx.dtype.itemsize
    per = numel // ctx.n
    inp = rank_data(ctx, numel, ctx.rank)
    out = ctx.out_buffer(numel)

    def check() -> None:
        want = torch.cat([rank_data(ctx, numel, q)[ctx.rank * per:(ctx.rank + 1) * per]
                          for q in range(ctx.n)])
        expect_equal("all_to_all", out, want)
    return Case(lambda be: dist.all_to_all_single(out, inp, backend=be), check)


BENCH = Bench("all_to_all", setup)
if __name__ == "__main__":
    run(BENCH)
