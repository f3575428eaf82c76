"""The always-on guard of calls on host libraries (Gloo, MPI, their lanes, hier) with CPU
tensors: ranks that made different calls at the same point of a group (op, dtype, bytes, reduce
op, root or library differ) get a MismatchError naming every rank's call, also after warm-up,
at no store round trip per new kind of call.

- One-node groups (MCR_GUARD=auto): every such call is compared on the group's board in shared
  memory (mcr.board) before any library runs it.
- Otherwise (several nodes, or MCR_GUARD=data), all-reduces up to INLINE_MAX_BYTES on groups up
  to INLINE_MAX_RANKS carry the signature in their own message: the data travels in a staging
  buffer with a trailer of NIBBLES slots per rank in the call's dtype; rank r writes its
  signature's digits (0..15, exact in every dtype) in its slots and the op's identity in the
  others', so the reduced trailer holds every rank's digits, checked before the result is
  written back. Other calls there are compared through the store at their first call.

Ranks that parted write their call in torch's store (only then) so that every rank's error
names the others' calls; a rank already inside its library learns it from the stall watch
(mcr.stall)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist
from torch.distributed import ReduceOp

from . import board
from . import ops as O
from .backends import HOST, Backend
from .board import Board
from .errors import MismatchError
from .groups import Group
from .ops import CallKey
from .signature import group_key

# Inline up to here: two copies of a message this small cost less than a second library call
# (MPI: ~5 us; Gloo: tens of us and more), and more above (1 MiB: ~100 us of copies).
INLINE_MAX_BYTES = 16 << 10
INLINE_MAX_RANKS = 64        # trailer of NIBBLES x ranks elements
NIBBLES = 8                  # a 32-bit hash of the signature, 4 bits a slot
PARTED_WAIT_S = 3.0          # a rank that saw a mismatch waits this long past MCR_STALL_S

_R = ReduceOp
# The value that leaves a slot as it is under each op the inline trailer serves.
_IDENTITY: dict[int, Callable[[torch.dtype], Any]] = {
    id(_R.SUM): lambda dt: 0, id(_R.BOR): lambda dt: 0, id(_R.BXOR): lambda dt: 0,
    id(_R.PRODUCT): lambda dt: 1,
    id(_R.BAND): lambda dt: -1 if dt.is_signed else torch.iinfo(dt).max,
    id(_R.MIN): lambda dt: (torch.finfo(dt) if dt.is_floating_point else torch.iinfo(dt)).max,
    id(_R.MAX): lambda dt: (torch.finfo(dt) if dt.is_floating_point else torch.iinfo(dt)).min,
}
_INLINE_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8,
                  torch.int8, torch.int16, torch.int32, torch.int64, torch.complex64,
                  torch.complex128}
_BITWISE = {id(_R.BAND), id(_R.BOR), id(_R.BXOR)}
_ROOTED = {O.BROADCAST, O.REDUCE, O.GATHER, O.SCATTER}


class Guard:
    """How one kind of call (one entry of mcr.comm's decision cache) carries its signature."""

    __slots__ = ("_desc", "_describe", "kind", "inline", "rooted", "n", "rank", "word", "dtype",
                 "red", "tmpl_np", "mine_np", "expect", "k")

    def __init__(self, describe: Callable[[], str], kind: int, nbytes: int, g: Group,
                 inline: bool, dtype: torch.dtype | None, redop: Any,
                 rooted: bool = False) -> None:
        self._describe, self._desc = describe, None
        self.inline, self.n, self.rank = inline, g.size, g.rank
        # A rank may complete it without its peers (the root of a broadcast or scatter, the
        # senders of a reduce or gather): its board check waits for every peer's word.
        self.rooted = rooted
        self.dtype, self.red = dtype, redop
        self.kind = kind
        self.word = word_of(kind, nbytes)
        self.k = self.n * NIBBLES if inline else 0
        self.tmpl_np: np.ndarray | None = None     # the trailer, made at its first use

    @property
    def desc(self) -> str:
        """The call as errors name it (made at its first use: most calls never need it)."""
        if self._desc is None:
            self._desc = self._describe()
        return self._desc

    def resized(self, nbytes: int, describe: Callable[[], str]) -> Guard:
        """The guard of this kind of call at another size in the same inline band (the same
        library, op, dtype, reduce op and root): only its word and description differ."""
        gd = Guard.__new__(Guard)
        gd._describe, gd._desc, gd.kind = describe, None, self.kind
        gd.inline, gd.n, gd.rank, gd.rooted = self.inline, self.n, self.rank, self.rooted
        gd.dtype, gd.red, gd.k, gd.tmpl_np = self.dtype, self.red, self.k, None
        gd.word = word_of(self.kind, nbytes)
        return gd

    def trailer(self) -> np.ndarray:
        """This rank's trailer (made once): its digits in its slots, the op's identity in
        the others'; and the reduced trailer every rank expects (self.expect)."""
        if self.tmpl_np is None:
            base, values = _templates(self.dtype, id(self.red), self.n)
            h = self.word
            own = values[[(h >> s) & 15 for s in range(0, 4 * NIBBLES, 4)]]
            tmpl = base.copy()
            tmpl[self.rank * NIBBLES:(self.rank + 1) * NIBBLES] = own
            self.mine_np, self.expect, self.tmpl_np = own, own.tobytes() * self.n, tmpl
        return self.tmpl_np


_M64 = (1 << 64) - 1


def kind_of(text: str) -> int:
    """A 64-bit hash of a kind of call's signature with its size left out (every rank alike,
    unlike Python's hash of a str)."""
    raw = text.encode()
    return (zlib.crc32(raw) << 32) | zlib.adler32(raw)


def word_of(kind: int, nbytes: int) -> int:
    """A call's board word: its kind's hash and its size mixed (splitmix64's finalizer), 63
    bits, a positive int64."""
    z = (kind + (nbytes + 2) * 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return (z ^ (z >> 31)) >> 1


_TEMPLATES: dict[tuple[torch.dtype, int, int], tuple[np.ndarray, np.ndarray]] = {}


def _templates(dtype: torch.dtype, red: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a trailer of n x NIBBLES identity values of the op, the digits 0..15) as numpy arrays
    of dtype's memory (_np), made once per dtype, op and group size."""
    hit = _TEMPLATES.get((dtype, red, n))
    if hit is None:
        ident = torch.full((n * NIBBLES,), _IDENTITY[red](dtype), dtype=dtype)
        hit = _TEMPLATES[(dtype, red, n)] = (_np(ident), _np(torch.arange(16).to(dtype)))
    return hit


def make(key: CallKey, g: Group, b: Backend, describe: Callable[[], str], kind: int,
         mode: str) -> Guard | None:
    """The guard of a new kind of call (mode: MCR_GUARD; describe: its text, kind: kind_of its
    text with the size left out), or None where the always-on check
    compares its first call through the store instead (GPU tensors, stream libraries,
    objects, point-to-point, one rank; on several nodes, all but small all-reduces)."""
    if b.domain != HOST or key.device != "cpu" or key.graph or g.size < 2 or \
            key.op in (O.P2P, O.OBJECT) or O.ALL_REDUCE not in b.serves or g.rank < 0:
        return None
    red = key.redop
    if red is not None and O.is_premul(red):
        red = _R.SUM                               # host libraries get it pre-multiplied
    inline = (key.op == O.ALL_REDUCE and 0 <= key.nbytes <= INLINE_MAX_BYTES and
              g.size <= INLINE_MAX_RANKS and key.dtype in _INLINE_DTYPES and
              id(red) in _IDENTITY and
              (id(red) not in _BITWISE or not (key.dtype.is_floating_point or
                                               key.dtype.is_complex)))
    if inline and id(red) in (id(_R.MIN), id(_R.MAX)) and key.dtype.is_complex:
        inline = False
    if not inline and (g.nodes != 1 or mode != "auto" or g.board is False):
        return None        # no board and no trailer: the store compares its first call
    return Guard(describe, kind, key.nbytes, g, inline, key.dtype, red, key.op in _ROOTED)


def size_class(nbytes: int) -> int:
    """The power-of-two class of a message size: the always-on store check compares a call
    the first time this rank makes its kind at this class (a bounded number of round trips,
    however many sizes a job makes); the guard compares every call."""
    return nbytes.bit_length() if nbytes >= 0 else -1


# -- inline: all-reduce with a trailer ----------------------------------------------------------

_STAGING: dict[torch.dtype, torch.Tensor] = {}
_VIEWS: dict[tuple[torch.dtype, int], tuple[torch.Tensor, np.ndarray]] = {}


def _np(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's memory as a flat numpy array (no copy; bfloat16 as int16)."""
    a = (t.view(torch.int16) if t.dtype is torch.bfloat16 else t).numpy()
    return a if a.ndim == 1 else a.reshape(-1)


def _staging(dtype: torch.dtype, total: int, fresh: bool) -> tuple[torch.Tensor, np.ndarray]:
    """A flat tensor of `total` elements to reduce in, and its numpy view: shared by synchronous
    calls (one at a time), new for an asynchronous one (in flight beside later calls)."""
    if fresh:
        t = torch.empty(total, dtype=dtype)
        return t, _np(t)
    hit = _VIEWS.get((dtype, total))
    if hit is None:
        big = _STAGING.get(dtype)
        if big is None or big.numel() < total:
            big = _STAGING[dtype] = torch.empty(max(total, 2 * (0 if big is None else
                                                                big.numel())), dtype=dtype)
            _VIEWS.clear()
        if len(_VIEWS) >= 4096:
            _VIEWS.clear()
        view = big[:total]
        hit = _VIEWS[(dtype, total)] = (view, _np(view))
    return hit


def all_reduce(gd: Guard, call: int, b: Backend, c: torch.Tensor, op: Any, g: Group,
               sync: bool) -> tuple[Any, Callable[[], None]]:
    """Start b's all-reduce of c (contiguous, CPU) with the trailer; returns (b's Work or None,
    the step that checks the trailer and writes the result into c, run once b is done)."""
    m = c.numel()
    buf, raw = _staging(c.dtype, m + gd.k, fresh=not sync)
    mine = _np(c)
    raw[:m] = mine
    raw[m:] = gd.trailer()
    try:
        w = b.all_reduce(buf, op, g, sync=sync)
    except Exception as e:
        raise parted_or(e, g, call, gd.desc) from e

    def check() -> None:
        if raw[m:].tobytes() != gd.expect:
            raise parted(g, call, gd.desc, _differing_inline(gd, raw[m:]))
        mine[:] = raw[:m]
    return w, check


def _differing_inline(gd: Guard, trailer: np.ndarray) -> list[int]:
    """Group ranks whose trailer slots differ from this rank's digits."""
    got = trailer.reshape(gd.n, NIBBLES)
    return [r for r in range(gd.n) if got[r].tobytes() != gd.mine_np.tobytes()]


# -- ranks that parted: both calls named ----------------------------------------------------------

STORE: list[Any] = [None]    # the session's SignatureCheck (its store and key prefix)


def parted(g: Group, call: int, desc: str, differing: list[int]) -> MismatchError:
    """The error of a call whose signature differs from its peers' (differing: their group
    ranks): each rank says what it called in the store, and every rank's error names every
    rank's call (those that said so within PARTED_WAIT_S)."""
    calls = _exchange(g, call, desc)
    rows = "; ".join(f"rank {g.ranks[r]}: {calls.get(r, 'did not say (its call ended otherwise)')}"
                     for r in range(g.size))
    return MismatchError(
        f"mcr: ranks of group {g.ranks} made different calls at call {call} of the group: "
        f"{rows}. Ranks {[g.ranks[r] for r in differing]} differ from this rank (rank "
        f"{g.ranks[g.rank]}); its tensors were left as they were")


def parted_or(e: BaseException, g: Group, call: int, desc: str) -> BaseException:
    """A library's error in a guarded call: a MismatchError naming the calls if a peer says
    it made another call at this point, else the error as it was."""
    calls = _exchange(g, call, desc)
    if any(v != desc for v in calls.values()):
        rows = "; ".join(f"rank {g.ranks[r]}: {v}" for r, v in sorted(calls.items()))
        return MismatchError(f"mcr: ranks of group {g.ranks} made different calls at call "
                             f"{call} of the group: {rows} (the library said: {e})")
    return e


def _exchange(g: Group, call: int, desc: str) -> dict[int, str]:
    """{group rank: its call at index `call` of group g} as the ranks say in the store, this
    rank's written first: a rank that saw the mismatch says so at once; one stuck in its
    library says what it waits in once its stall watch speaks (MCR_STALL_S). Waits until
    every peer has said, or left mcr, or PARTED_WAIT_S past the stall threshold."""
    sc = STORE[0]
    if sc is None:
        return {g.rank: desc}
    group = group_key(g.tag, tuple(g.ranks))
    calls = {g.rank: desc}
    try:
        sc.part(group, call, g.rank, desc)
        deadline = time.monotonic() + PARTED_WAIT_S + STALL_S[0]
        while True:
            for r in range(g.size):
                if r in calls:
                    continue
                made = sc.made_at(group, call, r)
                if made is not None:
                    calls[r] = made
                    continue
                there = sc.waiting_in(g.ranks[r])
                if there is not None and there[0] == group and there[2] == call:
                    calls[r] = there[1]
                elif sc.store.check([f"{sc.root}left/{g.ranks[r]}"]):
                    calls[r] = "left mcr"
            if len(calls) == g.size or time.monotonic() > deadline:
                return calls
            time.sleep(0.01)
    except (tdist.DistError, RuntimeError):
        return calls


STALL_S = [10.0]   # MCR_STALL_S of the session


# -- the guarded call in flight ------------------------------------------------------------------

# The inline-guarded all-reduce between mcr.route.pick and mcr.comm's all_reduce on this
# thread's path: (guard, call index).
CURRENT: list[Any] = [None]


def open_board(g: Group, mode: str) -> Board | None:
    """The signature board of g where one is used (MCR_GUARD=auto, one node), else None."""
    if mode != "auto" or g.nodes != 1 or STORE[0] is None:
        return None
    return board.open_board(g, STORE[0].store, STORE[0].root)


def board_of(g: Group, mode: str) -> Board | None:
    """g's board, opened at the first call that needs one (its first guarded call, or its
    first uneven all-to-all: GPU calls have no guard, and the split exchange would otherwise
    go through Gloo, ~300 us a call on 2x H200), or None where there is none. Every rank of
    g makes that call at the same point: opening is collective."""
    if g.board is None:
        g.board = open_board(g, mode) or False
    return g.board or None


def start(gd: Guard, g: Group) -> None:
    """At pick: compare the call on the group's board (before any library runs it), or note
    it for its inline trailer."""
    bd = g.board
    if bd:
        CURRENT[0] = None
        bad = bd.enter(g.calls, gd.word, (lambda: gd.desc) if gd.rooted else None)
        if bad:
            raise parted(g, g.calls, gd.desc, bad)
        return
    CURRENT[0] = (gd, g.calls) if gd.inline else None


def take_inline() -> tuple[Guard, int] | None:
    """(guard, call index) of the inline-guarded all-reduce in flight, now taken."""
    cur = CURRENT[0]
    CURRENT[0] = None
    return cur


