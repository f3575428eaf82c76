"""While a sub-group's members tune, the ranks outside it wait for as long as the members show
progress, not for one call's timeout: on 4 GPUs the 2-rank pass alone takes minutes, longer
than MCR_TIMEOUT_S may be, and a barrier of the whole world timed out on the idle ranks."""

from __future__ import annotations

import time
from typing import Any

import torch.distributed as tdist

from mcr.errors import McrTimeoutError

POLL_S = 0.5


class SubgroupPass:
    """One sub-group's pass: members beat once a size and say when done; the rest wait."""

    def __init__(self, key: int | str, ranks: list[int], timeout_s: float,
                 store: Any = None) -> None:
        """key names the group in the table (2, 4, '2x1'); timeout_s: the longest gap between
        two beats before the waiting ranks give up."""
        self.store = store or tdist.distributed_c10d._get_default_store()
        self.ranks, self.timeout_s = ranks, timeout_s
        self.root = f"mcr-tune/pass/{key}/"

    def beat(self) -> None:
        """A member measured one more size."""
        self.store.add(self.root + "beats", 1)

    def done(self, rank: int) -> None:
        """A member finished its pass."""
        self.store.set(f"{self.root}done/{rank}", "1")

    def wait(self) -> None:
        """Outside the group: return once every member is done; McrTimeoutError when no member
        measured anything for timeout_s (a member stuck or gone)."""
        names = [f"{self.root}done/{r}" for r in self.ranks]
        beats, last = -1, time.monotonic()
        while not self.store.check(names):
            now_beats = self.store.add(self.root + "beats", 0)
            now = time.monotonic()
            if now_beats != beats:
                beats, last = now_beats, now
            elif now - last > self.timeout_s:
                raise McrTimeoutError(
                    f"mcr-tune: the members {self.ranks} of the sub-group being tuned measured "
                    f"nothing for {self.timeout_s:g} s (after {max(beats, 0)} sizes; "
                    f"MCR_TIMEOUT_S): a member is stuck or has left")
            time.sleep(POLL_S)
