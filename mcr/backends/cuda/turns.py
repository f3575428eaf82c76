"""Torch numbers its symmetric-memory rendezvous per process, not per group: its store keys are
(group, the process's n-th rendezvous, rank). Ranks of one group that made different numbers of
rendezvous before (one sat out a sub-group's) look for different keys and wait out the store's
timeout with no word of why (4x H200: the tuner's world pass after a 2-rank pass). Before each
rendezvous mcr makes, the group's ranks compare how many they have made (through the session's
signature check); if they differ, every rank stops at once with an error that says so."""

from __future__ import annotations

from typing import Any

from ...errors import CallError


class RendezvousTurns:
    """This process's count of symmetric-memory rendezvous, compared within a group before
    each one."""

    def __init__(self) -> None:
        self.made = 0
        self.check: Any = None   # the mcr session's signature.SignatureCheck (None: unchecked)

    def before(self, group: str, rank: int, ranks: list[int]) -> None:
        """Compare this rank's count with the group's (collective over the group: every member
        calls it before the same rendezvous; rank is this one's index in ranks); CallError
        naming each rank's count if they differ. Outside an mcr session (a probe driving the
        engine itself) nothing is compared."""
        if self.check is None:
            return
        every = self.check.gather(f"rdv:{group}", tuple(ranks), rank, str(self.made),
                                  lambda: f"symmetric-memory setup on group {ranks}",
                                  f"rank {ranks[rank]} set up symmetric memory")
        counts = [int(v) for v in every]
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


TURNS = RendezvousTurns()   # one per process, as torch's count is
