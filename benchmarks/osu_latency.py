"""OSU-style point-to-point latency: ping-pong between ranks 0 and 1 (time = one round trip)."""

from __future__ import annotations

import mcr.comm as dist
from mcr.measure.engine import Bench, Case, Ctx, expect_equal, rank_data
from mcr.measure.sweep import run


def setup(ctx: Ctx, size: int) -> Case:
    """Rank 0 sends, rank 1 echoes; other ranks idle. OSU's latency is half the median."""
    numel = size // ctx.dtype.itemsize
    buf = rank_data(ctx, numel, ctx.rank)

    def pingpong(be: str | None) -> None:
        if ctx.rank == 0:
            dist.send(buf, 1, backend=be)
            dist.recv(buf, 1, backend=be)
        elif ctx.rank == 1:
            dist.recv(buf, 0, backend=be)
            dist.send(buf, 0, backend=be)

    def check() -> None:
        if ctx.rank < 2:
            expect_equal("p2p", buf, rank_data(ctx, numel, 0))
    return Case(pingpong, check)


BENCH = Bench("p2p", setup, "mcr OSU-style ping-pong latency (round trip)")
if __name__ == "__main__":
    run(BENCH)
