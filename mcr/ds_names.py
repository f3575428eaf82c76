"""The rest of deepspeed.comm's public names, so that code written against it runs on mcr.comm:
the comms logger's queries, the launcher helpers, the cluster probes, and DeepSpeed's own
start-up internals (refused, naming what mcr does instead)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from . import runtime
from .errors import CallError
from .launch import discover


def is_available() -> bool:
    """Whether mcr.comm can be used here (deepspeed.comm's is_available)."""
    import torch.distributed as tdist
    return tdist.is_available()


def reset_log() -> None:
    """Clear the comms logger's timings, so the next summary covers what comes after."""
    runtime.get().logger.stats.clear()


def has_comm_data() -> bool:
    """Whether the comms logger holds any timed call."""
    return bool(runtime.get().logger.stats)


def get_comm_operation_count() -> int:
    """Timed calls the comms logger holds, every op together."""
    return int(sum(s[0] for s in runtime.get().logger.stats.values()))


def get_logged_comm_ops() -> list[str]:
    """The ops the comms logger holds timings of."""
    return sorted({op for op, _, _ in runtime.get().logger.stats})


def get_world_rank_from_launcher() -> int:
    """This process's rank as its launcher set it (0 when started alone)."""
    return discover().rank


def get_world_size_from_launcher() -> int:
    """The world size as the launcher set it (1 when started alone)."""
    return discover().world_size


def get_local_rank_from_launcher() -> int:
    """This process's rank on its node as the launcher set it (0 when started alone)."""
    return discover().local_rank


def in_aml() -> bool:
    """Whether this runs inside Azure Machine Learning."""
    return "AZUREML_EXPERIMENT_ID" in os.environ


def in_aws_sm() -> bool:
    """Whether this runs inside AWS SageMaker."""
    return "SM_TRAINING_ENV" in os.environ


def in_dlts() -> bool:
    """Whether this runs on a DLTS cluster."""
    return "DLTS_JOB_ID" in os.environ


def timed_op(func: Callable[..., Any]) -> Callable[..., Any]:
    """deepspeed.comm's timing decorator: mcr times its own calls (configure, MCR_LOG), so the
    function is returned as it is."""
    return func


def _startup_internal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise CallError(f"mcr.comm.{name}: a part of DeepSpeed's own start-up, which mcr does "
                        "not run; mcr.comm.init_distributed() finds the launcher (torchrun, "
                        "mpirun, DeepSpeed's launcher, none) and starts every library itself")
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"deepspeed.comm.{name}: refused with a CallError (DeepSpeed's start-up)."
    return refuse


mpi_discovery = _startup_internal("mpi_discovery")
set_backend = _startup_internal("set_backend")
init_deepspeed_backend = _startup_internal("init_deepspeed_backend")
patch_aml_env_for_torch_nccl_backend = _startup_internal("patch_aml_env_for_torch_nccl_backend")
patch_aws_sm_env_for_torch_nccl_backend = _startup_internal(
    "patch_aws_sm_env_for_torch_nccl_backend")
