"""Replaying a stream-ordered call from a CUDA graph instead of issuing it again.

On the lent H200 host every driver call costs ~7-8 us, so a copy-engine
all-gather issued call by call spends ~70 us of host time where its GPU work at small sizes
takes ~25 us. A call whose key (op, addresses, sizes) repeats, as it does every step of a
training loop, is captured once and then replayed with one launch. A key is captured on its
second sighting, so buffers used once never pay for a capture.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

from ...streams import capturing


class GraphCache:
    """At most `capacity` captured calls, least recently used dropped first."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.capacity = capacity
        self.device = device
        self.graphs: OrderedDict[Hashable, torch.cuda.CUDAGraph] = OrderedDict()
        self.seen: OrderedDict[Hashable, None] = OrderedDict()
        self.stream: torch.cuda.Stream | None = None
        self.captures = 0     # for the summary: how well this job's keys repeat
        self.replays = 0
        self.direct = 0
        self.dropped = 0
        self.refused = 0      # replays the driver refused (graphs are off after the first)

    def run(self, key: Hashable | None, issue: Callable[[torch.cuda.Stream], None],
            stream: Callable[[], torch.cuda.Stream], tried: bool = False) -> None:
        """Enqueue the call on the current stream, `stream()`: replayed if captured, captured on
        a second sighting, else issued directly. `issue(s)` must enqueue the whole call on s and
        join back to s every side stream it forks, without host synchronization. tried: the
        caller's replay(key) just found no graph (not looked up again)."""
        if not tried and self.replay(key):
            return
        if key is None or self.capacity <= 0 or capturing():
            self._direct(issue, stream)
            return
        if key not in self.seen:
            self.seen[key] = None
            if len(self.seen) > 4 * self.capacity:
                self.seen.popitem(last=False)
            self._direct(issue, stream)
            return
        del self.seen[key]
        try:
            g = self._capture(issue)
        except RuntimeError as e:
            # Same work on the device either way: go on without graphs on this rank.
            self._off("capture", str(e))
            self._direct(issue, stream)
            return
        self.graphs[key] = g
        if len(self.graphs) > self.capacity:
            self.graphs.popitem(last=False)
            self.dropped += 1
        if not self.replay(key):   # the capture ran nothing: this is the call
            self._direct(issue, stream)

    def _direct(self, issue: Callable[[torch.cuda.Stream], None],
                stream: Callable[[], torch.cuda.Stream]) -> None:
        """Issue the call itself on the current stream (counted)."""
        self.direct += 1
        issue(stream())

    def _off(self, what: str, why: str) -> None:
        """Graphs off for good on this rank after a failed capture or replay, with a warning
        at the backend's caller."""
        warnings.warn(f"mcr: CUDA graph {what} failed, issuing calls directly from now on: "
                      f"{why}", RuntimeWarning, stacklevel=4)
        self.capacity = 0
        self.clear()

    def replay(self, key: Hashable) -> bool:
        """Replay key's graph on the current stream if it is captured and no capture is under
        way; False otherwise. run() starts with it; a caller that has more to do before run()
        (symm builds its plan) calls it first."""
        g = self.graphs.get(key)
        if g is None or capturing():
            return False
        self.graphs.move_to_end(key)
        try:
            g.replay()
        except RuntimeError as e:
            # cudaGraphLaunch refused the graph, which enqueues none of it (seen once: "invalid
            # argument", an sdma reduce-scatter in FSDP2 on 2x H100). The caller then
            # issues the call directly, the same work on the device, so the peers cannot tell.
            self._off("replay", str(e).splitlines()[0] if str(e) else type(e).__name__)
            self.refused += 1
            return False
        self.replays += 1
        return True

    def _capture(self, issue: Callable[[torch.cuda.Stream], None]) -> torch.cuda.CUDAGraph:
        if self.stream is None:
            self.stream = torch.cuda.Stream(self.device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            # thread_local: torch's NCCL watchdog thread may query events meanwhile.
            g.capture_begin(capture_error_mode="thread_local")
            try:
                issue(self.stream)
            except BaseException:
                try:
                    g.capture_end()
                except RuntimeError:
                    pass  # the capture is already invalid; the first error is the one to see
                raise
            g.capture_end()
        self.captures += 1
        return g

    def note(self) -> str:
        """How calls ran: directly, or replayed from captured graphs (and how many were
        captured, and dropped again for room: many drops mean keys that rarely repeat)."""
        refused = "; a replay failed, graphs off since" if self.refused else ""
        return (f"{self.direct} calls issued directly, {self.replays} replayed from "
                f"{self.captures} captured CUDA graphs ({self.dropped} dropped for room{refused})")

    def clear(self) -> None:
        """Forget every graph (the buffers they name are about to change)."""
        self.graphs.clear()
        self.seen.clear()
