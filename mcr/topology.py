"""Which groups the one-node GPU backends (sdma, symm, nccl_ce) may bind to."""

from __future__ import annotations

import socket
from typing import Any

import torch
import torch.distributed as tdist

from .backends import Backend, Unavailable

ONE_NODE = ("sdma", "symm", "nccl_ce")


def one_node_reason(gloo_pg: Any, size: int) -> str | None:
    """None if every rank of the group is on this host with peer access to every other's GPU.

    Collective over gloo_pg (two small all-gathers); every member gets the same answer.
    """
    me = (socket.gethostname(), torch.cuda.current_device())
    every: list[Any] = [None] * size
    tdist.all_gather_object(every, me, group=gloo_pg)
    hosts = {h for h, _ in every}
    ok = len(hosts) == 1
    if ok:
        devs = {d for _, d in every}
        ok = len(devs) == size and all(torch.cuda.can_device_access_peer(me[1], d)
                                       for d in devs if d != me[1])
    verdicts: list[Any] = [None] * size
    tdist.all_gather_object(verdicts, ok, group=gloo_pg)
    if len(hosts) > 1:
        return f"ranks span {len(hosts)} hosts; this backend works inside one node"
    if not all(verdicts):
        return "not every pair of the group's GPUs has peer (NVLink/PCIe P2P) access"
    return None


def bind(backends: dict[str, Backend], handles: dict[str, Any], notes: dict[str, str],
         nccl_pg: Any, ce_pg: Any, gloo_pg: Any, size: int) -> None:
    """Add sdma/symm/nccl_ce handles for a group, or a note saying why not (collective)."""
    wanted = [n for n in ONE_NODE if not isinstance(backends.get(n), Unavailable)]
    if not wanted or nccl_pg is None:
        return
    reason = one_node_reason(gloo_pg, size)
    for n in wanted:
        if reason:
            notes[n] = reason
        elif n == "nccl_ce":
            if ce_pg is None:
                notes[n] = "no zero-CTA NCCL communicator (needs NCCL >= 2.28)"
            else:
                handles[n] = ce_pg
        else:
            handles[n] = nccl_pg
