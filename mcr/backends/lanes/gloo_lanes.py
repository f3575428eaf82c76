"""Lane-parallel Gloo all-reduce: each slice of the buffer on its own Gloo process group.

A Gloo process group runs its collectives on its own C++ thread over its own TCP pairs, so N
groups all-reducing N slices at once use N cores for the copies and the reduction, with no
Python thread hand-off. Open MPI serializes one process's collectives, whatever thread or
communicator issues them (eight MPI lanes as threads ran no faster than one), so this
is where lanes scale on a host. GPU tensors are handed to Gloo, which stages each slice through
pinned memory on its own stream, from its own thread: staging them in mcr instead (one pinned
buffer, slice by slice on a side stream, lanes started as their slices landed) was 0.73-0.98x
as fast, Python's cost per lane (H200 host, 16 cores). Each lane count is a backend
(gloo_lanes2, 4, 8): the tuner picks it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist

from ...groups import Group, Spec, numbered
from ...ops import ALL_REDUCE, CallKey
from ...work import Work
from ..base import HOST, Backend

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


class _Lanes:
    """A group's lane Gloo groups, made on first use by its members alone (every member makes
    its first lane call at the same point), shared by every lane count.

    They are Gloo backends over the job's store under a prefix named after the group's spec
    (Spec.name, the same on every member), not torch new_group's names (see
    groups.members_only_group).
    """

    def __init__(self, spec: Spec) -> None:
        self.ranks, self.rank = tuple(spec.ranks), spec.ranks.index(spec.me)
        self.timeout = spec.timeout
        self.pgs: list[Any] = []
        self.name = numbered(f"mcr/{spec.name}/gloo_lanes")

    def get(self, n: int) -> list[Any]:
        """The first n lane groups (made now where missing: collective over the members)."""
        if len(self.pgs) >= n:
            return self.pgs[:n]
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

    def __init__(self, lanes: int) -> None:
        self.name = f"gloo_lanes{lanes}"
        self.lanes = lanes
        # Gloo copies the options per call: built once per reduce op, as torch_pg does.
        self._opts: dict[Any, Any] = {}
        for redop, gloo_op in _OPS.items():
            self._opts[redop] = o = _C10D.AllreduceOptions()
            o.reduceOp = gloo_op

    def bind(self, spec: Spec) -> Any:
        """The group's shared lanes (their process groups are made at the first call)."""
        if not spec.member:
            return None
        # Every lane count shares one set of lanes per group: the first count bound makes it.
        bound = [h for n, h in spec.handles.items() if n.startswith("gloo_lanes")]
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
        """Each lane all-reduces its slice of t in place on its own Gloo group."""
        pgs = g.handles[self.name].get(self.lanes)
        flat, n = t.view(-1), t.numel()
        opts = self._opts[redop]
        works = []
        for i, pg in enumerate(pgs):
            part = flat[n * i // self.lanes:n * (i + 1) // self.lanes]
            if part.numel():
                works.append(pg.allreduce([part], opts))
        after = [lambda: t.div_(g.size)] if redop == tdist.ReduceOp.AVG else []
        return Work(ALL_REDUCE, self.name, t.nbytes, g.size, torch_work=_Works(works),
                    after=after, keep=(t,))


R = tdist.ReduceOp
# Gloo has no AVG: SUM, then divide (floating types only, as torch's avg).
_OPS = {R.SUM: R.SUM, R.AVG: R.SUM, R.PRODUCT: R.PRODUCT, R.MIN: R.MIN, R.MAX: R.MAX,
        R.BAND: R.BAND, R.BOR: R.BOR, R.BXOR: R.BXOR}
