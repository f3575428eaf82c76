"""How a collective reaches MPI and completes (the MPI backend's half that is about forms, not
ops): the blocking form in the caller's thread, at any size, where mcr.guard's board shows every
rank made the same synchronous call; otherwise the blocking form on a worker thread from
MCR_MPI_BLOCKING_BYTES, else the non-blocking form, polled with a deadline; every form checks
for ranks that left the job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import McrTimeoutError
from ...groups import Group
from ...threads import Futures, Worker
from ...waits import get_timeout, mcr_error, poll_until
from ...work import Work

_NONBLOCKING = {n: "I" + n[0].lower() + n[1:] for n in (
    "Allreduce", "Allgather", "Allgatherv", "Reduce_scatter_block", "Alltoallv", "Bcast",
    "Reduce", "Gather", "Scatter", "Barrier")}   # MPI's non-blocking form of each collective
_NOT_ISSUED = object()      # _issue's call: not yet counted in departures


class Issuing:
    """The MPI backend's issue-and-complete methods (a mixin of MpiBackend: self.MPI,
    self.departures, self.blocking_bytes, self._multiple, self._worker, self.name)."""

    MPI: Any
    departures: Any
    blocking_bytes: float
    name: str
    _multiple: bool
    _worker: Worker | None

    def _work(self, op: str, nbytes: int, g: Group, reqs: list, after: list[Callable[[], None]],
              keep: tuple, source: Callable[[], int] | None = None,
              on_worker: Futures | None = None, peer: int | None = None,
              call: tuple | None = None) -> Work:
        w = Work(op, self.name, nbytes, g.size, torch_work=on_worker, mpi_requests=reqs,
                 mpi_test=self.MPI.Request.Testall, after=after, keep=keep)
        w.source = source
        w.check = self.departures.watch(g.ranks if peer is None else [g.ranks[peer]],
                                        w.describe, call, any_of=peer is not None or source is None)
        if on_worker is not None:
            on_worker.check = w.check
        return w

    def _issue(self, g: Group, name: str, args: tuple, nbytes: int = -1,
               blocking_fn: Callable[[Any], None] | None = None, call: Any = _NOT_ISSUED
               ) -> tuple[list, Futures | None, tuple | None]:
        """Start the collective MPI names `name` (blocking form) on g's communicator.

        From MCR_MPI_BLOCKING_BYTES of nbytes (a size every rank shares; -1: none), its blocking
        form (blocking_fn(comm) where given) runs on the worker. Otherwise its non-blocking form
        is issued here, or, while the worker has calls queued, by the worker (this thread waits
        until it is issued): every collective reaches the communicator in this rank's order,
        and a non-blocking one still completes in any order. Returns (requests, worker handle,
        the call's name for departures.watch).
        """
        comm = g.handles[self.name]
        if call is _NOT_ISSUED:     # else counted already (_coll's blocking attempt)
            call = self.departures.issue(comm)
        nonblocking = getattr(comm, _NONBLOCKING[name])
        busy = not self._worker_idle()
        if busy:
            self._not_stuck(name)
        if not (0 <= self.blocking_bytes <= nbytes and self._multiple):
            if not busy:
                return [nonblocking(*args)], None, call
            issued = self._worker.submit(nonblocking, *args)
            try:
                Futures([issued], self.departures.watch(g.ranks, lambda: f"MPI_{name}",
                                                        call)).wait()
            except TimeoutError as e:
                raise McrTimeoutError(
                    f"mcr: MPI_{name} waited {get_timeout():g} s (MCR_TIMEOUT_S) behind the "
                    "blocking MPI collectives this rank issued before it: a rank of their "
                    "groups may not have called one of them") from e
            return [issued.result()], None, call
        if self._worker is None:
            self._worker = Worker("mcr-mpi")
        fn = getattr(comm, name) if blocking_fn is None else (lambda *_: blocking_fn(comm))
        return [], Futures([self._worker.submit(fn, *args)]), call

    def _blocking(self, g: Group, name: str, args: tuple, after: list[Callable[[], None]],
                  what: Callable[[], str], blocking_fn: Callable[[Any], None] | None) -> None:
        """The blocking form of MPI's collective `name` (blocking_fn(comm) where given) on g's
        communicator, here, then the copy-backs."""
        comm = g.handles[self.name]
        try:
            if blocking_fn is None:
                getattr(comm, name)(*args)
            else:
                blocking_fn(comm)
        except Exception as e:  # noqa: BLE001 - MPI's errors, raised as mcr's
            raise mcr_error(e, what(), get_timeout()) from e
        for fn in after:
            fn()

    def _worker_idle(self) -> bool:
        """Whether no call is queued on the worker: only then may this thread reach the
        communicator itself (collectives reach it in this rank's order)."""
        return self._worker is None or not self._worker.pending

    def _not_stuck(self, name: str) -> None:
        """Refuse a call at once, rather than after another deadline, when the worker is still
        inside a blocking collective that already timed out: MPI cannot interrupt it."""
        secs, limit = self._worker.running_for(), get_timeout()
        if secs > limit:
            raise McrTimeoutError(
                f"mcr: MPI_{name} not issued: this rank's MPI worker has been inside an earlier "
                f"blocking MPI collective for {secs:.0f} s, past MCR_TIMEOUT_S ({limit:g} s), "
                "and MPI cannot interrupt it (a rank of its group never called it). No later "
                "MPI collective can run on this rank; restart the job.")

    def drain(self) -> None:
        """Wait until the worker has returned every call: MPI calls made outside _issue on a
        communicator (creating others from it) must not overtake queued collectives."""
        w = self._worker
        if w is not None and w.pending:
            poll_until(lambda: not w.pending, "MPI collectives queued on mcr's worker thread")

    def _coll(self, op: str, g: Group, name: str, args: tuple, nbytes: int, shared: bool,
              after: list[Callable[[], None]], keep: tuple,
              blocking_fn: Callable[[Any], None] | None = None, *, sync: bool) -> Work | None:
        """_issue, then the Work, or (sync) complete the call here and return None: a
        synchronous call skips the Work object, which costs more host time than a small MPI
        call itself. shared: nbytes is the same on every rank of g."""
        what = lambda: f"{op} on backend '{self.name}' ({nbytes} bytes)"  # noqa: E731
        call: Any = _NOT_ISSUED
        bd = g.board
        if bd:
            if sync and self._worker_idle():
                call = self.departures.issue(g.handles[self.name])
                if bd.met(g.calls, what, self.departures.watch(g.ranks, what, call)):
                    # Every rank made this very call (mcr.guard's board) and runs it blocking:
                    # the blocking form cannot wait for a peer at another call, and runs faster
                    # than the non-blocking one (Open MPI's libnbc: 2x slower at 4 KiB-1 MiB)
                    # and than the worker's hand-off at every size (3 MiB: 1.67x on 2 cores).
                    return self._blocking(g, name, args, after, what, blocking_fn)
            else:
                bd.decide(g.calls)     # peers that would run it blocking learn they cannot
        reqs, fut, call = self._issue(g, name, args, nbytes if shared else -1, blocking_fn, call)
        if not sync:
            return self._work(op, nbytes, g, reqs, after, keep, on_worker=fut, call=call)
        check = self.departures.watch(g.ranks, what, call)
        try:
            if fut is not None:
                fut.check = check
                fut.wait()
            elif len(reqs) == 1:
                poll_until(reqs[0].Test, what, progresses=True, check=check)
            else:
                poll_until(lambda: self.MPI.Request.Testall(reqs), what, progresses=True,
                           check=check)
        except Exception as e:  # noqa: BLE001 - MPI's errors, raised as mcr's
            raise mcr_error(e, what(), get_timeout()) from e
        for fn in after:
            fn()
        return None
