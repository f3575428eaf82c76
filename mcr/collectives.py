"""The collectives of mcr.comm (deepspeed.comm's names and arguments, plus keyword-only
backend=): argument checks, then the backend the dispatch path picks. The all-to-alls are in
mcr.alltoall."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed import ReduceOp

from . import checks, guard, nans, runtime
from . import ops as O
from .errors import CallError
from .route import (
    SUM,
    TORCH_REDOP_IDS,
    buffer_of,
    finish,
    may_sync,
    nbytes_of,
    pick,
    readwrite,
    redop_of,
    reduction,
    rooted,
    writable,
)
from .runtime import _RT
from .session import group_of
from .work import ON_COMPLETE, Work

# -- collectives ------------------------------------------------------------------------------

def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
               async_op: bool = False, prof: bool = False, log_name: str = "all_reduce",
               debug: Any = None, *, backend: str | None = None) -> Work | None:
    """In-place all-reduce of tensor across group."""
    t = tensor if isinstance(tensor, torch.Tensor) else checks.tensor(tensor, "all_reduce")
    if t.requires_grad:      # checks.plain, inline on the hot path
        t = t.detach()
    g = _RT[0].world if group is None and _RT else group_of(group, "all_reduce")
    if id(op) not in TORCH_REDOP_IDS:       # redop_of, inline on the hot path
        op = redop_of(op, "all_reduce")
    b = pick(O.ALL_REDUCE, g, t, t.nbytes, op, backend)
    c, after = (t, None) if t.is_contiguous() else readwrite(t)
    if op is not SUM:
        if nans.applies(c, op):
            buf = nans.flagged(c, op)
            after = [nans.unflag(buf, c), *(after or [])]
            c = buf
        c, op = reduction(b, c, op, inplace=True)
    if guard.CURRENT[0] is not None:
        inline = guard.take_inline()
        w, check = guard.all_reduce(*inline, b, c, op, g, not async_op and not ON_COMPLETE)
        return finish(w, [check, *(after or [])], async_op, b)
    w = b.all_reduce(c, op, g, sync=not async_op and not ON_COMPLETE)
    if after is None and (async_op or w is None):
        return w        # finish() would hand back the Work or have nothing to do
    return finish(w, after, async_op, b)


def inference_all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, prof: bool = False,
                         log_name: str = "all_reduce", debug: Any = None, *,
                         backend: str | None = None) -> Work | None:
    """all_reduce under DeepSpeed's inference name."""
    return all_reduce(tensor, op, group, async_op, backend=backend)


def all_reduce_coalesced(tensors: list[torch.Tensor], op: Any = ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, prof: bool = False,
                         log_name: str = "all_reduce", debug: Any = None, *,
                         backend: str | None = None) -> Work | None:
    """All-reduce several tensors of one dtype as one flat message."""
    what = "all_reduce_coalesced"
    if not tensors:
        raise CallError(f"{what}: empty tensor list")
    ts = [checks.tensor(t, what, f"tensors[{i}]") for i, t in enumerate(tensors)]
    for i, t in enumerate(ts[1:], 1):
        checks.same(what, t, ts[0], f"tensors[{i}]", "tensors[0]")
    g = group_of(group, what)
    op = redop_of(op, what)
    flat = _flatten_dense_tensors(ts)
    b = pick(O.ALL_REDUCE, g, flat, nbytes_of(flat), op, backend)
    after = []
    if nans.applies(flat, op):
        buf = nans.flagged(flat, op)
        after, flat_out, flat = [nans.unflag(buf, flat)], flat, buf
    else:
        flat_out = flat
    flat, op = reduction(b, flat, op, inplace=True)

    def unflatten() -> None:
        for t, v in zip(ts, _unflatten_dense_tensors(flat_out, ts)):
            t.copy_(v)   # ts: checks.tensor's, without autograd
    inline = guard.take_inline()
    if inline is not None:
        w, check = guard.all_reduce(*inline, b, flat, op, g, may_sync(async_op))
        return finish(w, [check, *after, unflatten], async_op, b)
    w = b.all_reduce(flat, op, g, sync=may_sync(async_op))
    return finish(w, [*after, unflatten], async_op, b)


def all_gather_into_tensor(output_tensor: torch.Tensor, tensor: torch.Tensor,
                           group: Any = None, async_op: bool = False, prof: bool = False,
                           log_name: str = "all_gather_into_tensor", debug: Any = None, *,
                           backend: str | None = None) -> Work | None:
    """output_tensor (group size x tensor, rank order) <- every rank's tensor."""
    what = "all_gather_into_tensor"
    g = group_of(group, what)
    out, inp = checks.tensor_pair(what, output_tensor, tensor, g, output_is_larger=True)
    o, after = writable(out)
    kind, off = buffer_of(o)
    b = pick(O.ALL_GATHER, g, out, nbytes_of(out), None, backend, kind, offset=off)
    w = b.all_gather(o, inp.contiguous(), g, sync=may_sync(async_op))
    return finish(w, after, async_op, b)


