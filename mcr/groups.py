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
    # Collective calls made on it (point-to-point left out: two ranks take part, not all): in
    # a correct program every member has made as many at the same point, so the stall watch
    # and the always-on check tell a peer at another call of the same point by it.
    calls: int = 0
    # mcr.board.Board of a one-node group once its first guarded call opened it (False: none).
    board: Any = None

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
def _unbound_world() -> Iterator[None]:
    """The world's device binding hidden meanwhile: torch then splits no new group from the
    world's communicator for that device and builds it on its own."""
    world = tdist.distributed_c10d._get_default_group()
    dev = world.bound_device_id
    world.bound_device_id = None
    try:
        yield
    finally:
        world.bound_device_id = dev


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
    with _unbound_world():
        yield


_numbers: dict[str, int] = {}


def numbered(base: str) -> str:
    """`base/k`, k counting the names this process made from base before: the same on every
    rank that makes the same names in one order."""
    k = _numbers.get(base, 0)
    _numbers[base] = k + 1
    return f"{base}/{k}"


def ranks_name(ranks: list[int] | tuple[int, ...]) -> str:
    """Ranks as a name part: 0_1_2."""
    return "_".join(map(str, ranks))


def members_only_group(spec: Spec, backend: str, pg_options: Any = None) -> Any:
    """A torch group of spec's ranks that only its members build, under a name of mcr's own.

    torch's new_group(use_local_synchronization=True) names a group by its ranks and by how
    many groups the calling process belongs to, so members that belong to different other
    groups (pipeline stages, TP/DP meshes, hier's groups) pick different names and wait for
    each other until the timeout. Here the name is the spec's, which its members agree on.
    A world bound to a device would split an NCCL group from the world's communicator, a
    collective over every world rank, which the non-members never join: the binding is hidden
    while the group is made (it then initializes its own communicator at first use).
    torch has no public way to name a group, hence its private helper (the one new_group
    calls; the same parameters on torch 2.11 and 2.13).
    """
    if not spec.member:
        return tdist.GroupMember.NON_GROUP_MEMBER
    c10d = tdist.distributed_c10d
    name = numbered(f"mcr/{spec.name}/{backend}")
    with _unbound_world():
        pg, _ = c10d._new_process_group_helper(
            len(spec.ranks), spec.ranks.index(spec.me), spec.ranks, backend,
            c10d._get_default_store(), name, backend_options=pg_options, timeout=spec.timeout,
            group_desc=name)
    c10d._world.pg_group_ranks[pg] = {r: i for i, r in enumerate(spec.ranks)}
    return pg


@dataclass
class Spec:
    """What a backend needs to build its handle for a group (Backend.bind).

    Three kinds of group: the world; a group mcr.comm.new_group makes (every world rank takes
    part in building it, as torch requires); and a torch group mcr did not make (`local`: only
    its members take part, the first time mcr serves a call on it). `name` is the same on
    every member and differs from every other group's in the job: the groups and store keys a
    backend makes for its own use are named after it.
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
    name: str = ""
    default_gpu: str = "nccl"   # Group.default_gpu of the group built
    handles: dict[str, Any] = field(default_factory=dict)   # built so far, in registry order
    notes: dict[str, str] = field(default_factory=dict)
    _one_node: list[str | None] = field(default_factory=list)

    @property
    def member(self) -> bool:
        """Is this process one of the ranks?"""
        return self.me in self.ranks

    def torch_group(self, backend: str, pg_options: Any = None) -> Any:
        """A new torch group of these ranks on `backend` (only members make it if `local`)."""
        if self.local:
            return members_only_group(self, backend, pg_options)
        with _split_only_from_own_kind(backend):
            return tdist.new_group(self.ranks, timeout=self.timeout, backend=backend,
                                   pg_options=pg_options)

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
                    cuda=self.cuda, local=self.local, layout=self.layout, tag=tag,
                    name=f"{self.name}/{tag}/{ranks_name(ranks)}")

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
