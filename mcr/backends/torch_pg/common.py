"""Shared body of the backends that are torch ProcessGroups (gloo, nccl): one call each."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ...errors import CallError
from ...groups import Group
from ...ops import is_premul
from ...waits import PENDING, get_timeout, mcr_error, wait_torch_host
from ...work import ON_COMPLETE, Work
from ..base import STREAM, Backend


def _raw(*names: str) -> Any:
    """torch.distributed's own function (the first of names it has): mcr's counter of calls
    that bypass mcr (mcr.bypass) wraps some of them, and mcr's own calls must not count."""
    for name in names:
        f = getattr(tdist, name, None)
        if f is not None:
            return getattr(f, "__mcr_wrapped__", f)
    raise AttributeError(f"torch.distributed has none of {names}")


# torch 2.13 renamed the tensor forms (the old names warn); the GPU image's 2.11 has only those.
all_gather_tensor = _raw("all_gather_single", "all_gather_into_tensor")
reduce_scatter_tensor = _raw("reduce_scatter_single", "reduce_scatter_tensor")
_reduce, _gather, _scatter = _raw("reduce"), _raw("gather"), _raw("scatter")
_isend, _irecv, _barrier = _raw("isend"), _raw("irecv"), _raw("barrier")
_batch_isend_irecv = _raw("batch_isend_irecv")
_broadcast_object_list, _all_gather_object = _raw("broadcast_object_list"), \
    _raw("all_gather_object")


def _blocks(flat: torch.Tensor, n: int) -> list[torch.Tensor]:
    return list(flat.view(n, -1).unbind(0))


