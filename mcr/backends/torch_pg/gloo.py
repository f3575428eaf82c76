"""Gloo through torch ProcessGroupGloo: the default for CPU tensors."""

from __future__ import annotations

from typing import Any

import torch

from ...groups import Spec
from ...ops import DEVICELESS, REDUCTIONS, CallKey
from ..base import HOST
from .common import TorchPGBackend

# What torch's Gloo cannot reduce ("Invalid scalar type" from inside the library, torch 2.13).
_NO_REDUCTION = {torch.int16, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
                 torch.float8_e5m2}


class GlooBackend(TorchPGBackend):
    """CPU tensors over Gloo (TCP / shared memory), host-progressed."""

    name = "gloo"
    domain = HOST
    completes_alone = True

    def bind(self, spec: Spec) -> Any:
        """The ranks' own torch group if it is pure Gloo (object ops need one), else a new
        Gloo group."""
        if spec.pg_backends() == "gloo":
            return spec.pg
        return spec.torch_group("gloo")

    def decline_key(self, key: CallKey) -> str | None:
        """Gloo in mcr serves CPU tensors; GPU tensors go to nccl or mpi."""
        if key.device != "cpu" and key.op not in DEVICELESS:
            return f"gloo serves CPU tensors only, not {key.device}"
        if key.op in REDUCTIONS and key.dtype in _NO_REDUCTION:
            return f"gloo has no {key.dtype} reductions"
        return None
