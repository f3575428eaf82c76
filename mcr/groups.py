"""mcr's process group (the ranks, and the handle each library holds for them) and the spec
from which the backends build those handles."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch.distributed as tdist

from .errors import CallError

_ids = itertools.count()


@dataclass(eq=False)
class Group:
    """A set of ranks with one communicator per library (torch process groups, an MPI comm)."""

    ranks: list[int]            # global ranks, in group-rank order
    rank: int                   # this process's rank in the group, -1 if not a member
    handles: dict[str, Any] = field(default_factory=dict)  # backend name -> PG / MPI comm
    default_gpu: str = "nccl"
    notes: dict[str, str] = field(default_factory=dict)  # backend -> why it has no handle
    id: int = field(default_factory=lambda: next(_ids))
    released: bool = False      # destroy_process_group(group) was called
    nodes: int = 1              # nodes its ranks span (mcr.layout)
    per_node: int = 0           # ranks on each, node-major; 0 if uneven (see Layout.shape)
    # Names the sequence of the always-on check: groups a backend builds for its own use
    # (hier's intra- and inter-node groups) have their own, whatever their ranks.
    tag: str = ""

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    @property
    def span(self) -> int:
        """Nodes, as a call key holds them (CallKey.nodes: 0 where its ranks are uneven)."""
        return self.nodes if self.per_node else 0

    def group_rank(self, global_rank: int, what: str) -> int:
        """Group rank of a global rank; CallError naming the call if it is not a member."""
        try:
            return self._index[global_rank]
        except KeyError:
            raise CallError(f"{what}: rank {global_rank} is not in this group "
                            f"(ranks {self.ranks})") from None
        except AttributeError:
            self._index = {r: i for i, r in enumerate(self.ranks)}
            return self.group_rank(global_rank, what)

    def __repr__(self) -> str:
        return f"Group(id={self.id}, ranks={self.ranks}, backends={sorted(self.handles)})"


@contextmanager
def _split_only_from_own_kind(backend: str) -> Iterator[None]:
    """While torch builds an NCCL group, hide the world's device binding if the world's backend
    for that device is not NCCL.

    torch (2.11 to 2.13 at least) splits a new group from the world's backend for its bound
    device whatever library that is; a Gloo world bound to a GPU (init_process_group("gloo",
    device_id=...), as DeepSpeed makes with dist_backend="gloo" on CUDA) then makes every new
    NCCL group fail with a TypeError inside torch. Unbound, torch builds the group on its own.
    """
    world = tdist.distributed_c10d._get_default_group() if tdist.is_initialized() else None
    dev = getattr(world, "bound_device_id", None)
    nccl = getattr(tdist, "ProcessGroupNCCL", None)   # absent from CPU builds of torch
    if backend != "nccl" or dev is None or nccl is None \
            or isinstance(world._get_backend(dev), nccl):
        yield
        return
    world.bound_device_id = None
    try:
        yield
    finally:
        world.bound_device_id = dev


@dataclass
class Spec:
    """What a backend needs to build its handle for a group (Backend.bind).

    Three kinds of group: the world; a group mcr.comm.new_group makes (every world rank takes
    part in building it, as torch requires); and a torch group mcr did not make (`local`: only
    its members take part, the first time mcr serves a call on it).
    """

    ranks: list[int]
    me: int                     # this process's world rank
    world_size: int
    timeout: timedelta
    cuda: bool
    pg: Any = None              # the torch group these ranks already have (world, foreign)
    local: bool = False
    layout: Any = None          # mcr.layout.Layout of the world (None: one node)
    tag: str = ""               # Group.tag of the group built
    default_gpu: str = "nccl"   # Group.default_gpu of the group built
    handles: dict[str, Any] = field(default_factory=dict)   # built so far, in registry order
    notes: dict[str, str] = field(default_factory=dict)
    _one_node: list[str | None] = field(default_factory=list)

    @property
    def member(self) -> bool:
        """Is this process one of the ranks?"""
        return self.me in self.ranks

    def torch_group(self, backend: str, **kw: Any) -> Any:
        """A new torch group of these ranks on `backend` (only members call it if `local`)."""
        if self.local:
            kw["use_local_synchronization"] = True
        with _split_only_from_own_kind(backend):
            return tdist.new_group(self.ranks, timeout=self.timeout, backend=backend, **kw)

    def pg_backends(self) -> str:
        """torch's backend string of `pg` (`gloo`, `nccl`, `cpu:gloo,cuda:nccl`), or ''."""
        return tdist.get_backend(self.pg) if self.pg is not None else ""

    def shape(self) -> tuple[int, int]:
        """(nodes, ranks per node) of these ranks (Layout.shape)."""
        return self.layout.shape(self.ranks) if self.layout is not None else (1, len(self.ranks))

    def child(self, ranks: list[int], tag: str) -> Spec:
        """The spec of a group of some of these ranks that a backend builds for itself, taken
        part in by the same processes as this one."""
        return Spec(ranks=ranks, me=self.me, world_size=self.world_size, timeout=self.timeout,
                    cuda=self.cuda, local=self.local, layout=self.layout, tag=tag)

    def one_node(self) -> str | None:
        """Why these ranks are not one node whose GPUs all reach each other (None: they are).

        Collective over the group's gloo handle on first use (members only); asked by every
        one-node backend, computed once.
        """
        if not self._one_node:
            from .topology import one_node_reason
            nodes = self.shape()[0]
            self._one_node.append(
                f"ranks span {nodes} nodes ({self.layout.source}); this backend works inside "
                "one node" if nodes > 1 else
                one_node_reason(self.handles["gloo"], len(self.ranks)))
        return self._one_node[0]
