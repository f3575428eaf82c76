"""Point-to-point and object calls of mcr.comm."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import checks
from . import ops as O
from .backends import Backend
from .errors import CallError
from .groups import Group
from .route import (
    UNKNOWN,
    finish,
    nbytes_of,
    pick,
    writable,
)
from .session import group_of, group_ranks
from .work import Work

# -- point to point ---------------------------------------------------------------------------

def _p2p(what: str, tensor: torch.Tensor, peer: int | None, group: Any, tag: int,
         backend: str | None) -> tuple[Backend, Group, int | None, torch.Tensor]:
    t = checks.tensor(tensor, what)
    g = group_of(group, what)
    gp = None if peer is None else g.group_rank(peer, f"{what} peer")
    if gp == g.rank:
        raise CallError(f"{what}: rank {g.ranks[g.rank]} cannot {what} to itself")
    checks.tag(what, tag)
    return pick(O.P2P, g, t, nbytes_of(t), None, backend), g, gp, t


def isend(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0, prof: bool = False,
          log_name: str = "isend", debug: Any = None, *, backend: str | None = None) -> Work:
    """Non-blocking send of tensor to global rank dst."""
    b, g, gp, t = _p2p("isend", tensor, dst, group, tag, backend)
    return b.send(t.contiguous(), gp, tag, g)


def irecv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0,
          prof: bool = False, log_name: str = "irecv", debug: Any = None, *,
          backend: str | None = None) -> Work:
    """Non-blocking receive into tensor from global rank src (None: any)."""
    b, g, gp, t = _p2p("irecv", tensor, src, group, tag, backend)
    if gp is None and not b.any_source:
        # The sender chose the same library from the same key, so another cannot step in.
        raise CallError(f"irecv: {b.name} cannot receive from any source; pass src, or route "
                        "this size of point-to-point to a library that can (backend=mpi, or "
                        "gloo for CPU tensors, on both sides)")
    c, after = writable(t)
    return finish(b.recv(c, gp, tag, g), after, True, b)


def send(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0, prof: bool = False,
         log_name: str = "send", debug: Any = None, *, backend: str | None = None) -> None:
    """Blocking send of tensor to global rank dst."""
    isend(tensor, dst, group, tag, backend=backend).wait()


def recv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0,
         prof: bool = False, log_name: str = "recv", debug: Any = None, *,
         backend: str | None = None) -> int:
    """Blocking receive into tensor; returns the sender's global rank."""
    w = irecv(tensor, src, group, tag, backend=backend)
    w.wait()
    if src is not None:
        return src
    return group_ranks(group)[w.source_rank()]


class P2POp:
    """One send or receive of a batch_isend_irecv: op is isend or irecv (mcr's, torch's or
    DeepSpeed's), peer a global rank."""

    def __init__(self, op: Any, tensor: torch.Tensor, peer: int, group: Any = None,
                 tag: int = 0) -> None:
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag


def _p2p_kind(op: Any) -> str:
    """'isend' or 'irecv' from the op of any library's P2POp (DeepSpeed stores the name)."""
    name = op if isinstance(op, str) else getattr(op, "__name__", "")
    if name not in ("isend", "irecv"):
        raise CallError(f"batch_isend_irecv: op must be isend or irecv, got {op!r}")
    return name


def batch_isend_irecv(p2p_op_list: list[Any], prof: bool = False,
                      log_name: str = "batch_isend_irecv", debug: Any = None) -> list[Work]:
    """Start every send and receive of the list (P2POp of mcr, torch or DeepSpeed) as one batch,
    in whatever order each library needs to avoid deadlock; return their Works in list order."""
    if not isinstance(p2p_op_list, (list, tuple)) or not p2p_op_list:
        raise CallError("batch_isend_irecv: expects a non-empty list of P2POp")
    by_backend: dict[str, tuple[Backend, list[int], list[tuple]]] = {}
    afters: list[list[Callable[[], None]] | None] = []
    for i, p in enumerate(p2p_op_list):
        kind = _p2p_kind(p.op)
        b, g, gp, t = _p2p(kind, p.tensor, p.peer, p.group, p.tag, None)
        t, after = writable(t) if kind == "irecv" else (t.contiguous(), None)
        afters.append(after)
        entry = by_backend.setdefault(b.name, (b, [], []))
        entry[1].append(i)
        entry[2].append((kind, t, gp, p.tag, g))
    works: list[Any] = [None] * len(p2p_op_list)
    for b, idx, items in by_backend.values():
        for i, w in zip(idx, b.batch_p2p(items)):
            works[i] = finish(w, afters[i], True, b)
    return works


# -- objects ----------------------------------------------------------------------------------

def broadcast_object_list(object_list: list[Any], src: int, group: Any = None,
                          device: Any = None, prof: bool = False,
                          log_name: str = "broadcast_object_list", debug: Any = None, *,
                          backend: str | None = None) -> None:
    """object_list on every rank <- object_list on global rank src (pickled)."""
    g = group_of(group, "broadcast_object_list")
    root = g.group_rank(src, "broadcast_object_list src")
    b = pick(O.OBJECT, g, None, UNKNOWN, None, backend, root=root)
    b.broadcast_object_list(object_list, root, g)


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None, prof: bool = False,
                      log_name: str = "all_gather_object", debug: Any = None, *,
                      backend: str | None = None) -> None:
    """object_list[i] <- obj of rank i (pickled)."""
    g = group_of(group, "all_gather_object")
    if not isinstance(object_list, list) or len(object_list) != g.size:
        raise CallError(f"all_gather_object: object_list must be a list of {g.size} (group size)")
    b = pick(O.OBJECT, g, None, UNKNOWN, None, backend)
    b.all_gather_object(object_list, obj, g)
