"""mcr.comm's all-to-alls (all_to_all_single, even or with split sizes, and the list form):
argument checks, the split sizes compared across ranks, then the backend the dispatch path
picks."""

from __future__ import annotations

from typing import Any

import torch

from . import checks, guard, runtime
from . import ops as O
from .errors import CallError
from .groups import Group
from .route import buffer_of, finish, may_sync, nbytes_of, pick, writable
from .runtime import _RT
from .session import group_of
from .work import ON_COMPLETE, Work


def _splits(what: str, g: Group, in_counts: list[int], out_counts: list[int], row: int,
            dtype: torch.dtype) -> tuple[int, bool]:
    """checks.uneven_splits through the group's board (opened here if no call opened it)."""
    rt = runtime.get()
    # Named for the stall watch: this wait comes before the call is counted.
    rt.latest = ((f"{what}: the exchange of split sizes",), g, g.calls + 1)
    guard.board_of(g, rt.cfg.guard)
    return checks.uneven_splits(what, g, in_counts, out_counts, row, dtype)


def all_to_all_single(output: torch.Tensor, tensor: torch.Tensor,
                      output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None, group: Any = None,
                      async_op: bool = False, prof: bool = False,
                      log_name: str = "all_to_all_single", debug: Any = None, *,
                      backend: str | None = None) -> Work | None:
    """Split tensor along dim 0, send block i to rank i, concatenate what arrives into output."""
    what = "all_to_all_single"
    out, inp = checks.tensor(output, what, "output"), checks.tensor(tensor, what, "tensor")
    g = _RT[0].world if group is None and _RT else group_of(group, what)
    if output_split_sizes is None and input_split_sizes is None:
        w = _even_all_to_all(out, inp, g, async_op, backend)
        if w is not _SLOW:
            return w
    checks.same(what, out, inp, "output", "tensor")
    in_counts = checks.counts(what, "input", inp, input_split_sizes, g.size)
    out_counts = checks.counts(what, "output", out, output_split_sizes, g.size)
    even = input_split_sizes is None and output_split_sizes is None
    if even and inp.numel() != out.numel():
        raise CallError(f"{what}: output has {out.numel()} elements, tensor {inp.numel()}")
    o, after = writable(out)
    kind, off = buffer_of(o)
    nb = nbytes_of(inp)
    key_nb = nb
    if not even and g.size > 1:
        row = inp.numel() // inp.shape[0] if inp.dim() and inp.shape[0] else 1
        key_nb, even = _splits(what, g, in_counts, out_counts, row, inp.dtype)
    b = pick(O.ALL_TO_ALL, g, inp, key_nb, None, backend, kind, offset=off, moved=nb,
             even=even)
    # Backends move flat element counts; views keep the caller's memory.
    w = b.all_to_all(o.view(-1), inp.contiguous().view(-1), out_counts, in_counts, g,
                     sync=may_sync(async_op), even=even)
    return finish(w, after, async_op, b)


_SLOW = object()   # _even_all_to_all: not the common case, take the checked path


def _even_all_to_all(out: torch.Tensor, inp: torch.Tensor, g: Group, async_op: bool,
                     backend: str | None) -> Any:
    """all_to_all_single with equal splits of contiguous tensors alike in dtype, device and
    size (MoE's dispatch and combine): all_to_all_single's checks and views, fewer of them
    (each torch view or list costs a slow host ~1 us, and these calls repeat every layer).
    _SLOW where the call is anything else: the full path checks and names it."""
    n, numel = g.size, inp.numel()
    if out.dtype != inp.dtype or out.device != inp.device or out.numel() != numel or \
            not (out.is_contiguous() and inp.is_contiguous()) or \
            (inp.shape[0] if inp.dim() else 1) % n or (out.shape[0] if out.dim() else 1) % n:
        return _SLOW
    counts = [numel // n] * n
    kind, off = buffer_of(out)
    b = pick(O.ALL_TO_ALL, g, inp, inp.nbytes, None, backend, kind, offset=off)
    # Backends move flat element counts; views keep the caller's memory.
    w = b.all_to_all(out if out.dim() == 1 else out.view(-1),
                     inp if inp.dim() == 1 else inp.view(-1), counts, counts, g,
                     sync=not async_op and not ON_COMPLETE)
    if async_op or w is None:
        return w        # finish() would hand back the Work or have nothing to do
    return finish(w, None, async_op, b)


def all_to_all(output_tensor_list: list[torch.Tensor], input_tensor_list: list[torch.Tensor],
               group: Any = None, async_op: bool = False, prof: bool = False,
               log_name: str = "all_to_all", debug: Any = None, *,
               backend: str | None = None) -> Work | None:
    """input_tensor_list[i] goes to rank i; output_tensor_list[i] comes from rank i."""
    what = "all_to_all"
    g = group_of(group, what)
    if len(output_tensor_list) != g.size or len(input_tensor_list) != g.size:
        raise CallError(f"{what}: both lists must hold {g.size} tensors (group size)")
    ins = [checks.tensor(t, what, f"input_tensor_list[{i}]")
           for i, t in enumerate(input_tensor_list)]
    outs = [checks.tensor(t, what, f"output_tensor_list[{i}]")
            for i, t in enumerate(output_tensor_list)]
    for i, t in enumerate(ins + outs):
        checks.same(what, t, ins[0], f"tensor {i}", "input_tensor_list[0]")
    flat_in = torch.cat([t.reshape(-1) for t in ins])
    out_counts, in_counts = [t.numel() for t in outs], [t.numel() for t in ins]
    flat_out = torch.empty(sum(out_counts), dtype=flat_in.dtype, device=flat_in.device)
    # Tensors of one size here need not be of that size on the peers: ranks compare them.
    nb, even = nbytes_of(flat_in), True
    key_nb = nb
    if g.size > 1:
        key_nb, even = _splits(what, g, in_counts, out_counts, 1, flat_in.dtype)
    b = pick(O.ALL_TO_ALL, g, flat_in, key_nb, None, backend, moved=nb, even=even)

    def split() -> None:
        for t, v in zip(outs, flat_out.split(out_counts)):
            t.copy_(v.view(t.shape))
    w = b.all_to_all(flat_out, flat_in, out_counts, in_counts, g, sync=may_sync(async_op),
                     even=even)
    return finish(w, [split], async_op, b)
