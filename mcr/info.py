"""deepspeed.comm's questions and settings: ranks, capabilities, profiles of table rules,
per-call timing, the summary."""

from __future__ import annotations

from typing import Any

from . import report, runtime
from .errors import CallError
from .session import group_rank, group_ranks, group_size

# -- rank queries (answer from what is known; never bind a library) --------------------------

def get_rank(group: Any = None) -> int:
    """This process's rank in group (the world by default); -1 if not a member."""
    return group_rank(group)


def get_world_size(group: Any = None) -> int:
    """Number of ranks in group (the world by default); -1 for torch's non-member group."""
    return group_size(group)


def get_local_rank() -> int:
    """Rank of this process on its node."""
    return runtime.get().launch.local_rank


def get_global_rank(group: Any = None, group_rank: int = 0) -> int:
    """The world rank of rank group_rank of group."""
    ranks = group_ranks(group)
    if not 0 <= group_rank < len(ranks):
        raise CallError(f"get_global_rank: group rank {group_rank} outside group of "
                        f"{len(ranks)}")
    return ranks[group_rank]


def get_all_ranks_from_group(group: Any = None) -> list[int]:
    """The world ranks of group, in group-rank order."""
    return group_ranks(group)


def has_all_gather_into_tensor() -> bool:
    """mcr always has all_gather_into_tensor."""
    return True


def has_reduce_scatter_tensor() -> bool:
    """mcr always has reduce_scatter_tensor."""
    return True


def has_all_reduce_coalesced() -> bool:
    """mcr always has all_reduce_coalesced (one flat message)."""
    return True


def has_coalescing_manager() -> bool:
    """No: mcr has no torch coalescing manager; callers take their per-call path."""
    return False


def enable_symm_mem_for_group(group_name: str) -> None:
    """torch's enable_symm_mem_for_group, where this torch still needs it (a no-op after)."""
    import torch.distributed._symmetric_memory as symm_mem
    fn = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if fn is not None:
        fn(group_name)


def initialize_mesh_device(mesh_shape: tuple[int, ...], mesh_dim_names: tuple[str, ...]
                           ) -> Any:
    """A torch DeviceMesh over the world (its groups are served by mcr like any torch group)."""
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cuda" if runtime.get().cuda else "cpu", tuple(mesh_shape),
                            mesh_dim_names=tuple(mesh_dim_names))


def configure(deepspeed_config: Any = None, enabled: bool | None = None,
              prof_all: bool | None = None, prof_ops: list[str] | None = None,
              verbose: bool | None = None, debug: bool | None = None) -> None:
    """Per-call timing (the comms logger), as deepspeed.comm.configure; a DeepSpeed config's
    comms_logger section is read the same way. Counting calls per library is always on."""
    comms = getattr(deepspeed_config, "comms_config", None)
    if comms is not None and getattr(comms, "comms_logger_enabled", False):
        cl = comms.comms_logger
        enabled = enabled if enabled is not None else cl.enabled
        prof_all = prof_all if prof_all is not None else cl.prof_all
        prof_ops = prof_ops if prof_ops is not None else cl.prof_ops
        verbose = verbose if verbose is not None else cl.verbose
    runtime.get().logger.configure(enabled=enabled, verbose=verbose, prof_ops=prof_ops,
                                   prof_all=prof_all)


def log_summary(show_straggler: bool = False, return_dict: bool = False) -> Any:
    """Print on rank 0 what mcr did: calls and bytes per op and library, fallbacks, calls that
    bypassed mcr, and (with per-call timing on) times and bandwidths."""
    rt = runtime.get()
    report.show(rt)
    return report.rows(rt) if return_dict else None
