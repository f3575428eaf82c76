"""`MCR_DEEPSPEED=1`, `MCR_FSDP=1` and `MCR_TORCH=1`: DeepSpeed, FSDP2 or every
torch.distributed group through mcr with no change to the training script.

mcr's install puts `mcr_autoload.pth` into site-packages; at interpreter start it imports this
module only when one of the two is set (to anything but 0), and arm() then waits for the
framework's module to be imported and adapts it right after: DeepSpeed gets
mcr.integrations.deepspeed.install(); torch.distributed.fsdp's fully_shard becomes one that also
installs mcr's comm objects on each module it shards. Nothing else is imported at start-up (no
torch), so Python processes that never import either framework pay nothing.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from mcr.imports import after_import


def _deepspeed(_module: ModuleType) -> None:
    from . import deepspeed as mcr_ds
    mcr_ds.install()


def _fsdp(module: ModuleType) -> None:
    from . import fsdp as mcr_fsdp
    mcr_fsdp.auto(module)


def _torch(module: ModuleType) -> None:
    # torch.distributed runs while torch itself is still importing: mcr (which imports torch)
    # is imported at the script's first init_process_group, not now. The launcher's ranks are
    # stated now (mcr.launch needs only the standard library): frameworks read RANK before
    # their init_process_group (transformers' tp_plan).
    from mcr.launch import state_ranks
    state_ranks()
    original = module.distributed_c10d._mcr_original = module.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        from . import torch_backend
        torch_backend.install()
        return module.init_process_group(*args, **kwargs)
    init_process_group.__doc__ = original.__doc__
    module.init_process_group = module.distributed_c10d.init_process_group = init_process_group


HOOKS = {"MCR_DEEPSPEED": ("deepspeed", _deepspeed), "MCR_FSDP": ("torch.distributed.fsdp", _fsdp),
         "MCR_TORCH": ("torch.distributed", _torch)}


def wanted(var: str) -> bool:
    """Whether the environment variable asks for it."""
    return os.environ.get(var, "0").strip().lower() not in ("", "0", "false", "no", "off")


def arm(var: str) -> None:
    """Install the import hook of one variable's framework (idempotent); if the framework is
    already imported, adapt it now."""
    after_import(*HOOKS[var])


for _var in HOOKS:
    if wanted(_var):
        arm(_var)
