"""Copy-engine collectives on CUDA: peer copies over NVLink, synchronized by stream memory ops.

Per group: a small symmetric flag buffer and a bounded symmetric transit buffer (two slots, so
that the copies of round k+1 overlap the copy-out of round k). No SM kernel runs except the local
reduction of reduce-scatter.

One round, rank `me`, slot s (every rank runs the same rounds in the same order):
  main stream M (the caller's): write READY[s][me]=token into each sender's flags (my slot s is
      free), INPUT[s][p]=1 locally (my input is ready, for my push stream to peer p);
  push stream S_p per peer: wait INPUT[s][p]==1, reset; wait READY[s][p]==token, reset;
      cuMemcpyAsync my block -> p's slot s (or p's own symmetric buffer: zero-copy);
      write DATA[s][me]=1 into p's flags, DONE[s][p]=1 into mine;
  M: wait DATA[s][p]==1 and DONE[s][p]==1 for every peer, reset; copy out of the transit slot.
The token is 1 for transit rounds and 2 + (byte offset / 16) for zero-copy rounds, so ranks that
disagree on where the data goes wait (and time out) instead of writing to the wrong place.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from ..errors import CallError
from .cudadrv import OP_WAIT32, OP_WRITE32, Driver, MemOps

_SLOTS = 2


def _zero_copy_token(offset: int) -> int:
    return 2 + ((offset >> 4) & 0x3FFFFFFF)


@dataclass
class Send:
    """One push: nbytes from src (local) to a peer; dst is an offset in the peer's transit slot,
    or an absolute (peer-mapped) address when zero-copy."""

    peer: int
    src: int
    dst: int
    nbytes: int


@dataclass
class SymmBuffer:
    """A symmetric allocation mcr made: peers' addresses of the same bytes."""

    base: int
    nbytes: int
    ptrs: list[int]
    tensor: torch.Tensor


def symm_empty(nbytes: int, device: torch.device) -> torch.Tensor:
    """A uint8 tensor in torch symmetric memory (collective use needs rendezvous after)."""
    import torch.distributed._symmetric_memory as symm_mem
    return symm_mem.empty(max(nbytes, 16), dtype=torch.uint8, device=device)


def rendezvous(t: torch.Tensor, pg: tdist.ProcessGroup) -> object:
    """Exchange symmetric-memory handles over pg (collective)."""
    import torch.distributed._symmetric_memory as symm_mem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            enable(pg.group_name)  # needed by older torch for groups other than WORLD
    return symm_mem.rendezvous(t, pg.group_name)


