"""A one-node group's signature board: a few int64 words in shared memory where each rank
writes, before every guarded call, the call's index and signature, and reads its peers'. Of
two ranks that made different calls the later one sees it before its library runs (Gloo aborts
the process on a length mismatch; MPI truncates or mixes data) and the earlier one learns it
from the stall watch; ranks that agree pay a few memory reads and never wait for each other
here. mcr.guard decides which calls use it."""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

from .groups import Group
from .waits import poll_until

SLOTS = 64                  # calls a rank may run ahead of a peer and be checked (a power of 2)
_SEQ = 0xFFFF               # the call index's low bits in a word
_SIG = (1 << 47) - 1        # the signature's bits in a word (a positive int64 in all)
_AHEAD = 1 << 15            # a word whose index is this call's or up to this far past it
_FENCE = threading.Lock()
_ACQUIRE, _RELEASE = _FENCE.acquire, _FENCE.release
_SHM = "/dev/shm"   # noqa: S108 - memory, not disk; the file is made by mkstemp

class Board:
    """One group's board (this rank's view of the shared words)."""

    def __init__(self, mm: mmap.mmap, n: int, rank: int) -> None:
        self._mm, self.n, self.rank = mm, n, rank
        self.words = memoryview(mm).cast("q")
        self.row_words = 2 * n + 1      # an all-to-all's send and receive splits and dtype
        self.exchanges = 0              # exchanges made (the same count on every rank)
        self._last = (-1, 0, 0)      # (call, slot base, word) this rank wrote last

    def close(self) -> None:
        """Unmap the board."""
        self.words.release()
        self._mm.close()

    def enter(self, call: int, sig: int, wait: Any = None) -> list[int]:
        """Write this rank's word for call `call` and read its peers': the group ranks whose
        word for this call differs. Of every two ranks the one that comes later reads the
        other's word, so each pair is compared before the later one's library runs; a peer
        more than SLOTS calls ahead (asynchronous calls) is not. wait (the call's name, for
        the error of a wait past MCR_TIMEOUT_S): first wait until every peer has written its
        word, for calls that a rank can complete without its peers (a broadcast's root)."""
        seq = call & _SEQ
        word = (seq << 47) | (sig & _SIG)
        n = self.n
        base = (call & (SLOTS - 1)) * n
        words = self.words
        words[base + self.rank] = word
        self._last = (call, base, word)
        # A locked instruction (an uncontended lock's atomic exchange) between this store and
        # the loads below: without it two ranks arriving together could each read the other's
        # slot before the other's store is visible, and neither compare.
        _ACQUIRE()
        _RELEASE()
        if wait is not None:
            self._wait_written(base, seq, wait)
        if n == 2:          # a pair (two-GPU tensor parallelism): one read, no slice (~0.14 us)
            w = words[base + 1 - self.rank]
            if w == word or (w >> 47) != seq or not w:
                return []
            return self._differing(base, seq, word)
        for w in words[base:base + n]:
            if w != word and (w >> 47) == seq and w:
                break
        else:
            return []
        return self._differing(base, seq, word)

    # The two below stand apart from enter: a lambda or (before Python 3.12) a comprehension
    # there would make its locals closure cells, which cost every call (~0.3 us).

    def _differing(self, base: int, seq: int, word: int) -> list[int]:
        """The group ranks whose word for call index seq is another than `word`."""
        words = self.words
        bad = [r for r in range(self.n) if self._differs(words[base + r], seq, word)]
        if bad:          # a word read mid-write would look different: read again to be sure
            time.sleep(0.001)
            bad = [r for r in bad if self._differs(words[base + r], seq, word)]
        return bad

    def _wait_written(self, base: int, seq: int, what: str | Callable[[], str]) -> None:
        """Wait until every peer has written its word for call index seq (or a later one)."""
        words, n = self.words, self.n
        poll_until(lambda: all(((words[base + r] >> 47) - seq) & _SEQ < _AHEAD
                               for r in range(n)), what)

    # A second region, after the words: each rank's decision on the form of the call it
    # wrote last, as (seq << 2) | 2 | blocking (never 0, which a slot holds before any use).
    # MPI matches a blocking collective only with blocking ones, so a rank runs the blocking
    # form only where every rank decided so (a rank may make the same call asynchronously).

    def decide(self, call: int) -> None:
        """Say that this rank runs call `call` in its library's non-blocking form."""
        if self._last[0] == call:
            self.words[SLOTS * self.n + self._last[1] + self.rank] = ((call & _SEQ) << 2) | 2

    def met(self, call: int, what: str | Callable[[], str], check: Any = None) -> bool:
        """Whether every rank of the group made call `call` exactly as this one and will run it
        in its library's blocking form: this rank says it would, then waits until every peer
        has said how it runs the call, or wrote another call there (as MCR_TIMEOUT_S and the
        stall watch allow; what: the call, for that error; check: as poll_until runs it, to
        end a wait on a rank that left). All ranks reach the same answer. False at once where
        this rank wrote no word for `call`."""
        last, base, word = self._last
        if last != call:
            return False
        words, n, seq = self.words, self.n, call & _SEQ
        d = SLOTS * n + base
        mine = (seq << 2) | 3
        words[d + self.rank] = mine
        _ACQUIRE()
        _RELEASE()

        def said() -> bool:
            for r in range(n):
                if self._differs(words[base + r], seq, word):
                    return True           # another call there: that rank will not say
                if words[d + r] >> 2 != seq:
                    return False
            return True
        poll_until(said, what, check=check)
        return words[base:base + n].tolist().count(word) == n and \
            words[d:d + n].tolist().count(mine) == n

    # A third region, after the decisions: two buffers of one row a rank (a tag word, then
    # row_words values), for exchanges every rank of the group makes at the same point (an
    # uneven all-to-all's split sizes). Buffer u % 2 holds exchange u: a rank cannot start
    # exchange u + 2 before every peer has written exchange u + 1, which each does only after
    # reading exchange u, so no row is overwritten before its readers are done.

    def exchange(self, row: list[int], what: str | Callable[[], str]) -> list[list[int]]:
        """Every rank's row of the group's next exchange (each rank passes its own, all of one
        width, at most row_words): this rank's written, then the group's read once every peer
        has written its own (as MCR_TIMEOUT_S and the stall watch allow; what: for that
        error)."""
        if len(row) > self.row_words:
            raise ValueError(f"board exchange: a row of {len(row)} values, at most "
                             f"{self.row_words}")
        self.exchanges += 1
        u, n, w = self.exchanges, self.n, self.row_words + 1
        base = 2 * SLOTS * n + (u & 1) * n * w
        tag = (u & _SEQ) + 1           # never 0, which a row holds before any use
        words, mine, end = self.words, base + self.rank * w, base + n * w
        words[mine + 1:mine + 1 + len(row)] = array("q", row)
        _ACQUIRE()       # a full fence (as in enter): the values are visible before the tag
        _RELEASE()
        words[mine] = tag
        tags = slice(base, end, w)
        poll_until(lambda: words[tags].tolist().count(tag) == n, what)
        _ACQUIRE()       # and read after it
        _RELEASE()
        every = words[base:end].tolist()
        return [every[r * w + 1:r * w + 1 + len(row)] for r in range(n)]

    @staticmethod
    def _differs(w: int, seq: int, word: int) -> bool:
        return (w >> 47) == seq and w != word and w != 0   # 0: a slot no one wrote yet


