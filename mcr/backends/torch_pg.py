"""Shared body of the backends that are torch ProcessGroups (gloo, nccl): one call each."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ..groups import Group
from ..work import Work
from .base import STREAM, Backend

# torch 2.13 renamed the tensor forms (the old names warn); the GPU image's 2.11 has only those.
_all_gather_tensor = getattr(tdist, "all_gather_single", None) or tdist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(tdist, "reduce_scatter_single", None) or \
    tdist.reduce_scatter_tensor


def _blocks(flat: torch.Tensor, n: int) -> list[torch.Tensor]:
    return list(flat.view(n, -1).unbind(0))


class TorchPGBackend(Backend):
    """A backend whose library is reached through a torch.distributed ProcessGroup."""

    def _work(self, op: str, t: torch.Tensor, g: Group, w: Any) -> Work:
        return Work(op, self.name, t.numel() * t.element_size(), g.size, torch_work=w,
                    stream_ordered=self.domain == STREAM)

    def _call(self, what: str, t: torch.Tensor, g: Group, sync: bool, fn: Any, /, *args: Any,
              **kw: Any) -> Work:
        """Op `what` as fn(*args, **kw) through torch. A synchronous call on a stream library
        is made as torch's own synchronous call, which skips the work object, its event and the
        stashed tensors (NOTES.md v9); either way the caller's stream is ordered after it on
        return.
        Host libraries keep async + Work.wait, whose host wait progresses MPI and has mcr's
        deadline."""
        if sync and self.domain == STREAM:
            fn(*args, async_op=False, **kw)
            return Work(what, self.name, t.numel() * t.element_size(), g.size,
                        stream_ordered=True)
        return self._work(what, t, g, fn(*args, async_op=True, **kw))

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """In-place all-reduce through torch."""
        return self._call("all_reduce", t, g, sync, tdist.all_reduce, t, op=redop,
                          group=g.handles[self.name])

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """all_gather_into_tensor through torch."""
        return self._call("all_gather", out, g, sync, _all_gather_tensor, out, inp,
                          group=g.handles[self.name])

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work:
        """reduce_scatter_tensor through torch."""
        return self._call("reduce_scatter", inp, g, sync, _reduce_scatter_tensor, out, inp,
                          op=redop, group=g.handles[self.name])

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False) -> Work:
        """all_to_all_single with element splits through torch."""
        return self._call("all_to_all", inp, g, sync, tdist.all_to_all_single, out, inp,
                          out_counts, in_counts, group=g.handles[self.name])

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work:
        """broadcast through torch."""
        return self._call("broadcast", t, g, sync, tdist.broadcast, t,
                          group=g.handles[self.name], group_src=root)

    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """reduce through torch."""
        return self._call("reduce", t, g, sync, tdist.reduce, t, op=redop,
                          group=g.handles[self.name], group_dst=root)

    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """gather into views of one flat buffer through torch."""
        lst = _blocks(out, g.size) if out is not None else None
        return self._call("gather", inp, g, sync, tdist.gather, inp, lst,
                          group=g.handles[self.name], group_dst=root)

    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group, *,
                sync: bool = False) -> Work:
        """scatter from views of one flat buffer through torch."""
        lst = _blocks(inp, g.size) if inp is not None else None
        return self._call("scatter", out, g, sync, tdist.scatter, out, lst,
                          group=g.handles[self.name], group_src=root)

    def send(self, t: torch.Tensor, peer: int, tag: int, g: Group) -> Work:
        """isend through torch."""
        w = tdist.isend(t, group=g.handles[self.name], tag=tag, group_dst=peer)
        return self._work("send", t, g, w)

    def recv(self, t: torch.Tensor, peer: int | None, tag: int, g: Group) -> Work:
        """irecv through torch (peer None: any source)."""
        w = tdist.irecv(t, group=g.handles[self.name], tag=tag, group_src=peer)
        return self._work("recv", t, g, w)

    def barrier(self, g: Group, *, sync: bool = False) -> Work:
        """barrier through torch."""
        pg = g.handles[self.name]
        if self.domain == STREAM:
            # NCCL's barrier is an all-reduce of one element on the current device.
            t = torch.zeros(1, device=torch.cuda.current_device())
            return self._call("barrier", t, g, sync, tdist.all_reduce, t, group=pg)
        return Work("barrier", self.name, 0, g.size, torch_work=tdist.barrier(pg, async_op=True))

    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """torch's pickling broadcast on this backend's group."""
        tdist.broadcast_object_list(objs, group=g.handles[self.name], group_src=root)

    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """torch's pickling all-gather on this backend's group."""
        tdist.all_gather_object(out, obj, group=g.handles[self.name])
