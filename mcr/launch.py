"""Who launched us: rank, world size and local rank from torchrun's or an MPI launcher's env."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

# (rank, size, local rank) variables of the MPI launchers mcr knows, as DeepSpeed's discovery.
_MPI_VARS = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),                                   # MPICH, Intel
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),     # MVAPICH2
)


@dataclass
class Launch:
    """How this process was started."""

    launcher: str       # env (RANK/WORLD_SIZE: torchrun, DeepSpeed's launcher) | mpi | single
    rank: int
    world_size: int
    local_rank: int


def launched_by_mpi() -> bool:
    """True when an MPI launcher (mpirun/mpiexec/hydra) started this process."""
    return any(r in os.environ and s in os.environ for r, s, _ in _MPI_VARS)


def discover() -> Launch:
    """Read the launcher's environment (torchrun's RANK wins if both are present)."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return Launch("env", int(env["RANK"]), int(env["WORLD_SIZE"]),
                      int(env.get("LOCAL_RANK", 0)))
    return mpi_launch() or Launch("single", 0, 1, 0)


def mpi_launch() -> Launch | None:
    """What an MPI launcher's variables say, or None where none started this process."""
    env = os.environ
    for r, s, lr in _MPI_VARS:
        if r in env and s in env:
            return Launch("mpi", int(env[r]), int(env[s]), int(env.get(lr, 0)))
    return None


def state_ranks() -> None:
    """Under an MPI launcher, RANK, WORLD_SIZE and LOCAL_RANK as torchrun sets them, where
    unset (frameworks read them before they start torch.distributed: transformers' tp_plan);
    no communication, so any rank may call it alone."""
    launch = mpi_launch()
    if launch is not None and "RANK" not in os.environ:
        _set_ranks(launch)


def _set_ranks(launch: Launch) -> None:
    os.environ.update(RANK=str(launch.rank), WORLD_SIZE=str(launch.world_size),
                      LOCAL_RANK=str(launch.local_rank))


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def rendezvous_env(launch: Launch, port: int | None) -> None:
    """Set MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK for torch when torchrun did not.

    Under an MPI launcher, rank 0 picks the address and a free port and broadcasts them over MPI,
    as DeepSpeed's MPI discovery does. One host: loopback; several: rank 0's hostname address.
    """
    env = os.environ
    # Under an MPI launcher with RANK stated (state_ranks) but no address: as "mpi".
    if launch.launcher == "mpi" or (mpi_launch() is not None and not (
            "MASTER_ADDR" in env and "MASTER_PORT" in env)):
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        hosts = comm.allgather(socket.gethostname())
        if comm.rank == 0:
            addr = env.get("MASTER_ADDR") or (
                "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(hosts[0]))
            chosen = int(env.get("MASTER_PORT") or port or free_port())
        else:
            addr, chosen = None, None
        addr, chosen = comm.bcast((addr, chosen), root=0)
        env["MASTER_ADDR"], env["MASTER_PORT"] = addr, str(chosen)
    elif launch.launcher == "single":
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", str(port or free_port()))
    _set_ranks(launch)
