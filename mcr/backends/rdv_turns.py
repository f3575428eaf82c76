"""Torch numbers its symmetric-memory rendezvous per process, not per group: its store keys are
(group, the process's n-th rendezvous, rank). Ranks of one group that made different numbers of
rendezvous before (one sat out a sub-group's) look for different keys and wait out the store's
timeout with no word of why (4x H200: the tuner's world pass after a 2-rank pass). Before each
rendezvous mcr makes, the group's ranks compare how many they have made; if they differ, every
rank stops at once with an error that says so, instead of waiting."""

from __future__ import annotations

import time
from typing import Any

from ..errors import CallError, McrTimeoutError

POLL_S = 0.001


class RendezvousTurns:
    """This process's count of symmetric-memory rendezvous, compared within a group before
    each one."""

    def __init__(self) -> None:
        self.made = 0
        self._per_group: dict[str, int] = {}

    def before(self, store: Any, group: str, rank: int, ranks: list[int],
               timeout_s: float) -> None:
        """Compare this rank's count with the group's (collective over the group: every member
        calls it before the same rendezvous); CallError naming each rank's count if they
        differ."""
        k = self._per_group[group] = self._per_group.get(group, 0) + 1
        root = f"mcr/rdv/{group}/{k}/"
        store.set(f"{root}{rank}", str(self.made))
        names = [f"{root}{r}" for r in range(len(ranks))]
        deadline = time.monotonic() + timeout_s
        while not store.check(names):
            if time.monotonic() > deadline:
                raise McrTimeoutError(
                    f"mcr: symmetric-memory setup on group {ranks}: the other ranks did not "
                    f"reach it within {timeout_s:g} s (the store's timeout)")
            time.sleep(POLL_S)
        counts = [int(store.get(n)) for n in names]
        if len(set(counts)) > 1:
            by = "; ".join(f"rank {g}: {c}" for g, c in zip(ranks, counts))
            raise CallError(
                f"mcr: symmetric-memory setup on group {ranks} cannot meet: torch counts its "
                f"rendezvous per process, and these ranks have made different numbers of them "
                f"before ({by}), so each would wait for keys the others never write until the "
                f"store's timeout. Ranks that sit out a sub-group's symmetric-memory calls "
                f"fall behind; make the same symmetric-memory calls (sdma, sdma_pipe, symm, "
                f"symmetric_empty) on every rank of this group before, larger groups first, "
                f"or send this group's calls to nccl (a table rule or backend='nccl')")

    def after(self) -> None:
        """One more rendezvous made (torch's own count skips a repeat of one allocation on one
        group, which every member of that group repeats alike)."""
        self.made += 1
