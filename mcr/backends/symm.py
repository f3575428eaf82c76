"""`symm`: small all-reduces on torch symmetric-memory kernels (one-shot / two-shot).

A persistent symmetric staging buffer per group (MCR_SYMM_MAX_BYTES); the one-shot kernel copies
the caller's tensor into it itself (`one_shot_all_reduce_copy_out`), so an aligned small
all-reduce is one kernel. The kernels sum in bf16/fp32; avg is a sum and one division.

A small all-reduce is host-bound: torch's op cost ~11 us of host time per call on the H100 host,
a replay of the same call captured in a CUDA graph ~5 us (NOTES.md, "symm calls replayed from
CUDA graphs"). So a call whose tensor address, shape and dtype repeat, as in a training loop or
an OSU loop, is captured on its second sighting and replayed after (MCR_SYMM_GRAPHS per group).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ..config import Config
from ..groups import Group, Spec
from ..ops import ALL_REDUCE, CallKey
from ..work import StreamId, Work, follow_stream, stream_of
from .base import STREAM, Backend
from .ce_engine import rendezvous, symm_empty
from .graphs import GraphCache

R = tdist.ReduceOp
_AVG = R.AVG   # reduce ops reach backends as torch's own enum values (singletons): `is` holds
DTYPES = (torch.bfloat16, torch.float32)   # what torch's kernels dispatch on


def _align(x: int) -> int:
    for a in (16, 8, 4, 2):
        if x % a == 0:
            return a
    return 1


# How a call's all-reduce runs, by (shape, dtype, offset): one kernel that copies the input in
# itself, staged (copy in, then a one- or two-shot kernel), or padded to 16 bytes.
_COPY_IN, _STAGED, _PADDED = 0, 1, 2


class _Staging:
    """The group's symmetric staging buffer, a same-size scratch output, the plan of each
    kind of call seen (cached: slicing, viewing and alignment tests cost microseconds per call
    on a slow host, NOTES.md v9), and the calls captured as CUDA graphs."""

    def __init__(self, pg: tdist.ProcessGroup, nbytes: int, graphs: int) -> None:
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.buf = symm_empty(nbytes, self.dev)
        rendezvous(self.buf, pg)
        self.scratch = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
        self.name = pg.group_name
        self.plans: dict[tuple, tuple[int, torch.Tensor, Any]] = {}
        self.graphs = GraphCache(graphs, self.dev)
        self.last_sid: StreamId | None = None   # the stream of the group's last call

    def remember(self, key: tuple, plan: tuple[int, torch.Tensor, Any]
                 ) -> tuple[int, torch.Tensor, Any]:
        """Keep a plan (at most 256: keys carry shapes, which a program may vary without end)."""
        if len(self.plans) >= 256:
            self.plans.clear()
        self.plans[key] = plan
        return plan


class SymmBackend(Backend):
    """Symmetric-memory all-reduce for small messages on one node."""

    name = "symm"
    domain = STREAM
    serves = frozenset({ALL_REDUCE})
    capturable = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._groups: dict[int, _Staging] = {}
        self.ops = torch.ops.symm_mem
        # Older torch lacks the variant that copies the input inside the kernel.
        self._copy_in_kernel = hasattr(self.ops, "one_shot_all_reduce_copy_out")

    def decline_key(self, key: CallKey) -> str | None:
        """All-reduce, sum/avg, bf16/fp32, CUDA, at most MCR_SYMM_MAX_BYTES, 1..8 ranks (one rank:
        the same kernel with a local barrier, which lets a one-GPU machine test this path)."""
        if key.device != "cuda":
            return f"symm serves GPU tensors only, not {key.device}"
        if key.redop not in (R.SUM, R.AVG):
            return "symm kernels reduce with sum (avg = sum / n) only"
        if key.dtype not in DTYPES:
            return f"symm kernels take bfloat16 and float32, not {key.dtype}"
        if key.nbytes > self.cfg.symm_max_bytes:
            return (f"{key.nbytes} bytes exceed the symmetric staging buffer "
                    f"(MCR_SYMM_MAX_BYTES={int(self.cfg.symm_max_bytes)})")
        if not 1 <= key.group_size <= 8:
            return f"symm kernels are built for up to 8 ranks, not {key.group_size}"
        return None

    def bind(self, spec: Spec) -> Any:
        """The group's NCCL group (symmetric-memory rendezvous runs over it), one node only."""
        return self._bind_one_node(spec, spec.handles.get("nccl"))

    def _plan(self, st: _Staging, t: torch.Tensor, size: int) -> tuple[int, torch.Tensor, Any]:
        """(form, staging view, kernel) for calls like t on a group of `size`."""
        es = t.element_size()
        nbytes = t.numel() * es
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
        """How each group's calls ran: directly or replayed from captured graphs."""
        return [f"symm, group {gid}: {st.graphs.note()}"
                for gid, st in sorted(self._groups.items())]

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """In-place all-reduce of t through the staging buffer (replayed from a graph where the
        call repeats)."""
        st = self._groups.get(g.id)
        if st is None:
            st = self._groups[g.id] = _Staging(g.handles[self.name],
                                               int(self.cfg.symm_max_bytes) + 16,
                                               int(self.cfg.symm_graphs))
        # Calls on two streams would otherwise share the staging buffer and the kernel's signal
        # pad at once.
        sid = st.last_sid = follow_stream(st.last_sid, st.dev.index)
        avg = redop is _AVG
        if st.graphs.capacity > 0:
            # A graph names the tensor's memory, so its key holds the address (which also fixes
            # the alignment the plan depends on). A replay needs no plan: the short path first.
            gkey = (t.data_ptr(), t.shape, t.dtype, avg)
            if not st.graphs.replay(gkey):
                plan = self._plan_for(st, t, g.size)
                st.graphs.run(gkey, lambda m: self._issue(st, t, plan, avg, g.size),
                              lambda: stream_of(sid))
        else:
            self._issue(st, t, self._plan_for(st, t, g.size), avg, g.size)
        return None if sync else self._stream_work("all_reduce", t.nbytes, g)

    def _plan_for(self, st: _Staging, t: torch.Tensor, size: int
                  ) -> tuple[int, torch.Tensor, Any]:
        """The cached plan for calls like t."""
        key = (t.shape, t.dtype, t.storage_offset() & 15)
        return st.plans.get(key) or st.remember(key, self._plan(st, t, size))

    def _issue(self, st: _Staging, t: torch.Tensor, plan: tuple[int, torch.Tensor, Any],
               avg: bool, size: int) -> None:
        """Enqueue the all-reduce of t on the current stream."""
        form, stage, how = plan
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
