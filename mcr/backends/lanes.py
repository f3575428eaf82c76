"""Lane-parallel MPI all-reduce: several host cores per rank, each driving its own slice.

MPI's own all-reduce of a host-staged buffer runs on one core per rank: one memcpy stream, one
reduction loop. Here the buffer is cut into `lanes` slices, and each slice is staged (GPU
tensors: to pinned host memory on its own CUDA stream) and all-reduced by its own thread on
its own communicator (a duplicate of the group's), so that many cores copy and reduce at once
(Adams and Bienz's multi-CPU-per-GPU all-reduce). Across nodes, hier's inter-node all-reduce
is one such call per local rank, so every lane of every local rank runs at once. The tuner
picks the lane count: each count is a backend (mpi_lanes2, mpi_lanes4, mpi_lanes8).
"""

from __future__ import annotations

from typing import Any

import torch

from ..groups import Group, Spec
from ..ops import ALL_REDUCE, CallKey
from ..threads import Futures, Worker
from ..work import Work, poll_until
from .base import HOST, Backend
from .staging import PinnedPool, view_as

COUNTS = (2, 4, 8)   # the lane counts offered to the tuner, one backend each


class LaneSet:
    """What lane i owns, shared by every lane count: one thread (so that the calls on lane i's
    communicator of a group start in issue order, as MPI requires of a communicator's
    collectives), a CUDA stream and a pinned pool (made on the calling thread), and per group
    communicator its duplicates."""

    def __init__(self, mpi: Any) -> None:
        self.mpi = mpi
        self.threads: list[Worker] = []
        self.streams: list[Any] = []
        self.pools: list[PinnedPool] = []

    def grow(self, lanes: int, cuda: bool) -> None:
        """At least `lanes` lanes, with streams if cuda."""
        while len(self.threads) < lanes:
            i = len(self.threads)
            self.threads.append(Worker(f"mcr-lane{i}"))
            self.pools.append(PinnedPool(self.mpi.pool.max_cached / max(COUNTS)))
        while cuda and len(self.streams) < lanes:
            self.streams.append(torch.cuda.Stream())

    def comms(self, comm: Any, lanes: int) -> list[Any]:
        """The first `lanes` duplicates of a group's communicator (made the first time: every
        rank of the group makes its first lane call at the same point; nonblocking, so MPI
        keeps progressing meanwhile)."""
        dups = self.mpi.lane_comms.setdefault(id(comm), [])
        if len(dups) < lanes:
            self.mpi.drain()   # Idup is a collective on comm: after the ones queued on it
        while len(dups) < lanes:
            made = comm.Idup()
            poll_until(made[1].Test, "creating the MPI communicators of the lanes",
                       progresses=True)
            dups.append(made[0])
        return dups[:lanes]


class MpiLanesBackend(Backend):
    """all_reduce in `lanes` slices, one thread and one communicator each."""

    domain = HOST
    serves = frozenset({ALL_REDUCE})

    def __init__(self, lane_set: LaneSet, lanes: int) -> None:
        self.name = f"mpi_lanes{lanes}"
        self.set, self.mpi, self.lanes = lane_set, lane_set.mpi, lanes

    def bind(self, spec: Spec) -> Any:
        """The group's MPI communicator (lanes duplicate it on first use)."""
        if not spec.member or "mpi" not in spec.handles:
            return None
        if not self.mpi._multiple:
            spec.notes[self.name] = "MPI was initialized without MPI_THREAD_MULTIPLE (lanes " \
                                    "call it from several threads)"
            return None
        return spec.handles["mpi"]

    def decline_key(self, key: CallKey) -> str | None:
        """What MPI cannot reduce (a lane left without elements reduces none)."""
        return self.mpi.decline_key(key)

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """Each lane all-reduces its slice of t in place (GPU tensors through pinned memory)."""
        ls = self.set
        ls.grow(self.lanes, t.is_cuda)
        comms, n = ls.comms(g.handles[self.name], self.lanes), t.numel()
        flat = t.view(-1)
        bounds = [n * i // self.lanes for i in range(self.lanes + 1)]
        ready = None
        if t.is_cuda:
            ready = torch.cuda.Event()
            ready.record()
        op, avg = self.mpi._reduction(redop)
        futs = [ls.threads[i].submit(self._lane, i, flat[bounds[i]:bounds[i + 1]], comms[i], op,
                                     ready) for i in range(self.lanes)]
        return Work(ALL_REDUCE, self.name, t.nbytes, g.size, torch_work=Futures(futs),
                    after=self.mpi._avg(t, avg, g.size), keep=(t,))

    def _lane(self, i: int, part: torch.Tensor, comm: Any, op: Any, ready: Any) -> None:
        """One lane: stage in, all-reduce, stage out (runs on the lane's thread)."""
        if ready is None:
            comm.Allreduce(self.mpi.MPI.IN_PLACE, self.mpi._typed(part), op)
            return
        s, pool = self.set.streams[i], self.set.pools[i]
        buf = pool.get(part.nbytes)
        try:
            host = view_as(buf, part)
            torch.cuda.set_device(part.device)
            with torch.cuda.stream(s):
                s.wait_event(ready)
                host.copy_(part, non_blocking=True)
                s.synchronize()
                comm.Allreduce(self.mpi.MPI.IN_PLACE, self.mpi._typed(host), op)
                part.copy_(host, non_blocking=True)
                s.synchronize()
        finally:
            pool.put(buf, None)
