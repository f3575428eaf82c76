"""`symm`: small all-reduces on symmetric-memory kernels: mcr's low-latency one (ll.py) up
to MCR_SYMM_LL_BYTES, torch's one-shot / two-shot above; small all-gathers, reduce-scatters,
broadcasts and equal-split all-to-alls (those MCR_SYMM_OPS names) on the low-latency kernel
too.

A persistent symmetric staging buffer per group (MCR_SYMM_MAX_BYTES), with the low-latency
kernel's receive regions after it; torch's one-shot kernel copies the caller's tensor into it
itself (`one_shot_all_reduce_copy_out`), so an aligned small all-reduce is one kernel. The
kernels sum in bf16/fp32; avg is a sum and one division.

A small all-reduce is host-bound: torch's op cost ~11 us of host time per call on the H100 host,
a replay of the same call captured in a CUDA graph ~5 us. So a call whose tensor address, shape
and dtype repeat, as in a training loop or an OSU loop, is captured on its second sighting and
replayed after (MCR_SYMM_GRAPHS per group).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

from ...config import Config
from ...groups import Group, Spec
from ...ops import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, BROADCAST, REDUCE_SCATTER, CallKey
from ...streams import StreamId, follow_stream, stream_of
from ...work import Work
from ..base import STREAM, Backend
from ..cuda.graphs import GraphCache
from ..cuda.symm_mem import rendezvous, symm_empty
from ..torch_pg.common import all_gather_tensor, reduce_scatter_tensor
from . import ll as LL
from .ll import CALL_LIMIT, LLGroup, auto_bytes, region_bytes, unavailable

UNEVEN = "all_to_all_uneven"     # MCR_SYMM_OPS's name for all-to-alls with split sizes

R = tdist.ReduceOp
_AVG = R.AVG   # reduce ops reach backends as torch's own enum values (singletons): `is` holds
DTYPES = (torch.bfloat16, torch.float32)   # what torch's kernels dispatch on


def _align(x: int) -> int:
    for a in (16, 8, 4, 2):
        if x % a == 0:
            return a
    return 1


# How a call's all-reduce runs, by (shape, dtype, offset): mcr's low-latency kernel, one torch
# kernel that copies the input in itself, staged (copy in, then a one- or two-shot kernel), or
# padded to 16 bytes.
_LL, _COPY_IN, _STAGED, _PADDED = 3, 0, 1, 2
# Graphs captured for one size of low-latency all-reduce (at different addresses) before calls
# of that size at addresses with no graph are launched directly instead of captured: a capture
# costs ~150 us of host time and evicts graphs that do repeat (HF decode allocates every step).
MOVING = 4


class _Staging:
    """The group's symmetric staging buffer, a same-size scratch output, the low-latency
    kernel's state, the plan of each kind of call seen (cached: slicing, viewing and alignment
    tests cost microseconds per call on a slow host), and the calls captured as
    CUDA graphs."""

    def __init__(self, pg: tdist.ProcessGroup, nbytes: int, cfg: Config) -> None:
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.name = pg.group_name
        ll_bytes, self.why_not_ll = _ll_bytes(pg, cfg)
        off = -(-nbytes // 256) * 256
        self.buf = symm_empty(off + region_bytes(ll_bytes, pg.size()), self.dev)
        if ll_bytes:
            # Zero lines carry call number 0, which no call uses; zeroed before any peer can
            # learn the address (the rendezvous below), so no peer's line is overwritten.
            self.buf[off:].zero_()
            torch.cuda.current_stream(self.dev).synchronize()
        hdl = rendezvous(self.buf, pg)
        self.ll = LLGroup(self.buf, off, list(hdl.buffer_ptrs), pg.rank(), ll_bytes,
                          cfg.timeout_s, cfg.symm_pdl) if ll_bytes else None
        self.calls = 0
        self.scratch = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
        self.plans: dict[tuple, tuple[int, torch.Tensor, Any]] = {}
        self.graphs = GraphCache(int(cfg.symm_graphs), self.dev)
        self.last_sid: StreamId | None = None   # the stream of the group's last call
        # Captures per kind and size of low-latency call (op, bytes, ...); from MOVING on, calls
        # of that kind whose addresses have no graph are launched directly (in unrepeated).
        self.moving: dict[tuple, int] = {}
        self.unrepeated = 0
        self.uneven = 0      # all-to-alls with split sizes (never captured)

    def retire_ll(self) -> None:
        """Leave the low-latency kernel for good (its call numbers would come round): every
        rank counts the same calls, so all leave at the same one."""
        self.ll = None
        self.why_not_ll = f"{CALL_LIMIT} calls made; its call numbers would repeat"
        self.plans.clear()
        self.graphs.clear()

    def remember(self, key: tuple, plan: tuple[int, torch.Tensor, Any]
                 ) -> tuple[int, torch.Tensor, Any]:
        """Keep a plan (at most 256: keys carry shapes, which a program may vary without end)."""
        if len(self.plans) >= 256:
            self.plans.clear()
        self.plans[key] = plan
        return plan


def ll_limit(cfg: Config, world: int) -> int:
    """The largest block (bytes per rank) the low-latency kernel takes on `world` ranks."""
    asked = auto_bytes(world) if cfg.symm_ll_bytes is None else cfg.symm_ll_bytes
    return int(min(asked, cfg.symm_max_bytes))


def _ll_bytes(pg: tdist.ProcessGroup, cfg: Config) -> tuple[int, str | None]:
    """(MCR_SYMM_LL_BYTES, None) where every rank of pg can run the low-latency kernel, else
    (0, why not): a rank that ran it while a peer ran torch's would wait for lines that never
    come."""
    want = ll_limit(cfg, pg.size())
    if not want:
        return 0, "MCR_SYMM_LL_BYTES=0"
    why = unavailable()
    ok = torch.tensor([0 if why else 1], device=torch.device("cuda", torch.cuda.current_device()))
    tdist.all_reduce(ok, op=R.MIN, group=pg)
    if not int(ok.item()):
        return 0, why or "a peer cannot run the low-latency kernel (its summary says why)"
    return want, None


class SymmBackend(Backend):
    """Symmetric-memory all-reduce, all-gather, reduce-scatter and broadcast (MCR_SYMM_OPS)
    for small messages on one node."""

    name = "symm"
    domain = STREAM
    serves = frozenset({ALL_REDUCE})
    capturable = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.serves = frozenset({ALL_REDUCE, *cfg.symm_ops} - {UNEVEN})
        self._groups: dict[int, _Staging] = {}
        self.ops = torch.ops.symm_mem
        # Older torch lacks the variant that copies the input inside the kernel.
        self._copy_in_kernel = hasattr(self.ops, "one_shot_all_reduce_copy_out")

    def decline_key(self, key: CallKey) -> str | None:
        """CUDA, 1..8 ranks (one rank: the same kernels with their peers' part left out, which
        lets a one-GPU machine test this path); all-reduce sum/avg of bf16/fp32 up to
        MCR_SYMM_MAX_BYTES; all-gather, broadcast and all-to-all (any dtype; with split sizes
        where MCR_SYMM_OPS says so, keyed on the largest block) and reduce-scatter (as
        all-reduce) of blocks the low-latency kernel takes."""
        if key.device != "cuda":
            return f"symm serves GPU tensors only, not {key.device}"
        if not 1 <= key.group_size <= 8:
            return f"symm kernels are built for up to 8 ranks, not {key.group_size}"
        if key.op == ALL_TO_ALL and not key.even and UNEVEN not in self.cfg.symm_ops:
            return f"symm serves all-to-alls with split sizes only where MCR_SYMM_OPS has {UNEVEN}"
        if key.op != ALL_REDUCE:
            whole = key.op == BROADCAST     # its root pushes the whole tensor to each peer
            block = key.nbytes if whole else key.nbytes // key.group_size
            most = ll_limit(self.cfg, key.group_size)
            if block > most:
                return (f"{block} bytes per rank exceed what the low-latency kernel takes on "
                        f"{key.group_size} ranks ({most}: MCR_SYMM_LL_BYTES)")
            if key.op in (ALL_GATHER, BROADCAST, ALL_TO_ALL):
                return None
        if key.redop not in (R.SUM, R.AVG):
            return "symm kernels reduce with sum (avg = sum / n) only"
        if key.dtype not in DTYPES:
            return f"symm kernels take bfloat16 and float32, not {key.dtype}"
        if key.nbytes > self.cfg.symm_max_bytes:
            return (f"{key.nbytes} bytes exceed the symmetric staging buffer "
                    f"(MCR_SYMM_MAX_BYTES={int(self.cfg.symm_max_bytes)})")
        return None

    def ready(self, group: Group) -> bool:
        """Whether the group's buffers exist (made at its first call, outside capture)."""
        return group.id in self._groups

    def bind(self, spec: Spec) -> Any:
        """The group's NCCL group (symmetric-memory rendezvous runs over it), one node only."""
        return self._bind_one_node(spec, spec.handles.get("nccl"))

    def _plan(self, st: _Staging, t: torch.Tensor, size: int) -> tuple[int, torch.Tensor, Any]:
        """(form, staging view, kernel) for calls like t on a group of `size`."""
        es = t.element_size()
        nbytes = t.numel() * es
        if st.ll is not None and nbytes <= st.ll.ll_bytes:
            return _LL, st.buf, None
        size_al = _align(nbytes)
        fits = size_al >= max(4, es) and _align((t.storage_offset() & 15) * es) >= size_al
        two_shot = nbytes >= self.cfg.symm_two_shot_bytes and size in (2, 4, 8)
        if fits and not two_shot and self._copy_in_kernel:
            return _COPY_IN, st.buf[:nbytes].view(t.dtype).view(t.shape), None
        if fits:
            kernel = self.ops.two_shot_all_reduce_out if two_shot else \
                self.ops.one_shot_all_reduce_out
            return _STAGED, st.buf[:nbytes].view(t.dtype), kernel
        # Sizes the kernels cannot vector-load: pad to 16 bytes with zeros.
        padded = -(-nbytes // 16) * 16
        return _PADDED, st.buf[:padded].view(t.dtype), st.scratch[:padded].view(t.dtype)

    def summary_lines(self) -> list[str]:
        """How each group's calls ran: directly or replayed from captured graphs, and up to
        which size on the low-latency kernel."""
        return [f"symm, group {gid}: {st.graphs.note()}; "
                + (f"calls to {st.ll.ll_bytes} bytes on mcr's low-latency kernel"
                   + (" (launched early, PDL)" if st.ll.pdl else "") if st.ll
                   else f"torch's kernels only: {st.why_not_ll}")
                + (f"; {st.unrepeated} calls launched without capture (their addresses kept "
                   f"changing: {sum(v >= MOVING for v in st.moving.values())} sizes)"
                   if st.unrepeated else "")
                + (f"; {st.uneven} all-to-alls with split sizes launched directly"
                   if st.uneven else "")
                for gid, st in sorted(self._groups.items())]

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """In-place all-reduce of t through the staging buffer (replayed from a graph where the
        call repeats)."""
        st, sid = self._enter(g)
        avg = redop is _AVG
        if st.graphs.capacity > 0:
            # A graph names the tensor's memory, so its key holds the address (which also fixes
            # the alignment the plan depends on). A replay needs no plan: the short path first.
            gkey = (t.data_ptr(), t.shape, t.dtype, avg)
            if not st.graphs.replay(gkey):
                plan = self._plan_for(st, t, g.size)
                self._run(st, sid, gkey, (ALL_REDUCE, t.nbytes, t.dtype, avg) if plan[0] == _LL
                          else None, lambda: self._issue(st, t, plan, avg, g.size), tried=True)
        else:
            self._issue(st, t, self._plan_for(st, t, g.size), avg, g.size)
        return None if sync else self._stream_work("all_reduce", t.nbytes, g)

    def _enter(self, g: Group) -> tuple[_Staging, StreamId]:
        """The group's state (made at its first call, collectively), this call counted, and
        the caller's stream, ordered after the group's last call's: calls on two streams would
        otherwise share the staging buffer, the kernels' signal pad and receive regions at
        once."""
        st = self._groups.get(g.id)
        if st is None:
            st = self._groups[g.id] = _Staging(g.handles[self.name],
                                               int(self.cfg.symm_max_bytes) + 16, self.cfg)
        st.calls += 1
        if st.calls == CALL_LIMIT and st.ll is not None:
            st.retire_ll()
        st.last_sid = follow_stream(st.last_sid, st.dev.index)
        return st, st.last_sid

    @staticmethod
    def _run(st: _Staging, sid: StreamId, gkey: tuple, size: tuple | None,
             issue: Callable[[], None], tried: bool = False) -> None:
        """Enqueue a call: replayed where its key was captured, captured on its second
        sighting, launched directly where it is a low-latency call of a `size` whose addresses
        kept changing (MOVING captures already). tried: the caller has just looked for gkey's
        graph and found none (a second lookup costs a slow host ~1 us a call)."""
        if size is not None and st.moving.get(size, 0) >= MOVING:
            # One run either way: a second would advance this rank's call numbers past its
            # peers' (the low-latency kernel's next call would then wait for good).
            if tried or not st.graphs.replay(gkey):
                issue()
                st.unrepeated += 1
            return
        before = st.graphs.captures
        st.graphs.run(gkey, lambda m: issue(), lambda: stream_of(sid), tried)
        if size is not None and st.graphs.captures != before:
            st.moving[size] = st.moving.get(size, 0) + 1

    def _ll_call(self, g: Group, key: tuple, issue: Callable[[LLGroup], None],
                 fallback: Callable[[Any], None]) -> None:
        """Enqueue one call on the low-latency kernel (replayed from a graph where its key
        repeats), or fallback(torch's group) where the group's ranks cannot all run it. key:
        (op, output address, input address, bytes, ...)."""
        st, sid = self._enter(g)
        if st.ll is None:
            fallback(g.handles[self.name])
        else:
            self._run(st, sid, key, (key[0], *key[3:]), lambda: issue(st.ll))

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """out <- every rank's inp in rank order, on the low-latency kernel (NCCL on the group
        where its ranks cannot all run it)."""
        n = inp.numel() * inp.element_size()
        self._ll_call(g, (ALL_GATHER, out.data_ptr(), inp.data_ptr(), n),
                      lambda ll: ll.issue(LL.ALL_GATHER, inp, out, n, False),
                      lambda pg: all_gather_tensor(out, inp, group=pg))
        return None if sync else self._stream_work(ALL_GATHER, out.nbytes, g)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work:
        """out <- this rank's block of the sum (avg) of every rank's inp, on the low-latency
        kernel (NCCL on the group where its ranks cannot all run it)."""
        n, avg = out.numel() * out.element_size(), redop is _AVG
        self._ll_call(g, (REDUCE_SCATTER, out.data_ptr(), inp.data_ptr(), n, out.dtype, avg),
                      lambda ll: ll.issue(LL.REDUCE_SCATTER, inp, out, n, avg),
                      lambda pg: reduce_scatter_tensor(out, inp, op=redop, group=pg))
        return None if sync else self._stream_work(REDUCE_SCATTER, inp.nbytes, g)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False,
                   even: bool = True) -> Work:
        """Block p of inp -> rank p, on the low-latency kernel (NCCL on the group where its
        ranks cannot all run it); even: equal splits, else split sizes (the key said which,
        alike on every rank; each rank's splits alone may look equal)."""
        if not even:
            return self._uneven(out, inp, out_counts, in_counts, g, sync)
        n = in_counts[0] * inp.element_size()
        self._ll_call(g, (ALL_TO_ALL, out.data_ptr(), inp.data_ptr(), n),
                      lambda ll: ll.issue(LL.ALL_TO_ALL, inp, out, n, False),
                      lambda pg: tdist.all_to_all_single(out, inp, group=pg))
        return None if sync else self._stream_work(ALL_TO_ALL, inp.nbytes, g)

    def _uneven(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                in_counts: list[int], g: Group, sync: bool) -> Work:
        """all_to_all with split sizes, launched directly: its splits change call by call (a
        drop-less MoE layer's routing), so a captured graph would rarely be replayed."""
        st, _ = self._enter(g)
        if st.ll is None:
            tdist.all_to_all_single(out, inp, out_counts, in_counts, group=g.handles[self.name])
        else:
            st.ll.issue_uneven(inp, out, in_counts, out_counts)
            st.uneven += 1
        return None if sync else self._stream_work(ALL_TO_ALL, inp.nbytes, g)

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work:
        """t on every rank <- t on group rank root, in place, on the low-latency kernel (NCCL on
        the group where its ranks cannot all run it)."""
        n = t.numel() * t.element_size()
        self._ll_call(g, (BROADCAST, t.data_ptr(), t.data_ptr(), n, root),
                      lambda ll: ll.issue(LL.BROADCAST, t, t, n, False, root),
                      lambda pg: tdist.broadcast(t, group_src=root, group=pg))
        return None if sync else self._stream_work(BROADCAST, t.nbytes, g)

    def _plan_for(self, st: _Staging, t: torch.Tensor, size: int
                  ) -> tuple[int, torch.Tensor, Any]:
        """The cached plan for calls like t."""
        key = (t.shape, t.dtype, t.storage_offset() & 15)
        return st.plans.get(key) or st.remember(key, self._plan(st, t, size))

    def _issue(self, st: _Staging, t: torch.Tensor, plan: tuple[int, torch.Tensor, Any],
               avg: bool, size: int) -> None:
        """Enqueue the all-reduce of t on the current stream."""
        form, stage, how = plan
        if form == _LL:
            st.ll.issue(LL.ALL_REDUCE, t, t, t.numel() * t.element_size(), avg)
            return
        if form == _COPY_IN:
            # The common small case: one kernel, no Python-side views of t.
            self.ops.one_shot_all_reduce_copy_out(stage, t, "sum", st.name, t)
            flat = t
        elif form == _STAGED:
            flat = t.view(-1)
            stage.copy_(flat)
            how(stage, "sum", st.name, flat)
        else:
            flat = t.view(-1)
            n = flat.numel()
            stage[:n].copy_(flat)
            stage[n:].zero_()
            self.ops.one_shot_all_reduce_out(stage, "sum", st.name, how)
            flat.copy_(how[:n])
        if avg:
            flat.div_(size)
