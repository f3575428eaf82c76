"""Lane-parallel MPI all-reduce: N helper processes per rank, each all-reducing its slice.

MPI's all-reduce of a host-staged buffer runs on one core per rank, and Open MPI serializes
one process's collectives whatever thread issues them (eight threads on
duplicated communicators ran no faster than one). So each lane is a process: at a group's
first call with N lanes, every member spawns N helpers on its own host (helper.py; a
collective MPI_Comm_spawn_multiple over the group's communicator), helper i of every member
joining lane i's communicator. A call copies the buffer into host memory the rank shares with
its helpers, rings each lane, and the helpers all-reduce their slices at once, each on its own
core and connections (Adams and Bienz's multi-CPU-per-GPU all-reduce). Across nodes, hier's
inter-node all-reduce is one such call per local rank, so every lane of every local rank runs
at once. The tuner picks the lane count: each is a backend (mpi_lanes2, mpi_lanes4, mpi_lanes8).
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from typing import Any

import torch

from ...errors import LibraryError
from ...groups import Group, Spec
from ...ops import ALL_REDUCE, CallKey
from ...waits import get_timeout, poll_until, wait_event
from ...work import Work
from ..base import HOST, Backend
from . import helper as H

_SHM = "/dev/shm"  # noqa: S108 - files made O_EXCL, mode 0600, named by pid and object
# CPU tensors whose lane slices are at least this large are staged slice by slice: the copy of
# one overlaps the lanes before it (4-64 MiB 1.1-1.8x on the H100 host's 16 cores); smaller
# slices lost the ~6 us of Python each piece costs (1 MiB in 4 lanes 0.87x).
PIECEWISE_SLICE_BYTES = 512 << 10


class LaneProcs:
    """One communicator's helpers for one lane count: their control block, the data segment
    they share with this rank, and the call in flight (one at a time: a new call first
    finishes the previous one)."""

    def __init__(self, mpi: Any, comm: Any, lanes: int, spin_s: float) -> None:
        MPI = mpi.MPI
        self.lanes = lanes
        tag = f"mcr-lanes-{os.getpid()}-{id(self)}"
        self.ctl_path = f"{_SHM}/{tag}-ctl"
        self.block = H.Block(H.map_file(self.ctl_path, H.CTL_BYTES))
        self.block.words[:] = 0
        self.data_tag, self.data_path, self.data_linked = f"{_SHM}/{tag}-data", "", False
        self.data: Any = None
        self.host: torch.Tensor | None = None
        self.registered = False
        self.seq = 0
        self.pending: LaneCall | None = None
        self.reusable: Any = None   # event: the last copy back out of the data segment
        hosts = comm.allgather(socket.gethostname())
        paths, pids = comm.allgather(self.ctl_path), comm.allgather(os.getpid())
        infos = [MPI.INFO_NULL] * len(hosts)
        if len(set(hosts)) > 1:   # several hosts: each rank's helpers on its own
            infos = [MPI.Info.Create() for _ in hosts]
            for info, h in zip(infos, hosts):
                info.Set("host", h)
        helper = os.path.abspath(H.__file__)
        try:
            self.inter = comm.Spawn_multiple([sys.executable] * len(hosts), [[helper]] * len(hosts),
                                             [lanes] * len(hosts), infos, root=0)
        except MPI.Exception as e:
            raise LibraryError(f"mcr: mpi_lanes{lanes} could not spawn its {lanes} helper "
                               f"processes per rank (MPI_Comm_spawn_multiple: {e}); the MPI "
                               "launcher must allow spawning (Open MPI: --oversubscribe where "
                               "the slots are fewer than ranks x (lanes + 1))") from e
        root = MPI.ROOT if comm.Get_rank() == 0 else MPI.PROC_NULL
        self.inter.bcast((lanes, paths, pids, spin_s), root=root)
        recs = [self.block.rec(i) for i in range(lanes)]
        poll_until(lambda: all(r[H.PID] for r in recs), f"the {lanes} lane helpers to start")
        self.pids = [int(r[H.PID]) for r in recs]
        os.unlink(self.ctl_path)   # mapped by all now; nothing to leave behind after a crash

    def ensure(self, nbytes: int, cuda: bool) -> torch.Tensor:
        """The data segment as uint8, at least nbytes (a larger one replaces it: no call is in
        flight then), pinned for CUDA copies where cuda."""
        if self.host is None or self.host.numel() < nbytes:
            self._drop_data()
            size = max(1 << 20, 1 << (max(nbytes, 1) - 1).bit_length())
            fs = os.statvfs(_SHM)
            free = fs.f_bavail * fs.f_frsize
            if size > free:
                raise LibraryError(f"mcr: mpi_lanes{self.lanes} needs {size} bytes of {_SHM} "
                                   f"for a {nbytes}-byte all-reduce; {free} are free")
            path = f"{self.data_tag}-{self.block.words[H.GEN] + 1}"
            self.data = H.map_file(path, size)
            self.host = torch.frombuffer(self.data, dtype=torch.uint8)
            self.block.set_data_path(path)
            self.data_path, self.data_linked = path, True
        if cuda and not self.registered:
            rc = torch.cuda.cudart().cudaHostRegister(self.host.data_ptr(), self.host.numel(), 0)
            if int(rc) != 0:
                raise LibraryError(f"mcr: cudaHostRegister of mpi_lanes' {self.host.numel()}-"
                                   f"byte shared buffer failed ({rc})")
            self.registered = True
        return self.host

    def _drop_data(self) -> None:
        if self.host is None:
            return
        if self.reusable is not None:
            wait_event(self.reusable, "the last copy out of mpi_lanes' shared buffer")
        if self.registered:
            torch.cuda.cudart().cudaHostUnregister(self.host.data_ptr())
            self.registered = False
        self.host = None
        self.data.close()
        self.unlink_data()

    def unlink_data(self) -> None:
        """Remove the data segment's name from /dev/shm (once every helper has mapped it, or
        when it is dropped): nothing is left there if the job dies."""
        if self.data_linked:
            os.unlink(self.data_path)
            self.data_linked = False

    def start(self, t: torch.Tensor, dtype_code: int, op_code: int) -> LaneCall:
        """Stage t into the data segment and ring every lane with its slice. GPU: one copy on
        the current stream, waited for, then every lane. CPU: one copy, or, where slices are
        large, slice by slice, each lane rung as soon as its slice is in, so that the copy of
        one overlaps the lanes before it."""
        if self.pending is not None:
            self.pending.finish(get_timeout())
        host = self.ensure(t.nbytes, t.is_cuda)
        self.seq += 1
        es, n = t.element_size(), t.numel()
        view, flat = host[:t.nbytes].view(t.dtype), t.view(-1)
        bounds = [n * i // self.lanes for i in range(self.lanes + 1)]
        piecewise = not t.is_cuda and t.nbytes >= PIECEWISE_SLICE_BYTES * self.lanes
        if t.is_cuda:
            # One copy, not one per slice: each copy call cost ~35 us on the H100 host
            # (timed stage by stage), more than the pipelining won.
            if self.reusable is not None:
                torch.cuda.current_stream().wait_event(self.reusable)
            view.copy_(flat, non_blocking=True)
            landed = torch.cuda.Event()
            landed.record()
            poll_until(landed.query, "the GPU copy into mpi_lanes' shared buffer",
                       progresses=True)
        elif not piecewise:
            view.copy_(flat)
        for i in range(self.lanes):
            a, b = bounds[i], bounds[i + 1]
            if piecewise:
                view[a:b].copy_(flat[a:b])
            r = self.block.rec(i)
            r[H.OFFSET], r[H.COUNT] = a * es, b - a
            r[H.DTYPE], r[H.OP] = dtype_code, op_code
            r[H.SEQ] = self.seq
            self.block.ring(i)
        self.pending = LaneCall(self, t, view, self.seq, bounds if piecewise else None)
        return self.pending

    def alive(self) -> None:
        """Raise if a helper died (a wait on it would be hopeless)."""
        for i, pid in enumerate(self.pids):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                raise LibraryError(f"mcr: mpi_lanes{self.lanes} helper {i} (pid {pid}) "
                                   "exited; see its stderr") from None

    def close(self) -> None:
        """Tell the helpers to quit and disconnect from them (collective over the
        communicator's members and every helper)."""
        if self.pending is not None:
            self.pending.finish(get_timeout())
        self.block.words[H.QUIT] = 1
        for i in range(self.lanes):
            self.block.ring(i)
        self.inter.Disconnect()
        self._drop_data()
        self.block.release()


class LaneCall:
    """torch-work-like handle of one lane all-reduce: done when every lane is, then copied back
    (GPU: on the waiter's current stream)."""

    def __init__(self, procs: LaneProcs, t: torch.Tensor, view: torch.Tensor, seq: int,
                 bounds: list[int] | None) -> None:
        self.procs, self.t, self.view, self.seq, self.bounds = procs, t, view, seq, bounds
        self.recs = [procs.block.rec(i) for i in range(procs.lanes)]
        self.finished = False

    def is_completed(self) -> bool:
        """Have all lanes finished their slices?"""
        return self.finished or all(r[H.DONE] == self.seq for r in self.recs)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """finish() with the timeout, or MCR_TIMEOUT_S."""
        self.finish(get_timeout() if timeout is None else timeout.total_seconds())
        return True

    def finish(self, secs: float) -> None:
        """Wait for every lane, then copy the result back (where staged piecewise, each lane's
        slice as soon as that lane is done: lanes finish in the order they were rung). The
        waits do not nudge MPI (an MPI_Iprobe over TCP per poll slowed them): the lanes need
        nothing from this rank's MPI, and its own pending requests progress again when it
        next waits on MPI."""
        if self.finished:
            return
        p = self.procs
        flat, bounds = self.t.view(-1), self.bounds
        for i, r in enumerate(self.recs):
            poll_until(lambda r=r: r[H.DONE] == self.seq,
                       lambda: f"all_reduce on backend 'mpi_lanes{p.lanes}' "
                               f"({self.t.nbytes} bytes), lane {i}", secs, check=p.alive,
                       progresses=True)
            if r[H.ERROR] == self.seq:
                raise LibraryError(f"mcr: all_reduce on backend 'mpi_lanes{p.lanes}' "
                                   f"({self.t.nbytes} bytes): lane {i} failed (its helper's "
                                   "error is on stderr)")
            if bounds is not None:
                flat[bounds[i]:bounds[i + 1]].copy_(self.view[bounds[i]:bounds[i + 1]])
        p.unlink_data()   # every helper has mapped it now
        if bounds is None:
            flat.copy_(self.view, non_blocking=flat.is_cuda)
        if flat.is_cuda:
            p.reusable = torch.cuda.Event()
            p.reusable.record()
        self.finished = True
        p.pending = None
        self.t = self.view = None   # type: ignore[assignment]


class LaneSet:
    """Every communicator's helpers, by (communicator, lane count), made at first use."""

    def __init__(self, mpi: Any, spin_us: int | None) -> None:
        self.mpi = mpi
        self.spin_us = spin_us
        self.procs: dict[tuple[int, int], LaneProcs] = {}

    def get(self, comm: Any, lanes: int) -> LaneProcs:
        """comm's helpers for `lanes` lanes (spawned now where missing: every member makes its
        first call with this lane count at the same point)."""
        p = self.procs.get((id(comm), lanes))
        if p is None:
            self.mpi.drain()   # the spawn is a collective on comm: after those queued on it
            p = self.procs[(id(comm), lanes)] = LaneProcs(self.mpi, comm, lanes,
                                                          self._spin_s(lanes))
        return p

    def _spin_s(self, lanes: int) -> float:
        """How long an idle helper spins before it sleeps: MCR_LANE_SPIN_US, else 2 ms where
        this host has a core for every rank and helper on it, none where it has not (spinning
        helpers would take the cores the ranks need)."""
        if self.spin_us is not None:
            return self.spin_us * 1e-6
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        return 2e-3 if cores >= local * (lanes + 1) else 0.0

    def close(self, comm: Any) -> None:
        """Stop comm's helpers (every member releases the group at the same point)."""
        for key in [k for k in self.procs if k[0] == id(comm)]:
            self.procs.pop(key).close()


class MpiLanesBackend(Backend):
    """all_reduce in `lanes` slices, one helper process each."""

    domain = HOST
    serves = frozenset({ALL_REDUCE})

    def __init__(self, lane_set: LaneSet, lanes: int) -> None:
        self.name = f"mpi_lanes{lanes}"
        self.set, self.mpi, self.lanes = lane_set, lane_set.mpi, lanes
        MPI = self.mpi.MPI
        self._ops = [getattr(MPI, n) for n in H.OPS]
        # the helpers' dtype codes, by torch dtype: looked up per call
        self._codes = {getattr(torch, n): i for i, n in enumerate(H.DTYPES)}

    def bind(self, spec: Spec) -> Any:
        """The group's MPI communicator (the helpers are spawned at the first call)."""
        if not spec.member or "mpi" not in spec.handles:
            return None
        if not os.path.isdir(_SHM):
            spec.notes[self.name] = f"lanes share memory through {_SHM}, which this host lacks"
            return None
        return spec.handles["mpi"]

    def release(self, handle: Any, world: bool) -> None:
        """Stop the helpers of this communicator (before mpi frees it)."""
        self.set.close(handle)

    def decline_key(self, key: CallKey) -> str | None:
        """What MPI cannot reduce, and what it can but the helpers were not given codes for."""
        why = self.mpi.decline_key(key)
        if why is None and key.dtype not in self._codes:
            why = f"mpi lanes do not reduce {key.dtype}"
        return why

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """Each lane all-reduces its slice of t in place (avg: sum, then divide)."""
        procs = self.set.get(g.handles[self.name], self.lanes)
        op, avg = self.mpi._reduction(redop)
        call = procs.start(t, self._codes[t.dtype], self._ops.index(op))
        return Work(ALL_REDUCE, self.name, t.nbytes, g.size, torch_work=call,
                    after=self.mpi._avg(t, avg, g.size), keep=(t,))
