"""Gloo through torch ProcessGroupGloo: the default for CPU tensors."""

from __future__ import annotations

import torch.distributed as tdist

from ..ops import DEVICELESS, CallKey
from .base import HOST
from .torch_pg import TorchPGBackend


class GlooBackend(TorchPGBackend):
    """CPU tensors over Gloo (TCP / shared memory), host-progressed."""

    name = "gloo"
    domain = HOST

    def decline_key(self, key: CallKey) -> str | None:
        """Gloo in mcr serves CPU tensors; GPU tensors go to nccl or mpi."""
        if key.device != "cpu" and key.op not in DEVICELESS:
            return f"gloo serves CPU tensors only, not {key.device}"
        if key.redop is not None and key.redop == tdist.ReduceOp.PREMUL_SUM:
            return "gloo has no premul_sum"
        return None
