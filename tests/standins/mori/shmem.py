"""Stand-in for mori.shmem: remembers the bootstrap group and the SDMA switch at init."""

from __future__ import annotations

import os

import torch.distributed.distributed_c10d as c10d

STATE: dict[str, object] = {}


def shmem_torch_process_group_init(group_name: str) -> int:
    """Bind to the torch process group registered under group_name (as mori does)."""
    STATE["group"] = c10d._resolve_process_group(group_name)
    STATE["sdma_env_at_init"] = os.environ.get("MORI_ENABLE_SDMA")
    return 0


def shmem_mype() -> int:
    """This PE's rank in the bootstrap group."""
    return STATE["group"].rank()


def shmem_npes() -> int:
    """Number of PEs in the bootstrap group."""
    return STATE["group"].size()
