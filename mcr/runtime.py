"""Process-wide state made by init_distributed: backends, world group, tables, dispatcher."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

from . import backends as backends_mod
from .backends import Backend
from .config import Config
from .dispatcher import Dispatcher
from .errors import MismatchError, NotInitializedError
from .groups import Group
from .launch import Launch
from .logger import CommsLogger
from .spans import Spans
from .tables import TableSet, find_table_files, load_tables

log = logging.getLogger("mcr")
TABLES_DIR = Path(__file__).resolve().parent.parent / "tuning_tables"


@dataclass
class Runtime:
    """Everything mcr.comm needs after init."""

    cfg: Config
    launch: Launch
    backends: dict[str, Backend]
    world: Group
    tables: TableSet
    dispatcher: Dispatcher
    logger: CommsLogger
    cuda: bool
    own_pg: bool = False        # mcr started torch.distributed, so mcr tears it down
    init_args: tuple = ()       # what init_distributed was called with (a second call must agree)
    by_pg: dict[Any, Group] = field(default_factory=dict)
    # mcr.comm's decision cache: a plain tuple of what a call's decision depends on ->
    # (backend, [calls, bytes]), the dispatcher's entry for it.
    fast: dict[tuple, tuple[Backend, list[int]]] = field(default_factory=dict)
    # Address ranges [lo, hi) handed out by mcr.comm.symmetric_empty (kept for the process's
    # life, like the buffers): outputs inside them are keyed buffer="symmetric".
    symmetric: Spans[None] = field(default_factory=Spans)


_RT: list[Runtime] = []


def get() -> Runtime:
    """The runtime; NotInitializedError before init_distributed()."""
    if not _RT:
        raise NotInitializedError("mcr.comm: call mcr.comm.init_distributed() first")
    return _RT[0]


def system_class(cfg: Config, cuda: bool) -> str:
    """`cpu`, or the GPU's name as a slug (`nvidia-h200`); MCR_SYSTEM_CLASS overrides."""
    if cfg.system_class:
        return cfg.system_class
    if not cuda:
        return "cpu"
    name = torch.cuda.get_device_name(0).lower()
    return re.sub(r"[^a-z0-9]+", "-", re.sub(r"\b\d+gb\b|\bnvl\b|\bsxm\d*\b|\bhbm\w*\b", "",
                                              name)).strip("-")


def load_tables_for(cfg: Config, cuda: bool) -> TableSet:
    """MCR_TUNING_TABLE (file or folder), else the shipped tables of this system class."""
    known = backends_mod.KNOWN
    if cfg.tuning_table:
        return load_tables(find_table_files(cfg.tuning_table, None), known)
    if not TABLES_DIR.is_dir():
        return TableSet([])
    return load_tables(find_table_files(TABLES_DIR, system_class(cfg, cuda)), known)


def tune_command(cfg: Config, cuda: bool, n: int) -> str:
    """The command that writes a table for n ranks of this machine's class."""
    out = f"tuning_tables/{system_class(cfg, cuda)}_np{n}"
    if cuda:
        return (f"mpirun -np {n} python -m tuner -d cuda -t bfloat16 -m 4KiB:1GiB -f 4 -i 20 "
                f"-x 3 --batch 5 --max-seconds 0.25 --backend nccl,sdma,symm --symm sdma "
                f"--out {out}")
    return f"mpiexec -n {n} python -m tuner -m 4:16MiB -f 4 -i 40 -x 5 --out {out}"


def check_same_tables(world: Group, tables: TableSet, cfg: Config) -> None:
    """All ranks must run the same rules, or they would pick different libraries and hang."""
    mine = (tables.fingerprint(), cfg.backend or "", cfg.profile, tables.describe())
    every: list[Any] = [None] * world.size
    tdist.all_gather_object(every, mine, group=world.handles["gloo"])
    variants: dict[tuple, list[int]] = {}
    for r, fp in enumerate(every):
        variants.setdefault(tuple(fp[:3]), []).append(r)
    if len(variants) > 1:
        lines = [f"ranks {rs}: table fingerprint {fp[0]} ({every[rs[0]][3]}), MCR_BACKEND="
                 f"{fp[1] or '(unset)'}, MCR_PROFILE={fp[2]}" for fp, rs in variants.items()]
        raise MismatchError("mcr: ranks loaded different tuning rules; refusing to start "
                            "(mixing them would hang):\n  " + "\n  ".join(lines))


def install(rt: Runtime) -> None:
    """Make rt the process's runtime."""
    _RT[:] = [rt]


def clear() -> None:
    """Forget the runtime (after destroy_process_group)."""
    _RT.clear()
