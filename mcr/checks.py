"""Argument checks of mcr.comm's calls, MCR_CHECK's comparison of a call across ranks, and the
split-size exchange of uneven all-to-alls. The always-on check is mcr.signature."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from . import backends as backends_mod
from . import ops as O
from .errors import CallError, MismatchError
from .groups import Group
from .ops import CallKey


def tensor(t: Any, what: str, name: str = "tensor") -> torch.Tensor:
    """t as mcr writes it (plain()), or CallError naming the call and argument if it is not a
    tensor."""
    if not isinstance(t, torch.Tensor):
        raise CallError(f"{what}: {name} must be a torch.Tensor, got {type(t).__name__}")
    return plain(t)


def plain(t: torch.Tensor) -> torch.Tensor:
    """t without autograd (its storage, its version counter): collectives write parameters and
    their views in place as torch's do, where autograd would refuse an in-place write."""
    return t.detach() if t.requires_grad else t


def same(what: str, a: torch.Tensor, b: torch.Tensor, an: str, bn: str) -> None:
    """a and b must share dtype and device."""
    if a.dtype != b.dtype:
        raise CallError(f"{what}: {an} dtype {a.dtype} differs from {bn} dtype {b.dtype}")
    if a.device != b.device:
        raise CallError(f"{what}: {an} is on {a.device}, {bn} on {b.device}")