def allgather_fn(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None,
                 async_op: bool = False, debug: Any = None, *, backend: str | None = None
                 ) -> Work | None:
    """DeepSpeed's name for all_gather_into_tensor."""
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op, backend=backend)


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None,
               async_op: bool = False, prof: bool = False, log_name: str = "all_gather",
               debug: Any = None, *, backend: str | None = None) -> Work | None:
    """tensor_list[i] <- tensor of rank i."""
    inp = checks.tensor(tensor, "all_gather")
    g = group_of(group, "all_gather")
    checks.check_list("all_gather", "tensor_list", tensor_list, inp, g.size)
    flat = torch.empty(g.size * inp.numel(), dtype=inp.dtype, device=inp.device)
    b = pick(O.ALL_GATHER, g, flat, nbytes_of(flat), None, backend)

    def split() -> None:
        for t, v in zip(tensor_list, flat.view(g.size, -1).unbind(0)):
            checks.plain(t).copy_(v.view(t.shape))
    return finish(b.all_gather(flat, inp.contiguous(), g, sync=may_sync(async_op)), [split],
                async_op, b)


def all_gather_coalesced(output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                         group: Any = None, async_op: bool = False, *,
                         backend: str | None = None) -> Work | None:
    """output_tensors[i] (group size x input_tensors[i]) <- all-gather, as one message."""
    what = "all_gather_coalesced"
    if len(output_tensors) != len(input_tensors) or not input_tensors:
        raise CallError(f"{what}: {len(output_tensors)} outputs for {len(input_tensors)} inputs")
    g = group_of(group, what)
    for i, (o, t) in enumerate(zip(output_tensors, input_tensors)):
        checks.same(what, checks.tensor(o, what, f"output_tensors[{i}]"),
                    checks.tensor(t, what, f"input_tensors[{i}]"), f"output_tensors[{i}]",
                    f"input_tensors[{i}]")
        checks.same(what, t, input_tensors[0], f"input_tensors[{i}]", "input_tensors[0]")
        if o.numel() != t.numel() * g.size:
            raise CallError(f"{what}: output_tensors[{i}] has {o.numel()} elements, expected "
                            f"{g.size} x {t.numel()}")
    flat_in = _flatten_dense_tensors(list(input_tensors))
    flat_out = torch.empty(flat_in.numel() * g.size, dtype=flat_in.dtype, device=flat_in.device)
    b = pick(O.ALL_GATHER, g, flat_out, nbytes_of(flat_out), None, backend)
    sizes = [t.numel() for t in input_tensors]

    def split() -> None:
        per_rank = flat_out.view(g.size, -1)
        for i, part in enumerate(per_rank.split(sizes, dim=1)):
            checks.plain(output_tensors[i]).view(g.size, -1).copy_(part)
    w = b.all_gather(flat_out, flat_in, g, sync=may_sync(async_op))
    return finish(w, [split], async_op, b)


def reduce_scatter_tensor(output_tensor: torch.Tensor, tensor: torch.Tensor,
                          op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False,
                          prof: bool = False, log_name: str = "reduce_scatter_tensor",
                          debug: Any = None, *, backend: str | None = None) -> Work | None:
    """output_tensor <- this rank's block of the reduction of every rank's tensor."""
    what = "reduce_scatter_tensor"
    g = group_of(group, what)
    out, inp = checks.tensor_pair(what, output_tensor, tensor, g, output_is_larger=False)
    op = redop_of(op, what)
    b = pick(O.REDUCE_SCATTER, g, inp, nbytes_of(inp), op, backend)
    o, after = writable(out)
    inp = inp.contiguous()
    if nans.applies(inp, op):
        inp, res = nans.flagged(inp, op, blocks=g.size), torch.empty(2 * o.numel(), dtype=o.dtype,
                                                                      device=o.device)
        after, o = [nans.unflag(res, o), *(after or [])], res
    inp, op = reduction(b, inp, op, inplace=False)
    return finish(b.reduce_scatter(o, inp, op, g, sync=may_sync(async_op)), after, async_op, b)


