"""The small interface every backend implements; the dispatcher only talks to this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as tdist

from ..config import Config
from ..groups import Group, Spec
from ..ops import OPS, CallKey, is_premul
from ..streams import StreamDone, StreamId
from ..work import Work

STREAM = "stream"  # enqueues on a GPU stream and returns (NCCL, copy engines, symmetric memory)
HOST = "host"      # progressed by the host (Gloo, MPI)


class Backend:
    """One communication library behind mcr's primitive ops.

    A backend states the ops it serves once (`serves`); the dispatcher never sends it others, and
    the defaults below refuse them. Tensors handed to a backend are contiguous, their sizes
    already checked by mcr.comm; ranks (root, peer) are group ranks. Every op returns a Work,
    never blocks unless the library must. `sync=True` says the caller completes the Work right
    away on the stream it issued on (a synchronous call): a backend may then skip what only an
    asynchronous handle needs.
    """

    name: str = ""
    domain: str = HOST
    serves: frozenset[str] = frozenset(OPS)
    # Reduces with ReduceOp.PREMUL_SUM(factor) itself; others get the input pre-multiplied by
    # mcr.comm and reduce with SUM.
    native_premul: bool = False
    # Can receive from any source (recv with src=None).
    any_source: bool = True
    # Its work can be recorded in a CUDA graph (stream-ordered GPU work only).
    capturable: bool = False
    # Its asynchronous works are torch works that the library finishes on its own threads,
    # their futures completing then (Gloo's); others need the caller to wait (MPI's polling).
    completes_alone: bool = False

    # -- handles -------------------------------------------------------------------------
    def bind(self, spec: Spec) -> Any:
        """This library's handle for the group `spec` describes, or None (with the reason in
        spec.notes). Called in registry order on every rank that takes part in building the
        group (see Spec), members or not, so that collective constructors line up."""
        return None

    def release(self, handle: Any, world: bool) -> None:
        """Free a handle bind() made (destroy_process_group); the world's at shutdown."""

    def _bind_one_node(self, spec: Spec, handle: Any) -> Any:
        """handle if the group's ranks are one node with peer access, else None and a note."""
        if not spec.member or handle is None:
            return None
        reason = spec.one_node()
        if reason:
            spec.notes[self.name] = reason
            return None
        return handle

    # -- decisions -----------------------------------------------------------------------
    def decline(self, key: CallKey, group: Group) -> str | None:
        """Why this backend cannot serve the call, or None if it can.

        Must depend only on the key, the group and state every rank of the group reaches at
        the same call (what the process has, the group's buffers once its first call made
        them), so that every rank decides the same and no rank waits on a library its peers
        skipped.
        """
        if self.name not in group.handles:
            return group.notes.get(self.name) or \
                f"group {group.ranks} has no {self.name} communicator"
        if key.op not in self.serves:
            return f"{self.name} does not implement {key.op}"
        if key.graph and not self.capturable:
            return f"{self.name} cannot run inside CUDA graph capture (its work is not " \
                   "stream-ordered GPU work)"
        if key.graph and not self.ready(group):
            return f"{self.name} sets up a group's buffers at its first call on it (collectives " \
                   "and host synchronizations, which CUDA graph capture forbids)"
        if key.redop is not None and not self.native_premul and is_premul(key.redop):
            key = key._replace(redop=tdist.ReduceOp.SUM)
        return self.decline_key(key)

    def ready(self, group: Group) -> bool:
        """Whether a call on group needs no setup first (backends that set up per-group
        buffers at a group's first call say False until then)."""
        return True

    def same_as(self, key: CallKey) -> str | None:
        """The name of a backend that does exactly what this one would for this call (the
        tuner times only that one), or None."""
        return None

    def summary_lines(self) -> list[str]:
        """Lines for the summary about how this backend ran its calls (none by default)."""
        return []

    def decline_key(self, key: CallKey) -> str | None:
        """Backend-specific reasons to decline (device, dtype, reduce op, size)."""
        return None

    def _stream_work(self, op: str, nbytes: int, g: Group,
                     stream: StreamId | None = None, sync: bool = False) -> Work | None:
        """Work of an op this backend enqueued on the caller's current stream (or on `stream`).
        A synchronous call needs none (None): it completes on the stream it was issued on."""
        if sync:
            return None
        return Work(op, self.name, nbytes, g.size,
                    torch_work=StreamDone(stream),
                    stream_ordered=True)

    def _refuse(self, op: str) -> Work:
        raise NotImplementedError(f"backend {self.name} does not implement {op} (it serves "
                                  f"{sorted(self.serves)}); the dispatcher should not send it")

    # -- ops (each backend overrides those in `serves`) ------------------------------------
    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """In-place all-reduce of t."""
        return self._refuse("all_reduce")

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """out (group size x inp, flat) <- every rank's inp in rank order."""
        return self._refuse("all_gather")

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work:
        """out <- this rank's block of the reduction of every rank's inp."""
        return self._refuse("reduce_scatter")

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False,
                   even: bool = True) -> Work:
        """Block i of inp goes to rank i; counts are elements per rank, flat buffers; even:
        the call's key says every block of every rank is the same size."""
        return self._refuse("all_to_all")

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work:
        """t on every rank <- t on root."""
        return self._refuse("broadcast")

    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """t on root <- reduction of every rank's t; the other ranks' t stays as it was."""
        return self._refuse("reduce")

    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """out on root (flat, group size x inp) <- every rank's inp."""
        return self._refuse("gather")

    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group, *,
                sync: bool = False) -> Work:
        """out on every rank <- its block of inp (flat) on root."""
        return self._refuse("scatter")

    def send(self, t: torch.Tensor, peer: int, tag: int, g: Group) -> Work:
        """Non-blocking send of t to peer."""
        return self._refuse("send")

    def recv(self, t: torch.Tensor, peer: int | None, tag: int, g: Group) -> Work:
        """Non-blocking receive into t from peer (None: any source)."""
        return self._refuse("recv")

    def batch_p2p(self, items: list[tuple[str, torch.Tensor, int, int, Group]]) -> list[Work]:
        """Start sends ("isend") and receives ("irecv") of (kind, tensor, peer, tag, group) as
        one batch. The default issues each: right for libraries whose sends and receives never
        block one another (host-progressed ones)."""
        return [self.send(t, peer, tag, g) if kind == "isend" else self.recv(t, peer, tag, g)
                for kind, t, peer, tag, g in items]

    def barrier(self, g: Group, *, sync: bool = False) -> Work:
        """Every rank has reached this point."""
        return self._refuse("barrier")

    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """objs on every rank <- objs on root (pickled)."""
        self._refuse("broadcast_object_list")

    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """out[i] <- obj of rank i (pickled)."""
        self._refuse("all_gather_object")


class Unavailable(Backend):
    """A backend this process cannot run; it declines every call with the reason."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def bind(self, spec: Spec) -> Any:
        """No handle; the note says why."""
        spec.notes[self.name] = self.reason
        return None

    def decline(self, key: CallKey, group: Group) -> str | None:
        """Always: the reason it is unavailable."""
        return self.reason


@dataclass
class Context:
    """What a backend folder's build() may look at: the settings, how the job was launched,
    whether CUDA is there, and the backends built before it (registry order)."""

    cfg: Config
    launched_by_mpi: bool
    cuda: bool
    built: dict[str, Backend] = field(default_factory=dict)
    # Every backend once all are built (filled in last): for backends that bind others' groups.
    registry: dict[str, Backend] = field(default_factory=dict)
