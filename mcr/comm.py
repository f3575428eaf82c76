"""mcr.comm: a drop-in for deepspeed.comm / torch.distributed that picks a library per call.

`import mcr.comm as dist`, then use it as deepspeed.comm: the same names, the same arguments in
the same order (DeepSpeed's profiling arguments `prof`, `log_name`, `debug` are accepted and
unused). Every collective also takes a keyword-only `backend=` to force one library for that
call. Ranks (src, dst, peer) are global ranks, as in torch.distributed. `group` is an mcr group
(new_group) or any torch ProcessGroup. Unknown keyword arguments are a TypeError.
"""

from __future__ import annotations

import torch.distributed as tdist

from . import compiled as _compiled
from .alltoall import all_to_all, all_to_all_single
from .collectives import (
                          all_gather,
                          all_gather_coalesced,
                          all_gather_into_tensor,
                          all_reduce,
                          all_reduce_coalesced,
                          allgather_fn,
                          barrier,
                          broadcast,
                          gather,
                          inference_all_reduce,
                          monitored_barrier,
                          reduce,
                          reduce_scatter,
                          reduce_scatter_fn,
                          reduce_scatter_tensor,
                          scatter,
)
from .ds_names import (
    get_comm_operation_count,
    get_local_rank_from_launcher,
    get_logged_comm_ops,
    get_world_rank_from_launcher,
    get_world_size_from_launcher,
    has_comm_data,
    in_aml,
    in_aws_sm,
    in_dlts,
    init_deepspeed_backend,
    is_available,
    mpi_discovery,
    patch_aml_env_for_torch_nccl_backend,
    patch_aws_sm_env_for_torch_nccl_backend,
    reset_log,
    set_backend,
    timed_op,
)
from .hier import HierBackend  # noqa: F401 - registers the composed backend `hier`
from .info import (
                          configure,
                          enable_symm_mem_for_group,
                          get_all_ranks_from_group,
                          get_global_rank,
                          get_local_rank,
                          get_rank,
                          get_world_size,
                          has_all_gather_into_tensor,
                          has_all_reduce_coalesced,
                          has_coalescing_manager,
                          has_reduce_scatter_tensor,
                          initialize_mesh_device,
                          log_summary,
)
from .p2p import (
                          P2POp,
                          all_gather_object,
                          batch_isend_irecv,
                          broadcast_object_list,
                          irecv,
                          isend,
                          recv,
                          send,
)
from .route import force_backend, profile, which_backend
from .session import (
                          can_allocate_symmetric,
                          destroy_process_group,
                          get_world_group,
                          init_distributed,
                          is_initialized,
                          new_group,
                          symmetric_empty,
                          torch_group,
)
from .work import Work

ReduceOp = tdist.ReduceOp
__all__ = [
    "P2POp", "ReduceOp", "Work", "all_gather", "all_gather_coalesced", "all_gather_into_tensor",
    "all_gather_object", "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single",
    "allgather_fn", "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list",
    "can_allocate_symmetric", "configure", "destroy_process_group", "enable_symm_mem_for_group",
    "force_backend",
    "gather", "get_all_ranks_from_group", "get_global_rank", "get_local_rank", "get_rank",
    "get_world_group", "get_world_size", "has_all_gather_into_tensor",
    "has_all_reduce_coalesced", "has_coalescing_manager", "has_reduce_scatter_tensor",
    "inference_all_reduce", "init_distributed", "initialize_mesh_device", "irecv",
    "is_initialized", "isend", "log_summary", "monitored_barrier", "new_group", "profile",
    "recv", "reduce", "reduce_scatter", "reduce_scatter_fn", "reduce_scatter_tensor", "scatter",
    "send", "symmetric_empty", "torch_group", "which_backend",
    # deepspeed.comm's other names (mcr.ds_names)
    "get_comm_operation_count", "get_local_rank_from_launcher", "get_logged_comm_ops",
    "get_world_rank_from_launcher", "get_world_size_from_launcher", "has_comm_data", "in_aml",
    "in_aws_sm", "in_dlts", "init_deepspeed_backend", "is_available", "mpi_discovery",
    "patch_aml_env_for_torch_nccl_backend", "patch_aws_sm_env_for_torch_nccl_backend",
    "reset_log", "set_backend", "timed_op",
]

# torch.compile: Dynamo skips mcr's code, and the in-place collectives enter graphs as custom ops
# (mcr.compiled); from here on, when torch._dynamo is imported.
_compiled.arm()
