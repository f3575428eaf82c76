"""Names of the primitive operations mcr dispatches, and their nccl-tests bandwidth factors."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as tdist

# Table and dispatch op names. Every public call maps onto one of these; the message size of a
# call is the full buffer (all-gather output, reduce-scatter input), as nccl-tests counts it.
ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"
BROADCAST = "broadcast"
REDUCE = "reduce"
GATHER = "gather"
SCATTER = "scatter"
P2P = "p2p"
BARRIER = "barrier"
OBJECT = "object"

OPS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST, REDUCE, GATHER, SCATTER,
       P2P, BARRIER, OBJECT)
REDUCTIONS = frozenset({ALL_REDUCE, REDUCE_SCATTER, REDUCE})
# Calls with no tensor: any library can serve them whatever the device of the data.
DEVICELESS = frozenset({BARRIER, OBJECT})


def bus_factor(op: str, n: int) -> float:
    """busbw = algbw * factor, as nccl-tests defines it for a group of n ranks."""
    if n <= 1:
        return 1.0
    if op == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if op in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


class CallKey(NamedTuple):
    """What a decision depends on; every field is identical on every rank of the group."""

    op: str
    group_size: int
    nbytes: int
    dtype: torch.dtype | None
    device: str
    redop: object | None
    profile: str
    # "symmetric" when the output lies in memory from mcr.comm.symmetric_empty (on every rank,
    # as zero-copy requires), which copy-engine backends write without staging.
    buffer: str = "plain"


REDOP_NAMES = {
    tdist.ReduceOp.SUM: "sum", tdist.ReduceOp.PRODUCT: "product", tdist.ReduceOp.MIN: "min",
    tdist.ReduceOp.MAX: "max", tdist.ReduceOp.BAND: "band", tdist.ReduceOp.BOR: "bor",
    tdist.ReduceOp.BXOR: "bxor", tdist.ReduceOp.AVG: "avg",
}


def redop_name(op: object) -> str:
    """Short lower-case name of a torch ReduceOp (`sum`, `avg`, ...)."""
    name = REDOP_NAMES.get(op)  # type: ignore[call-overload]
    if name is None:
        raise ValueError(f"unsupported reduce op {op!r}; use one of "
                         f"{sorted(REDOP_NAMES.values())}")
    return name


def dtype_name(dtype: torch.dtype | None) -> str:
    """`torch.bfloat16` -> `bfloat16`; None -> `any`."""
    return "any" if dtype is None else str(dtype).removeprefix("torch.")
