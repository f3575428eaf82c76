"""OSU-style all_reduce latency and bandwidth through mcr."""

from __future__ import annotations

import mcr.comm as dist
from benchmarks.harness import Bench, Case, Ctx, expect_equal, rank_data, run


def setup(ctx: Ctx, size: int) -> Case:
    """A buffer of `size` bytes, reduced in place."""
    numel = size // ctx.dtype.itemsize
    buf = rank_data(ctx, numel, ctx.rank)

    def check() -> None:
        buf.copy_(rank_data(ctx, numel, ctx.rank))
        dist.all_reduce(buf)
        want = sum(rank_data(ctx, numel, q) for q in range(ctx.n))
        expect_equal("all_reduce", buf, want)
    return Case(lambda be: dist.all_reduce(buf, backend=be), check)


BENCH = Bench("all_reduce", setup)
if __name__ == "__main__":
    run(BENCH)
