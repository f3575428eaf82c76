"""Whether the ranks of a group share one node with peer access (sdma, symm, nccl_ce need it)."""

from __future__ import annotations

import socket
from typing import Any

import torch
import torch.distributed as tdist


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
