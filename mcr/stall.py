"""The stall watch: a thread that notices when the main thread has waited in one mcr call for
MCR_STALL_S. It then says so once, on this rank, with what each rank of the call's group is
doing as far as they have said; writes it in torch's store, where a peer waiting at a new kind
of call at the same point reads it and raises a MismatchError naming both calls; and looks
whether a peer of the group made a new kind of call at this same point, waits in another call
there (ranks whose sizes straddle a table boundary wait in two libraries), or saw its guard
fail there (mcr.guard), any of which makes this rank's wait hopeless (waits.STALL_NOTE: its
error names both calls)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

from . import waits
from .signature import group_key

log = logging.getLogger("mcr")
_MCR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def in_mcr(frame: FrameType | None) -> bool:
    """Whether a thread whose innermost frame is `frame` is inside a call of mcr."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_MCR):
            return True
        frame = frame.f_back
    return False


class StallWatch:
    """Watches the main thread's mcr calls from a daemon thread (started by init, stopped by
    destroy_process_group)."""

    def __init__(self, rt: Any, stall_s: float) -> None:
        self.rt, self.stall_s = rt, stall_s
        self._stop = threading.Event()
        self._main = threading.main_thread().ident
        self._seen: Any = None
        self._since = time.monotonic()
        self._told = False
        waits.STALL_NOTE[0] = ""
        self._thread = threading.Thread(target=self._run, name="mcr-stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the watch (its notes in the store go with the session)."""
        self._stop.set()
        waits.STALL_NOTE[0] = ""

    def _run(self) -> None:
        every = min(1.0, self.stall_s / 4)
        while not self._stop.wait(every):
            try:
                self._tick()
            except Exception as e:  # noqa: BLE001 - the store's host gone: nothing to tell
                log.debug("mcr: stall watch stopped: %s", e)
                return

    def _tick(self) -> None:
        rt, sig = self.rt, self.rt.signature_check
        latest = rt.latest
        now = time.monotonic()
        if latest is not self._seen or not in_mcr(sys._current_frames().get(self._main)):
            if self._told:
                sig.withdraw(rt.launch.rank)
                self._told = False
                waits.STALL_NOTE[0] = ""
            self._seen, self._since = latest, now
            return
        if latest is None or now - self._since < self.stall_s:
            return
        fk, g, call = latest
        ranks = tuple(g.ranks)
        describe = rt.descs.get(fk)
        what = describe() if describe else str(fk[0])
        if not self._told:
            sig.publish(rt.launch.rank, g.tag, ranks, what, call)
            self._told = True
            log.warning("mcr: rank %d has waited %.0f s in %s, call %d of group %s; %s",
                        rt.launch.rank, now - self._since, what, call, list(ranks),
                        self._peers(ranks, g.rank))
        if not waits.STALL_NOTE[0]:
            ahead = sig.peer_ahead(g.tag, ranks, g.rank, call) or \
                sig.peer_elsewhere(g.tag, ranks, g.rank, call, what)
            if ahead and rt.latest is latest:    # else the call it is about has ended
                # Said before this rank's error can end its program: a peer still waiting at
                # this point names both calls rather than "left".
                sig.part(group_key(g.tag, ranks), call, g.rank, what)
                waits.STALL_NOTE[0] = (f"ranks of group {list(ranks)} made different calls at "
                                       f"call {call} of the group: this rank (rank "
                                       f"{rt.launch.rank}) waits in {what}; {ahead}")
                log.error("mcr: %s", waits.STALL_NOTE[0])

    def _peers(self, ranks: tuple[int, ...], me: int) -> str:
        """What the group's other ranks say they wait in (only ranks stalled as long say)."""
        out = []
        for i, r in enumerate(ranks):
            if i != me:
                there = self.rt.signature_check.waiting_in(r)
                out.append(f"rank {r}: " + (f"waits in {there[1]}, call {there[2]}" if there
                                            else "not stalled in a call of mcr"))
        return "; ".join(out)
