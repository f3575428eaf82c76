"""The small interface every backend implements; the dispatcher only talks to this."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from ..groups import Group
from ..ops import CallKey
from ..work import StreamDone, StreamId, Work

STREAM = "stream"  # enqueues on a GPU stream and returns (NCCL, copy engines, symmetric memory)
HOST = "host"      # progressed by the host (Gloo, MPI)


class Backend(ABC):
    """One communication library behind mcr's primitive ops.

    Tensors handed to a backend are contiguous, their sizes already checked by mcr.comm; ranks
    (root, peer) are group ranks. Every op returns a Work, never blocks unless the library must.
    `sync=True` says the caller completes the Work right away on the stream it issued on (a
    synchronous call): a backend may then skip what only an asynchronous handle needs.
    """

    name: str = ""
    domain: str = HOST

    def decline(self, key: CallKey, group: Group) -> str | None:
        """Why this backend cannot serve the call, or None if it can.

        Must depend only on the key, the group and the process's static state, so that every
        rank of the group decides the same and no rank waits on a library its peers skipped.
        """
        if self.name not in group.handles:
            return group.notes.get(self.name) or \
                f"group {group.ranks} has no {self.name} communicator"
        return self.decline_key(key)

    def _stream_work(self, op: str, nbytes: int, g: Group,
                     stream: StreamId | None = None, sync: bool = False) -> Work:
        """Work of an op this backend enqueued on the caller's current stream (or on `stream`).
        A synchronous call's Work needs no stream: it completes on the stream it was issued
        on."""
        if sync:
            return Work(op, self.name, nbytes, g.size, stream_ordered=True)
        return Work(op, self.name, nbytes, g.size,
                    torch_work=StreamDone(stream),
                    stream_ordered=True)

    @abstractmethod
    def decline_key(self, key: CallKey) -> str | None:
        """Backend-specific reasons to decline (device, dtype, reduce op, size)."""

    @abstractmethod
    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """In-place all-reduce of t."""

    @abstractmethod
    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """out (group size x inp, flat) <- every rank's inp in rank order."""

    @abstractmethod
    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work:
        """out <- this rank's block of the reduction of every rank's inp."""

    @abstractmethod
    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False) -> Work:
        """Block i of inp goes to rank i; counts are elements per rank, flat buffers."""

    @abstractmethod
    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work:
        """t on every rank <- t on root."""

    @abstractmethod
    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """t on root <- reduction of every rank's t (others' t unspecified, as in torch)."""

    @abstractmethod
    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group, *,
               sync: bool = False) -> Work:
        """out on root (flat, group size x inp) <- every rank's inp."""

    @abstractmethod
    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group, *,
                sync: bool = False) -> Work:
        """out on every rank <- its block of inp (flat) on root."""

    @abstractmethod
    def send(self, t: torch.Tensor, peer: int, tag: int, g: Group) -> Work:
        """Non-blocking send of t to peer."""

    @abstractmethod
    def recv(self, t: torch.Tensor, peer: int | None, tag: int, g: Group) -> Work:
        """Non-blocking receive into t from peer (None: any source)."""

    @abstractmethod
    def barrier(self, g: Group, *, sync: bool = False) -> Work:
        """Every rank has reached this point."""

    @abstractmethod
    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """objs on every rank <- objs on root (pickled)."""

    @abstractmethod
    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """out[i] <- obj of rank i (pickled)."""
