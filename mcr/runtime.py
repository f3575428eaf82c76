"""Process-wide state made by init_distributed: backends, world group, tables, dispatcher."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as tdist

from . import backends as backends_mod
from . import tables_dir
from .backends import Backend
from .config import Config, user_tables_dir
from .dispatcher import Dispatcher
from .errors import MismatchError, NotInitializedError
from .groups import Group
from .launch import Launch
from .layout import Layout
from .logger import CommsLogger
from .spans import Spans
from .table_file import find_table_files, load_tables
from .tables import TableSet

log = logging.getLogger("mcr")
TABLES_DIR = tables_dir()   # the tables shipped with mcr


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
    layout: Layout
    own_pg: bool = False        # mcr started torch.distributed, so mcr tears it down
    init_args: tuple = ()       # what init_distributed was called with (a second call must agree)
    by_pg: dict[Any, Group] = field(default_factory=dict)
    # mcr.comm's decision cache: a plain tuple of what a call's decision depends on ->
    # (backend, [calls, bytes], mcr.guard.Guard or None), the dispatcher's entry and the guard.
    fast: dict[tuple, tuple[Backend, list[int], Any]] = field(default_factory=dict)
    signature_check: Any = None   # signature.SignatureCheck, the always-on cross-rank check
    # The latest call (decision-cache key, group, its index in the group), for the stall watch
    # (mcr.stall); and how each cached kind of call reads in its messages.
    latest: Any = None
    stall_watch: Any = None       # stall.StallWatch (None on one rank)
    descs: dict[tuple, Callable[[], str]] = field(default_factory=dict)
    # Kinds of guarded call (mcr.guard) compared through the store, by size class.
    guard_classes: set[tuple] = field(default_factory=set)
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


def load_tables_for(cfg: Config, cuda: bool, world: int | None = None,
                    nodes: int = 1) -> TableSet:
    """MCR_TUNING_TABLE (a file, or a folder's tables of this system class) alone; else the
    user's folder (mcr-tune's) before the tables shipped with mcr, this system class's only."""
    known = backends_mod.SERVES
    cls = system_class(cfg, cuda)
    if cfg.tuning_table:
        return TableSet([load_tables(find_table_files(cfg.tuning_table, cls, explicit=True),
                                     known)], world, nodes)
    layers = [load_tables(find_table_files(d, cls), known)
              for d in (user_tables_dir(cfg), TABLES_DIR) if d.is_dir()]
    return TableSet(layers, world, nodes) if layers else TableSet([])


def tune_command(cfg: Config, cuda: bool, n: int, nodes: int = 1) -> str:
    """The command that writes a table for n ranks of this machine's class (to the user's
    table folder, which mcr reads first); across nodes, under the job's own launcher."""
    if nodes != 1:
        return (f"under your multi-node launcher, as this job ({n} ranks over {nodes or 'its'} "
                "nodes): mpirun -np N --hostfile HOSTS python -m mcr.tuner [options]")
    if cuda:
        return (f"mcr-tune -n {n} -d cuda -t bfloat16 -m 4KiB:1GiB --batch 5 "
                f"--backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap")
    return f"mcr-tune -n {n}"


def library_versions(cuda: bool) -> dict[str, str]:
    """Versions of mcr, torch, NCCL (with CUDA) and the MPI library (once mpi4py is loaded):
    what init compares across ranks and the tuner records in a table."""
    import mcr
    out = {"mcr": mcr.__version__, "torch": str(torch.__version__)}
    if cuda:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        out["mpi"] = mpi.Get_library_version().splitlines()[0].strip()
    return out


def decision_inputs(tables: TableSet, cfg: Config, cuda: bool) -> dict[str, Any]:
    """Everything a rank's decisions depend on besides the call: the rules of its tables, the
    knobs that steer decisions, the library versions."""
    return {"tuning rules": tables.fingerprint(), **cfg.agreeing(), **library_versions(cuda)}


def check_agreement(world: Group, tables: TableSet, cfg: Config, cuda: bool) -> None:
    """All ranks must decide alike, or they would pick different libraries and hang: compare
    every decision input once, at init, and stop every rank, naming what differs, if any does."""
    mine = decision_inputs(tables, cfg, cuda)
    mine["(tables)"] = tables.describe()
    every: list[Any] = [None] * world.size
    tdist.all_gather_object(every, mine, group=world.handles["gloo"])
    keys = [k for k in mine if not k.startswith("(")
            and any(e.get(k) != mine[k] for e in every)]
    if keys:
        lines = []
        for k in keys:
            by_value: dict[str, list[int]] = {}
            for r, e in enumerate(every):
                by_value.setdefault(repr(e.get(k)), []).append(r)
            lines.append(f"{k}: " + "; ".join(f"ranks {rs} have {v}"
                                              for v, rs in by_value.items()))
            if k == "tuning rules":
                lines += [f"  rank {r} loaded {e['(tables)']}" for r, e in enumerate(every)]
        raise MismatchError("mcr: ranks differ in what steers their decisions; refusing to "
                            "start (mixing them would hang):\n  " + "\n  ".join(lines))


def put_first(table: Any) -> None:
    """Make a table's rules win over every loaded one's, in this process (every rank must do
    it at the same point: the tuner, once it has tuned the groups that hier's parts run on)."""
    rt = get()
    rt.tables = rt.tables.before(table)
    rt.dispatcher.set_tables(rt.tables)
    rt.fast.clear()


def install(rt: Runtime) -> None:
    """Make rt the process's runtime."""
    _RT[:] = [rt]


def clear() -> None:
    """Forget the runtime (after destroy_process_group)."""
    _RT.clear()
