"""`sdma` (alias `ce`): collectives moved by the GPU copy engines, leaving the SMs to compute.

CUDA: peer copies over NVLink between torch symmetric-memory buffers (cuda_engine.py). ROCm: mori's
SDMA collectives (mori_engine.py), untested on hardware here. Ops: all-gather, equal-split
all-to-all, broadcast, and reduce-scatter as a copy-engine all-to-all plus one local reduction.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ...config import Config
from ...groups import Group, Spec
from ...ops import ALL_GATHER, ALL_TO_ALL, BROADCAST, REDUCE_SCATTER, CallKey
from ...work import Work
from ..base import STREAM, Backend
from ..cuda.symm_mem import rounds, symm_empty
from .cuda_engine import CeGroup, Send, check_token_room, round_bytes, zero_copy_token

R = tdist.ReduceOp
_REDUCE = {R.SUM: "sum", R.AVG: "avg", R.MAX: "amax", R.MIN: "amin", R.PRODUCT: "prod"}


def _reduce_blocks(blocks: torch.Tensor, redop: Any, out: torch.Tensor) -> None:
    """out <- reduction over dim 0 of blocks (n x m), in one pass over memory."""
    name = _REDUCE[redop]
    if name == "sum" and blocks.shape[0] == 2:
        torch.add(blocks[0], blocks[1], out=out)   # elementwise, not a reduction kernel
    elif name == "sum":
        torch.sum(blocks, dim=0, out=out)
    elif name == "avg":
        # The sum scaled by 1/n inside the reduction: no second pass over out to divide.
        torch.mean(blocks, dim=0, out=out)
    elif name == "prod":
        torch.prod(blocks, dim=0, out=out)
    else:
        getattr(torch, name)(blocks, dim=0, out=out)


class SdmaBackend(Backend):
    """Copy-engine collectives on one node (CUDA peer copies, or mori SDMA on ROCm).

    `sdma_pipe` is the same backend with the pipelined schedule: from `pipeline` bytes per rank
    block it pushes on a side stream in rounds, so the local copies run beside the pushes. It
    wins standalone and loses beside a GEMM (0.73-0.93x on 2x H200), so it is a backend of its own
    that the tuner measures under each profile; it shares sdma's per-group state (transit
    buffer, flags, symmetric buffers)."""

    name = "sdma"
    domain = STREAM
    serves = frozenset({ALL_GATHER, ALL_TO_ALL, BROADCAST, REDUCE_SCATTER})
    capturable = True

    def __init__(self, cfg: Config, engine: str, name: str = "sdma",
                 pipeline: float = float("inf"), shares: SdmaBackend | None = None) -> None:
        self.cfg = cfg
        self.engine = engine            # "cuda" | "mori"
        self.name = name
        self.pipeline = pipeline        # per-rank block bytes from which rounds pipeline
        self._groups: dict[int, Any] = shares._groups if shares is not None else {}
        self._owns_groups = shares is None
        self._drv = None

    def summary_lines(self) -> list[str]:
        """Per group: how its calls ran (graph replays; said once for sdma and sdma_pipe)."""
        if not self._owns_groups:
            return []   # the backend whose groups these are says it, for both
        return [f"{self.name}, group {gid} ({st.n} rank{'s' * (st.n != 1)}): {st.graphs.note()}"
                for gid, st in sorted(self._groups.items())
                if hasattr(st, "graphs")]

    def same_as(self, key: CallKey) -> str | None:
        """The backend that does exactly what this one would for the call (sdma, for
        sdma_pipe's calls below its threshold), so the tuner need not time both."""
        if self.pipeline == float("inf"):
            return None
        block = key.nbytes if key.op == BROADCAST else key.nbytes // max(key.group_size, 1)
        zc_bcast = key.op == BROADCAST and key.buffer != "plain"
        return "sdma" if block < self.pipeline or zc_bcast else None

    def decline_key(self, key: CallKey) -> str | None:
        """Serves CUDA tensors for all-gather, even all-to-all, broadcast, reduce-scatter."""
        if key.device != "cuda":
            return f"sdma serves GPU tensors only, not {key.device}"
        if key.op == ALL_TO_ALL and not key.even:
            return "sdma serves equal-split all-to-all only"
        if key.op == REDUCE_SCATTER:
            if key.redop not in _REDUCE:
                return "sdma reduce-scatter serves sum, avg, max, min, product"
            if key.redop == R.AVG and not (key.dtype and key.dtype.is_floating_point):
                return "sdma has no avg for integer types"
            if key.dtype == torch.bool:
                return "sdma has no bool reductions"
        if self.engine == "mori":
            if key.op not in (ALL_GATHER, ALL_TO_ALL):
                return f"sdma on ROCm (mori) serves all-gather and all-to-all, not {key.op}"
            if key.op == ALL_TO_ALL and key.nbytes % (4 * key.group_size):
                return "mori all-to-all moves 32-bit words: bytes per rank must divide by 4"
        return None

    def ready(self, group: Group) -> bool:
        """Whether the group's buffers exist (made at its first call, outside capture)."""
        return group.id in self._groups

    def bind(self, spec: Spec) -> Any:
        """The group's NCCL group (symmetric-memory rendezvous runs over it), one node only."""
        return self._bind_one_node(spec, spec.handles.get("nccl"))

    def decline(self, key: CallKey, group: Group) -> str | None:
        """Also declines groups whose ranks are not one node with peer access (see Group.notes)."""
        if self.engine == "mori" and self.name in group.handles \
                and group.size != tdist.get_world_size():
            return "mori shmem is bound to the world group only"
        return super().decline(key, group)

    # -- state -------------------------------------------------------------------------------
    def _state(self, g: Group) -> Any:
        st = self._groups.get(g.id)
        if st is None:
            pg = g.handles[self.name]   # sdma's and sdma_pipe's: the group's NCCL group
            max_block = max(1 << 16, int(self.cfg.sdma_max_bytes) // 2)
            if self.engine == "mori":
                from .mori_engine import MoriGroup
                st = MoriGroup(pg, int(self.cfg.sdma_max_bytes))
            else:
                from ..cuda.driver import Driver
                self._drv = self._drv or Driver(self.cfg.sdma_copy)
                st = CeGroup(pg, max_block, self._drv, self.cfg.sdma_sync,
                             int(self.cfg.sdma_graphs))
            self._groups[g.id] = st
        return st

    def alloc_symmetric(self, nbytes: int, g: Group) -> torch.Tensor:
        """A uint8 buffer the copy engines write into directly (collective on g)."""
        if self.engine != "cuda":
            raise NotImplementedError("symmetric buffers for sdma exist on CUDA only")
        st = self._state(g)
        return st.register(symm_empty(nbytes, st.dev)).tensor[:nbytes]

    def _zc(self, st: CeGroup, t: torch.Tensor) -> tuple[Any, int] | None:
        if not self.cfg.sdma_zero_copy:
            return None
        hit = st.find_symm(t)
        if hit is not None:
            check_token_room(hit[1])
        return hit

    # -- ops ----------------------------------------------------------------------------
    # Each op builds the key of its call (what the enqueued work depends on: addresses, sizes,
    # root, dtype, reduce op) and an issue(m) that enqueues it on stream m; CeGroup.launch
    # issues it or replays its captured graph.
    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """out <- every rank's inp; straight into peers' buffers when out is symmetric."""
        st = self._state(g)
        if self.engine == "mori":
            st.all_gather(out, inp)
            return self._stream_work("all_gather", out.numel() * out.element_size(), g,
                                     sync=sync)
        b = inp.numel() * inp.element_size()
        src, dst = inp.data_ptr(), out.data_ptr()
        self._exchange(st, ("ag", src, dst, b), b, lambda p, o: src + o, dst,
                       lambda p: dst + p * b, own=(dst + st.me * b, src), zc=self._zc(st, out))
        return self._stream_work("all_gather", b * g.size, g, st.last_sid, sync=sync)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False,
                   even: bool = True) -> Work:
        """Block p of inp -> rank p; equal splits only (the dispatcher guarantees it)."""
        st = self._state(g)
        if self.engine == "mori":
            st.all_to_all(out, inp)
            return self._stream_work("all_to_all", inp.numel() * inp.element_size(), g,
                                     sync=sync)
        b = in_counts[0] * inp.element_size()
        src, dst = inp.data_ptr(), out.data_ptr()
        self._exchange(st, ("a2a", src, dst, b), b, lambda p, o: src + p * b + o, dst,
                       lambda p: dst + p * b, own=(dst + st.me * b, src + st.me * b),
                       zc=self._zc(st, out))
        return self._stream_work("all_to_all", b * g.size, g, st.last_sid, sync=sync)

    def _exchange(self, st: CeGroup, key: tuple, b: int, src_of: Any, dst: int, out_of: Any,
                  own: tuple[int, int], zc: tuple[Any, int] | None) -> None:
        """Every rank sends block (p, offset) to every p; block p lands at out_of(p)."""
        peers = st.peers
        if zc is not None:
            buf, off = zc
            mine = off + (own[0] - dst)   # my block's offset in the symmetric buffer
            token = zero_copy_token(off)

            # Pushes beside the own-block copy when both are large (in place, there is none).
            side = b >= self.pipeline and own[0] != own[1]

            def issue_zc(m: torch.cuda.Stream) -> None:
                sends = [Send(p, src_of(p, 0), buf.ptrs[p] + mine, b) for p in peers]
                h = st.start(m, 0, sends, peers, token, True, side)
                st.local_copy(m, *own, b)
                st.finish(m, h)
            st.launch(key + ("zc", side), issue_zc)
            return
        me = st.me

        def at_start(m: torch.cuda.Stream, h: Any, o: int, ln: int) -> None:
            if o == 0:
                st.local_copy(m, *own, b)   # my own block, while the first pushes run
        self._staged(st, key, b, lambda o, ln: [Send(p, src_of(p, o), me * ln, ln)
                                                for p in peers], peers,
                     lambda m, h, o, ln: self._copy_out(st, m, h, o, ln, b, out_of), at_start)

    def _staged(self, st: CeGroup, key: tuple, b: int, sends_of: Any, recv: list[int],
                drain: Any, at_start: Any = None) -> None:
        """Rounds of round_bytes each (at most one transit slot); drain(m, round, offset, length)
        of round k is enqueued after round k+1's pushes, so the two overlap."""
        per = round_bytes(b, st.max_block, self.pipeline)
        st.ensure_transit(per)
        pieces = rounds(b, per)
        side = len(pieces) > 1

        def issue(m: torch.cuda.Stream) -> None:
            prev = None
            for i, (o, ln) in enumerate(pieces):
                h = st.start(m, i % 2, sends_of(o, ln), recv, 1, False, side)
                if at_start is not None:
                    at_start(m, h, o, ln)
                if prev is not None:
                    drain(m, *prev)
                prev = (h, o, ln)
            drain(m, *prev)
        st.launch(key + (st.slot_bytes, per), issue)

    def _copy_out(self, st: CeGroup, m: torch.cuda.Stream, h: Any, o: int, ln: int, b: int,
                  out_of: Any) -> None:
        base = st.finish(m, h)
        me, n = st.me, st.n
        if ln == b and out_of(1) - out_of(0) == b:
            # Whole blocks, laid out like the output: two copies around my own block.
            if me > 0:
                st.local_copy(m, out_of(0), st.slot_ptr(base, ln, 0), me * b)
            if me < n - 1:
                st.local_copy(m, out_of(me + 1), st.slot_ptr(base, ln, me + 1),
                              (n - 1 - me) * b)
            return
        for p in range(n):
            if p != me:
                st.local_copy(m, out_of(p) + o, st.slot_ptr(base, ln, p), ln)

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work:
        """Root pushes t to every peer, one after the other."""
        st = self._state(g)
        b = t.numel() * t.element_size()
        ptr = t.data_ptr()
        zc = self._zc(st, t)
        is_root = st.me == root
        # Rotated from the root, like the other ops' pushes.
        peers = list(st.peers) if is_root else []
        recv = [] if is_root else [root]
        if zc is not None:
            buf, off = zc
            token = zero_copy_token(off)

            def issue_zc(m: torch.cuda.Stream) -> None:
                sends = [Send(p, ptr, buf.ptrs[p] + off, b) for p in peers]
                st.finish(m, st.start(m, 0, sends, recv, token, True, False))
            st.launch(("bc", ptr, b, root, "zc"), issue_zc)
            return self._stream_work("broadcast", b, g, st.last_sid, sync=sync)
        self._staged(st, ("bc", ptr, b, root), b,
                     lambda o, ln: [Send(p, ptr + o, root * ln, ln) for p in peers], recv,
                     lambda m, h, o, ln: self._bcast_out(st, m, h, o, ln, ptr, root, is_root))
        return self._stream_work("broadcast", b, g, st.last_sid, sync=sync)

    @staticmethod
    def _bcast_out(st: CeGroup, m: torch.cuda.Stream, h: Any, o: int, ln: int, ptr: int,
                   root: int, is_root: bool) -> None:
        base = st.finish(m, h)
        if not is_root:
            st.local_copy(m, ptr + o, st.slot_ptr(base, ln, root), ln)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work:
        """Copy-engine all-to-all of the blocks into the transit slot, then one reduction."""
        st = self._state(g)
        es = inp.element_size()
        b = out.numel() * es
        src = inp.data_ptr()
        peers = st.peers
        flat_out = out.view(-1)
        me = st.me

        def own_block(m: torch.cuda.Stream, h: Any, o: int, ln: int) -> None:
            st.local_copy(m, st.slot_ptr(st.slot_base(h.slot), ln, me), src + me * b + o, ln)
        self._staged(st, ("rs", src, out.data_ptr(), b, inp.dtype, redop), b,
                     lambda o, ln: [Send(p, src + p * b + o, me * ln, ln) for p in peers], peers,
                     lambda m, h, o, ln: self._reduce_out(st, m, h, o, ln, inp.dtype, redop,
                                                          flat_out), own_block)
        return self._stream_work("reduce_scatter", b * g.size, g, st.last_sid,
                                 sync=sync)

    @staticmethod
    def _reduce_out(st: CeGroup, m: torch.cuda.Stream, h: Any, o: int, ln: int,
                    dtype: torch.dtype, redop: Any, flat_out: torch.Tensor) -> None:
        base = st.finish(m, h)
        es = flat_out.element_size()
        blocks = st.transit[base:base + st.n * ln].view(dtype).view(st.n, ln // es)
        _reduce_blocks(blocks, redop, flat_out[o // es:(o + ln) // es])
