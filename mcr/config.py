"""Environment knobs: one list (KNOBS) names each, its parser, default and whether every rank
must agree on it; read once at init (README "Environment variables" documents each)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _text(name: str, raw: str) -> str | None:
    return raw or None


def _bool(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a yes/no value: use one of "
                     f"{', '.join(_TRUE + _FALSE)}")


def _positive(name: str, raw: str) -> float:
    try:
        val = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number (seconds)") from None
    if not val > 0 or val == float("inf"):
        raise ValueError(f"{name}={raw!r} must be a positive, finite number of seconds")
    return val


def int_from(least: int) -> Callable[[str, str], int]:
    """A parser of NAME=RAW: an integer of at least `least`, else ValueError naming both."""
    def parse(name: str, raw: str) -> int:
        try:
            val = int(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not an integer") from None
        if val < least:
            raise ValueError(f"{name}={raw!r} must be {least} or more")
        return val
    return parse


def _bytes(name: str, raw: str) -> float:
    from .units import parse_bytes
    try:
        return parse_bytes(raw)
    except ValueError as e:
        raise ValueError(f"{name}={raw!r}: {e}") from None


def _bytes_or_auto(name: str, raw: str) -> float | None:
    """A size, or `auto` (None): the consumer picks by the group's size."""
    if raw == "auto":
        return None
    try:
        return _bytes(name, raw)
    except ValueError as e:
        raise ValueError(f"{e}; or auto") from None


def _symm_ops(name: str, raw: str) -> tuple[str, ...]:
    """A comma-separated list of the ops symm may serve (all_reduce always)."""
    allowed = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
               "all_to_all_uneven")
    ops = tuple(dict.fromkeys(x.strip() for x in raw.split(",") if x.strip()))
    bad = [x for x in ops if x not in allowed]
    if bad:
        raise ValueError(f"{name}={raw!r}: {', '.join(bad)} not among {', '.join(allowed)}")
    return tuple(dict.fromkeys(("all_reduce",) + ops))


def _size(name: str, raw: str) -> float:
    """A buffer's size: a whole, finite number of bytes (inf is for thresholds)."""
    n = _bytes(name, raw)
    if n == float("inf") or n < 1:
        raise ValueError(f"{name}={raw!r}: sizes a buffer, so it must be a finite number of "
                         "bytes of at least 1 (e.g. 256MiB)")
    return n


# The least piece a chunked transfer takes: below it each piece costs more in calls than it
# moves (MCR_MPI_CHUNK_BYTES=0 crawled past the timeout and blocked every later MPI call).
MIN_CHUNK_BYTES = 4 << 10


def _chunk(name: str, raw: str) -> float:
    """A piece's size: at least MIN_CHUNK_BYTES, or inf (one piece)."""
    n = _bytes(name, raw)
    if n < MIN_CHUNK_BYTES:
        raise ValueError(f"{name}={raw!r}: a chunk must be at least 4KiB (or inf: one piece)")
    return n


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in allowed:
            raise ValueError(f"{name}={raw!r} must be one of {', '.join(allowed)}")
        return raw
    return parse


@dataclass(frozen=True)
class Knob:
    """One MCR_* variable."""

    env: str
    field: str
    parse: Callable[[str, str], Any]
    default: str            # as it would be written in the environment ("" for unset)
    agree: bool             # every rank must use the same value (it steers decisions)


KNOBS = (
    Knob("MCR_BACKEND", "backend", _text, "", True),
    Knob("MCR_TUNING_TABLE", "tuning_table", _text, "", False),   # contents compared instead
    Knob("MCR_USER_TABLES", "user_tables", _text, "", False),     # likewise
    Knob("MCR_SYSTEM_CLASS", "system_class", _text, "", False),   # likewise
    Knob("MCR_PROFILE", "profile", _choice("auto", "standalone", "overlap"), "auto", True),
    Knob("MCR_TIMEOUT_S", "timeout_s", _positive, "600", False),
    Knob("MCR_LOG", "log", _bool, "0", False),
    Knob("MCR_SUMMARY", "summary", _bool, "0", False),
    Knob("MCR_CHECK", "check", _bool, "0", True),
    Knob("MCR_CHECK_TIMEOUT_S", "check_timeout_s", _positive, "", False),
    Knob("MCR_STALL_S", "stall_s", _positive, "10", False),
    Knob("MCR_GUARD", "guard", _choice("auto", "data", "0"), "auto", True),
    Knob("MCR_DEEPSPEED", "deepspeed", _bool, "0", False),
    Knob("MCR_FSDP", "fsdp", _bool, "0", False),
    Knob("MCR_TORCH", "torch", _bool, "0", False),
    Knob("MCR_MPI_CUDA_AWARE", "mpi_cuda_aware", _choice("auto", "0", "1"), "auto", False),
    Knob("MCR_MPI_PINNED_MAX_BYTES", "mpi_pinned_max_bytes", _bytes, "1GiB", False),
    Knob("MCR_MPI_BLOCKING_BYTES", "mpi_blocking_bytes", _bytes, "2MiB", True),
    Knob("MCR_MPI_CHUNK_BYTES", "mpi_chunk_bytes", _chunk, "16MiB", True),
    Knob("MCR_SDMA_MAX_BYTES", "sdma_max_bytes", _size, "256MiB", True),
    Knob("MCR_SDMA_ZERO_COPY", "sdma_zero_copy", _bool, "1", True),
    Knob("MCR_SDMA_SYNC", "sdma_sync", _choice("kernel", "memops"), "kernel", True),
    Knob("MCR_SDMA_GRAPHS", "sdma_graphs", int_from(0), "256", True),
    Knob("MCR_SDMA_COPY", "sdma_copy", _choice("dtod", "unified"), "dtod", False),
    Knob("MCR_SDMA_PIPELINE_BYTES", "sdma_pipeline_bytes", _bytes, "16MiB", True),
    Knob("MCR_SYMM_MAX_BYTES", "symm_max_bytes", _size, "1MiB", True),
    Knob("MCR_SYMM_TWO_SHOT_BYTES", "symm_two_shot_bytes", _bytes, "512KiB", True),
    Knob("MCR_SYMM_GRAPHS", "symm_graphs", int_from(0), "64", True),
    Knob("MCR_SYMM_LL_BYTES", "symm_ll_bytes", _bytes_or_auto, "auto", True),
    Knob("MCR_SYMM_PDL", "symm_pdl", _bool, "0", False),
    Knob("MCR_SYMM_OPS", "symm_ops", _symm_ops,
         "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,all_to_all_uneven", True),
    Knob("MCR_NCCL_CE", "nccl_ce", _bool, "0", True),
    Knob("MCR_NCCL_CE_MAX_BYTES", "nccl_ce_max_bytes", _size, "64MiB", True),
    Knob("MCR_FSDP_BUFFERS", "fsdp_buffers", int_from(2), "4", True),
    Knob("MCR_LOCAL_SIZE", "local_size", int_from(1), "", True),
    Knob("MCR_HIER_CHUNK_BYTES", "hier_chunk_bytes", _chunk, "inf", True),
    Knob("MCR_HIER_MAX_CHUNKS", "hier_max_chunks", int_from(1), "4", True),
    Knob("MCR_LANE_SPIN_US", "lane_spin_us", int_from(0), "", False),
)


