"""Ranks that have left an MPI job, told by the ranks themselves.

A rank whose program ends (sys.exit, the end of the script) sits in MPI_Finalize until every
rank gets there (Open MPI fences), so a peer waiting for it in a collective would wait
MCR_TIMEOUT_S (600 s by default) before it raised. At exit each rank therefore sends every other
rank a one-word notice on a communicator of its own; a peer that has waited a while checks for
notices and raises once a rank its call needs has left (and the call has had GRACE_S more to
complete, for data that was already on its way). A job whose ranks all end together only pays
the notices: nobody checks them.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Callable
from typing import Any

from ..errors import LibraryError

TAG = 0x6D6372          # "mcr": the notices' own communicator makes clashes impossible anyway
GRACE_S = 2.0           # after a notice, for data the leaving rank had already sent


class Departures:
    """The world's leaving notices: announce() at exit, watch() for a waiting call."""

    def __init__(self, MPI: Any) -> None:
        self.MPI = MPI
        self.comm: Any = None
        self.left: dict[int, float] = {}    # world rank -> when its notice arrived (monotonic)
        self._word = bytearray(1)

    def start(self, world: Any) -> None:
        """Duplicate the world communicator (collective: every rank binds the world) and send
        the notices at exit; once per process."""
        if self.comm is not None or world.Get_size() < 2:
            return
        self.comm = world.Dup()
        # After mpi4py's own atexit hook (MPI_Finalize) was registered, so it runs before it.
        atexit.register(self.announce)

    def announce(self) -> None:
        """Tell every other rank that this one is leaving (its program has ended)."""
        MPI = self.MPI
        if self.comm is None or not MPI.Is_initialized() or MPI.Is_finalized():
            return
        me = self.comm.Get_rank()
        try:
            reqs = [self.comm.Isend([self._word, 1, MPI.BYTE], r, TAG)
                    for r in range(self.comm.Get_size()) if r != me]
            deadline = time.monotonic() + 1.0   # one-byte sends go eagerly; never hold the exit
            while not MPI.Request.Testall(reqs) and time.monotonic() < deadline:
                time.sleep(1e-4)
        except MPI.Exception:
            # A peer already gone (Open MPI's async_mpi_finalize skips the fence that keeps
            # them): nobody is left to wait for this rank, and an exit must not fail on it.
            pass

    def _collect(self) -> None:
        MPI, status = self.MPI, self.MPI.Status()
        while self.comm.Iprobe(MPI.ANY_SOURCE, TAG, status):
            src = status.Get_source()
            self.comm.Recv([self._word, 1, MPI.BYTE], src, TAG)
            self.left.setdefault(src, time.monotonic())

    def watch(self, ranks: list[int], what: Callable[[], str],
              any_of: bool = True) -> Callable[[], None] | None:
        """A check for a wait on `ranks` (world ranks): it raises LibraryError once one of them
        (any_of=False: all of them) left GRACE_S ago. None where nothing can tell."""
        if self.comm is None:
            return None

        def check() -> None:   # built on every call, run only by long waits: keep work here
            self._collect()
            me, now = self.comm.Get_rank(), time.monotonic()
            peers = [r for r in ranks if r != me]
            gone = [r for r in peers if now - self.left.get(r, now) > GRACE_S]
            if gone and (any_of or len(gone) == len(peers)):
                raise LibraryError(
                    f"mcr: {what()}: rank{'s' if len(gone) > 1 else ''} "
                    f"{', '.join(map(str, gone))} left the job (its program ended: sys.exit or "
                    "the end of the script) while this rank waits for it; a rank must not end "
                    "before the calls its peers make with it")
        return check
