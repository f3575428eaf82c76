"""Shared body of the backends that are torch ProcessGroups (gloo, nccl): one call each."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ..groups import Group
from ..work import Work
from .base import STREAM, Backend


def _raw(*names: str) -> Any:
    """torch.distributed's own function (the first of names it has): mcr's counter of calls
    that bypass mcr (mcr.bypass) wraps some of them, and mcr's own calls must not count."""
    for name in names:
        f = getattr(tdist, name, None)
        if f is not None:
            return getattr(f, "__mcr_wrapped__", f)
    raise AttributeError(f"torch.distributed has none of {names}")


# torch 2.13 renamed the tensor forms (the old names warn); the GPU image's 2.11 has only those.
_all_gather_tensor = _raw("all_gather_single", "all_gather_into_tensor")
_reduce_scatter_tensor = _raw("reduce_scatter_single", "reduce_scatter_tensor")
_all_reduce, _all_to_all_single, _broadcast = _raw("all_reduce"), _raw("all_to_all_single"), \
    _raw("broadcast")
_reduce, _gather, _scatter = _raw("reduce"), _raw("gather"), _raw("scatter")
_isend, _irecv, _barrier = _raw("isend"), _raw("irecv"), _raw("barrier")
_batch_isend_irecv = _raw("batch_isend_irecv")
_broadcast_object_list, _all_gather_object = _raw("broadcast_object_list"), \
    _raw("all_gather_object")


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
        return self._call("all_reduce", t, g, sync, _all_reduce, t, op=redop,
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
        return self._call("all_to_all", inp, g, sync, _all_to_all_single, out, inp,
                          out_counts, in_counts, group=g.handles[self.name])

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work:
        """broadcast through torch."""
        return self._call("broadcast", t, g, sync, _broadcast, t,
                          group=g.handles[self.name], group_src=root)

    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """reduce through torch."""
        return self._call("reduce", t, g, sync, _reduce, t, op=redop,
                          group=g.handles[self.name], group_dst=root)

    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """gather into views of one flat buffer through torch."""
        lst = _blocks(out, g.size) if out is not None else None
        return self._call("gather", inp, g, sync, _gather, inp, lst,
                          group=g.handles[self.name], group_dst=root)

    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group, *,
                sync: bool = False) -> Work:
        """scatter from views of one flat buffer through torch."""
        lst = _blocks(inp, g.size) if inp is not None else None
        return self._call("scatter", out, g, sync, _scatter, out, lst,
                          group=g.handles[self.name], group_src=root)

    def send(self, t: torch.Tensor, peer: int, tag: int, g: Group) -> Work:
        """isend through torch."""
        w = _isend(t, group=g.handles[self.name], tag=tag, group_dst=peer)
        return self._work("send", t, g, w)

    def recv(self, t: torch.Tensor, peer: int | None, tag: int, g: Group) -> Work:
        """irecv through torch (peer None: any source)."""
        w = _irecv(t, group=g.handles[self.name], tag=tag, group_src=peer)
        return self._work("recv", t, g, w)

    def batch_p2p(self, items: list[tuple[str, torch.Tensor, int, int, Group]]) -> list[Work]:
        """torch's batch_isend_irecv where the library blocks a stream per operation (NCCL:
        one group call, so a receive posted before a send cannot stall its peer)."""
        if self.domain != STREAM:
            return super().batch_p2p(items)
        fns = {"isend": _isend, "irecv": _irecv}
        ops = [tdist.P2POp(fns[kind], t, group=g.handles[self.name], tag=tag,
                           group_peer=peer) for kind, t, peer, tag, g in items]
        return [self._work("send" if kind == "isend" else "recv", t, g, w)
                for (kind, t, _, _, g), w in zip(items, _batch_isend_irecv(ops))]

    def barrier(self, g: Group, *, sync: bool = False) -> Work:
        """barrier through torch."""
        pg = g.handles[self.name]
        if self.domain == STREAM:
            # NCCL's barrier is an all-reduce of one element on the current device.
            t = torch.zeros(1, device=torch.cuda.current_device())
            return self._call("barrier", t, g, sync, _all_reduce, t, group=pg)
        return Work("barrier", self.name, 0, g.size, torch_work=_barrier(pg, async_op=True))

    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """torch's pickling broadcast on this backend's group."""
        _broadcast_object_list(objs, group=g.handles[self.name], group_src=root)

    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """torch's pickling all-gather on this backend's group."""
        _all_gather_object(out, obj, group=g.handles[self.name])
