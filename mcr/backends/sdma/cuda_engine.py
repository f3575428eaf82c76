"""Copy-engine collectives on CUDA: peer copies over NVLink between symmetric buffers.

Per group: a small symmetric flag buffer and a bounded symmetric transit buffer (two slots, so
that the copies of round k+1 overlap the copy-out of round k).

Schedule: each rank pushes its blocks one peer after the other, in the
rotated order me+1, me+2, ..., on one stream. Started together, the ranks then form a
permutation at every moment: each GPU sends to one peer and receives from one, which runs the
copy engines at ~380 GB/s; the same pushes issued concurrently on one stream per peer reached
~220 GB/s.

One round, rank `me`, slot s (every rank runs the same rounds in the same order; a call's
rounds use slots 0, 1, 0, ... so graph replays and direct issue agree):
  kernel sync (default): barrier kernel on channel s (every rank entered: inputs ready,
      destinations free); pushes; after them the caller's stream runs the barrier again
      (every push into me has landed).
  memops sync (no SM use): write READY[s][me]=token into each sender's flags; wait READY[s][p]
      from each destination; pushes; write DATA[s][me]=1 into each destination; wait DATA from
      each sender. The token is 1 for transit rounds and 2 + (byte offset / 16) for zero-copy
      rounds, so ranks that disagree on where the data goes wait instead of writing elsewhere.
A small call runs all of it on the caller's stream. From MCR_SDMA_PIPELINE_BYTES per rank block
(and for blocks larger than a slot) a call pushes on a side stream, in rounds (round_bytes), so
that its own-block copy runs beside the pushes and each round's copy-out overlaps the next
round's pushes; below it the extra events cost more host time than the overlap saves.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from ...errors import CallError
from ...spans import Spans
from ...streams import StreamId, follow_stream, stream_of
from ..cuda.driver import OP_WAIT32, OP_WRITE32, Driver, MemOps
from ..cuda.graphs import GraphCache
from ..cuda.symm_mem import rendezvous, symm_empty

_SLOTS = 2


def zero_copy_token(offset: int) -> int:
    """The flag value of a zero-copy round: ranks that disagree on the offset wait, not write."""
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


class CeGroup:
    """Copy-engine state of one group on this rank: flags, transit buffer, push stream."""

    def __init__(self, pg: tdist.ProcessGroup, max_block: int, drv: Driver,
                 sync: str = "kernel", graphs: int = 0) -> None:
        self.pg = pg
        self.n = pg.size()
        self.me = pg.rank()
        self.drv = drv
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.max_block = max_block          # per-rank bytes per round and slot
        n = self.n
        self.flags = symm_empty(4 * 2 * _SLOTS * n, self.dev).view(torch.int32)
        self.flags.zero_()
        hdl = rendezvous(self.flags, pg)
        self.fhdl = hdl
        self.fptr = list(hdl.buffer_ptrs)   # every rank's flags, as mapped here
        self.sync = sync                    # "kernel" | "memops" (MCR_SDMA_SYNC)
        self.ev_in = torch.cuda.Event()
        self.ev_out = [torch.cuda.Event() for _ in range(_SLOTS)]
        torch.cuda.synchronize()
        tdist.barrier(group=pg, device_ids=[self.dev.index])
        torch.cuda.synchronize()
        # Rotated order: at each moment every GPU receives from a different sender.
        self.peers = [(self.me + i) % n for i in range(1, n)]
        self.push = torch.cuda.Stream(self.dev)
        self.transit: torch.Tensor | None = None
        self.tptr: list[int] = []
        self.slot_bytes = 0
        self.last_sid: StreamId | None = None   # the stream the last call was issued on
        self._ops: dict[tuple, MemOps] = {}
        self.symm: Spans[SymmBuffer] = Spans()
        self.graphs = GraphCache(graphs, self.dev)

    # -- flag addresses (word index -> byte address in rank r's flags) --------------------
    def _f(self, r: int, kind: int, s: int, p: int) -> int:
        """kind 0 READY, 1 DATA; slot s; peer p."""
        return self.fptr[r] + 4 * ((kind * _SLOTS + s) * self.n + p)

    def _memops(self, key: tuple, build: Callable[[], list[tuple[int, int, int]]]) -> MemOps:
        ops = self._ops.get(key)
        if ops is None:
            if len(self._ops) >= 1024:
                self._ops.clear()   # keys carry zero-copy offsets: bound what they can grow to
            ops = self._ops[key] = MemOps(build())
        return ops

    # -- buffers ---------------------------------------------------------------------------
    def ensure_transit(self, block: int) -> None:
        """Transit slots of at least `block` bytes per rank (grown in powers of two, bounded)."""
        need = min(self.max_block, max(1 << 16, 1 << (block - 1).bit_length()))
        if need <= self.slot_bytes:
            return
        torch.cuda.synchronize()  # the old buffer may still be read by copies in flight
        self.graphs.clear()       # graphs name the old buffer's addresses
        t = symm_empty(_SLOTS * self.n * need, self.dev)
        hdl = rendezvous(t, self.pg)
        self.transit, self.tptr, self.slot_bytes = t, list(hdl.buffer_ptrs), need

    def register(self, t: torch.Tensor) -> SymmBuffer:
        """Make t (from symm_empty, same size on every rank) a zero-copy target (collective)."""
        hdl = rendezvous(t, self.pg)
        b = SymmBuffer(t.data_ptr(), t.numel() * t.element_size(), list(hdl.buffer_ptrs), t)
        self.symm.add(b.base, b.nbytes, b)
        return b

    def find_symm(self, t: torch.Tensor) -> tuple[SymmBuffer, int] | None:
        """The registered buffer holding all of t, and t's byte offset in it."""
        return self.symm.find(t)

    # -- one call --------------------------------------------------------------------------
    def launch(self, key: Hashable | None, issue: Callable[[torch.cuda.Stream], None]) -> None:
        """Run issue(m) on the caller's stream m, or its captured graph (see graphs.py)."""
        # Stream ids, not Stream objects: a replayed call needs none.
        # The transit slots may last have been read by copy-outs on another stream.
        sid = self.last_sid = follow_stream(self.last_sid, self.dev.index)
        self.graphs.run(key, issue, lambda: stream_of(sid))

    # -- one round -------------------------------------------------------------------------
    def start(self, m: torch.cuda.Stream, s: int, sends: list[Send], recv_from: list[int],
              token: int, zero_copy: bool, side: bool) -> Round:
        """Enqueue the entry sync and the pushes (on m, the current stream, or on the push
        stream when side)."""
        me, drv, f = self.me, self.drv, self._f
        mh = m.cuda_stream
        dests = tuple(x.peer for x in sends)
        if self.sync == "kernel":
            self.fhdl.barrier(channel=s)   # launches on the current stream, which is m
        else:
            drv.batch(mh, self._memops(("ready", s, token, tuple(recv_from)), lambda: [
                (OP_WRITE32, f(p, 0, s, me), token) for p in recv_from]))
        ps = m
        if side:
            ps = self.push
            self.ev_in.record(m)
            ps.wait_event(self.ev_in)
        sh = ps.cuda_stream
        if self.sync == "memops" and dests:
            drv.batch(sh, self._memops(("wait", s, token, dests), lambda: [
                x for p in dests for x in ((OP_WAIT32, f(me, 0, s, p), token),
                                           (OP_WRITE32, f(me, 0, s, p), 0))]))
        base = 0 if zero_copy else self.slot_base(s)
        for snd in sends:
            dst = snd.dst if zero_copy else self.tptr[snd.peer] + base + snd.dst
            drv.memcpy(dst, snd.src, snd.nbytes, sh)
        if side:
            if self.sync == "memops":
                drv.batch(sh, self._data_ops(s, dests, ()))
            self.ev_out[s].record(ps)
        return Round(s, dests, tuple(recv_from), side)

    def _data_ops(self, s: int, dests: tuple[int, ...], senders: tuple[int, ...]) -> MemOps:
        me, f = self.me, self._f
        return self._memops(("data", s, dests, senders), lambda: (
            [(OP_WRITE32, f(p, 1, s, me), 1) for p in dests]
            + [x for p in senders for x in ((OP_WAIT32, f(me, 1, s, p), 1),
                                            (OP_WRITE32, f(me, 1, s, p), 0))]))

    def finish(self, m: torch.cuda.Stream, rnd: Round) -> int:
        """m waits for my pushes and for every arrival into me; returns the slot's base."""
        s = rnd.slot
        if rnd.side:
            m.wait_event(self.ev_out[s])
        if self.sync == "kernel":
            # Every rank reaches this barrier after its own pushes: all pushes into me landed.
            self.fhdl.barrier(channel=s)
        else:
            dests = () if rnd.side else rnd.dests
            self.drv.batch(m.cuda_stream, self._data_ops(s, dests, rnd.senders))
        return self.slot_base(s)

    def slot_base(self, s: int) -> int:
        """Byte offset of transit slot s."""
        return s * self.n * self.slot_bytes

    def slot_ptr(self, base: int, block: int, p: int) -> int:
        """Local address of peer p's block in my transit slot starting at byte base."""
        return self.transit.data_ptr() + base + p * block

    def local_copy(self, m: torch.cuda.Stream, dst: int, src: int, nbytes: int) -> None:
        """Copy on stream m (copy engine or driver's choice)."""
        if dst != src:
            self.drv.memcpy(dst, src, nbytes, m.cuda_stream)