def reduce_scatter_fn(output_tensor: torch.Tensor, tensor: torch.Tensor, op: Any = ReduceOp.SUM,
                      group: Any = None, async_op: bool = False, prof: bool = False,
                      debug: Any = None, *, backend: str | None = None) -> Work | None:
    """DeepSpeed's name for reduce_scatter_tensor."""
    return reduce_scatter_tensor(output_tensor, tensor, op, group, async_op, backend=backend)


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], op: Any = ReduceOp.SUM,
                   group: Any = None, async_op: bool = False, prof: bool = False,
                   log_name: str = "reduce_scatter", debug: Any = None, *,
                   backend: str | None = None) -> Work | None:
    """output <- reduction over ranks of input_list[this rank]."""
    g = group_of(group, "reduce_scatter")
    out = checks.tensor(output, "reduce_scatter", "output")
    checks.check_list("reduce_scatter", "input_list", input_list, out, g.size, tname="output")
    flat = torch.cat([t.reshape(-1) for t in input_list])
    return reduce_scatter_tensor(out, flat, op, g, async_op, backend=backend)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False,
              prof: bool = False, log_name: str = "broadcast", debug: Any = None, *,
              backend: str | None = None) -> Work | None:
    """tensor on every rank <- tensor on global rank src."""
    t, g, root = rooted("broadcast", tensor, group, src, "src")
    c, after = readwrite(t)
    kind, off = buffer_of(c)
    b = pick(O.BROADCAST, g, t, nbytes_of(t), None, backend, kind, root, off)
    return finish(b.broadcast(c, root, g, sync=may_sync(async_op)), after, async_op, b)


def reduce(tensor: torch.Tensor, dst: int, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False, prof: bool = False, log_name: str = "reduce",
           debug: Any = None, *, backend: str | None = None) -> Work | None:
    """tensor on global rank dst <- reduction of every rank's tensor; on every other rank,
    whatever the library, tensor stays as it was."""
    t, g, root = rooted("reduce", tensor, group, dst, "dst")
    op = redop_of(op, "reduce")
    b = pick(O.REDUCE, g, t, nbytes_of(t), op, backend, root=root)
    c, after = readwrite(t)
    if nans.applies(c, op):
        buf = nans.flagged(c, op)
        after, c = ([nans.unflag(buf, c), *(after or [])] if g.rank == root else after), buf
    c, op = reduction(b, c, op, inplace=g.rank == root)   # other ranks keep their tensor
    return finish(b.reduce(c, op, root, g, sync=may_sync(async_op)), after, async_op, b)


def gather(tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None, dst: int = 0,
           group: Any = None, async_op: bool = False, prof: bool = False,
           log_name: str = "gather", debug: Any = None, *, backend: str | None = None
           ) -> Work | None:
    """gather_list[i] on global rank dst <- tensor of rank i."""
    t, g, root = rooted("gather", tensor, group, dst, "dst")
    flat, after = None, None
    if g.rank == root:
        checks.check_list("gather", "gather_list", gather_list, t, g.size, "on the root, ")
        flat = torch.empty(g.size * t.numel(), dtype=t.dtype, device=t.device)

        def split() -> None:
            for o, v in zip(gather_list, flat.view(g.size, -1).unbind(0)):
                checks.plain(o).copy_(v.view(o.shape))
        after = [split]
    b = pick(O.GATHER, g, t, nbytes_of(t) * g.size, None, backend, root=root)
    w = b.gather(flat, t.contiguous(), root, g, sync=may_sync(async_op))
    return finish(w, after, async_op, b)


def scatter(tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None, src: int = 0,
            group: Any = None, async_op: bool = False, prof: bool = False,
            log_name: str = "scatter", debug: Any = None, *, backend: str | None = None
            ) -> Work | None:
    """tensor on rank i <- scatter_list[i] on global rank src."""
    t, g, root = rooted("scatter", tensor, group, src, "src")
    flat = None
    if g.rank == root:
        checks.check_list("scatter", "scatter_list", scatter_list, t, g.size, "on the root, ")
        flat = torch.cat([s.reshape(-1) for s in scatter_list])
    b = pick(O.SCATTER, g, t, nbytes_of(t) * g.size, None, backend, root=root)
    c, after = writable(t)
    return finish(b.scatter(c, flat, root, g, sync=may_sync(async_op)), after, async_op, b)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None,
            prof: bool = False, log_name: str = "barrier", debug: Any = None, *,
            backend: str | None = None) -> Work | None:
    """Every rank of group has reached this point."""
    g = group_of(group, "barrier")
    b = pick(O.BARRIER, g, None, 0, None, backend)
    return finish(b.barrier(g, sync=may_sync(async_op)), None, async_op, b)


def monitored_barrier(group: Any = None, timeout: Any = None, wait_all_ranks: bool = False,
                      prof: bool = False, log_name: str = "monitored_barrier",
                      debug: Any = None) -> None:
    """torch's monitored_barrier (names the ranks that did not arrive); Gloo is the one
    library that has it, so it runs on the group's Gloo group."""
    g = group_of(group, "monitored_barrier")
    from datetime import timedelta
    tdist.monitored_barrier(group=g.handles["gloo"],
                            timeout=timeout or timedelta(seconds=runtime.get().cfg.timeout_s),
                            wait_all_ranks=wait_all_ranks)
