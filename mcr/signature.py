"""The always-on cross-rank check (SignatureCheck), through torch's store: each new kind of call
compared across its group before any library runs it; and the notes by which a rank stuck in
one call and a peer stuck at a new kind of call at the same point learn of each other (the
stall watch, mcr.stall, writes and reads them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch.distributed as tdist

from . import ops as O
from .checks import describe
from .errors import LibraryError, McrTimeoutError, MismatchError
from .groups import Group
from .ops import CallKey
from .waits import CHECK_EVERY_S, PENDING, progress

# Between a store value's fields: the signature (or a description), then the call's index in
# its group (Group.calls), which the comparison leaves out.
SEP = "\x00"
# A wait this long at a new kind of call asks whether a peer waits in another call at the
# same point (the peer's stall watch says so once it has waited MCR_STALL_S).
ASK_ELSEWHERE_S = 1.0


class SignatureCheck:
    """The always-on check: each rank compares a call with its group the first time it makes
    a call of that signature (op, bytes, dtype, reduce op, root, library). In a correct program
    new signatures come at the same point on every rank, so this costs one round trip through
    torch's store per distinct call, and never touches the data libraries: ranks that disagree
    get a MismatchError naming what each passed before any library can hang or mix their data.
    A rank whose peer waits in a call of a kind made before, at the same point of the group's
    calls, is told so naming both calls once the peer's stall watch has spoken (MCR_STALL_S);
    one whose peer left mcr (destroy_process_group, the end of its program) before the call
    is told at once; otherwise it waits `timeout` seconds.
    """

    # mcr sessions started in this process: a session's keys are its own, as a torch store
    # that outlives mcr (DeepSpeed's, a user's) still holds the keys of the session before.
    made = 0

    def __init__(self, store: Any, timeout: float) -> None:
        self.store = store
        self.timeout, self.poll = timeout, min(CHECK_EVERY_S, timeout)
        self._seq: dict[tuple[str, tuple[int, ...]], int] = {}
        SignatureCheck.made += 1
        self.root = f"mcr/{SignatureCheck.made}/"

    def leave(self, rank: int) -> None:
        """Say in the store that this rank (world rank) makes no more calls in this session."""
        self.store.set(f"{self.root}left/{rank}", "1")

    def __call__(self, key: CallKey, g: Group, root: int, backend: str) -> None:
        """Compare this call's signature with the group's (collective over the group)."""
        ranks = tuple(g.ranks)
        mine = signature(key, root, backend)

        def what() -> str:
            return f"{key.op} on backend '{backend}' ({key.nbytes} bytes)"
        every = self.gather(g.tag, ranks, g.rank, mine, what,
                            f"rank {ranks[g.rank]} made a new one: {mine}", call=g.calls)
        if any(v != mine for v in every):
            rows = "; ".join(f"rank {ranks[r]}: {v}" for r, v in enumerate(every))
            raise MismatchError(f"ranks of group {list(ranks)} disagree on a {key.op} call: "
                                f"{rows}")

    def gather(self, tag: str, ranks: tuple[int, ...], rank: int, mine: str,
               what: Callable[[], str], new: str, call: int = -1) -> list[str]:
        """Every rank's value in one comparison over ranks (collective over them; rank: this
        one's index; call: this call's index in its group, -1 where none is kept), through
        torch's store: a late peer waited up to the timeout, one that left mcr named at once,
        one that waits in another call at this same point named once it has said so, a store
        that failed named as such."""
        n = self._seq[(tag, ranks)] = self._seq.get((tag, ranks), 0) + 1
        names = [self._prefix(tag, ranks, n) + str(r) for r in range(len(ranks))]
        try:
            self.store.set(names[rank], f"{mine}{SEP}{call}")
            self._wait(names, ranks, what, new, group_key(tag, ranks), call, mine)
            every = [v.decode().rpartition(SEP)[0] for v in self.store.multi_get(names)]
            if n > 1:
                # Every rank set its key n after reading all of n - 1: this rank's key of the
                # comparison before is read by all, and goes (two keys a rank at most).
                self.store.delete_key(self._prefix(tag, ranks, n - 1) + str(rank))
            return every
        except tdist.DistError as e:
            raise LibraryError(
                f"mcr: {what()}: torch's store failed ({type(e).__name__}: {e}); the process "
                "that hosts it (rank 0 under mpirun, torchrun's agent) has left or crashed"
            ) from e

    def _prefix(self, tag: str, ranks: tuple[int, ...], n: int) -> str:
        return f"{self.root}sig/{tag}{'.'.join(map(str, ranks))}/{n}/"

    # -- what the stall watch writes and reads ----------------------------------------------

    def part(self, group: str, call: int, index: int, made: str) -> None:
        """Say that the rank at `index` of group (its key) made `made` at call `call` of the
        group, where a peer made another: every peer's error names both calls, also once this
        rank has left."""
        self.store.set(f"{self.root}parted/{group}/{call}/{index}", made)

    def made_at(self, group: str, call: int, index: int) -> str | None:
        """What the rank at `index` of group said it made at call `call`, where it parted from
        a peer (part()); None if it did not say."""
        k = f"{self.root}parted/{group}/{call}/{index}"
        return self.store.get(k).decode() if self.store.check([k]) else None

    def publish(self, rank: int, tag: str, ranks: tuple[int, ...], what: str, call: int) -> None:
        """Say that this rank (world rank) waits in `what`, call `call` of group ranks."""
        self.store.set(f"{self.root}now/{rank}",
                       SEP.join((group_key(tag, ranks), what, str(call))))

    def withdraw(self, rank: int) -> None:
        """This rank's wait that publish() told of is over."""
        self.store.delete_key(f"{self.root}now/{rank}")

    def waiting_in(self, rank: int) -> tuple[str, str, int] | None:
        """(group key, call, index) that `rank` says it waits in, or None."""
        k = f"{self.root}now/{rank}"
        if not self.store.check([k]):
            return None
        group, what, call = self.store.get(k).decode().split(SEP)
        return group, what, int(call)

    def peer_ahead(self, tag: str, ranks: tuple[int, ...], me: int, call: int) -> str | None:
        """A peer of the group (ranks; me: this rank's index) that made a new kind of call at
        the same call index as this rank's current one, as `rank R made a new kind of call,
        SIG`; None if there is none."""
        prefix = self._prefix(tag, ranks, self._seq.get((tag, ranks), 0) + 1)
        for i, r in enumerate(ranks):
            if i != me and self.store.check([prefix + str(i)]):
                sig, _, at = self.store.get(prefix + str(i)).decode().rpartition(SEP)
                if at == str(call):
                    return f"rank {r} made a new kind of call, {sig}"
        return None

    def peer_elsewhere(self, tag: str, ranks: tuple[int, ...], me: int, call: int, what: str
                       ) -> str | None:
        """A peer of the group that waits in another call than `what` at this call index, or
        whose guard found the ranks' calls differ there (mcr.guard writes its call), as `rank
        R waits in CALL`; None if there is none."""
        group = group_key(tag, ranks)
        for i, r in enumerate(ranks):
            if i == me:
                continue
            made = self.made_at(group, call, i)
            if made is not None and made != what:
                return f"rank {r} made {made}"
            there = self.waiting_in(r)
            if there is not None and there[0] == group and there[2] == call and there[1] != what:
                return f"rank {r} waits in {there[1]}"
        return None

    def _wait(self, names: list[str], ranks: tuple[int, ...], what: Callable[[], str],
              new: str, group: str, call: int, mine: str) -> None:
        """Poll for every rank's key; now and then ask who said it made another call at this
        same point (and may have left since), who left without setting one, or who waits in
        another call here.

        store.check, not store.wait in slices: each timed-out slice of a wait logs a warning
        from torch's C++ store (two lines per slice while a peer is late)."""
        start = now = time.monotonic()
        deadline, ask, nap = now + self.timeout, now + self.poll, 1e-4
        while not self.store.check(names):
            now = time.monotonic()
            if now >= ask:
                # A rank's leave() comes after every key it set: checked in this order, a
                # rank that left with its key still missing never makes this call.
                missing = [(k, r) for k, r in zip(names, ranks) if not self.store.check([k])]
                if call >= 0:
                    self._parted(missing, ranks, what, new, group, call, mine)
                gone = [r for k, r in missing if self.store.check([f"{self.root}left/{r}"])
                        and not self.store.check([k])]
                if gone:
                    raise LibraryError(
                        f"mcr: {what()}: rank{'s' if len(gone) > 1 else ''} "
                        f"{', '.join(map(str, gone))} of group {list(ranks)} left mcr "
                        "(destroy_process_group, or its program ended) before making this "
                        "call; a rank must not end before the calls its peers make with it")
                if call >= 0 and now - start >= ASK_ELSEWHERE_S:
                    self._elsewhere(missing, what, new, group, call, list(ranks))
                if now >= deadline:
                    raise McrTimeoutError(
                        f"mcr: {what()}: the other ranks of group {list(ranks)} did not reach "
                        f"this call within {self.timeout:g} s (MCR_CHECK_TIMEOUT_S, default "
                        f"MCR_TIMEOUT_S): they are late or stuck, or made a call of a kind "
                        f"they had made before while {new}")
                ask = now + self.poll
            if PENDING[0]:
                # A peer may be inside a call it made synchronously that waits on this rank's
                # asynchronous MPI requests of the same point: they move only when progressed.
                progress()
                nap = 1e-4
            time.sleep(nap)
            nap = min(2 * nap, 0.01)   # a peer a moment behind is seen at once

    def _parted(self, missing: list[tuple[str, int]], ranks: tuple[int, ...],
                what: Callable[[], str], new: str, group: str, call: int, mine: str) -> None:
        """MismatchError if a missing rank said it made another call at this call index (its
        stall watch or guard found the ranks parted there; it may have left since)."""
        for _, r in missing:
            made = self.made_at(group, call, ranks.index(r))
            if made is not None and made != mine:
                raise MismatchError(
                    f"mcr: {what()}: ranks of group {list(ranks)} made different calls at call "
                    f"{call} of the group: {new}; rank {r} made {made}")

    def _elsewhere(self, missing: list[tuple[str, int]], what: Callable[[], str], new: str,
                   group: str, call: int, ranks: list[int]) -> None:
        """MismatchError if a missing rank says it waits in another call of this group at
        this same call index."""
        for _, r in missing:
            there = self.waiting_in(r)
            if there is not None and there[0] == group and there[2] == call:
                raise MismatchError(
                    f"mcr: {what()}: ranks of group {ranks} made different calls at call "
                    f"{call} of the group: {new}; rank {r} waits in {there[1]}, a kind of call "
                    "made before")


def signature(key: CallKey, root: int, backend: str) -> str:
    """The always-on check's view of a call: describe() of its key."""
    redop = O.redop_name(key.redop) if key.redop is not None else ""
    return describe(key.op, redop, key.dtype, key.nbytes, root, backend)


def group_key(tag: str, ranks: tuple[int, ...]) -> str:
    """A group's name in the store's keys: its tag and ranks."""
    return f"{tag}{'.'.join(map(str, ranks))}"