_OPENED: dict[str, int] = {}     # boards this process opened, by group ranks and tag


def open_board(g: Group, store: Any, root: str) -> Board | None:
    """The board of g, made by its first rank in /dev/shm and opened by every rank (a
    collective over g: every member calls it at the same point), or None on every rank if
    any rank could not map it. The file is removed once every rank has it mapped."""
    base = f"{root}board/{g.tag}{'.'.join(map(str, g.ranks))}"
    # Groups of the same ranks (the world and a sub-group of all of them) each get their own
    # board: numbered by how many this process opened before for those ranks, the same count on
    # every member (each opens at a call all of them make, in program order).
    _OPENED[base] = _OPENED.get(base, 0) + 1
    key = f"{base}#{_OPENED[base]}"
    # words, decisions, then two buffers of one exchange row (a tag and 2n + 1 values) a rank
    size = max(mmap.PAGESIZE, (2 * SLOTS * g.size + 2 * g.size * (2 * g.size + 2)) * 8)
    path = ""
    if g.rank == 0:
        folder = _SHM if os.path.isdir(_SHM) else tempfile.gettempdir()
        try:
            fd, path = tempfile.mkstemp(prefix="mcr-board-", dir=folder)   # O_EXCL, 0600
            with os.fdopen(fd, "wb") as f:
                f.truncate(size)
        except OSError:
            path = ""
        store.set(key, path)
    else:
        store.wait([key])
        path = store.get(key).decode()
    board = None
    if path:
        try:
            with open(path, "r+b") as f:
                board = Board(mmap.mmap(f.fileno(), size), g.size, g.rank)
        except OSError:
            board = None
    store.add(key + "/ok", 1 if board is not None else 0)
    store.add(key + "/done", 1)
    poll_until(lambda: store.add(key + "/done", 0) >= g.size,
               f"mcr: opening the signature board of group {g.ranks}")
    ok = store.add(key + "/ok", 0) == g.size
    if g.rank == 0 and path:
        os.unlink(path)
    if not ok and board is not None:
        board.close()
        board = None
    return board
