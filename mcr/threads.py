"""Daemon worker threads that run a library's blocking calls in order, and a work handle over them.

A blocking MPI collective cannot be given a deadline, so mcr runs it on a worker and waits on
the result with one (MCR_TIMEOUT_S). The workers are daemon threads: a call stuck in a library
(a peer that never joined) must not keep the process from exiting after the error, as
concurrent.futures' executors would.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .waits import CHECK_EVERY_S, get_timeout


class Worker:
    """One daemon thread running submitted calls one after the other, in submission order."""

    def __init__(self, name: str) -> None:
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        # Each counter has one writer (the submitting thread, the worker), so no lock is needed.
        self._submitted = self._finished = 0
        self._since = 0.0   # monotonic start of the call running now; 0.0 while idle
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    @property
    def pending(self) -> int:
        """Calls submitted that have not returned yet."""
        return self._submitted - self._finished

    def running_for(self) -> float:
        """Seconds the call running now has run (0.0 while idle)."""
        since = self._since
        return time.monotonic() - since if since else 0.0

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Queue fn(*args); its Future holds the result or the exception."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._submitted += 1
        self._inbox.put((fut, fn, args))
        return fut

    def _loop(self) -> None:
        while True:
            fut, fn, args = self._inbox.get()
            self._since = time.monotonic()
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                error = e
            # Counted finished before the waiter wakes: it may read `pending` at once.
            self._since = 0.0
            self._finished += 1
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)


class Futures:
    """torch-work-like handle over calls on workers: mcr's Work waits on it with its deadline."""

    __slots__ = ("futures", "check")

    def __init__(self, futures: list[concurrent.futures.Future],
                 check: Callable[[], None] | None = None) -> None:
        self.futures = futures
        self.check = check   # as poll_until's: raises when the wait is hopeless

    def is_completed(self) -> bool:
        """Have all the calls returned?"""
        return all(f.done() for f in self.futures)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until all calls return (raising the first error), at most timeout or
        MCR_TIMEOUT_S."""
        secs = get_timeout() if timeout is None else timeout.total_seconds()
        deadline = time.monotonic() + secs
        for f in self.futures:
            while True:
                left = deadline - time.monotonic()
                try:
                    f.result(max(0.0, left if self.check is None else min(left, CHECK_EVERY_S)))
                    break
                except concurrent.futures.TimeoutError:
                    if left <= CHECK_EVERY_S or self.check is None:
                        # Work maps "timed out" to McrTimeoutError, naming the call.
                        raise TimeoutError(f"timed out after {secs:g} s") from None
                    self.check()
        return True


_HELPER: list[Worker] = []


def wait_helper() -> Worker:
    """One daemon thread that blocks in a host library's wait on behalf of a polling caller
    (a daemon: a wait stuck past its deadline must not keep the process from exiting)."""
    if not _HELPER:
        _HELPER.append(Worker("mcr-wait"))
    return _HELPER[0]
