"""The dispatch path shared by every call: from a call's arguments to its library (cached after
the first call of a kind) and back (Work, copy-backs); profiles and forced backends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as tdist
from torch.distributed import ReduceOp

from . import checks, guard, runtime
from . import ops as O
from .backends import STREAM, Backend
from .backends import canonical as backends_canonical
from .errors import MismatchError
from .groups import Group
from .session import group_of
from .signature import signature
from .streams import capturing as _capturing
from .streams import raw_stream
from .waits import STALL_NOTE
from .work import ON_COMPLETE, Work

UNKNOWN = -1  # message size of calls with no rank-invariant size (objects)

PROFILE: list[str] = []
AUTO = "auto"   # overlap on a side stream, else standalone (call_profile)


@contextlib.contextmanager
def profile(name: str) -> Iterator[None]:
    """Use the table rules of profile `name` (standalone | overlap | auto) inside the block."""
    from .tables import PROFILES
    if name not in (*PROFILES, AUTO):
        raise ValueError(f"profile {name!r} is not one of {[*PROFILES, AUTO]}")
    PROFILE.append(name)
    try:
        yield
    finally:
        PROFILE.pop()


def force_backend(name: str | None) -> None:
    """From now on send every call to backend `name` where it can serve it (as MCR_BACKEND does
    at init: calls it declines fall back); None goes back to MCR_BACKEND and the tables. Every
    rank must call it at the same point: it checks that all ranks name the same backend."""
    rt = runtime.get()
    want = backends_canonical(name) if name else rt.cfg.backend
    every: list[Any] = [None] * rt.world.size
    tdist.all_gather_object(every, want, group=rt.world.handles["gloo"])
    if len(set(every)) > 1:
        raise MismatchError(f"force_backend: ranks named different backends: "
                            f"{dict(enumerate(every))}")
    rt.dispatcher.set_env_backend(want)
    rt.fast.clear()


# -- the dispatch path ------------------------------------------------------------------------
# A call's decision depends on (op, group, bytes, dtype, device, reduce op, profile, forced
# backend, buffer kind). After the first call with those values it is one dict lookup on a
# plain tuple of them (runtime.fast); the first goes through the dispatcher, which builds the
# CallKey, and MCR_CHECK sends every call that way.

def nbytes_of(t: torch.Tensor) -> int:
    """The tensor's bytes."""
    return t.nbytes


def buffer_of(t: torch.Tensor) -> tuple[str, int]:
    """("symmetric", byte offset in its allocation) if t lies in memory from symmetric_empty,
    else ("plain", -1)."""
    spans = runtime._RT[0].symmetric
    hit = spans.find(t) if spans and t.is_cuda else None
    return ("symmetric", hit[1]) if hit else ("plain", -1)


def device_of(t: torch.Tensor | None) -> str:
    """The table's device name for t: cpu or cuda (cpu for calls with no tensor)."""
    # is_cuda first: t.device builds a torch.device object, a microsecond per call.
    return "cpu" if t is None else "cuda" if t.is_cuda else "cpu" if t.is_cpu else t.device.type


def pick(op: str, g: Group, t: torch.Tensor | None, nbytes: int, redop: Any,
           forced: str | None, buffer: str = "plain", root: int = -1,
           offset: int = -1, moved: int = -1, even: bool = True) -> Backend:
    """The backend for this call (counted: calls and bytes per op and library; `moved`: the
    bytes to count where nbytes is not what moves: UNKNOWN, or the key of an uneven all-to-all)."""
    rt = runtime._RT[0]
    graph = rt.cuda and _capturing()
    cuda = t is not None and t.is_cuda     # once: each tensor property costs ~40 ns
    prof = PROFILE[-1] if PROFILE else rt.cfg.profile
    if prof == AUTO:
        prof = "overlap" if cuda and not graph and \
            op in rt.dispatcher.tables.profiled_ops and _side_stream(t.get_device()) \
            else "standalone"
    # Reduce ops by identity (hashing torch's enum costs ~0.4 us); every PREMUL_SUM(factor)
    # decides alike, whatever its factor.
    rk = None if redop is None else -1 if type(redop) is _REDUCE_OP_OBJ else id(redop)
    fk = (op, g.id, nbytes, None if t is None else t.dtype,
          1 if cuda else 0 if t is None or t.is_cpu else t.device.type,
          rk, prof, forced, buffer, graph, root, even)
    if op != O.P2P:
        g.calls += 1
    hit = rt.fast.get(fk)
    rt.latest = (fk, g, g.calls)
    if STALL_NOTE[0]:          # the stall watch's note was about the call before
        STALL_NOTE[0] = ""
    if hit is None or rt.cfg.check:
        hit = _first(rt, fk, op, g, t, nbytes, redop, forced, prof, buffer, graph, root, offset,
                     even, hit)
    gd = hit[2]
    if gd is None:
        guard.CURRENT[0] = None
    elif g.board and not gd.rooted:      # guard.start's common case, inline (hot path)
        guard.CURRENT[0] = None
        bad = g.board.enter(g.calls, gd.word)
        if bad:
            raise guard.parted(g, g.calls, gd.desc, bad)
    else:
        guard.start(gd, g)
    n = hit[1]
    n[0] += 1
    if moved >= 0:
        n[1] += moved
    elif nbytes > 0:
        n[1] += nbytes
    return hit[0]


