"""Reused pinned host buffers for host-progressed libraries that cannot read GPU memory."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...waits import wait_event


class PinnedPool:
    """Pinned host buffers reused across calls; the cache is bounded in bytes."""

    def __init__(self, max_cached_bytes: float) -> None:
        self.max_cached = max_cached_bytes
        self.cached = 0
        self._free: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []

    def get(self, nbytes: int) -> torch.Tensor:
        """A pinned uint8 buffer of at least nbytes, not in use by any pending copy."""
        fits = [(buf.numel(), i) for i, (buf, _) in enumerate(self._free) if buf.numel() >= nbytes]
        best = min(fits)[1] if fits else None
        if best is not None:
            buf, ev = self._free.pop(best)
            self.cached -= buf.numel()
            if ev is not None:
                wait_event(ev, "reuse of a pinned staging buffer")
            return buf
        size = max(4096, 1 << (max(nbytes, 1) - 1).bit_length())
        return torch.empty(size, dtype=torch.uint8, pin_memory=True)

    def put(self, buf: torch.Tensor, event: torch.cuda.Event | None) -> None:
        """Give a buffer back; event marks the last device copy that reads or writes it."""
        if self.cached + buf.numel() <= self.max_cached:
            self._free.append((buf, event))
            self.cached += buf.numel()


def view_as(buf: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """buf's first bytes viewed with like's dtype and shape."""
    n = like.numel() * like.element_size()
    return buf[:n].view(like.dtype).view(like.shape)


def stage_in(pool: PinnedPool, tensors: list[tuple[torch.Tensor, bool]]
             ) -> tuple[list[torch.Tensor], list[Callable[[], None]]]:
    """Pinned host stand-ins for GPU tensors, given as (tensor, copy_in); returns the views,
    readable once this returns (the host polls until the current stream has copied them), and
    the copy-backs to run after the library is done with them."""
    views: list[torch.Tensor] = []
    after: list[Callable[[], None]] = []
    for t, copy_in in tensors:
        buf = pool.get(t.numel() * t.element_size())
        host = view_as(buf, t)
        if copy_in:
            host.copy_(t, non_blocking=True)
        views.append(host)
        after.append(_copy_back(pool, t, host, buf))
    ready = torch.cuda.Event()
    ready.record()
    wait_event(ready, "the GPU producer of a host-staged buffer")
    return views, after


def _copy_back(pool: PinnedPool, t: torch.Tensor, host: torch.Tensor, buf: torch.Tensor
               ) -> Callable[[], None]:
    def fn() -> None:
        t.copy_(host, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        pool.put(buf, ev)
    return fn


def host_visible(pool: PinnedPool, cuda_aware: bool, tensors: list[tuple[torch.Tensor, bool]]
                 ) -> tuple[list[torch.Tensor], list[Callable[[], None]]]:
    """What a host library may read and write for each (tensor, copy_in) of one call, and the
    copy-backs to run after it. CPU tensors as they are; GPU tensors as they are for a
    CUDA-aware library once the producing stream has written them (the host polls, MPI
    progressing), else pinned copies (stage_in)."""
    if not tensors[0][0].is_cuda:   # a call's tensors share one device (mcr.comm checks)
        return [t for t, _ in tensors], []
    if not cuda_aware:
        return stage_in(pool, tensors)
    ready = torch.cuda.Event()
    ready.record()
    wait_event(ready, "GPU producer of an MPI buffer")
    return [t for t, _ in tensors], []
