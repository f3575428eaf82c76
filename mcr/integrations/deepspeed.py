"""DeepSpeed: every deepspeed.comm call goes through mcr's dispatcher; DeepSpeed stays untouched.

One line in the training script, anywhere before the first step::

    import mcr.integrations.deepspeed; mcr.integrations.deepspeed.install()

or no change at all: `MCR_DEEPSPEED=1` (mcr's import hook calls install() when DeepSpeed is
imported; see mcr/integrations/autoload.py). DeepSpeed still sets up torch.distributed itself
(deepspeed.init_distributed); mcr starts on top of it, right then or at install() if that came
later. deepspeed.comm and deepspeed.comm.comm are separate namespaces, and some DeepSpeed modules
bind comm functions at import (`from deepspeed.comm import all_to_all_single`): install()
replaces the functions in all of them. Groups DeepSpeed creates are torch ProcessGroups, served
by every library mcr has. One call stays DeepSpeed's where DeepSpeed runs its own CPU kernel for
it: inference_all_reduce (see inference_all_reduce below).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import torch.distributed as tdist

from .. import bypass, runtime, session
from .. import comm as mcr
from ..route import redop_of

# deepspeed.comm names that mcr.comm serves with the same arguments.
SAME = (
    "all_reduce", "all_reduce_coalesced", "all_gather",
    "all_gather_into_tensor", "allgather_fn", "all_gather_coalesced", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_fn", "all_to_all_single", "all_to_all",
    "broadcast", "reduce", "gather", "scatter", "barrier", "monitored_barrier", "send", "recv",
    "isend", "irecv", "batch_isend_irecv", "broadcast_object_list", "all_gather_object",
    "get_rank", "get_world_size", "get_global_rank", "get_all_ranks_from_group",
    "has_all_gather_into_tensor", "has_reduce_scatter_tensor", "has_all_reduce_coalesced",
    "has_coalescing_manager", "enable_symm_mem_for_group", "initialize_mesh_device",
    "log_summary",
)
_ORIGINALS: dict[str, Any] = {}     # name -> DeepSpeed's function, while installed
_PENDING_CONFIG: list[dict[str, Any]] = []


def _start_mcr() -> None:
    """Start mcr on top of torch.distributed (once it is up)."""
    if not runtime._RT and tdist.is_initialized():
        mcr.init_distributed()
        for kw in _PENDING_CONFIG:
            mcr.configure(**kw)
        _PENDING_CONFIG.clear()


def init_distributed(*args: Any, **kwargs: Any) -> None:
    """DeepSpeed's init_distributed, then mcr on top of it."""
    _ORIGINALS["init_distributed"](*args, **kwargs)
    _start_mcr()


def new_group(ranks: list[int]) -> Any:
    """An mcr group of ranks (every library), given to DeepSpeed as its torch ProcessGroup."""
    return session.torch_group(mcr.new_group(ranks))


def get_world_group() -> Any:
    """torch's world group (mcr serves it with every library)."""
    return tdist.group.WORLD


def destroy_process_group(group: Any = None) -> Any:
    """mcr lets go of the group (or of everything), then DeepSpeed destroys it as usual."""
    if runtime._RT:
        mcr.destroy_process_group(group)
    return _ORIGINALS["destroy_process_group"](group)


def configure(deepspeed_config: Any = None, enabled: bool | None = None,
              prof_all: bool | None = None, prof_ops: list[str] | None = None,
              verbose: bool | None = None, debug: bool | None = None) -> None:
    """DeepSpeed's comms-logger settings, applied to mcr's per-call timing as well."""
    kw = dict(deepspeed_config=deepspeed_config, enabled=enabled, prof_all=prof_all,
              prof_ops=prof_ops, verbose=verbose, debug=debug)
    _ORIGINALS["configure"](**kw)
    if runtime._RT:
        mcr.configure(**kw)
    else:
        _PENDING_CONFIG.append(kw)