def _first(rt: Any, fk: tuple, op: str, g: Group, t: torch.Tensor | None, nbytes: int,
           redop: Any, forced: str | None, prof: str, buffer: str, graph: bool, root: int,
           offset: int, even: bool, hit: Any) -> tuple[Backend, list[int], Any]:
    """pick's decision for a call its cache does not hold (or every call, MCR_CHECK): the
    dispatcher's backend, its counters and the kind's guard; the call compared across its
    group where the guard does not carry it (MCR_CHECK: every call, in full)."""
    new = hit is None
    key = O.make_key(op, g.size, nbytes, None if t is None else t.dtype, device_of(t), redop,
                     prof, buffer, graph, g.span, even)
    # A guarded kind at a new size (dynamic shapes): the decision its last size took, where
    # the dispatcher would take it again: ~6-8 us of host time where the full path costs ~14.
    tk = (*fk[:2], _BANDS[nbytes <= guard.INLINE_MAX_BYTES], *fk[3:]) if nbytes >= 0 else None
    if new and tk is not None and not rt.cfg.check:
        like = rt.fast.get(tk)
        if like is not None:
            b, n, gd = like
            if (g.board is not False or gd.inline) and \
                    (*fk[:2], guard.size_class(nbytes), *fk[3:]) in rt.guard_classes and \
                    rt.dispatcher.keeps(key, g, forced, b):
                describe = _describer(key, root, b.name)
                rt.descs[fk] = describe
                hit = rt.fast[fk] = (b, n, gd.resized(nbytes, describe))
                return hit
    b, n = rt.dispatcher.entry(key, g, forced)
    gd = None if new else hit[2]
    if new:
        if len(rt.fast) >= 1 << 16:
            rt.fast.clear()
            rt.descs.clear()
            rt.guard_classes.clear()
        describe = rt.descs[fk] = _describer(key, root, b.name)
        if rt.cfg.guard != "0" and not rt.cfg.check:
            kind = guard.kind_of(signature(key._replace(nbytes=-1), root, b.name))
            gd = guard.make(key, g, b, describe, kind, rt.cfg.guard)
    # Point-to-point calls involve two ranks of the group, not all: nothing to compare.
    if op == O.P2P or g.size == 1:
        pass
    elif rt.cfg.check:
        checks.across_ranks(key, g, root, b.name, offset)
    elif new:
        # A new kind of call is compared through the store before any library runs it, once
        # per size class where the guard compares each call (ranks whose sizes differ within a
        # class part in the library, and the guard or the stall watch names both calls).
        ck = (*fk[:2], guard.size_class(nbytes), *fk[3:])
        if gd is None or ck not in rt.guard_classes:
            rt.signature_check(key, g, root, b.name)
            if gd is not None:
                rt.guard_classes.add(ck)
                if not guard.board_of(g, rt.cfg.guard) and not gd.inline:
                    gd = None      # no board: the store compares each kind
    hit = rt.fast[fk] = (b, n, gd)
    if gd is not None and tk is not None:
        rt.fast[tk] = hit         # the kind's latest size, for its next new size
    return hit


_BANDS = ("band: above the inline guard's limit", "band: within the inline guard's limit")


def _describer(key: O.CallKey, root: int, backend: str) -> Callable[[], str]:
    """The call's text as errors and the stall watch show it, made when first asked for."""
    text: list[str] = []

    def describe() -> str:
        if not text:
            text.append(signature(key, root, backend))
        return text[0]
    return describe


_DEFAULT_STREAMS: dict[int, int] = {}   # device index -> its default stream's handle


