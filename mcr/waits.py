"""Host waits with a deadline: every block of the host polls its condition, keeps MPI
progressing for the peers that wait on this host, and raises McrTimeoutError naming the call
at MCR_TIMEOUT_S (or sooner, once a check says the wait is hopeless)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch

from .errors import McrError, McrTimeoutError, MismatchError, library_error

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
# Set by the stall watch (mcr.stall) when a peer made another call at the point where this
# rank waits: the wait is hopeless, and its error says why, naming both calls.
STALL_NOTE = [""]


def set_timeout(seconds: float) -> None:
    """Deadline for every blocking wait from now on."""
    _TIMEOUT_S[0] = float(seconds)


def get_timeout() -> float:
    """Deadline in seconds for blocking waits."""
    return _TIMEOUT_S[0]


def progress() -> None:
    """Drive the host-progressed libraries (MPI) once: peers may wait on this host's requests."""
    for hook in PROGRESS_HOOKS:
        hook()


def timeout_error(what: str, timeout: float) -> McrError:
    """The error of a call (`what`) that did not complete within `timeout` seconds (a
    MismatchError where the stall watch found a peer at another call)."""
    note, STALL_NOTE[0] = STALL_NOTE[0], ""    # told once: the next call is not hopeless
    if note:
        return MismatchError(f"mcr: {what}: {note}")
    return McrTimeoutError(
        f"mcr: {what} did not complete within {timeout:g} s (MCR_TIMEOUT_S). A rank of the "
        "group may not have called it, or ranks issued collectives in a different order "
        "(MCR_CHECK=1 compares every call across ranks).")


def mcr_error(e: BaseException, what: str, secs: float) -> McrError:
    """A library's error as mcr's, naming the call: mcr's own as they are, a timeout as
    McrTimeoutError, anything else as LibraryError."""
    if isinstance(e, McrError):
        return e
    note, STALL_NOTE[0] = STALL_NOTE[0], ""
    if note:   # the library gave up because the peer at another call left
        return MismatchError(f"mcr: {what}: {note} (the library said: {e})")
    text = str(e).lower()
    # Gloo "Timed out waiting", torch "Operation timed out!", NCCL's watchdog "collective
    # operation timeout", and other texts naming a timeout; but torch's "wait() with finite
    # timeout not implemented" (a Work made in Python) is no timeout.
    if isinstance(e, TimeoutError) or "timed out" in text or \
            ("timeout" in text and "not implemented" not in text):
        return timeout_error(what, secs)
    return library_error(e, what)


_SLICE = timedelta(seconds=1)


def wait_torch_host(w: Any, secs: float | None = None) -> None:
    """torch's Work.wait for a host library (Gloo), in slices of a second up to `secs`
    (None: MCR_TIMEOUT_S): a wait the stall watch has found hopeless (STALL_NOTE) ends within
    a second. Raises the library's error, or RuntimeError("Operation timed out!") at the
    deadline."""
    try:
        # Most waits end within the first slice. No is_completed() first: on a Gloo work one
        # timed wait costs less than the two calls, done or not (0.29 against 0.44 us).
        w.wait(_SLICE)
        return
    except RuntimeError as e:
        secs = get_timeout() if secs is None else secs
        if not _slice_ran_out(e) or secs <= 1.0:
            raise
    deadline = time.monotonic() + secs - 1.0
    while True:
        try:
            w.wait(min(_SLICE, timedelta(seconds=max(0.001, deadline - time.monotonic()))))
            return
        except RuntimeError as e:
            if not _slice_ran_out(e) or time.monotonic() >= deadline:
                raise


def _slice_ran_out(e: RuntimeError) -> bool:
    """Whether torch's wait ended because its slice ran out (c10d's words; the library's own
    failures say others) and no note says the wait is hopeless."""
    return "Operation timed out!" in str(e) and not STALL_NOTE[0]


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
            progress()
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
            if waited > timeout or STALL_NOTE[0]:
                raise timeout_error(what if isinstance(what, str) else what(), timeout)
            if check is not None and waited > next_check:
                check()
                next_check = waited + CHECK_EVERY_S


def wait_event(event: torch.cuda.Event, what: str) -> None:
    """Host-wait for a CUDA event without a bare device synchronize, keeping MPI progressing."""
    poll_until(event.query, what)