class CeGroup:
    """Copy-engine state of one group on this rank: flags, transit buffer, push streams."""

    def __init__(self, pg: tdist.ProcessGroup, max_block: int, drv: Driver,
                 sync: str = "kernel") -> None:
        self.pg = pg
        self.n = pg.size()
        self.me = pg.rank()
        self.drv = drv
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.max_block = max_block          # per-rank bytes per round and slot
        n = self.n
        self.flags = symm_empty(4 * 8 * n, self.dev).view(torch.int32)
        self.flags.zero_()
        hdl = rendezvous(self.flags, pg)
        self.fhdl = hdl
        self.fptr = list(hdl.buffer_ptrs)   # every rank's flags, as mapped here
        self.sync = sync                    # "kernel" | "memops" (see README, NOTES.md v2)
        self.ev_in = torch.cuda.Event()
        self.ev = {p: torch.cuda.Event() for p in range(self.n) if p != self.me}
        torch.cuda.synchronize()
        tdist.barrier(group=pg, device_ids=[self.dev.index])
        torch.cuda.synchronize()
        # Rotated order (me+1, me+2, ...): at each moment every GPU receives from a different
        # sender; in rank order all ranks would first write into rank 0 (NOTES.md v3).
        self.peers = [(self.me + i) % n for i in range(1, n)]
        self.streams = {p: torch.cuda.Stream(self.dev) for p in self.peers}
        self.sh = {p: s.cuda_stream for p, s in self.streams.items()}
        self.transit: torch.Tensor | None = None
        self.tptr: list[int] = []
        self.slot_bytes = 0
        self.round = 0
        self.last_stream: torch.cuda.Stream | None = None
        self._ops: dict[tuple, MemOps] = {}
        self.symm: list[SymmBuffer] = []

    # -- flag addresses (word index -> byte address in rank r's flags) --------------------
    def _f(self, r: int, kind: int, s: int, p: int) -> int:
        """kind 0 READY, 1 DATA, 2 INPUT, 3 DONE; slot s; peer p."""
        return self.fptr[r] + 4 * ((kind * _SLOTS + s) * self.n + p)

    def _memops(self, key: tuple, build: Callable[[], list[tuple[int, int, int]]]) -> MemOps:
        ops = self._ops.get(key)
        if ops is None:
            ops = self._ops[key] = MemOps(build())
        return ops

    # -- buffers ---------------------------------------------------------------------------
    def ensure_transit(self, block: int) -> None:
        """Transit slots of at least `block` bytes per rank (grown in powers of two, bounded)."""
        need = min(self.max_block, max(1 << 16, 1 << (block - 1).bit_length()))
        if need <= self.slot_bytes:
            return
        torch.cuda.synchronize()  # the old buffer may still be read by copies in flight
        t = symm_empty(_SLOTS * self.n * need, self.dev)
        hdl = rendezvous(t, self.pg)
        self.transit, self.tptr, self.slot_bytes = t, list(hdl.buffer_ptrs), need

    def register(self, t: torch.Tensor) -> SymmBuffer:
        """Make t (from symm_empty, same size on every rank) a zero-copy target (collective)."""
        hdl = rendezvous(t, self.pg)
        b = SymmBuffer(t.data_ptr(), t.numel() * t.element_size(), list(hdl.buffer_ptrs), t)
        self.symm.append(b)
        return b

    def find_symm(self, t: torch.Tensor) -> tuple[SymmBuffer, int] | None:
        """The registered buffer holding all of t, and t's byte offset in it."""
        lo = t.data_ptr()
        hi = lo + t.numel() * t.element_size()
        for b in self.symm:
            if b.base <= lo and hi <= b.base + b.nbytes:
                return b, lo - b.base
        return None

    # -- one round -------------------------------------------------------------------------
    def start(self, sends: list[Send], recv_from: list[int], token: int, zero_copy: bool
              ) -> tuple[int, list[Send], list[int]]:
        """Enqueue READY/INPUT on the caller's stream and the pushes on the push streams."""
        m = torch.cuda.current_stream(self.dev)
        if self.last_stream is not None and self.last_stream != m:
            # The transit slots were last read by copy-outs on another stream.
            m.wait_stream(self.last_stream)
        self.last_stream = m
        mh = m.cuda_stream
        s = self.round % _SLOTS
        self.round += 1
        me, drv, f = self.me, self.drv, self._f
        if self.sync == "kernel":
            return self._start_kernel(m, s, sends, zero_copy)
        peers = tuple(p.peer for p in sends)
        ops = self._memops(("start", s, token, tuple(recv_from), peers), lambda: (
            [(OP_WRITE32, f(p, 0, s, me), token) for p in recv_from]
            + [(OP_WRITE32, f(me, 2, s, p), 1) for p in peers]))
        drv.batch(mh, ops)
        base = 0 if zero_copy else self.slot_base(s)
        for snd in sends:
            p, sh = snd.peer, self.sh[snd.peer]
            drv.batch(sh, self._memops(("pre", s, p, token), lambda p=p: [
                (OP_WAIT32, f(me, 2, s, p), 1), (OP_WRITE32, f(me, 2, s, p), 0),
                (OP_WAIT32, f(me, 0, s, p), token), (OP_WRITE32, f(me, 0, s, p), 0)]))
            dst = snd.dst if zero_copy else self.tptr[p] + base + snd.dst
            drv.memcpy(dst, snd.src, snd.nbytes, sh)
            drv.batch(sh, self._memops(("post", s, p), lambda p=p: [
                (OP_WRITE32, f(p, 1, s, me), 1), (OP_WRITE32, f(me, 3, s, p), 1)]))
        return s, sends, recv_from

    def _start_kernel(self, m: torch.cuda.Stream, s: int, sends: list[Send], zero_copy: bool
                      ) -> tuple[int, list[Send], list[int]]:
        """Kernel sync: a one-block barrier kernel on the caller's stream says every rank has
        entered (destinations free, inputs ready); pushes wait on it through an event."""
        self.fhdl.barrier(channel=s)
        self.ev_in.record(m)
        base = 0 if zero_copy else self.slot_base(s)
        for snd in sends:
            st = self.streams[snd.peer]
            st.wait_event(self.ev_in)
            dst = snd.dst if zero_copy else self.tptr[snd.peer] + base + snd.dst
            self.drv.memcpy(dst, snd.src, snd.nbytes, st.cuda_stream)
            self.ev[snd.peer].record(st)
        return s, sends, []

    def finish(self, handle: tuple[int, list[Send], list[int]]) -> int:
        """Caller's stream waits for every arrival and for its own pushes; returns slot base."""
        s, sends, recv_from = handle
        if self.sync == "kernel":
            m = torch.cuda.current_stream(self.dev)
            for snd in sends:
                m.wait_event(self.ev[snd.peer])
            # Every rank reaches this barrier after its own pushes: all pushes into me are done.
            self.fhdl.barrier(channel=s)
            return self.slot_base(s)
        me, f = self.me, self._f
        peers = tuple(p.peer for p in sends)
        ops = self._memops(("fin", s, tuple(recv_from), peers), lambda: (
            [x for p in recv_from for x in ((OP_WAIT32, f(me, 1, s, p), 1),
                                            (OP_WRITE32, f(me, 1, s, p), 0))]
            + [x for p in peers for x in ((OP_WAIT32, f(me, 3, s, p), 1),
                                          (OP_WRITE32, f(me, 3, s, p), 0))]))
        self.drv.batch(torch.cuda.current_stream(self.dev).cuda_stream, ops)
        return self.slot_base(s)

    def slot_base(self, s: int) -> int:
        """Byte offset of transit slot s."""
        return s * self.n * self.slot_bytes

    def slot_ptr(self, base: int, block: int, p: int) -> int:
        """Local address of peer p's block in my transit slot starting at byte base."""
        return self.transit.data_ptr() + base + p * block

    def local_copy(self, dst: int, src: int, nbytes: int) -> None:
        """Copy on the caller's stream (copy engine or driver's choice)."""
        if dst != src:
            self.drv.memcpy(dst, src, nbytes, torch.cuda.current_stream(self.dev).cuda_stream)


def rounds(nbytes: int, cap: int) -> list[tuple[int, int]]:
    """(offset, length) pieces of a per-rank block of nbytes, each at most cap."""
    if nbytes <= cap:
        return [(0, nbytes)]
    return [(o, min(cap, nbytes - o)) for o in range(0, nbytes, cap)]


def check_token_room(offset: int) -> None:
    """Zero-copy tokens encode offsets in 16-byte units; refuse misaligned zero-copy views."""
    if offset % 16:
        raise CallError("sdma zero-copy: tensor offset in its symmetric buffer must be a "
                        f"multiple of 16 bytes, got {offset}")


__all__ = ["CeGroup", "Send", "SymmBuffer", "_zero_copy_token", "rounds",
           "symm_empty"]