def _ds_shm_runs(tensor: torch.Tensor, op: Any, group: Any) -> bool:
    """Whether DeepSpeed's own inference_all_reduce would run its shared-memory kernel here,
    and rightly: a CPU tensor of a dtype it sums, summed over the whole world, on a host with
    the kernel's vector ISA, its buffers set up (DeepSpeed does that only where LOCAL_SIZE, as
    its launcher states it, covers the world; without them the kernel segfaults)."""
    if tensor.device.type != "cpu" or tensor.dtype not in _SHM_LEVEL:
        return False
    if not hasattr(torch.ops, "deepspeed") or \
            not hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        return False
    import deepspeed.comm.comm as ds_comm
    level = getattr(ds_comm.cdb, "shm_vector_kernel_level", 0)
    world = tdist.get_world_size()
    return (level >= _SHM_LEVEL[tensor.dtype] and os.environ.get("LOCAL_SIZE") == str(world)
            and tdist.get_world_size(group) == world
            and redop_of(op, "inference_all_reduce") == tdist.ReduceOp.SUM)


def inference_all_reduce(tensor: torch.Tensor, op: Any = tdist.ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, prof: bool = False,
                         log_name: str = "all_reduce", debug: Any = None) -> Any:
    """DeepSpeed's shared-memory kernel where DeepSpeed runs it (mcr has no library that beats
    it on one host's CPUs yet: Gloo took 5x its time), else mcr's all_reduce."""
    if _ds_shm_runs(tensor, op, group):
        bypass.count("deepspeed.comm", "inference_all_reduce (DeepSpeed's shared-memory kernel)",
                     (tensor,), {})
        return _ORIGINALS["inference_all_reduce"](tensor, op, group, async_op, prof, log_name,
                                                  debug)
    return mcr.inference_all_reduce(tensor, op, group, async_op, prof, log_name, debug)


# The vector ISA level DeepSpeed's kernel needs per dtype (DeepSpeed's own rule: avx2 for fp32,
# avx512bw for the 16-bit ones).
_SHM_LEVEL = {torch.float32: 1, torch.bfloat16: 2, torch.float16: 2}
_ADAPTED = {"init_distributed": init_distributed, "new_group": new_group,
            "get_world_group": get_world_group, "destroy_process_group": destroy_process_group,
            "configure": configure, "inference_all_reduce": inference_all_reduce}


def _ds_modules() -> list[Any]:
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name == "deepspeed" or name.startswith("deepspeed."))]


def _swap(old_to_new: dict[int, Any]) -> None:
    """Replace, in every loaded DeepSpeed module, each attribute whose value is a key's object."""
    for m in _ds_modules():
        for attr, val in list(vars(m).items()):
            new = old_to_new.get(id(val))
            if new is not None:
                setattr(m, attr, new)


def install() -> int:
    """Route every deepspeed.comm call through mcr (idempotent); returns how many of
    deepspeed.comm's functions now go to mcr."""
    import deepspeed.comm.comm as ds_comm
    table = {name: getattr(mcr, name) for name in SAME} | _ADAPTED
    missing = [n for n in table if not hasattr(ds_comm, n)]
    if missing:
        raise RuntimeError(f"mcr.integrations.deepspeed: this DeepSpeed's deepspeed.comm has no "
                           f"{missing}; mcr was written against 0.19.x")
    if not _ORIGINALS:
        _ORIGINALS.update({n: getattr(ds_comm, n) for n in table})
        _swap({id(_ORIGINALS[n]): fn for n, fn in table.items()})
    bypass.install()
    _start_mcr()
    return len(table)


def uninstall() -> None:
    """Give deepspeed.comm its own functions back (mcr stays initialized)."""
    if not _ORIGINALS:
        return
    import deepspeed.comm.comm as ds_comm
    mine = {id(getattr(ds_comm, n)): orig for n, orig in _ORIGINALS.items()}
    _swap(mine)
    _ORIGINALS.clear()


def installed() -> bool:
    """Whether deepspeed.comm currently routes through mcr."""
    return bool(_ORIGINALS)
