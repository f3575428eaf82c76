"""OSU-style broadcast from rank 0 through mcr."""

from __future__ import annotations

import mcr.comm as dist
from benchmarks.harness import Bench, Case, Ctx, expect_equal, rank_data, run


def setup(ctx: Ctx, size: int) -> Case:
    """Rank 0's size bytes to every rank."""
    numel = size // ctx.dtype.itemsize
    buf = ctx.out_buffer(numel)
    buf.copy_(rank_data(ctx, numel, ctx.rank))

    def check() -> None:
        expect_equal("broadcast", buf, rank_data(ctx, numel, 0))
    return Case(lambda be: dist.broadcast(buf, 0, backend=be), check)


BENCH = Bench("broadcast", setup)
if __name__ == "__main__":
    run(BENCH)
