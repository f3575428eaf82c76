"""Which ranks share a node: detected once at init, agreed by every rank, and the shape of a
group across nodes (what tables key on: `4` is one node of 4 ranks, `2x2` two nodes of 2)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

import torch.distributed as tdist

from .errors import MismatchError

# Ranks per node as the launchers state it: Open MPI, MPICH/Intel, MVAPICH2, DeepSpeed's
# launcher, torchrun. LOCAL_WORLD_SIZE comes last: Accelerate on CPU writes it (from these, or
# 1 where none is set, as under DeepSpeed's launcher, which states LOCAL_SIZE).
_LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                    "LOCAL_SIZE", "LOCAL_WORLD_SIZE")


@dataclass(frozen=True)
class Layout:
    """node_of[r]: the node (0, 1, ...; in order of first rank) of world rank r."""

    node_of: tuple[int, ...]
    source: str        # how it was found: host names, or MCR_LOCAL_SIZE=n

    @property
    def nodes(self) -> int:
        """Number of nodes of the world."""
        return max(self.node_of, default=0) + 1

    def shape(self, ranks: list[int]) -> tuple[int, int]:
        """(nodes, ranks per node) of a group of these world ranks, in group order; ranks per
        node is 0 where nodes hold different numbers of the group's ranks, or a node's ranks
        are not consecutive in the group (node-major order is what hierarchical paths need)."""
        seq = [self.node_of[r] for r in ranks]
        nodes = len(set(seq))
        if nodes == 1:
            return 1, len(ranks)
        per = len(ranks) // nodes
        runs = [seq[i:i + per] for i in range(0, len(seq), per)]
        ok = per * nodes == len(ranks) and all(len(set(run)) == 1 for run in runs) \
            and len({run[0] for run in runs}) == nodes
        return nodes, per if ok else 0


def label(size: int, nodes: int) -> int | str | None:
    """A group's key in a table (from CallKey's size and nodes): its size on one node, `NxL`
    across N nodes of L ranks each, None where its ranks are spread unevenly (no table rule
    applies to it)."""
    if nodes == 1:
        return size
    return f"{nodes}x{size // nodes}" if nodes > 1 else None


def parse_label(key: Any) -> tuple[int, int] | None:
    """(group size, nodes) of a table's group key (`4`, `2x2`); None if it is neither."""
    if isinstance(key, int) and not isinstance(key, bool):
        return (key, 1) if key >= 1 else None
    if isinstance(key, str) and key.count("x") == 1:
        a, b = key.split("x")
        if a.isdigit() and b.isdigit() and int(a) >= 2 and int(b) >= 1:
            return int(a) * int(b), int(a)
    return None


def stated_local_size() -> int | None:
    """The ranks on this node as the launcher states them, or None where it states none."""
    return next((int(os.environ[v]) for v in _LOCAL_SIZE_VARS
                 if os.environ.get(v, "").isdigit()), None)


def detect(local_size: int | None, world: int, gloo_pg: Any) -> Layout:
    """The world's layout, the same on every rank (collective over the world's Gloo group).

    MCR_LOCAL_SIZE=n (local_size) declares nodes of n consecutive ranks: one host standing in
    for several. Otherwise ranks on one host name are one node; where the launcher states its
    ranks per node, every rank checks that the host names agree with it.
    """
    stated = stated_local_size()
    every: list[Any] = [None] * world
    tdist.all_gather_object(every, (socket.gethostname(), stated, local_size), group=gloo_pg)
    if len({e[2] for e in every}) > 1:
        raise MismatchError("mcr: ranks differ in MCR_LOCAL_SIZE: " + "; ".join(
            f"rank {r}: {e[2]}" for r, e in enumerate(every)))
    if local_size is not None:
        if world % local_size:
            raise ValueError(f"MCR_LOCAL_SIZE={local_size} does not divide the world of {world} "
                             "ranks into whole nodes")
        return Layout(tuple(r // local_size for r in range(world)),
                      f"MCR_LOCAL_SIZE={local_size}")
    first: dict[str, int] = {}
    node_of = tuple(first.setdefault(h, len(first)) for h, _, _ in every)
    counts = [node_of.count(n) for n in node_of]
    bad = [r for r, e in enumerate(every) if e[1] is not None and e[1] != counts[r]]
    if bad:
        r = bad[0]
        raise MismatchError(f"mcr: rank {r} was launched as one of {every[r][1]} ranks on its "
                            f"node, but {counts[r]} ranks report host name {every[r][0]!r}; "
                            "set MCR_LOCAL_SIZE to the ranks per node if host names are not "
                            "unique per node")
    return Layout(node_of, "host names")
