"""All-reduce split across several host connections at once: `mpi_lanesN` (N helper processes
per rank, each its own MPI communicator) and `gloo_lanesN` (N Gloo groups)."""

from __future__ import annotations

from ..base import Backend, Context, Unavailable

COUNTS = (2, 4, 8)   # the lane counts offered to the tuner, one backend each
NAMES = tuple(f"mpi_lanes{n}" for n in COUNTS) + tuple(f"gloo_lanes{n}" for n in COUNTS)


def build(ctx: Context) -> dict[str, Backend]:
    """mpi_lanesN where mpi itself is available (they duplicate its communicator); gloo_lanesN
    always."""
    from .gloo_lanes import GlooLanesBackend
    from .mpi_lanes import LaneSet, MpiLanesBackend
    mpi = ctx.built["mpi"]
    out: dict[str, Backend] = {}
    if isinstance(mpi, Unavailable):
        out.update((f"mpi_lanes{n}", Unavailable(f"mpi_lanes{n}", mpi.reason)) for n in COUNTS)
    else:
        lane_set = LaneSet(mpi, ctx.cfg.lane_spin_us)
        out.update((f"mpi_lanes{n}", MpiLanesBackend(lane_set, n)) for n in COUNTS)
    out.update((f"gloo_lanes{n}", GlooLanesBackend(n)) for n in COUNTS)
    return out
