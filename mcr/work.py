"""One Work type over torch work, MPI requests and CUDA events, with the synchronization rules.

Stream-ordered work (NCCL and other GPU-stream libraries): wait() makes the caller's current stream
wait and returns without blocking the host; synchronize() blocks. Host-progressed work (Gloo, MPI):
wait() blocks the host until the library is done, then runs the copy-backs on the caller's stream.
Every host block has a deadline (MCR_TIMEOUT_S) and keeps MPI progressing while it waits.
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist

from .streams import StreamDone
from .threads import wait_helper
from .waits import PENDING, get_timeout, mcr_error, poll_until, wait_event, wait_torch_host

# Called with (work, seconds) when a work completes and the comms logger is on.
ON_COMPLETE: list[Callable[[Work, float], None]] = []


class Work(tdist.Work):
    """Handle of one collective or point-to-point call, whatever library runs it.

    A torch.distributed.Work, so that frameworks which wait only on those (FSDP2's async
    all-gather) wait on it; its wait() follows the synchronization rules above for each library.
    """

    __slots__ = ("op", "backend", "nbytes", "group_size", "_torch", "_reqs", "_stream",
                 "_after", "_done", "_t0", "_mpi_test", "source", "_keep", "check")

    def __init__(self, op: str, backend: str, nbytes: int, group_size: int, *,
                 torch_work: Any = None, mpi_requests: list | None = None,
                 mpi_test: Callable[[list], bool] | None = None, stream_ordered: bool = False,
                 after: list[Callable[[], None]] | None = None, keep: tuple = ()) -> None:
        super().__init__()
        self.op = op
        self.backend = backend
        self.nbytes = nbytes
        self.group_size = group_size
        self._torch = torch_work
        self._reqs = mpi_requests
        if mpi_requests:
            PENDING[0] += 1
        self._mpi_test = mpi_test
        self._stream = stream_ordered
        self._after = after
        self._done = False
        self._t0 = time.perf_counter() if ON_COMPLETE else 0.0
        self.source: Callable[[], int] | None = None  # sender of an any-source receive
        self.check: Callable[[], None] | None = None   # raises when the wait is hopeless
        # Buffers a library reads or writes until completion; mpi4py does not hold them for us.
        self._keep = keep

    @classmethod
    def of_torch(cls, op: str, backend: str, nbytes: int, group_size: int, torch_work: Any,
                 stream_ordered: bool) -> Work:
        """Work(op, ..., torch_work=, stream_ordered=) without the rest: the hot path of every
        asynchronous torch-backed call (a third less host time than the general form)."""
        try:
            w = SPARE.pop()
        except IndexError:
            w = None
        # Reused where nothing else holds it, not even weakly: torch's Work.__init__ and the
        # object's allocation cost more than all of this call's own host time. A pop, not a
        # read: two threads never take the same one.
        if w is None or _refcount(w) != _SOLE or _weakrefs(w) or type(w) is not cls:
            w = cls.__new__(cls)
            _WORK_INIT(w)
        w.op, w.backend, w.nbytes, w.group_size = op, backend, nbytes, group_size
        w._torch, w._stream, w._reqs, w._mpi_test, w._after = torch_work, stream_ordered, \
            None, None, None
        w._done, w._t0, w.source, w.check, w._keep = False, \
            time.perf_counter() if ON_COMPLETE else 0.0, None, None, ()
        SPARE.append(w)
        return w

    def describe(self) -> str:
        """`all_reduce on backend 'mpi' (4096 bytes)`, for errors and logs."""
        return f"{self.op} on backend '{self.backend}' ({self.nbytes} bytes)"

    def is_completed(self) -> bool:
        """Non-blocking: has the library finished (copy-backs may still be pending)?"""
        if self._done:
            return True
        if self._torch is not None and not self._torch.is_completed():
            return False
        if self._reqs and not self._mpi_test(self._reqs):
            return False
        return True

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        """Complete the op for the caller (stream-ordered: current stream waits; host: blocks)."""
        if self._done:
            return True
        if timeout is None and self._torch is not None and not self._reqs and not PENDING[0]:
            # The common case, cheaply: a torch work, no MPI owed. A host library's wait goes
            # in slices, which the stall watch's note can end (torch's own would sit out the
            # group's timeout while a peer waits in another call).
            t = self._torch
            try:
                if self._stream:
                    t.wait()
                else:
                    wait_torch_host(t)
            except Exception as e:  # noqa: BLE001 - a library's, raised as mcr's
                self._raise(e, get_timeout())
            if self._after or ON_COMPLETE:
                self._complete()
            else:
                self._done, self._keep = True, ()
            return True
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        secs = get_timeout() if secs is None else secs
        if self._torch is not None:
            if self._stream:
                self._torch.wait()
            else:
                self._wait_torch_host(secs)
        if self._reqs:
            self._wait_mpi(secs)
        self._complete()
        return True

    def _wait_mpi(self, secs: float) -> None:
        # Apart from wait: its lambda would make closure cells of wait's locals, a cost to
        # every wait (the hot path's too).
        reqs, test = self._reqs, self._mpi_test
        try:
            # MPI_Test drives MPI's whole progress engine: no separate nudge needed.
            poll_until(lambda: test(reqs), self.describe(), secs, progresses=True,
                       check=self.check)
        except Exception as e:  # noqa: BLE001 - MPI's errors, raised as mcr's
            raise mcr_error(e, self.describe(), secs) from e

    def wait_issued(self) -> None:
        """wait() for the caller that issued the op and is still on the stream it issued on
        (a synchronous call): an op enqueued on that very stream (StreamDone, or no library
        handle at all) needs no stream check. A torch NCCL work still does: it runs on NCCL's
        own stream."""
        if self._done:
            return
        if (self._torch is None and not self._reqs) or type(self._torch) is StreamDone:
            self._complete()
        else:
            self.wait()

    def _complete(self) -> None:
        """The library is done for the caller: copy-backs, release, completion hooks."""
        if self._reqs:      # first: an after function may raise (a receive's size check)
            PENDING[0] -= 1
            self._reqs = None
        if self._after:
            for fn in self._after:
                fn()
        self._done = True
        self._keep = ()
        if ON_COMPLETE:
            if self._stream and torch.cuda.is_available():
                self._block_stream()
            dt = time.perf_counter() - self._t0
            for hook in ON_COMPLETE:
                hook(self, dt)

    def _wait_torch_host(self, secs: float) -> None:
        if PENDING[0]:
            # This host owes MPI progress to peers that may be waiting on it. Some torch host
            # works (Gloo's reduce-scatter) only complete inside wait(), so the wait runs on a
            # helper thread while this one keeps MPI moving.
            # The torch work (mcr's Futures for MPI) runs any check in its own wait, here on
            # the helper: checking here too would probe the same messages from two threads.
            fut = wait_helper().submit(self._torch.wait, timedelta(seconds=secs))
            poll_until(fut.done, self.describe(), secs)
            wait = fut.result
        else:
            wait = functools.partial(wait_torch_host, self._torch, secs)
        try:
            wait()
        except Exception as e:  # noqa: BLE001 - a library's, raised as mcr's
            self._raise(e, secs)

    def _raise(self, e: Exception, secs: float) -> None:
        """Raise a library's error as mcr's (mcr_error), naming the call."""
        raise mcr_error(e, self.describe(), secs) from e

    def _block_stream(self) -> None:
        ev = torch.cuda.Event()
        ev.record()
        wait_event(ev, self.describe())

    def synchronize(self) -> None:
        """Block the host until the op and its copy-backs are done on the device."""
        self.wait()
        if self._stream or torch.cuda.is_available():
            self._block_stream()

    def get_future(self) -> Any:
        """The torch future of the underlying work, where the library has one and nothing of
        mcr's (copy-backs, a check) is left to run after it."""
        if self._torch is None or self._reqs or (self._after and not self._done):
            raise NotImplementedError(f"{self.describe()}: no torch future for this call "
                                      "(wait() completes it)")
        return self._torch.get_future()

    def alone(self) -> bool:
        """Whether the library completes this work without mcr: a torch work, no MPI requests,
        nothing to run after it, no completion hooks (the comms logger)."""
        return self._torch is not None and not self._reqs and not self._after and \
            not ON_COMPLETE

    def block_current_stream(self) -> None:
        """The caller's current stream waits for the op (torch's name for a stream wait)."""
        self.wait()

    def exception(self) -> Any:
        """mcr raises a library's failure from wait(); nothing is kept here."""
        return None

    def is_success(self) -> bool:
        """True once completed: a failure raises from wait() instead."""
        return self.is_completed()

    def source_rank(self) -> int:
        """Group rank of the sender of a receive from any source."""
        if self.source is not None:
            return self.source()
        if self._torch is not None:
            return self._torch.source_rank()
        raise RuntimeError(f"{self.describe()}: source_rank() is for receives only")

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<mcr Work {self.describe()}, {state}>"


