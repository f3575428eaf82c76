"""Ranks that have left an MPI job, told by the ranks themselves.

A rank whose program ends (sys.exit, the end of the script) sits in MPI_Finalize until every
rank gets there (Open MPI fences), so a peer waiting for it in a collective would wait
MCR_TIMEOUT_S (600 s by default) before it raised. At exit each rank therefore sends every other
rank a notice, on a communicator of its own, that holds how many collectives it issued on each
of its communicators. A peer that has waited a while reads the notices: if a rank of its call's
group left having issued fewer collectives there than this call's number, it never made the
call and the wait is hopeless, so the peer raises. A rank that left after making the call (it
got its part of a broadcast and ended) is no error: the call may still need a live rank that
is late. A job whose ranks all end together only pays the notices: nobody reads them.

Communicators are named alike on every rank without talking: "world" for COMM_WORLD, else the
name of the group they serve (groups.Spec.name, the same on every member).
"""

from __future__ import annotations

import atexit
import pickle
import time
from collections.abc import Callable
from typing import Any

from ...errors import LibraryError

TAG = 0x6D6372          # "mcr": the notices' own communicator makes clashes impossible anyway
GRACE_S = 2.0           # point-to-point: after a notice, for data the leaving rank had sent

Key = str               # a communicator's name, the same on every member


class Departures:
    """Collectives issued per communicator, the notices at exit, and checks for long waits."""

    def __init__(self, MPI: Any) -> None:
        self.MPI = MPI
        self.comm: Any = None
        self.issued: dict[Key, int] = {}      # communicator name -> collectives issued on it
        self._names: dict[int, Key] = {}      # id(communicator) -> its name
        self.left: dict[int, tuple[float, dict[Key, int]]] = {}   # world rank -> (when, issued)

    def start(self, world: Any) -> None:
        """Duplicate the world communicator (collective: every rank binds the world) and send
        the notices at exit; once per process."""
        self._names[id(world)] = "world"
        if self.comm is not None or world.Get_size() < 2:
            return
        self.comm = world.Dup()
        # After mpi4py's own atexit hook (MPI_Finalize) was registered, so it runs before it.
        atexit.register(self.announce)

    def name(self, comm: Any, group: str) -> None:
        """Name a communicator bind() made for the group of that name (Spec.name)."""
        self._names[id(comm)] = group

    def forget(self, comm: Any) -> None:
        """The communicator is freed (its id may come back); its count stays for the notice."""
        self._names.pop(id(comm), None)

    def issue(self, comm: Any) -> tuple[Key, int] | None:
        """Count a collective issued on comm; (its communicator's name, its number there)."""
        key = self._names.get(id(comm))
        if key is None:
            return None
        n = self.issued[key] = self.issued.get(key, 0) + 1
        return key, n

    def announce(self) -> None:
        """Tell every other rank that this one is leaving, with what it issued where."""
        MPI = self.MPI
        if self.comm is None or not MPI.Is_initialized() or MPI.Is_finalized():
            return
        me, note = self.comm.Get_rank(), pickle.dumps(self.issued)
        try:
            reqs = [self.comm.Isend([note, MPI.BYTE], r, TAG)
                    for r in range(self.comm.Get_size()) if r != me]
            deadline = time.monotonic() + 1.0   # small sends go eagerly; never hold the exit
            while not MPI.Request.Testall(reqs) and time.monotonic() < deadline:
                time.sleep(1e-4)
        except MPI.Exception:
            # A peer already gone (Open MPI's async_mpi_finalize skips the fence that keeps
            # them): nobody is left to wait for this rank, and an exit must not fail on it.
            pass

    def _collect(self) -> None:
        MPI, status = self.MPI, self.MPI.Status()
        # A matched probe: the message found is the one received, whichever thread waits.
        while (msg := self.comm.Improbe(MPI.ANY_SOURCE, TAG, status)) is not None:
            buf = bytearray(status.Get_count(MPI.BYTE))
            msg.Recv([buf, MPI.BYTE])
            self.left.setdefault(status.Get_source(),
                                 (time.monotonic(), pickle.loads(buf)))  # noqa: S301

    def watch(self, ranks: list[int], what: Callable[[], str], call: tuple[Key, int] | None,
              any_of: bool = True) -> Callable[[], None] | None:
        """A check for a wait on `ranks` (world ranks). A collective (call: its communicator's
        name and number) is hopeless once a rank of it left before issuing it; a point-to-point
        wait once its peer (any_of=False: every rank) left GRACE_S ago. None where nothing can
        tell."""
        if self.comm is None:
            return None

        def check() -> None:   # built on every call, run only by long waits: keep work here
            self._collect()
            me, now = self.comm.Get_rank(), time.monotonic()
            peers = [r for r in ranks if r != me and r in self.left]
            if call is not None:
                key, n = call
                gone = [r for r in peers if self.left[r][1].get(key, 0) < n]
            else:
                gone = [r for r in peers if now - self.left[r][0] > GRACE_S]
                if not any_of and len(gone) < len(ranks) - (me in ranks):
                    gone = []
            if gone:
                raise LibraryError(
                    f"mcr: {what()}: rank{'s' if len(gone) > 1 else ''} "
                    f"{', '.join(map(str, gone))} left the job (its program ended: sys.exit or "
                    "the end of the script) "
                    + ("before making this call" if call is not None else "while this rank "
                       "waits for it")
                    + "; a rank must not end before the calls its peers make with it")
        return check
