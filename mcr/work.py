"""One Work type over torch work, MPI requests and CUDA events, with the synchronization rules.

Stream-ordered work (NCCL and other GPU-stream libraries): wait() makes the caller's current stream
wait and returns without blocking the host; synchronize() blocks. Host-progressed work (Gloo, MPI):
wait() blocks the host until the library is done, then runs the copy-backs on the caller's stream.
Every host block has a deadline (MCR_TIMEOUT_S) and keeps MPI progressing while it waits.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as tdist

from .errors import McrError, McrTimeoutError, library_error

if TYPE_CHECKING:
    from .threads import Worker

# Called while the host waits, so that a host-progressed library (MPI) keeps moving messages for
# the peers that wait on us. Backends register here.
PROGRESS_HOOKS: list[Callable[[], None]] = []
# Host-progressed requests (MPI) this process issued and has not completed. While there are
# none, no peer can be waiting on this host's progress, so a blocking call may block in its
# library instead of polling.
PENDING = [0]
_TIMEOUT_S = [600.0]
# How often a long wait asks whether it is hopeless (a peer has left: backends.departures).
CHECK_EVERY_S = 0.5
# Called with (work, seconds) when a work completes and the comms logger is on.
ON_COMPLETE: list[Callable[[Work, float], None]] = []


def set_timeout(seconds: float) -> None:
    """Deadline for every blocking wait from now on."""
    _TIMEOUT_S[0] = float(seconds)


def get_timeout() -> float:
    """Deadline in seconds for blocking waits."""
    return _TIMEOUT_S[0]


def _progress() -> None:
    for hook in PROGRESS_HOOKS:
        hook()


def timeout_error(what: str, timeout: float) -> McrTimeoutError:
    """The error of a call (`what`) that did not complete within `timeout` seconds."""
    return McrTimeoutError(
        f"mcr: {what} did not complete within {timeout:g} s (MCR_TIMEOUT_S). A rank of the "
        "group may not have called it, or ranks issued collectives in a different order "
        "(MCR_CHECK=1 compares every call across ranks).")


def mcr_error(e: BaseException, what: str, secs: float) -> McrError:
    """A library's error as mcr's, naming the call: mcr's own as they are, a timeout as
    McrTimeoutError, anything else as LibraryError."""
    if isinstance(e, McrError):
        return e
    text = str(e).lower()
    if "timeout" in text or "timed out" in text:
        return timeout_error(what, secs)
    return library_error(e, what)


def poll_until(done: Callable[[], bool], what: str | Callable[[], str],
               timeout: float | None = None, progresses: bool = False,
               check: Callable[[], None] | None = None) -> None:
    """Block the host until done() is true, progressing MPI (unless done() does: an MPI test);
    raise McrTimeoutError naming `what` (or what()) on deadline. check(), if given, runs every
    CHECK_EVERY_S once the wait is that long, and raises if the wait is hopeless."""
    if done():
        return
    timeout = get_timeout() if timeout is None else timeout
    start = time.monotonic()
    spins = 0
    next_check = CHECK_EVERY_S
    while True:
        if not progresses:
            _progress()
        if done():
            return
        spins += 1
        if spins > 64:
            # Yield the core (ranks are often oversubscribed, and Gloo's threads need CPU too),
            # then sleep, by time waited rather than by count: Open MPI's non-blocking
            # collectives advance only when tested, so a call of tens of ms must still be
            # tested often (a 1 ms sleep after 5000 tests slowed a 16 MiB one 1.5x).
            waited = time.monotonic() - start
            if waited < 0.05:
                os.sched_yield()
            else:
                time.sleep(2e-5 if waited < 1.0 else 1e-3)
            if waited > timeout:
                raise timeout_error(what if isinstance(what, str) else what(), timeout)
            if check is not None and waited > next_check:
                check()
                next_check = waited + CHECK_EVERY_S


_HELPER: list[Worker] = []


def _helper() -> Worker:
    """One daemon thread that blocks in a host library's wait on behalf of a polling caller
    (a daemon: a wait stuck past its deadline must not keep the process from exiting)."""
    if not _HELPER:
        from .threads import Worker  # threads imports this module's get_timeout
        _HELPER.append(Worker("mcr-wait"))
    return _HELPER[0]


def wait_event(event: torch.cuda.Event, what: str) -> None:
    """Host-wait for a CUDA event without a bare device synchronize, keeping MPI progressing."""
    poll_until(event.query, what)


# torch.cuda.current_stream() costs several microseconds of Python per call on the GPU hosts
# here (NOTES.md v9); these are the C calls underneath it. Public fallbacks where torch lacks them.
_get_device = getattr(torch._C, "_cuda_getDevice", None)
_get_stream = getattr(torch._C, "_cuda_getCurrentStream", None)
# Is the current stream capturing a CUDA graph? (torch's C call: the Python wrapper costs more)
capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or \
    torch.cuda.is_current_stream_capturing


StreamId = tuple[int, int, int]   # (stream id, device index, device type), as torch names them


def current_stream_id(device: int | None = None) -> StreamId:
    """The current CUDA stream of `device` (default: the current device) as a StreamId."""
    if _get_device is None or _get_stream is None:
        s = torch.cuda.current_stream(device)
        return s.stream_id, s.device_index, s.device_type
    return tuple(_get_stream(_get_device() if device is None else device))


def stream_of(sid: StreamId) -> torch.cuda.Stream:
    """The torch Stream a StreamId names."""
    return torch.cuda.Stream(stream_id=sid[0], device_index=sid[1], device_type=sid[2])


def follow_stream(last: StreamId | None, device: int) -> StreamId:
    """The caller's current stream on `device`, made to wait first for `last` (the stream of
    the previous call on a buffer both calls use) where they differ, outside graph capture: two
    calls on two streams then use the buffer one after the other."""
    sid = current_stream_id(device)
    if last is not None and last != sid and not capturing():
        stream_of(sid).wait_stream(stream_of(last))
    return sid


class StreamDone:
    """torch-work-like handle of ops enqueued on a CUDA stream with no library work object.

    Holds the stream's id, not a Stream object (cheap to take per call). The completion event is
    recorded lazily, at the first wait or query: it then also covers later work on that stream,
    which is conservative and costs nothing on the common path (a wait on the same stream).
    """

    __slots__ = ("sid", "event")

    def __init__(self, sid: StreamId | None = None) -> None:
        self.sid = current_stream_id() if sid is None else sid
        self.event: torch.cuda.Event | None = None

    @property
    def stream(self) -> torch.cuda.Stream:
        """The stream the ops were enqueued on."""
        return stream_of(self.sid)

    def _ev(self) -> torch.cuda.Event:
        if self.event is None:
            self.event = torch.cuda.Event()
            self.event.record(self.stream)
        return self.event

    def wait(self, timeout: Any = None) -> bool:
        """The caller's current stream waits for the op (no host block)."""
        cur = current_stream_id(self.sid[1])
        if cur != self.sid:
            stream_of(cur).wait_event(self._ev())
        return True

    def is_completed(self) -> bool:
        """Has the device finished the op?"""
        return self._ev().query()

    def get_future(self) -> Any:
        """Stream-ordered copy-engine ops have no torch future."""
        raise NotImplementedError("this backend's work has no torch future; use wait()")


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
            # The common case, cheaply: a torch work, no MPI owed: torch waits (host libraries
            # with their group's timeout, which mcr set to MCR_TIMEOUT_S).
            try:
                self._torch.wait()
            except Exception as e:  # noqa: BLE001 - a library's, raised as mcr's
                self._raise(e, get_timeout())
            self._complete()
            return True
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        secs = get_timeout() if secs is None else secs
        if self._torch is not None:
            if self._stream:
                self._torch.wait()
            else:
                self._wait_torch_host(secs)
        if self._reqs:
            reqs, test = self._reqs, self._mpi_test
            try:
                # MPI_Test drives MPI's whole progress engine: no separate nudge needed.
                poll_until(lambda: test(reqs), self.describe(), secs, progresses=True,
                           check=self.check)
            except Exception as e:  # noqa: BLE001 - MPI's errors, raised as mcr's
                raise mcr_error(e, self.describe(), secs) from e
        self._complete()
        return True

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
        if self._after:
            for fn in self._after:
                fn()
        self._done = True
        self._keep = ()
        if self._reqs:
            PENDING[0] -= 1
            self._reqs = None
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
            fut = _helper().submit(self._torch.wait, timedelta(seconds=secs))
            poll_until(fut.done, self.describe(), secs)
            wait = fut.result
        else:
            wait = functools.partial(self._torch.wait, timedelta(seconds=secs))
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
        """The torch future of the underlying work, where the library has one."""
        if self._torch is None:
            raise NotImplementedError(f"{self.describe()}: no torch future for this backend")
        return self._torch.get_future()

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
