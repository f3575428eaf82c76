"""`symm`: small all-reduces on torch symmetric-memory kernels (one-shot / two-shot).

A persistent symmetric staging buffer per group (MCR_SYMM_MAX_BYTES); the one-shot kernel copies
the caller's tensor into it itself (`one_shot_all_reduce_copy_out`), so an aligned small
all-reduce is one kernel. The kernels sum in bf16/fp32; avg is a sum and one division.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ..config import Config
from ..groups import Group, Spec
from ..ops import ALL_REDUCE, CallKey
from ..work import Work
from .base import STREAM, Backend
from .ce_engine import rendezvous, symm_empty

R = tdist.ReduceOp
DTYPES = (torch.bfloat16, torch.float32)   # what torch's kernels dispatch on


def _align(x: int) -> int:
    for a in (16, 8, 4, 2):
        if x % a == 0:
            return a
    return 1


class _Staging:
    """The group's symmetric staging buffer and a same-size scratch output."""

    def __init__(self, pg: tdist.ProcessGroup, nbytes: int) -> None:
        dev = torch.device("cuda", torch.cuda.current_device())
        self.buf = symm_empty(nbytes, dev)
        rendezvous(self.buf, pg)
        self.scratch = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        self.name = pg.group_name
        self._views: dict[tuple, torch.Tensor] = {}

    def view(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """The buffer's first bytes as a tensor of this shape and dtype (cached: slicing and
        viewing cost microseconds per call on a slow host, NOTES.md v9)."""
        v = self._views.get((shape, dtype))
        if v is None:
            if len(self._views) >= 256:
                self._views.clear()
            n = shape.numel() * dtype.itemsize
            v = self._views[(shape, dtype)] = self.buf[:n].view(dtype).view(shape)
        return v


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
        """All-reduce, sum/avg, bf16/fp32, CUDA, at most MCR_SYMM_MAX_BYTES, 2..8 ranks."""
        if key.device != "cuda":
            return f"symm serves GPU tensors only, not {key.device}"
        if key.redop not in (R.SUM, R.AVG):
            return "symm kernels reduce with sum (avg = sum / n) only"
        if key.dtype not in DTYPES:
            return f"symm kernels take bfloat16 and float32, not {key.dtype}"
        if key.nbytes > self.cfg.symm_max_bytes:
            return (f"{key.nbytes} bytes exceed the symmetric staging buffer "
                    f"(MCR_SYMM_MAX_BYTES={int(self.cfg.symm_max_bytes)})")
        if not 2 <= key.group_size <= 8:
            return f"symm kernels are built for 2 to 8 ranks, not {key.group_size}"
        return None

    def bind(self, spec: Spec) -> Any:
        """The group's NCCL group (symmetric-memory rendezvous runs over it), one node only."""
        return self._bind_one_node(spec, spec.handles.get("nccl"))

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """In-place all-reduce of t through the staging buffer."""
        st = self._groups.get(g.id)
        if st is None:
            st = self._groups[g.id] = _Staging(g.handles[self.name],
                                               int(self.cfg.symm_max_bytes) + 16)
        n, es = t.numel(), t.element_size()
        nbytes = n * es
        size_al = _align(nbytes)
        fits = size_al >= max(4, es) and _align(t.storage_offset() * es) >= size_al
        two_shot = nbytes >= self.cfg.symm_two_shot_bytes and g.size in (2, 4, 8)
        if fits and not two_shot and self._copy_in_kernel:
            # The common small case: one kernel, no Python-side views of t.
            self.ops.one_shot_all_reduce_copy_out(st.view(t.shape, t.dtype), t, "sum", st.name,
                                                  t)
            flat = t
        else:
            flat = t.view(-1)
            if fits:
                stage = st.view(flat.shape, t.dtype)
                stage.copy_(flat)
                kernel = self.ops.two_shot_all_reduce_out if two_shot else \
                    self.ops.one_shot_all_reduce_out
                kernel(stage, "sum", st.name, flat)
            else:
                # Sizes the kernels cannot vector-load: pad to 16 bytes with zeros.
                padded = -(-nbytes // 16) * 16
                pstage = st.buf[:padded].view(t.dtype)
                pstage[:n].copy_(flat)
                pstage[n:].zero_()
                tmp = st.scratch[:padded].view(t.dtype)
                self.ops.one_shot_all_reduce_out(pstage, "sum", st.name, tmp)
                flat.copy_(tmp[:n])
        if redop == R.AVG:
            flat.div_(g.size)
        return self._stream_work("all_reduce", nbytes, g, sync=sync)
