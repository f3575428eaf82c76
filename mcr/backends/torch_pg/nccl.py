"""NCCL (RCCL on ROCm) through torch ProcessGroupNCCL: the default for GPU tensors."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist

from ...groups import Spec
from ...ops import DEVICELESS, CallKey
from ..base import STREAM
from .common import TorchPGBackend

_BITWISE = (tdist.ReduceOp.BAND, tdist.ReduceOp.BOR, tdist.ReduceOp.BXOR)
# torch sends bool as uint8 and maps SUM to MAX (an or); MIN and PRODUCT are an and.
_BOOL_OK = (tdist.ReduceOp.SUM, tdist.ReduceOp.MAX, tdist.ReduceOp.MIN, tdist.ReduceOp.PRODUCT)


class NcclBackend(TorchPGBackend):
    """CUDA tensors over NCCL, stream-ordered."""

    name = "nccl"
    domain = STREAM
    native_premul = True
    any_source = False
    capturable = True

    def bind(self, spec: Spec) -> Any:
        """The ranks' own torch group if it runs NCCL for CUDA tensors, else a new one."""
        if "nccl" in spec.pg_backends():
            return spec.pg
        return spec.torch_group("nccl")

    def decline_key(self, key: CallKey) -> str | None:
        """NCCL serves CUDA tensors (and barriers); it has no bitwise reductions, and bool
        ones only as torch makes them (sum, max, min, product)."""
        if key.device != "cuda" and key.op not in DEVICELESS:
            return f"nccl serves CUDA tensors only, not {key.device}"
        if key.redop is not None:
            if key.redop in _BITWISE:
                return "nccl has no bitwise reductions"
            if key.dtype == torch.bool and key.redop not in _BOOL_OK:
                return "nccl reduces bool tensors by sum, max, min or product only"
        return None