def _side_stream(device: int) -> bool:
    """Whether the caller's current stream on this GPU is not its default stream: frameworks
    put communication there to run it beside compute (FSDP2's all-gather and reduce-scatter
    streams, ZeRO-3's prefetch and overlap_comm streams)."""
    default = _DEFAULT_STREAMS.get(device)
    if default is None:
        default = _DEFAULT_STREAMS[device] = torch.cuda.default_stream(device).cuda_stream
    return raw_stream(device) != default


def call_profile(device: str) -> str:
    """The table profile a call on `device` takes now: `with profile(...)`, else MCR_PROFILE;
    under auto, overlap on a GPU side stream outside CUDA graph capture, else standalone."""
    prof = PROFILE[-1] if PROFILE else runtime.get().cfg.profile
    if prof != AUTO:
        return prof
    on_side = device == "cuda" and not _capturing() and \
        _side_stream(torch.cuda.current_device())
    return "overlap" if on_side else "standalone"


def which_backend(op: str, nbytes: int, dtype: torch.dtype, device: str = "cpu",
                  group: Any = None, redop: Any = None, buffer: str = "plain",
                  even: bool = True) -> str:
    """The library mcr would choose for such a call (nbytes as nccl-tests counts them: the
    full buffer; even=False: an all-to-all with split sizes, nbytes its key, group size x its
    largest block rounded up to a power of two) on the current stream; no call is made and
    nothing is counted. Raises BackendUnavailable if none can serve it."""
    rt = runtime.get()
    g = group_of(group, "which_backend")
    key = O.make_key(op, g.size, nbytes, dtype, device, None if redop is None else
                     redop_of(redop, "which_backend"), call_profile(device), buffer,
                     nodes=g.span, even=even)
    return rt.dispatcher.entry(key, g)[0].name


def redop_of(op: Any, what: str) -> Any:
    """torch's ReduceOp for op (DeepSpeed's enum and names accepted); CallError naming `what`."""
    return op if id(op) in TORCH_REDOP_IDS else O.as_redop(op, what)


TORCH_REDOP_IDS = frozenset(id(op) for op in O.REDOP_NAMES)   # torch's enum values are singletons
_REDUCE_OP_OBJ = ReduceOp            # type of a ReduceOp object, e.g. PREMUL_SUM(factor)
SUM = ReduceOp.SUM


def reduction(b: Backend, t: torch.Tensor, op: Any, inplace: bool) -> tuple[torch.Tensor, Any]:
    """(tensor, op) for b: ReduceOp.PREMUL_SUM(f) becomes f * t and SUM where b has no premul
    (a copy unless the call overwrites t anyway)."""
    if op is SUM or b.native_premul or not O.is_premul(op):
        return t, op
    f = O.premul_factor(op)
    return (t.mul_(f) if inplace else t * f), SUM


def may_sync(async_op: bool) -> bool:
    """Whether the backend may finish the call as synchronous (no Work): not when the caller
    wants a handle, nor when per-call timing needs one."""
    return not async_op and not ON_COMPLETE


def finish(w: Any, after: list[Callable[[], None]] | None, async_op: bool, b: Backend) -> Any:
    """Hand the caller its Work (async_op), or complete the call; copy-backs run after the
    library is done (now, if the backend already completed a synchronous call). w is mcr's
    Work, torch's own (a torch-backed call with nothing to do after it) or None (done)."""
    if after:
        if w is None:
            for fn in after:
                fn()
        elif isinstance(w, Work):
            w._after = (w._after or []) + after
        else:
            w = Work("call", b.name, 0, 0, torch_work=w, stream_ordered=b.domain == STREAM,
                     after=after)
    if async_op:
        return w
    if w is not None:
        if isinstance(w, Work):
            w.wait_issued()
        else:
            w.wait()
    return None


def writable(t: torch.Tensor) -> tuple[torch.Tensor, list[Callable[[], None]] | None]:
    """A contiguous tensor to write into, and the copy-back into t if t was not contiguous."""
    if t.is_contiguous():
        return t, None
    c = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return c, [lambda: t.copy_(c)]


def readwrite(t: torch.Tensor) -> tuple[torch.Tensor, list[Callable[[], None]] | None]:
    """Like writable, for a tensor that is read as well."""
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, [lambda: t.copy_(c)]


def rooted(what: str, tensor: Any, group: Any, rank: int, role: str
            ) -> tuple[torch.Tensor, Group, int]:
    """Checked (tensor, group, root's group rank) of a rooted call (src/dst is a global rank)."""
    g = group_of(group, what)
    return checks.tensor(tensor, what), g, g.group_rank(rank, f"{what} {role}")
