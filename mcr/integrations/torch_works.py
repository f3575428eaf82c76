"""The Work objects the `mcr` torch.distributed backend hands torch: done already (Done), a
point-to-point call under way (Pending), GPU collectives under way on their library's stream
(OnStream), a host library's call under way (HostUnderWay)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from mcr.waits import get_timeout, mcr_error
from mcr.work import Work as McrWork


class Done(tdist.Work):
    """A finished call's Work: wait() returns at once; its future holds the tensors."""

    def __init__(self, result: list[torch.Tensor], source: int = -1) -> None:
        super().__init__()
        self._result, self._source = result, source

    def wait(self, timeout: Any = None) -> bool:
        """Done already."""
        return True

    def is_completed(self) -> bool:
        """Done already."""
        return True

    def _source_rank(self) -> int:
        """Group rank that sent a receive from any source (torch's recv asks)."""
        if self._source < 0:
            raise RuntimeError("source rank: this Work is not a receive from any source")
        return self._source

    def get_future(self) -> torch.futures.Future:
        """A completed future of the call's output tensors."""
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._result)
        return fut


class Pending(Done):
    """A point-to-point call under way: mcr's Work, waited when torch waits."""

    def __init__(self, work: Any, result: list[torch.Tensor]) -> None:
        super().__init__(result)
        self._work = work

    def wait(self, timeout: Any = None) -> bool:
        """Wait for mcr's Work."""
        return self._work.wait()

    def is_completed(self) -> bool:
        """Whether mcr's Work is done."""
        return self._work.is_completed()

    def _source_rank(self) -> int:
        self._work.wait()
        return self._work.source_rank()

    def get_future(self) -> torch.futures.Future:
        """A future of the output tensors, completed once the call is (waited here)."""
        self._work.wait()
        return super().get_future()


class OnStream(Done):
    """GPU collectives under way on their library's stream, as torch's NCCL work is: wait()
    makes the caller's current stream wait for them; the future (made when asked: each CUDA
    call costs microseconds) completes on the GPU when they do, a CUDA future whose events
    are recorded on a stream that waits for them, so DDP's bucket hooks run behind the
    all-reduce without holding back the backward pass."""

    def __init__(self, works: list[Any], result: list[torch.Tensor]) -> None:
        super().__init__(result)
        self._works = [w for w in works if w is not None]
        self._fut: torch.futures.Future | None = None

    def wait(self, timeout: Any = None) -> bool:
        """The caller's current stream waits for the collectives."""
        for w in self._works:
            w.wait()
        return True

    def is_completed(self) -> bool:
        """Whether the library has finished on the GPU."""
        return all(w.is_completed() for w in self._works)

    def get_future(self) -> torch.futures.Future:
        """A CUDA future of the tensors, completed when the collectives are."""
        w0 = self._works[0] if len(self._works) == 1 else None
        if self._fut is None and isinstance(w0, tdist.Work) and not isinstance(w0, McrWork):
            # torch's own work (NCCL's): its future already completes on the GPU. Handed on
            # as it is where its value is the caller's tensors: a Python future's value is
            # pickled to find its tensors, on completion and again in DDP's reducer (~20 us a
            # bucket on a GPU host). Else chained so that its value is the caller's tensors
            # (the library had a view).
            result = self._result
            fut = w0.get_future()
            if fut.done() and _same(fut.value(), result):
                self._fut = fut
            else:
                self._fut = fut.then(lambda _: result)
        if self._fut is None:
            dev = self._result[0].device
            side = _WAITERS.get(dev)
            if side is None:
                side = _WAITERS[dev] = torch.cuda.Stream(dev)
            with torch.cuda.stream(side):
                for w in self._works:
                    w.wait()
                self._fut = torch.futures.Future(devices=[dev])
                self._fut.set_result(self._result)
        return self._fut


class HostUnderWay(Pending):
    """A host library's call under way (Gloo's): wait() is mcr's (in slices, with the stall
    watch), as a point-to-point call's; the future completes on the library's thread when the
    call does, its error raised as mcr's."""

    def __init__(self, work: McrWork, result: list[torch.Tensor]) -> None:
        super().__init__(work, result)
        self._fut: torch.futures.Future | None = None

    def get_future(self) -> torch.futures.Future:
        """A future of the tensors, completed by the library's thread."""
        if self._fut is None:
            work, result = self._work, self._result

            def done(f: torch.futures.Future) -> list[torch.Tensor]:
                try:
                    f.value()
                except Exception as e:  # noqa: BLE001 - the library's, raised as mcr's
                    raise mcr_error(e, work.describe(), get_timeout()) from e
                return result
            self._fut = work.get_future().then(done)
        return self._fut


def _same(value: Any, tensors: list[torch.Tensor]) -> bool:
    """Whether a library future's value is these very tensors."""
    return isinstance(value, list) and len(value) == len(tensors) and \
        all(a is b for a, b in zip(value, tensors))


_WAITERS: dict[torch.device, Any] = {}   # device -> the stream futures are completed on