def tensor_pair(what: str, output: Any, input_: Any, g: Group, output_is_larger: bool,
                in_name: str = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """Checked (output, input) of a tensor-form all-gather (output = group size x input) or
    reduce-scatter (input = group size x output)."""
    out, inp = tensor(output, what, "output_tensor"), tensor(input_, what, in_name)
    same(what, out, inp, "output_tensor", in_name)
    (big, bn), (small, sn) = ((out, "output_tensor"), (inp, in_name)) if output_is_larger \
        else ((inp, in_name), (out, "output_tensor"))
    if big.numel() != small.numel() * g.size:
        raise CallError(f"{what}: {bn} has {big.numel()} elements, expected "
                        f"{g.size} x {small.numel()} (group size x {sn})")
    return out, inp


def check_list(what: str, name: str, lst: Any, t: torch.Tensor, n: int, where: str = "",
               tname: str = "tensor") -> None:
    """lst must be n tensors of t's dtype, device and element count (`where`: "on the root, ")."""
    if not isinstance(lst, (list, tuple)) or len(lst) != n:
        got = f"{type(lst).__name__} of {len(lst)}" if isinstance(lst, (list, tuple)) else \
            type(lst).__name__
        raise CallError(f"{what}: {where}{name} must be a list of {n} tensors (group size), "
                        f"got {got}")
    for i, x in enumerate(lst):
        same(what, tensor(x, what, f"{name}[{i}]"), t, f"{name}[{i}]", tname)
        if x.numel() != t.numel():
            raise CallError(f"{what}: {name}[{i}] has {x.numel()} elements, {tname} has "
                            f"{t.numel()}")


def counts(what: str, name: str, t: torch.Tensor, splits: list[int] | None, n: int
           ) -> list[int]:
    """Element counts per rank from split sizes along dim 0."""
    rows = t.shape[0] if t.dim() else 1
    row = t.numel() // rows if rows else 0
    if splits is None:
        if rows % n:
            raise CallError(f"{what}: {name} dim 0 ({rows}) is not divisible by group size {n}; "
                            f"pass {name}_split_sizes")
        return [rows // n * row] * n
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != rows:
        raise CallError(f"{what}: {name}_split_sizes {list(splits)} must be {n} non-negative "
                        f"sizes summing to dim 0 of {name} ({rows})")
    return [s * row for s in splits]


def uneven_splits(what: str, g: Group, in_counts: list[int], out_counts: list[int], row: int,
                  dtype: torch.dtype) -> tuple[int, bool]:
    """An all-to-all with split sizes: every rank's splits and dtype exchanged (through the
    group's signature board on one node, else one small all-gather over its Gloo handle), so
    that a rank's sends and its peers' receives that disagree are a MismatchError on every
    rank (naming ranks and splits) instead of stale or mixed output. Returns (the size the
    tables key on, whether every block is the same size), the same on every rank: with equal
    blocks the call's own size, else group size x the largest block any rank sends, in bytes,
    rounded up to a power of two (a few kinds of call, not one per routing)."""
    n = g.size
    mine = [*in_counts, *out_counts, _DTYPE_CODES.get(dtype, -1)]
    bd = g.board
    if bd:
        # One node: through the group's shared memory, microseconds instead of a Gloo call.
        every = bd.exchange(mine, lambda: f"{what}: the exchange of split sizes")
    else:
        rows = torch.empty(n, 2 * n + 1, dtype=torch.int64)
        tdist.all_gather(list(rows.unbind(0)), torch.tensor(mine, dtype=torch.int64),
                         group=g.handles["gloo"])
        every = rows.tolist()
    # Plain lists: a handful of ints a rank, where each torch op on them would cost microseconds.
    sends, recvs = [e[:n] for e in every], [e[n:2 * n] for e in every]
    dts = [e[2 * n] for e in every]
    unit = "rows" if row > 1 else "elements"
    if dts.count(dts[0]) != n:
        which = ", ".join(f"rank {g.ranks[r]} {O.dtype_name(_DTYPE_OF.get(int(d)))}"
                          for r, d in enumerate(dts))
        raise MismatchError(f"{what}: ranks of group {g.ranks} pass different dtypes: {which}")
    if [list(c) for c in zip(*recvs)] != sends:    # what each rank receives, by sender
        bad = [(s, r) for s in range(n) for r in range(n) if sends[s][r] != recvs[r][s]]
        said = [f"rank {g.ranks[s]} sends {sends[s][r] // row} {unit} to rank {g.ranks[r]}, "
                f"which expects {recvs[r][s] // row}" for s, r in bad]
        rows_said = "; ".join(f"rank {g.ranks[r]}: input_split_sizes "
                              f"{[c // row for c in sends[r]]}, output_split_sizes "
                              f"{[c // row for c in recvs[r]]}" for r in range(n))
        raise MismatchError(f"{what}: split sizes disagree across group {g.ranks}: "
                            f"{'; '.join(said[:4])}{' ...' if len(said) > 4 else ''} "
                            f"({rows_said})")
    flat = [c for e in sends for c in e]
    block = max(flat) * dtype.itemsize
    if flat.count(flat[0]) == len(flat):
        return n * block, True
    return n * (1 << (block - 1).bit_length()), False


def tag(what: str, value: Any) -> int:
    """A point-to-point tag: a non-negative int."""
    if not isinstance(value, int) or value < 0:
        raise CallError(f"{what}: tag must be a non-negative int, got {value!r}")
    return value


_DTYPE_CODES = {dt: i for i, dt in enumerate(
    (None, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
     torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128))}
# Stable codes (str hashes differ between processes).
_REDOP_CODES = {name: i for i, name in enumerate(sorted(O.REDOP_NAMES.values()))}


def across_ranks(key: CallKey, g: Group, root: int, backend: str, offset: int) -> None:
    """MCR_CHECK=1: every rank must call the same op, size, dtype, root and library, with its
    output at the same offset of symmetric memory or in plain memory everywhere."""
    redop = O.redop_name(key.redop) if key.redop is not None else ""
    fields = (O.OPS.index(key.op), key.nbytes, _DTYPE_CODES.get(key.dtype, -1),
              _REDOP_CODES.get(redop, -1), root, sorted(backends_mod.NAMES).index(backend),
              offset)
    mine = torch.tensor(fields, dtype=torch.int64)
    every = torch.empty(g.size * len(fields), dtype=torch.int64)
    tdist.all_gather(list(every.view(g.size, -1).unbind(0)), mine, group=g.handles["gloo"])
    every = every.view(g.size, len(fields))
    if not bool((every == mine).all()):
        names = ("op", "bytes", "dtype", "reduce op", "root", "backend",
                 "symmetric output offset")
        diff = [names[i] for i in range(len(fields)) if not bool((every[:, i] == mine[i]).all())]
        rows = "; ".join(f"rank {g.ranks[r]}: {_decode(every[r].tolist())}"
                         for r in range(g.size))
        raise MismatchError(f"MCR_CHECK: ranks of group {g.ranks} disagree on {diff} for "
                            f"{key.op}: {rows}")


_DTYPE_OF = {i: dt for dt, i in _DTYPE_CODES.items()}
_REDOP_OF = {i: name for name, i in _REDOP_CODES.items()}


def _decode(f: list[int]) -> str:
    """A rank's row of MCR_CHECK fields, as a person reads it."""
    op, nbytes, dt, red, root, be, off = f
    return describe(O.OPS[op], _REDOP_OF.get(red, ""), _DTYPE_OF.get(dt), nbytes, root,
                    sorted(backends_mod.NAMES)[be], off)


def describe(op: str, redop: str, dtype: torch.dtype | None, nbytes: int, root: int,
             backend: str, offset: int = -1) -> str:
    """`all_reduce sum of 1000 x float32 (4000 B) -> gloo`: a call as both checks' mismatch
    errors show it (root and symmetric-output offset where there are any)."""
    what = op + (f" {redop}" if redop else "")
    if dtype is not None and nbytes >= 0:
        what += f" of {nbytes // max(1, dtype.itemsize)} x {O.dtype_name(dtype)} ({nbytes} B)"
    elif dtype is not None:
        what += f" of {O.dtype_name(dtype)} (uneven sizes)"
    what += f", root {root}" if root >= 0 else ""
    what += f", symmetric offset {offset}" if offset >= 0 else ""
    return f"{what} -> {backend}"
