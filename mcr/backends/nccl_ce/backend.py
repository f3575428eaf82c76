"""`nccl_ce`: NCCL's own copy-engine collectives (NCCL >= 2.28, zero-CTA policy, one node).

The group gets a second NCCL communicator created with `cta_policy` ZERO; NCCL uses the copy
engines only for buffers in symmetric windows, so each group keeps persistent window buffers
(a torch MemPool on NCCL's allocator, registered with symm=True). Callers' tensors are copied in
and out, unless they were allocated by mcr.comm.symmetric_empty(backend="nccl_ce").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ...config import Config
from ...groups import Group, Spec
from ...ops import ALL_GATHER, ALL_TO_ALL, CallKey
from ...spans import Spans
from ...work import Work
from ..base import STREAM, Backend
from ..cuda.symm_mem import rounds
from ..torch_pg.common import all_gather_tensor


def zero_cta_options() -> Any | None:
    """ProcessGroupNCCL options with the zero-CTA policy, or None where torch/NCCL lack it."""
    pol = getattr(tdist.ProcessGroupNCCL, "NCCL_CTA_POLICY_ZERO", None)
    if pol is None or torch.cuda.nccl.version() < (2, 28, 0):
        return None
    opts = tdist.ProcessGroupNCCL.Options()
    opts.config.cta_policy = pol
    return opts


class _Windows:
    """Registered symmetric-window buffers of one group: an input and an output region."""

    def __init__(self, pg: tdist.ProcessGroup, in_bytes: int, n: int) -> None:
        dev = torch.device("cuda", torch.cuda.current_device())
        self.backend = pg._get_backend(dev)
        # Registration needs a live communicator; NCCL creates it lazily at the first call.
        tdist.all_reduce(torch.zeros(1, device=dev), group=pg)
        self.pool = torch.cuda.MemPool(self.backend.mem_allocator)
        with torch.cuda.use_mem_pool(self.pool):
            self.inp = torch.empty(in_bytes, dtype=torch.uint8, device=dev)
            self.out = torch.empty(in_bytes * n, dtype=torch.uint8, device=dev)
        self.backend.register_mem_pool(self.pool, symm=True)
        self.user: Spans[None] = Spans()  # caller buffers made in registered pools
        self.pools = [self.pool]

    def owns(self, t: torch.Tensor) -> bool:
        """t lies in a buffer registered as a symmetric window."""
        return self.user.find(t) is not None


class NcclCeBackend(Backend):
    """All-gather and equal all-to-all through NCCL's zero-CTA copy-engine path."""

    name = "nccl_ce"
    domain = STREAM
    serves = frozenset({ALL_GATHER, ALL_TO_ALL})
    capturable = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._groups: dict[int, _Windows] = {}

    def decline_key(self, key: CallKey) -> str | None:
        """CUDA all-gather and equal all-to-all."""
        if key.device != "cuda":
            return f"nccl_ce serves GPU tensors only, not {key.device}"
        if key.op == ALL_TO_ALL and not key.even:
            return "nccl_ce serves equal-split all-to-all only"
        return None

    def ready(self, group: Group) -> bool:
        """Whether the group's buffers exist (made at its first call, outside capture)."""
        return group.id in self._groups

    def bind(self, spec: Spec) -> Any:
        """A second NCCL communicator of the ranks with the zero-CTA policy, one node only
        (every rank that builds the group creates it, as torch requires)."""
        pg = spec.torch_group("nccl", pg_options=zero_cta_options())
        return self._bind_one_node(spec, pg)

    def _win(self, g: Group) -> _Windows:
        w = self._groups.get(g.id)
        if w is None:
            cap = max(1 << 20, int(self.cfg.nccl_ce_max_bytes))
            w = self._groups[g.id] = _Windows(g.handles[self.name], cap, g.size)
        return w

    def alloc_symmetric(self, nbytes: int, g: Group) -> torch.Tensor:
        """A uint8 buffer inside a registered window pool (collective on g)."""
        w = self._win(g)
        pool = torch.cuda.MemPool(w.backend.mem_allocator)
        with torch.cuda.use_mem_pool(pool):
            t = torch.empty(max(nbytes, 16), dtype=torch.uint8, device="cuda")
        w.backend.register_mem_pool(pool, symm=True)
        w.pools.append(pool)
        w.user.add(t.data_ptr(), t.numel(), None)
        return t[:nbytes]

    def _run(self, op: str, out: torch.Tensor, inp: torch.Tensor, g: Group, sync: bool) -> Work:
        w = self._win(g)
        pg = g.handles[self.name]
        n = g.size
        fn = all_gather_tensor if op == ALL_GATHER else tdist.all_to_all_single
        nb = inp.numel() * inp.element_size()
        if w.owns(inp) and w.owns(out):
            fn(out, inp, group=pg)
            return self._stream_work(op, nb, g, sync=sync)
        # Stage through the windows, in pieces of the window size.
        cap = w.inp.numel() if op == ALL_GATHER else w.inp.numel() // n * n
        src = inp.view(-1).view(torch.uint8)
        dst = out.view(-1).view(torch.uint8)
        blk = nb if op == ALL_GATHER else nb // n      # bytes per rank block
        per = cap if op == ALL_GATHER else cap // n
        for o, ln in rounds(blk, per):
            if op == ALL_GATHER:
                w.inp[:ln].copy_(src[o:o + ln])
            else:
                w.inp[:ln * n].view(n, ln).copy_(src.view(n, blk)[:, o:o + ln])
            fn(w.out[:ln * n], w.inp[:ln * n if op == ALL_TO_ALL else ln], group=pg)
            dst.view(n, blk)[:, o:o + ln].copy_(w.out[:ln * n].view(n, ln))
        return self._stream_work(op, nb, g, sync=sync)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """all_gather_into_tensor on the zero-CTA communicator."""
        return self._run(ALL_GATHER, out, inp, g, sync)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False,
                   even: bool = True) -> Work:
        """Equal-split all_to_all_single on the zero-CTA communicator."""
        return self._run(ALL_TO_ALL, out, inp, g, sync)

