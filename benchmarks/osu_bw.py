"""OSU-style point-to-point bandwidth: a window of isends from rank 0 to rank 1, then an ack."""

from __future__ import annotations

import torch

import mcr.comm as dist
from mcr.measure.engine import Bench, Case, Ctx, expect_equal, rank_data
from mcr.measure.sweep import run

WINDOW = 16


def setup(ctx: Ctx, size: int) -> Case:
    """WINDOW messages in flight; time / WINDOW per message (reported size: one message)."""
    numel = size // ctx.dtype.itemsize
    bufs = [rank_data(ctx, numel, ctx.rank) for _ in range(WINDOW)]
    ack = torch.zeros(1, dtype=ctx.dtype, device=ctx.device)

    def window(be: str | None) -> None:
        if ctx.rank == 0:
            for w in [dist.isend(b, 1, backend=be) for b in bufs]:
                w.wait()
            dist.recv(ack, 1, backend=be)
        elif ctx.rank == 1:
            for w in [dist.irecv(b, 0, backend=be) for b in bufs]:
                w.wait()
            dist.send(ack, 0, backend=be)

    def check() -> None:
        if ctx.rank == 1:
            for b in bufs:
                expect_equal("p2p window", b, rank_data(ctx, numel, 0))
    return Case(window, check)


BENCH = Bench("p2p", setup, f"mcr OSU-style bandwidth (window of {WINDOW}; time is per window)")
if __name__ == "__main__":
    run(BENCH)