@dataclass
class Config:
    """Settings in force for this process (one field per knob of KNOBS)."""

    backend: str | None = None          # force one backend for every call
    tuning_table: str | None = None     # file or folder of tables
    user_tables: str | None = None      # mcr-tune's folder (None: user_tables_dir())
    system_class: str | None = None     # override the detected system class
    profile: str = "auto"               # auto | standalone | overlap
    timeout_s: float = 600.0            # every blocking wait raises after this
    log: bool = False                   # per-call timing on
    summary: bool = False               # rank 0 prints the summary at teardown
    check: bool = False                 # compare each call across ranks
    check_timeout_s: float | None = None  # wait for peers' new-signature check (None: timeout_s)
    stall_s: float = 10.0                 # a wait this long in one call is reported (mcr.stall)
    guard: str = "auto"                 # auto | data | 0: how host-library calls are compared
    deepspeed: bool = False             # route DeepSpeed through mcr at its import
    fsdp: bool = False                  # fully_shard installs mcr on what it shards
    torch: bool = False                 # MCR_TORCH: init_process_group starts the mcr backend
    mpi_cuda_aware: str = "auto"        # auto | 0 | 1
    mpi_pinned_max_bytes: float = 2**30           # pinned staging cache bound
    mpi_blocking_bytes: float = 2 * 2**20         # blocking MPI collectives from here
    mpi_chunk_bytes: float = 16 * 2**20           # blocking MPI all-reduce chunk
    sdma_max_bytes: float = 256 * 2**20           # sdma transit per rank block
    sdma_zero_copy: bool = True                   # write into symmetric outputs
    sdma_sync: str = "kernel"                     # kernel | memops
    sdma_graphs: int = 256                        # captured calls kept per group
    sdma_copy: str = "dtod"                       # dtod | unified
    sdma_pipeline_bytes: float = 16 * 2**20       # sdma_pipe: side-stream rounds from here
    symm_max_bytes: float = 2**20                 # symm staging buffer
    symm_two_shot_bytes: float = 512 * 2**10      # two-shot from here
    symm_graphs: int = 64                         # captured all-reduces kept per group
    symm_ll_bytes: float | None = None            # symm's low-latency kernel up to here (auto)
    symm_pdl: bool = False                        # launch the kernel early (PDL)
    symm_ops: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                 "all_to_all", "all_to_all_uneven")
    nccl_ce: bool = False                         # enable nccl_ce
    nccl_ce_max_bytes: float = 64 * 2**20         # nccl_ce window per rank
    fsdp_buffers: int = 4                         # FSDP2 all-gather outputs kept per size
    local_size: int | None = None                 # ranks per node (None: host names)
    hier_chunk_bytes: float = float("inf")        # hier pipeline chunk per rank block
    hier_max_chunks: int = 4                      # most chunks a hier call is cut into
    lane_spin_us: int | None = None               # idle lane helpers spin (None: by cores)

    def agreeing(self) -> dict[str, Any]:
        """The knobs every rank must share, by variable name."""
        return {k.env: getattr(self, k.field) for k in KNOBS if k.agree}


def user_tables_dir(cfg: Config) -> Path:
    """Where mcr-tune writes and mcr looks first: MCR_USER_TABLES, else
    $XDG_DATA_HOME/mcr/tables (~/.local/share/mcr/tables)."""
    if cfg.user_tables:
        return Path(cfg.user_tables).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "mcr" / "tables"


def from_env() -> Config:
    """Read every MCR_* variable; ValueError naming a bad value and what is allowed."""
    values: dict[str, Any] = {}
    for k in KNOBS:
        raw = os.environ.get(k.env, "").strip() or k.default
        values[k.field] = k.parse(k.env, raw) if raw else None
    return Config(**values)


assert {k.field for k in KNOBS} == {f.name for f in fields(Config)}, "KNOBS and Config differ"
