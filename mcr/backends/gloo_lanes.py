"""Lane-parallel Gloo all-reduce: each slice of the buffer on its own Gloo process group.

A Gloo process group runs its collectives on its own C++ thread over its own TCP pairs, so N
groups all-reducing N slices at once use N cores for the copies and the reduction, with no
Python thread hand-off. Open MPI serializes one process's collectives, whatever thread or
communicator issues them (NOTES.md, issue 13: eight MPI lanes ran no faster than one), so this
is where lanes scale on a host. A GPU tensor goes through one reused pinned buffer, slice by
slice on one side stream, and each lane starts as soon as its slice has landed and goes back as
soon as it is reduced, so copies overlap the other lanes' reductions (handed GPU slices, Gloo
would stage each itself, with a stream, a copy and a synchronization per lane per call). Each
lane count is a backend (gloo_lanes2, 4, 8): the tuner picks it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist

from ..groups import Group, Spec
from ..ops import ALL_REDUCE, CallKey
from ..work import Work, wait_event
from .base import HOST, Backend
from .lanes import COUNTS
from .staging import PinnedPool, view_as

_C10D = torch._C._distributed_c10d
_SUPPORTED = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
              torch.uint8, torch.int32, torch.int64}


class _Works:
    """torch-work-like handle over the lanes' Gloo works."""

    __slots__ = ("works",)

    def __init__(self, works: list[Any]) -> None:
        self.works = works

    def is_completed(self) -> bool:
        """Have all lanes finished?"""
        return all(w.is_completed() for w in self.works)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Wait for every lane (each with the timeout, or its group's)."""
        for w in self.works:
            if timeout is None:
                w.wait()
            else:
                w.wait(timeout)
        return True


class _Staged:
    """torch-work-like handle over the lanes of a GPU tensor staged through pinned memory: as
    each lane's work completes, its slice is divided (avg) and copied back on the side stream;
    `done` then marks the last copy."""

    __slots__ = ("works", "parts", "stream", "divide", "done")

    def __init__(self, works: list[Any], parts: list[tuple[torch.Tensor, torch.Tensor]],
                 stream: torch.cuda.Stream, divide: int) -> None:
        self.works, self.parts, self.stream, self.divide = works, parts, stream, divide
        self.done: torch.cuda.Event | None = None

    def is_completed(self) -> bool:
        """Have all lanes reduced (the copies back may be pending)?"""
        return all(w.is_completed() for w in self.works)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Wait for each lane in turn and send its slice back."""
        with torch.cuda.stream(self.stream):
            for w, (dev, host) in zip(self.works, self.parts):
                if timeout is None:
                    w.wait()
                else:
                    w.wait(timeout)
                if self.divide > 1:
                    host.div_(self.divide)
                dev.copy_(host, non_blocking=True)
            self.done = torch.cuda.Event()
            self.done.record(self.stream)
        return True


class _Lanes:
    """A group's lane Gloo groups, made on first use by its members alone (every member makes
    its first lane call at the same point), shared by every lane count.

    They are Gloo backends over the job's store under a prefix of mcr's own: torch's
    new_group(use_local_synchronization=True) names a group by its ranks and by how many groups
    the calling rank has made, which differs between members that made different groups before
    (a deadlock the tuner met). Here the name is the ranks and how many lane sets of those ranks
    this process made, which the members agree on.
    """

    made: dict[tuple[int, ...], int] = {}   # lane sets made per rank tuple, in this process

    def __init__(self, spec: Spec) -> None:
        self.ranks, self.rank = tuple(spec.ranks), spec.ranks.index(spec.me)
        self.timeout = spec.timeout
        self.pgs: list[Any] = []
        self.name = ""

    def get(self, n: int) -> list[Any]:
        """The first n lane groups (made now where missing: collective over the members)."""
        if len(self.pgs) >= n:
            return self.pgs[:n]
        if not self.name:
            k = _Lanes.made.get(self.ranks, 0)
            _Lanes.made[self.ranks] = k + 1
            self.name = f"mcr/gloo_lanes/{'_'.join(map(str, self.ranks))}/{k}"
        store = tdist.distributed_c10d._get_default_store()
        while len(self.pgs) < n:
            prefix = tdist.PrefixStore(f"{self.name}/{len(self.pgs)}/", store)
            self.pgs.append(tdist.ProcessGroupGloo(prefix, self.rank, len(self.ranks),
                                                   self.timeout))
        return self.pgs[:n]


class GlooLanesBackend(Backend):
    """all_reduce in `lanes` slices, one Gloo process group each."""

    domain = HOST
    serves = frozenset({ALL_REDUCE})

    def __init__(self, lanes: int, pool: PinnedPool) -> None:
        self.name = f"gloo_lanes{lanes}"
        self.lanes = lanes
        self.pool = pool   # shared by the lane counts
        self._streams: dict[int, torch.cuda.Stream] = {}   # per device: the staging copies
        # Gloo copies the options per call: built once per reduce op, as torch_pg does.
        self._opts: dict[Any, Any] = {}
        for redop, gloo_op in _OPS.items():
            self._opts[redop] = o = _C10D.AllreduceOptions()
            o.reduceOp = gloo_op

    def bind(self, spec: Spec) -> Any:
        """The group's shared lanes (their process groups are made at the first call)."""
        if not spec.member:
            return None
        bound = [spec.handles[f"gloo_lanes{c}"] for c in COUNTS if f"gloo_lanes{c}" in spec.handles]
        return bound[0] if bound else _Lanes(spec)

    def release(self, handle: Any, world: bool) -> None:
        """Drop the lane groups (Gloo closes their pairs when the last reference goes)."""
        handle.pgs.clear()

    def decline_key(self, key: CallKey) -> str | None:
        """What Gloo cannot reduce: complex and bool tensors, devices other than cpu/cuda."""
        if key.device not in ("cpu", "cuda"):
            return f"gloo lanes serve cpu and cuda tensors, not {key.device}"
        if key.dtype not in _SUPPORTED:
            return f"gloo lanes do not reduce {key.dtype}"
        if key.redop is not None and key.redop not in _OPS:
            return f"gloo lanes have no {key.redop} reduction"
        if key.redop == tdist.ReduceOp.AVG and not key.dtype.is_floating_point:
            return "avg needs a floating-point tensor"
        return None

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """Each lane all-reduces its slice of t (of its pinned copy, for a GPU tensor) in
        place on its own Gloo group."""
        pgs = g.handles[self.name].get(self.lanes)
        flat, n = t.view(-1), t.numel()
        cuts = [(n * i // self.lanes, n * (i + 1) // self.lanes) for i in range(self.lanes)]
        cuts = [(a, b) for a, b in cuts if b > a]
        opts = self._opts[redop]
        avg = redop == tdist.ReduceOp.AVG
        if t.is_cuda:
            return self._staged(t, g, pgs, cuts, opts, avg)
        works = [pg.allreduce([flat[a:b]], opts) for pg, (a, b) in zip(pgs, cuts)]
        return Work(ALL_REDUCE, self.name, t.nbytes, g.size, torch_work=_Works(works),
                    after=[lambda: t.div_(g.size)] if avg else [], keep=(t,))

    def _staged(self, t: torch.Tensor, g: Group, pgs: list[Any], cuts: list[tuple[int, int]],
                opts: Any, avg: bool) -> Work:
        """A GPU tensor's lanes: slices copied to pinned memory in order on a side stream, each
        lane started once its slice is there (the host polls its event)."""
        stream = self._streams.get(t.device.index)
        if stream is None:
            stream = self._streams[t.device.index] = torch.cuda.Stream(t.device)
        buf = self.pool.get(t.nbytes)
        flat, host = t.view(-1), view_as(buf, t).view(-1)
        stream.wait_stream(torch.cuda.current_stream(t.device))   # t's producer
        parts, landed = [], []
        with torch.cuda.stream(stream):
            for a, b in cuts:
                parts.append((flat[a:b], host[a:b]))
                host[a:b].copy_(flat[a:b], non_blocking=True)
                landed.append(torch.cuda.Event())
                landed[-1].record(stream)
        works = []
        for pg, ev, (_, h) in zip(pgs, landed, parts):
            wait_event(ev, "a GPU slice's copy to the host for a Gloo lane")
            works.append(pg.allreduce([h], opts))
        staged = _Staged(works, parts, stream, g.size if avg else 1)

        def back() -> None:
            torch.cuda.current_stream(t.device).wait_event(staged.done)
            self.pool.put(buf, staged.done)
        return Work(ALL_REDUCE, self.name, t.nbytes, g.size, torch_work=staged,
                    after=[back], keep=(t, buf))


R = tdist.ReduceOp
# Gloo has no AVG: SUM, then divide (floating types only, as torch's avg).
_OPS = {R.SUM: R.SUM, R.AVG: R.SUM, R.PRODUCT: R.PRODUCT, R.MIN: R.MIN, R.MAX: R.MAX,
        R.BAND: R.BAND, R.BOR: R.BOR, R.BXOR: R.BXOR}
