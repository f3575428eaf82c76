"""MAX and MIN of floating tensors with torch's answer whatever the library: a NaN on any rank
makes that element NaN. Libraries compare as `a < b ? b : a` (Gloo, MPI) and so keep or drop a
NaN by where it sits in their reduction order (a NaN check built on a MAX all-reduce passed or
failed with the message size, as the table changed library). Each element's NaN travels as a
flag beside the data in the same call, the NaNs themselves replaced by the value that loses."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed import ReduceOp

_FILL = {id(ReduceOp.MAX): float("-inf"), id(ReduceOp.MIN): float("inf")}
# A flag that wins under the op: 1 under MAX, -1 under MIN (0 where there is no NaN).
_FLAG = {id(ReduceOp.MAX): 1.0, id(ReduceOp.MIN): -1.0}


def applies(t: torch.Tensor, op: object) -> bool:
    """Whether a reduction of t by op needs the NaN flags (floating MAX or MIN)."""
    return id(op) in _FILL and t.is_floating_point()


def flagged(x: torch.Tensor, op: object, blocks: int = 1) -> torch.Tensor:
    """A new flat buffer to reduce instead of x: each of `blocks` equal blocks of x (NaNs
    replaced by the value that loses under op), then that block's NaN flags."""
    nan = torch.isnan(x).reshape(blocks, -1)
    data = torch.where(nan, _FILL[id(op)], x.reshape(blocks, -1))
    return torch.cat([data, nan.to(x.dtype) * _FLAG[id(op)]], dim=1).reshape(-1)


def unflag(buf: torch.Tensor, into: torch.Tensor) -> Callable[[], None]:
    """The step that writes a reduced flagged block (buf: data then flags) into `into`, NaN
    where any rank's element was NaN."""
    def write() -> None:
        half = buf.numel() // 2
        into.copy_(torch.where(buf[half:] != 0, float("nan"), buf[:half]).view(into.shape))
    return write
