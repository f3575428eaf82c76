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

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group) -> Work:
        """In-place all-reduce through torch."""
        w = tdist.all_reduce(t, op=redop, group=g.handles[self.name], async_op=True)
        return self._work("all_reduce", t, g, w)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group) -> Work:
        """all_gather_into_tensor through torch."""
        w = _all_gather_tensor(out, inp, group=g.handles[self.name], async_op=True)
        return self._work("all_gather", out, g, w)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group) -> Work:
        """reduce_scatter_tensor through torch."""
        w = _reduce_scatter_tensor(out, inp, op=redop, group=g.handles[self.name], async_op=True)
        return self._work("reduce_scatter", inp, g, w)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group) -> Work:
        """all_to_all_single with element splits through torch."""
        w = tdist.all_to_all_single(out, inp, out_counts, in_counts, group=g.handles[self.name],
                                    async_op=True)
        return self._work("all_to_all", inp, g, w)

    def broadcast(self, t: torch.Tensor, root: int, g: Group) -> Work:
        """broadcast through torch."""
        w = tdist.broadcast(t, group=g.handles[self.name], async_op=True, group_src=root)
        return self._work("broadcast", t, g, w)

    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group) -> Work:
        """reduce through torch."""
        w = tdist.reduce(t, op=redop, group=g.handles[self.name], async_op=True, group_dst=root)
        return self._work("reduce", t, g, w)

    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group) -> Work:
        """gather into views of one flat buffer through torch."""
        lst = _blocks(out, g.size) if out is not None else None
        w = tdist.gather(inp, lst, group=g.handles[self.name], async_op=True, group_dst=root)
        return self._work("gather", inp, g, w)

    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group) -> Work:
        """scatter from views of one flat buffer through torch."""
        lst = _blocks(inp, g.size) if inp is not None else None
        w = tdist.scatter(out, lst, group=g.handles[self.name], async_op=True, group_src=root)
        return self._work("scatter", out, g, w)

    def send(self, t: torch.Tensor, peer: int, tag: int, g: Group) -> Work:
        """isend through torch."""
        w = tdist.isend(t, group=g.handles[self.name], tag=tag, group_dst=peer)
        return self._work("send", t, g, w)

    def recv(self, t: torch.Tensor, peer: int | None, tag: int, g: Group) -> Work:
        """irecv through torch (peer None: any source)."""
        w = tdist.irecv(t, group=g.handles[self.name], tag=tag, group_src=peer)
        return self._work("recv", t, g, w)

    def barrier(self, g: Group) -> Work:
        """barrier through torch."""
        pg = g.handles[self.name]
        if self.domain == STREAM:
            # NCCL's barrier is an all-reduce of one element on the current device.
            t = torch.zeros(1, device=torch.cuda.current_device())
            return self._work("barrier", t, g, tdist.all_reduce(t, group=pg, async_op=True))
        return Work("barrier", self.name, 0, g.size, torch_work=tdist.barrier(pg, async_op=True))

    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """torch's pickling broadcast on this backend's group."""
        tdist.broadcast_object_list(objs, group=g.handles[self.name], group_src=root)

    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """torch's pickling all-gather on this backend's group."""
        tdist.all_gather_object(out, obj, group=g.handles[self.name])
