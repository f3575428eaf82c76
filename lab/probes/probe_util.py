"""Helpers the probes share: print on rank 0, the slowest rank's value, GPU time per call, timing
variants in interleaved rounds under mpirun."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr.groups import Group


def nccl_world() -> tuple[tdist.ProcessGroup, int, int, torch.device, Group]:
    """torch's NCCL world without an mcr session, one process per GPU under torchrun: (its
    group, rank, world size, this rank's GPU, an mcr Group over it whose `symm` handle is that
    group, so a SymmBackend object can be called on it directly)."""
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    tdist.init_process_group("nccl")
    pg = tdist.group.WORLD
    rank, world = tdist.get_rank(), tdist.get_world_size()
    group = Group(ranks=list(range(world)), rank=rank, handles={"symm": pg})
    return pg, rank, world, torch.device("cuda", torch.cuda.current_device()), group


def backend_world(cpu: bool) -> tuple[bool, tdist.ProcessGroup, tdist.ProcessGroup,
                                       torch.device, torch.dtype]:
    """The world on the `mcr` torch.distributed backend (install()) beside torch's own group of
    the same ranks: (on GPU, torch's group, the mcr world, this rank's device, bf16 on GPU and
    float32 on CPU)."""
    from mcr.integrations import torch_backend
    torch_backend.install()
    cuda = not cpu
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    tdist.init_process_group("nccl" if cuda else "gloo")
    plain = tdist.new_group(backend="nccl" if cuda else "gloo")
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    return cuda, plain, tdist.group.WORLD, dev, torch.bfloat16 if cuda else torch.float32


def say(*a: object) -> None:
    """Print on rank 0."""
    if dist.get_rank() == 0:
        print(*a, flush=True)


def worst(x: float) -> float:
    """The slowest rank's value."""
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, backend="gloo")
    return float(t[0])


def gpu_us(fn: Callable[[], None], iters: int = 10, warm: int = 3) -> float:
    """Microseconds per call over `iters` back-to-back calls, by CUDA events, slowest rank."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    dist.barrier(backend="gloo")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return worst(s.elapsed_time(e) / iters * 1e3)


def mpi_rounds(variants: dict[str, Callable[[], None]], iters: int, rounds: int,
               cuda: bool) -> dict[str, list[float]]:
    """Microseconds per call of each variant (slowest rank, by MPI), in interleaved rounds."""
    from mpi4py import MPI
    W = MPI.COMM_WORLD
    times: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn()
    for _ in range(rounds):
        for k, fn in variants.items():
            W.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            if cuda:
                torch.cuda.synchronize()
            times[k].append(W.allreduce((time.perf_counter() - t0) / iters * 1e6, MPI.MAX))
    return times


def ratio_row(size: int, times: dict[str, list[float]], base: str) -> str:
    """`size  name median (base/it x) ...`, medians of each variant against `base`."""
    b = statistics.median(times[base])
    cells = (f"{k} {statistics.median(t):.0f} ({b / statistics.median(t):.2f}x)"
             for k, t in times.items())
    return f"{size:>9}  " + "  ".join(cells)