@dataclass
class Round:
    """What finish() needs of a started round."""

    slot: int
    dests: tuple[int, ...]
    senders: tuple[int, ...]
    side: bool


PIPELINE_ROUNDS = 4   # rounds a staged block is cut into from MCR_SDMA_PIPELINE_BYTES, at most


def round_bytes(nbytes: int, slot_cap: int, pipeline: float) -> int:
    """Bytes per round of a staged per-rank block: whole below `pipeline` bytes; from there
    about 1/PIPELINE_ROUNDS of it (MiB-rounded, at least pipeline / 2), so that each round's
    copy-out overlaps the next round's pushes; never more than a transit slot."""
    if nbytes < pipeline:
        return min(nbytes, slot_cap)
    per = -(-nbytes // PIPELINE_ROUNDS)
    per = -(-per // (1 << 20)) << 20
    return min(max(per, int(pipeline) // 2), slot_cap)


def check_token_room(offset: int) -> None:
    """Zero-copy tokens encode offsets in 16-byte units; refuse misaligned zero-copy views."""
    if offset % 16:
        raise CallError("sdma zero-copy: tensor offset in its symmetric buffer must be a "
                        f"multiple of 16 bytes, got {offset}")


__all__ = ["CeGroup", "Round", "Send", "SymmBuffer", "check_token_room", "round_bytes",
           "zero_copy_token"]