_WORK_INIT = tdist.Work.__init__
# The Work of_torch handed out last: the next call reuses it once its caller has let go (an
# asynchronous call waited at once, the common pattern). Emptied when mcr's session ends.
SPARE: list[Work] = []
_refcount, _weakrefs = sys.getrefcount, weakref.getweakrefcount


def _sole_count() -> int:
    """getrefcount of an object held by one local only, taken as of_torch takes it (this
    frame's and the argument's: 2 up to Python 3.13; interpreters that borrow references for
    arguments count fewer)."""
    spare = [object()]
    w = spare.pop()
    return _refcount(w)


_SOLE = _sole_count()


class Composite(Work):
    """Work of a call made of other calls (a backend that composes others, like hier): its
    parts are waited one by one in the caller's thread, each by its own library's rules (a
    stream wait for stream-ordered ones, a host block for host ones), then its copy-backs run."""

    __slots__ = ("_parts",)

    def __init__(self, op: str, backend: str, nbytes: int, group_size: int, parts: list[Any],
                 after: list[Callable[[], None]] | None = None) -> None:
        super().__init__(op, backend, nbytes, group_size, after=after)
        self._parts = [p for p in parts if p is not None]   # None: a part already complete

    def is_completed(self) -> bool:
        """Have all parts finished (some host libraries only say so once waited)?"""
        return self._done or all(p.is_completed() for p in self._parts)

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        """Wait for every part, then run the copy-backs."""
        if not self._done:
            if isinstance(timeout, (int, float)):
                timeout = timedelta(seconds=timeout)
            for p in self._parts:
                p.wait() if timeout is None else p.wait(timeout)
            self._parts = []
            self._complete()
        return True

    def wait_issued(self) -> None:
        """As wait(): the parts ran on their libraries' own terms."""
        self.wait()
