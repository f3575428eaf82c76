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
# Ops keyed by where their output lies (buffer="symmetric" in memory from symmetric_empty).
BUFFER_KEYED = frozenset({ALL_GATHER, ALL_TO_ALL, BROADCAST})


def make_key(op: str, group_size: int, nbytes: int, dtype: torch.dtype | None, device: str,
             redop: object = None, profile: str = "standalone", buffer: str = "plain",
             graph: bool = False, nodes: int = 1, even: bool = True) -> CallKey:
    """The key of a call: what its decision depends on (the one place that builds keys; a
    reduction without a reduce op is a sum)."""
    if redop is None and op in REDUCTIONS:
        redop = tdist.ReduceOp.SUM
    if op not in BUFFER_KEYED:
        buffer = "plain"
    return CallKey(op, group_size, nbytes, dtype, device, redop, profile, buffer, graph, nodes,
                   even)


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
    # Made while the caller's stream is capturing a CUDA graph: only libraries whose work is
    # stream-ordered GPU work can be captured (every rank captures the same calls).
    graph: bool = False
    # Nodes the group spans with the same number of its ranks on each, node-major (0: spread
    # unevenly); tables key on it with the size (`2x2`, see mcr.layout.label).
    nodes: int = 1
    # False for an all-to-all with split sizes: nbytes is then group size x the largest block
    # any rank sends (rounded up to a power of two), the same on every rank, which the tables
    # key on; copy-engine backends serve equal splits only.
    even: bool = True


REDOP_NAMES = {
    tdist.ReduceOp.SUM: "sum", tdist.ReduceOp.PRODUCT: "product", tdist.ReduceOp.MIN: "min",
    tdist.ReduceOp.MAX: "max", tdist.ReduceOp.BAND: "band", tdist.ReduceOp.BOR: "bor",
    tdist.ReduceOp.BXOR: "bxor", tdist.ReduceOp.AVG: "avg",
    tdist.ReduceOp.PREMUL_SUM: "premul_sum",
}
_BY_NAME = {name.upper(): op for op, name in REDOP_NAMES.items()}
_BY_NAME["PROD"] = tdist.ReduceOp.PRODUCT
# torch's enum values themselves: an equal value made anew (ReduceOp(AVG).op) maps to the one
# object callers compare by identity (mcr's per-call cache keys on it).
_CANON = {op: op for op in REDOP_NAMES}
# The same by the enum's integer: a ReduceOp object's type made anew hashes slower than an int.
_BY_INT = {int(op): op for op in REDOP_NAMES}
_PREMUL_INT = int(tdist.ReduceOp.PREMUL_SUM)


def as_redop(op: object, what: str = "reduction") -> object:
    """torch's reduce op for op, as torch's own enum value: op itself (a `ReduceOp.PREMUL_SUM(f)`
    keeps its factor), a ReduceOp object's type, or the value of another library's enum of the
    same names (DeepSpeed's `deepspeed.comm.ReduceOp`). ValueError naming the call otherwise."""
    if type(op) is tdist.ReduceOp:
        # A ReduceOp object (PREMUL_SUM(factor) is one): keep premul's factor, else its type.
        # Tested first, by the enum's integer: ~0.8 us, against ~1.7 through == and _CANON.
        k = int(op.op)
        return op if k == _PREMUL_INT else _BY_INT[k]
    canon = _CANON.get(op)  # type: ignore[call-overload]
    if canon is not None:
        return canon
    name = getattr(op, "name", None)
    if isinstance(name, str) and name.upper() in _BY_NAME and name.upper() != "PREMUL_SUM":
        return _BY_NAME[name.upper()]
    raise ValueError(f"{what}: unsupported reduce op {op!r}; use one of "
                     f"{sorted(REDOP_NAMES.values())} (torch.distributed.ReduceOp or "
                     "deepspeed.comm.ReduceOp)")


def is_premul(op: object) -> bool:
    """True for ReduceOp.PREMUL_SUM(factor)."""
    if type(op) is tdist.ReduceOp:
        return op == tdist.ReduceOp.PREMUL_SUM
    # torch's enum values are singletons (REDOP_NAMES): identity first, ~0.2 us less than ==.
    return op is tdist.ReduceOp.PREMUL_SUM or (op not in _CANON and
                                               op == tdist.ReduceOp.PREMUL_SUM)


def premul_factor(op: object) -> object:
    """The factor of a ReduceOp.PREMUL_SUM(factor) (a number or a one-element tensor)."""
    factor = getattr(op, "factor", None)
    if factor is None and hasattr(op, "__getstate__"):
        # torch < 2.13 has no `factor` attribute; its pickled state is (PREMUL_SUM, factor).
        state = op.__getstate__()
        factor = state[1] if isinstance(state, tuple) and len(state) == 2 else None
    if factor is None:
        raise ValueError("ReduceOp.PREMUL_SUM needs a factor: use ReduceOp.PREMUL_SUM(factor)")
    return factor


def redop_name(op: object) -> str:
    """Short lower-case name of a torch ReduceOp (`sum`, `avg`, ...)."""
    if type(op) is tdist.ReduceOp:
        op = op.op
    name = REDOP_NAMES.get(op)  # type: ignore[call-overload]
    if name is None:
        raise ValueError(f"unsupported reduce op {op!r}; use one of "
                         f"{sorted(REDOP_NAMES.values())}")
    return name


def dtype_name(dtype: torch.dtype | None) -> str:
    """`torch.bfloat16` -> `bfloat16`; None -> `any`."""
    return "any" if dtype is None else str(dtype).removeprefix("torch.")
