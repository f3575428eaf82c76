"""Probe: what does waiting the way mcr waits cost an MPI all-reduce? (NOTES.md, issue 13)

mcr's mpi backend ran 2x slower than a bare MPI_Allreduce of the same host buffer (16 MiB: 7.5 ms
against 4.0 ms, 2 ranks on one host). Suspects: the non-blocking collective (Open MPI's libnbc,
progressed only when the host tests it) and mcr's polling loop, which yields and then sleeps
between tests. Times, interleaved in rounds, on one buffer:
  block     MPI_Allreduce (GPU tensors: through a pinned host buffer, as mcr stages them);
  nbwait    MPI_Iallreduce, then MPI_Wait;
  nbpoll    MPI_Iallreduce, then mcr's poll_until on MPI_Test;
  thread    MPI_Allreduce on a helper thread, the caller polling its future;
  chunkN    MPI_Allreduce of N MiB slices one after the other;
  mcr       mcr.comm.all_reduce(backend="mpi") (MCR_MPI_BLOCKING_BYTES, MCR_MPI_CHUNK_BYTES);
  mcrasync  the same with async_op=True, then wait();
  lanesN    mcr.comm.all_reduce(backend="mpi_lanesN"): N helper processes, each a slice.
Run under mpirun -np 2 [--cuda].
"""

from __future__ import annotations

import argparse
import concurrent.futures
from collections.abc import Callable

import torch
from mpi4py import MPI

import mcr.comm as dist
from lab.probes.probe_util import mpi_rounds, ratio_row
from mcr.waits import poll_until

W = MPI.COMM_WORLD


def variants(buf: torch.Tensor) -> dict[str, Callable[[], None]]:
    """The waits above, on buf."""
    host = torch.empty(buf.numel(), pin_memory=True) if buf.is_cuda else buf
    helper = concurrent.futures.ThreadPoolExecutor(1)

    def staged(fn: Callable[[], None]) -> Callable[[], None]:
        if not buf.is_cuda:
            return fn

        def go() -> None:
            host.copy_(buf)
            fn()
            buf.copy_(host)
        return go

    def nbpoll() -> None:
        r = W.Iallreduce(MPI.IN_PLACE, host.numpy())
        poll_until(r.Test, "probe")

    def thread() -> None:
        f = helper.submit(W.Allreduce, MPI.IN_PLACE, host.numpy())
        poll_until(f.done, "probe")

    def chunks(mib: int) -> Callable[[], None]:
        step = mib * 2**18

        def go() -> None:
            for a in range(0, host.numel(), step):
                W.Allreduce(MPI.IN_PLACE, host[a:a + step].numpy())
        return staged(go)

    return {"block": staged(lambda: W.Allreduce(MPI.IN_PLACE, host.numpy())),
            "chunk4": chunks(4), "chunk16": chunks(16),
            "nbwait": staged(lambda: W.Iallreduce(MPI.IN_PLACE, host.numpy()).Wait()),
            "nbpoll": staged(nbpoll), "thread": staged(thread),
            "mcr": lambda: dist.all_reduce(buf, backend="mpi"),
            "mcrasync": lambda: dist.all_reduce(buf, backend="mpi", async_op=True).wait(),
            "lanes2": lambda: dist.all_reduce(buf, backend="mpi_lanes2"),
            "lanes4": lambda: dist.all_reduce(buf, backend="mpi_lanes4"),
            "lanes8": lambda: dist.all_reduce(buf, backend="mpi_lanes8")}


def main() -> None:
    """Median microseconds per call of each variant at each size (slowest rank)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="65536,1048576,4194304,16777216,67108864")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--variants", default="", help="comma-separated subset (default: all)")
    a = ap.parse_args()
    dist.init_distributed()
    if W.rank == 0:
        print(f"# {W.size} ranks, {'cuda' if a.cuda else 'cpu'}, "
              f"{MPI.Get_library_version().splitlines()[0]}", flush=True)
    for size in [int(s) for s in a.sizes.split(",")]:
        buf = torch.ones(size // 4, device="cuda" if a.cuda else "cpu")
        vs = variants(buf)
        if a.variants:
            vs = {k: vs[k] for k in a.variants.split(",")}
        times = mpi_rounds(vs, a.iters, a.rounds, a.cuda)
        if W.rank == 0:
            print(ratio_row(size, times, "block"), flush=True)


if __name__ == "__main__":
    main()
