"""Torch symmetric memory as mcr's CUDA backends use it: allocation, rendezvous in turns, and
the pieces a transit buffer cuts a block into (sdma, symm and nccl_ce share these)."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as tdist

from .turns import TURNS


def symm_empty(nbytes: int, device: torch.device) -> torch.Tensor:
    """A uint8 tensor in torch symmetric memory (collective use needs rendezvous after)."""
    import torch.distributed._symmetric_memory as symm_mem
    return symm_mem.empty(max(nbytes, 16), dtype=torch.uint8, device=device)


def rendezvous(t: torch.Tensor, pg: tdist.ProcessGroup) -> object:
    """Exchange symmetric-memory handles over pg (collective); a clear error instead of a
    wait that cannot end where pg's ranks made different numbers of rendezvous before."""
    import torch.distributed._symmetric_memory as symm_mem
    TURNS.before(pg.group_name, pg.rank(), tdist.get_process_group_ranks(pg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            enable(pg.group_name)  # needed by older torch for groups other than WORLD
    hdl = symm_mem.rendezvous(t, pg.group_name)
    TURNS.after()
    return hdl


def rounds(nbytes: int, cap: int) -> list[tuple[int, int]]:
    """(offset, length) pieces of a per-rank block of nbytes, each at most cap."""
    if nbytes <= cap:
        return [(0, nbytes)]
    return [(o, min(cap, nbytes - o)) for o in range(0, nbytes, cap)]
