"""Environment knobs, read once at init (README "Environment variables" documents each)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        val = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if val <= 0:
        raise ValueError(f"{name}={raw!r} must be positive")
    return val


def _env_int(name: str, default: int, least: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        val = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if val < least:
        raise ValueError(f"{name}={raw!r} must be {least} or more")
    return val


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    val = os.environ.get(name, default) or default
    if val not in allowed:
        raise ValueError(f"{name}={val!r} must be one of {', '.join(allowed)}")
    return val


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class Config:
    """Settings in force for this process."""

    backend: str | None          # MCR_BACKEND: force one backend for every call
    tuning_table: str | None     # MCR_TUNING_TABLE: file or folder of tables
    system_class: str | None     # MCR_SYSTEM_CLASS: override the detected system class
    profile: str                 # MCR_PROFILE: standalone | overlap
    timeout_s: float             # MCR_TIMEOUT_S: every blocking wait raises after this
    log: bool                    # MCR_LOG: comms logger on
    check: bool                  # MCR_CHECK: compare each call's size/dtype across ranks
    mpi_cuda_aware: str          # MCR_MPI_CUDA_AWARE: auto | 0 | 1
    mpi_pinned_max: float        # MCR_MPI_PINNED_MAX_BYTES: pinned staging cache bound
    sdma_max_bytes: float = 256 * 2**20   # MCR_SDMA_MAX_BYTES: sdma transit per rank block
    sdma_zero_copy: bool = True           # MCR_SDMA_ZERO_COPY: write into symmetric outputs
    symm_max_bytes: float = 2**20         # MCR_SYMM_MAX_BYTES: symm staging buffer
    symm_two_shot_bytes: float = 512 * 2**10  # MCR_SYMM_TWO_SHOT_BYTES: two-shot from here
    nccl_ce_max_bytes: float = 64 * 2**20     # MCR_NCCL_CE_MAX_BYTES: nccl_ce window per rank
    sdma_sync: str = "kernel"             # MCR_SDMA_SYNC: kernel | memops
    sdma_graphs: int = 64                 # MCR_SDMA_GRAPHS: captured calls kept per group
    fsdp_buffers: int = 4                 # MCR_FSDP_BUFFERS: symmetric all-gather outputs per size


def from_env() -> Config:
    """Read MCR_* variables; raise ValueError naming a bad one."""
    from .units import parse_bytes

    profile = os.environ.get("MCR_PROFILE", "standalone") or "standalone"
    return Config(
        backend=os.environ.get("MCR_BACKEND") or None,
        tuning_table=os.environ.get("MCR_TUNING_TABLE") or None,
        system_class=os.environ.get("MCR_SYSTEM_CLASS") or None,
        profile=profile,
        timeout_s=_env_float("MCR_TIMEOUT_S", 600.0),
        log=_env_bool("MCR_LOG"),
        check=_env_bool("MCR_CHECK"),
        mpi_cuda_aware=_choice("MCR_MPI_CUDA_AWARE", "auto", ("auto", "0", "1")),
        mpi_pinned_max=parse_bytes(os.environ.get("MCR_MPI_PINNED_MAX_BYTES", "1GiB")),
        sdma_max_bytes=parse_bytes(os.environ.get("MCR_SDMA_MAX_BYTES", "256MiB")),
        sdma_zero_copy=os.environ.get("MCR_SDMA_ZERO_COPY", "1").strip() not in ("0", "false",
                                                                                   "no", "off"),
        symm_max_bytes=parse_bytes(os.environ.get("MCR_SYMM_MAX_BYTES", "1MiB")),
        symm_two_shot_bytes=parse_bytes(os.environ.get("MCR_SYMM_TWO_SHOT_BYTES", "512KiB")),
        nccl_ce_max_bytes=parse_bytes(os.environ.get("MCR_NCCL_CE_MAX_BYTES", "64MiB")),
        sdma_sync=_choice("MCR_SDMA_SYNC", "kernel", ("kernel", "memops")),
        sdma_graphs=_env_int("MCR_SDMA_GRAPHS", 64),
        fsdp_buffers=_env_int("MCR_FSDP_BUFFERS", 4, least=2),
    )