def _real(t: torch.Tensor) -> torch.Tensor:
    """Complex tensors travel as their real view, as torch.distributed sends them."""
    return torch.view_as_real(t) if t.is_complex() else t


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A contiguous t as one dimension: Gloo wants each output block shaped like the input,
    and mcr takes any shapes of the right element counts, as NCCL does."""
    # The hot callers (ZeRO-3, FSDP2) pass flat buffers already: a view costs ~0.7 us.
    return t if t.dim() == 1 and not t.is_complex() else _real(t).view(-1)


# The hot ops call the ProcessGroup itself, as torch.distributed's functions do after their
# argument checks (mcr has made its own): torch 2.13 renamed three of its methods.
_PG = tdist.ProcessGroup
_C10D = torch._C._distributed_c10d   # every op's options (torch.distributed re-exports most)
_PG_ALL_GATHER = "all_gather_single" if hasattr(_PG, "all_gather_single") else "_allgather_base"
_PG_REDUCE_SCATTER = "reduce_scatter_single" if hasattr(_PG, "reduce_scatter_single") \
    else "_reduce_scatter_base"
_PG_ALL_TO_ALL = "all_to_all_single" if hasattr(_PG, "all_to_all_single") else "alltoall_base"
# asyncOp=False lets NCCL run a synchronous call on the caller's stream (torch >= 2.7).
_HAS_ASYNC_OP = hasattr(_C10D.AllreduceOptions(), "asyncOp")


def _options(cls: Any, here: bool, **fields: Any) -> Any:
    opts = cls()
    if _HAS_ASYNC_OP:
        opts.asyncOp = not here
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


class TorchPGBackend(Backend):
    """A backend whose library is reached through a torch.distributed ProcessGroup."""

    def __init__(self) -> None:
        # Options are plain structs that torch copies per call: built once per variant, keyed
        # by identity (torch's reduce ops are singletons; hashing them costs ~0.4 us).
        self._opts: dict[tuple[int, bool, int], Any] = {}
        # all_reduce's, by asyncOp (here) then reduce op: no tuple to build and hash per call.
        self._ar_opts: tuple[dict[int, Any], dict[int, Any]] = ({}, {})

    def _opt(self, cls: Any, here: bool, redop: Any = None) -> Any:
        o = self._opts.get((id(cls), here, id(redop)))
        if o is None:
            if redop is not None and is_premul(redop):   # carries its own factor: not cached
                return _options(cls, here, reduceOp=redop)
            o = self._opts[(id(cls), here, id(redop))] = _options(
                cls, here, **({} if redop is None else {"reduceOp": redop}))
        return o

    def _work(self, op: str, t: torch.Tensor, g: Group, w: Any) -> Work:
        return Work.of_torch(op, self.name, t.nbytes, len(g.ranks), w, self.domain == STREAM)

    def _waits_here(self, sync: bool) -> bool:
        """Whether this call is completed right here, as torch's own synchronous call: a
        synchronous call, unless per-call timing needs a Work, or this host has MPI requests
        in flight that a peer may need it to progress while it waits (then mcr's Work waits,
        polling MPI). Decided before the call: it is the call's asyncOp."""
        return sync and not ON_COMPLETE and (self.domain == STREAM or not PENDING[0])

    def _done(self, what: str, t: torch.Tensor, g: Group, w: Any, here: bool) -> Any:
        """Finish a call made on the ProcessGroup: waited here (None: on a stream library the
        caller's stream now waits; a host library has blocked), or a Work: torch's own for a
        stream library where no timing is on, else mcr's."""
        if here:
            if w is not None:
                try:
                    if self.domain == STREAM:
                        w.wait()
                    else:
                        wait_torch_host(w)
                except Exception as e:  # noqa: BLE001 - a library's, raised as mcr's
                    raise mcr_error(e, f"{what} on backend '{self.name}' ({t.nbytes} bytes), "
                                       f"group {g.ranks}", get_timeout()) from e
            return None
        # A stream library's work waits as torch's own; a host library's as mcr's (in slices
        # the stall watch can end, its errors named; a torch.distributed.Work, which FSDP2
        # checks for before it waits).
        if not ON_COMPLETE and self.domain == STREAM:
            return w
        return self._work(what, t, g, w)

    def _call(self, what: str, t: torch.Tensor, g: Group, sync: bool, fn: Any, /, *args: Any,
              **kw: Any) -> Work | None:
        """Op `what` as fn(*args, **kw) through torch.distributed's function (ops off the hot
        path). A synchronous call on a stream library is made as torch's own synchronous
        call, which skips the work object, its event and the stashed tensors."""
        if sync and self.domain == STREAM:
            fn(*args, async_op=False, **kw)
            return None
        return self._work(what, t, g, fn(*args, async_op=True, **kw))

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *,
                   sync: bool = False) -> Work | None:
        """In-place all-reduce on the ProcessGroup."""
        # _waits_here and _real inline: the hottest call of all.
        here = sync and not ON_COMPLETE and (self.domain == STREAM or not PENDING[0])
        opts = self._ar_opts[here].get(id(redop))
        if opts is None:
            opts = self._opt(_C10D.AllreduceOptions, here, redop)
            if not is_premul(redop):     # a premul's carries its factor: not kept
                self._ar_opts[here][id(redop)] = opts
        w = g.handles[self.name].allreduce(
            [torch.view_as_real(t) if t.is_complex() else t], opts)
        if here or (self.domain == STREAM and not ON_COMPLETE):
            return self._done("all_reduce", t, g, w, here)
        # _done's last case inline: a host library's work under way, as mcr's Work.
        return Work.of_torch("all_reduce", self.name, t.nbytes, g.size, w, False)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work | None:
        """all_gather_into_tensor on the ProcessGroup."""
        here = self._waits_here(sync)
        pg = g.handles[self.name]
        w = getattr(pg, _PG_ALL_GATHER)(_flat(out), _flat(inp),
                                         self._opt(_C10D.AllgatherOptions, here))
        return self._done("all_gather", out, g, w, here)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work | None:
        """reduce_scatter_tensor on the ProcessGroup."""
        here = self._waits_here(sync)
        pg = g.handles[self.name]
        w = getattr(pg, _PG_REDUCE_SCATTER)(_flat(out), _flat(inp),
                                             self._opt(_C10D.ReduceScatterOptions, here, redop))
        return self._done("reduce_scatter", inp, g, w, here)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False,
                   even: bool = True) -> Work | None:
        """all_to_all_single with element splits on the ProcessGroup."""
        if inp.is_complex():   # splits count complex elements; the real view has two each
            out_counts, in_counts = [2 * c for c in out_counts], [2 * c for c in in_counts]
        here = self._waits_here(sync)
        pg = g.handles[self.name]
        w = getattr(pg, _PG_ALL_TO_ALL)(_flat(out), _flat(inp), out_counts, in_counts,
                                         self._opt(_C10D.AllToAllOptions, here))
        return self._done("all_to_all", inp, g, w, here)

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *,
                  sync: bool = False) -> Work | None:
        """broadcast on the ProcessGroup."""
        here = self._waits_here(sync)
        opts = _options(_C10D.BroadcastOptions, here, rootRank=root, rootTensor=0)
        w = g.handles[self.name].broadcast([_real(t)], opts)
        return self._done("broadcast", t, g, w, here)

    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """reduce through torch. Gloo writes partial sums into the other ranks' tensors; mcr
        keeps them as they were, whatever the library (Backend.reduce), so those reduce a
        copy."""
        src = t if g.rank == root else t.clone()
        return self._call("reduce", src, g, sync, _reduce, src, op=redop,
                          group=g.handles[self.name], group_dst=root)

    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """gather into views of one flat buffer through torch."""
        lst = _blocks(out, g.size) if out is not None else None
        return self._call("gather", inp, g, sync, _gather, inp.view(-1), lst,
                          group=g.handles[self.name], group_dst=root)

    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group, *,
                sync: bool = False) -> Work:
        """scatter from views of one flat buffer through torch."""
        lst = _blocks(inp, g.size) if inp is not None else None
        return self._call("scatter", out, g, sync, _scatter, out.view(-1), lst,
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
        ws = list(_batch_isend_irecv(ops))
        if len(ws) == 1:
            ws *= len(items)   # NCCL coalesces the batch into one work: it is every op's
        if len(ws) != len(items):
            raise CallError(f"batch_isend_irecv: torch's {self.name} returned {len(ws)} works "
                            f"for {len(items)} operations")
        return [self._work("send" if kind == "isend" else "recv", t, g, w)
                for (kind, t, _, _, g), w in zip(items, ws)]

    def barrier(self, g: Group, *, sync: bool = False) -> Work | None:
        """barrier through torch."""
        pg = g.handles[self.name]
        if self.domain == STREAM:
            # NCCL's barrier is an all-reduce of one element on the current device.
            t = torch.zeros(1, device=torch.cuda.current_device())
            return self.all_reduce(t, tdist.ReduceOp.SUM, g, sync=sync)
        return Work("barrier", self.name, 0, g.size, torch_work=_barrier(pg, async_op=True))

    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """torch's pickling broadcast on this backend's group."""
        _broadcast_object_list(objs, group=g.handles[self.name], group_src=root)

    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """torch's pickling all-gather on this backend's group."""
        _all_gather_object(out, obj, group=g.handles[self.name])
