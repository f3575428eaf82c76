"""Process and group lifecycle: init_distributed, destroy_process_group, new_group, and the mcr
Group that serves a call's `group` argument (an mcr group or any torch ProcessGroup)."""

from __future__ import annotations

import atexit
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist

from . import backends as backends_mod
from . import guard, layout, report, runtime, waits, work
from .backends.cuda import turns as rdv_turns
from .config import Config, from_env
from .dispatcher import Dispatcher
from .errors import CallError
from .groups import Group, Spec, numbered, ranks_name
from .launch import Launch, discover, launched_by_mpi, rendezvous_env
from .logger import CommsLogger
from .signature import SignatureCheck
from .stall import StallWatch

_DIST_BACKENDS = ("gloo", "nccl", "rccl", "mpi")
# Sessions that started torch.distributed themselves in this process.
_STARTED = [0]


def init_distributed(dist_backend: str | None = None, auto_mpi_discovery: bool = True,
                     distributed_port: int | None = None, verbose: bool = True,
                     timeout: timedelta | None = None, init_method: str | None = None,
                     dist_init_required: bool | None = None, config: Any = None,
                     rank: int = -1, world_size: int = -1) -> None:
    """Start mcr under torchrun, mpirun/mpiexec or alone (on top of torch.distributed if it is
    already initialized); load tables; check that ranks agree. A second call is a no-op if its
    arguments agree with the first, else an error."""
    args = (dist_backend, init_method, rank, world_size)
    if runtime._RT:
        first = runtime.get().init_args
        if first and any(a is not None and a != -1 and a != b for a, b in zip(args, first)):
            raise CallError(f"init_distributed: already initialized with (dist_backend, "
                            f"init_method, rank, world_size) = {first}; called again with {args}")
        return
    cfg = from_env()
    if dist_backend is not None and dist_backend not in _DIST_BACKENDS:
        raise ValueError(f"init_distributed: dist_backend {dist_backend!r} is not one of "
                         f"{', '.join(_DIST_BACKENDS)}")
    launch = discover()
    if rank >= 0:
        launch.rank = rank
    if world_size > 0:
        launch.world_size = world_size
    if launch.launcher == "mpi" and not auto_mpi_discovery:
        launch.launcher = "single" if launch.world_size == 1 else launch.launcher
    own_pg = not tdist.is_initialized()
    cuda = torch.cuda.is_available()
    pg_timeout = timeout or timedelta(seconds=cfg.timeout_s)
    if cuda:
        # Before any group is bound: one-node checks and NCCL groups use the current device.
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    if own_pg:
        rendezvous_env(launch, distributed_port)
        _STARTED[0] += 1
        store = None
        if _STARTED[0] > 1:
            # A later session in this process: torch names its groups from 0 again, so on the
            # same store the new groups would read the old ones' keys (Gloo then waited on
            # addresses that were gone). Its own prefix keeps each session's keys apart.
            raw, _, _ = next(tdist.rendezvous(init_method or "env://", launch.rank,
                                              launch.world_size, timeout=pg_timeout))
            store = tdist.PrefixStore(f"mcr-session-{_STARTED[0]}", raw)
        tdist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo",
                                 init_method=None if store else init_method, store=store,
                                 timeout=pg_timeout, rank=launch.rank,
                                 world_size=launch.world_size)
    else:
        launch.rank, launch.world_size = tdist.get_rank(), tdist.get_world_size()
    try:
        rt = _setup(cfg, launch, cuda, pg_timeout, dist_backend)
    except BaseException:
        # Leave nothing half-built: a live gloo group aborts the interpreter at exit.
        waits.PROGRESS_HOOKS.clear()
        if own_pg:
            tdist.destroy_process_group()
        raise
    rt.own_pg, rt.init_args = own_pg, args
    runtime.install(rt)
    # Tear down at exit what the program did not: a live Gloo group's threads at static
    # destruction abort the process ("terminate called without an active exception"). mpi4py
    # finalizes MPI in its own atexit hook, registered earlier, so it runs after this one.
    # Once per process, however often mcr is started again after a teardown.
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)
    cls = runtime.system_class(cfg, cuda)
    if launch.rank == 0:
        for t in rt.tables.foreign(cls):   # said even when not verbose: never silently
            print(f"mcr: tuning table {t.path} was measured on {t.system.get('class')!r}, this "
                  f"machine is {cls!r}; its rules are in force (MCR_TUNING_TABLE)", flush=True)
    if launch.rank == 0:
        for line in _unusable_rules(rt, cuda):   # said even when not verbose: never silently
            print(line, flush=True)
    if verbose and launch.rank == 0:
        avail = [n for n, b in rt.backends.items()
                 if not isinstance(b, backends_mod.Unavailable)]
        how = "mpirun" if launched_by_mpi() else \
            {"env": "torchrun"}.get(launch.launcher, launch.launcher)
        print(f"mcr: {launch.world_size} ranks ({how}); libraries {', '.join(avail)}; "
              f"tables {rt.tables.names()}"
              + ("" if cfg.summary else "; MCR_SUMMARY=1 prints what it did at exit"), flush=True)


def _unusable_rules(rt: runtime.Runtime, cuda: bool) -> list[str]:
    """A line for each library the tables in force or MCR_BACKEND name that cannot run in this
    process (MPI under torchrun, say): its calls go to the next choice, and the user should
    know why (an A/B run forced onto a library it never reached measures the other one)."""
    out = []
    forced = rt.cfg.backend
    b = rt.backends.get(backends_mod.canonical(forced)) if forced else None
    if isinstance(b, backends_mod.Unavailable):
        out.append(f"mcr: MCR_BACKEND={forced} names a library that cannot run here "
                   f"({b.reason}); every call goes where the tables send it instead (counted "
                   f"as fallbacks in the summary).{_fix(b.name)}")
    for device in ("cuda", "cpu") if cuda else ("cpu",):
        for name in sorted(rt.tables.backends_named(device)):
            b = rt.backends.get(backends_mod.canonical(name))
            if isinstance(b, backends_mod.Unavailable):
                out.append(f"mcr: the tables send some {device} calls to {name}, which cannot "
                           f"run here ({b.reason}); they go to the next choice (the default "
                           f"library, {backends_mod.default_backend(device)}).{_fix(b.name)}")
    return out


def _fix(name: str) -> str:
    """What makes library `name` available, where a launcher is all it lacks."""
    return " Launch with mpirun (or mpiexec) to use it." if name == "mpi" or \
        name.startswith("mpi_lanes") else ""


def names_mcr(backend: str | None) -> bool:
    """Whether torch backend string `backend` names the `mcr` backend, alone or for any device
    ("mcr", "cpu:mcr,cuda:mcr", "cpu:gloo,cuda:mcr": torch then hands every call of the group
    to mcr's, whatever the device, as it does for any Python process group)."""
    return backend is not None and any(part.rpartition(":")[2].strip().lower() == "mcr"
                                       for part in str(backend).split(","))


def _setup(cfg: Config, launch: Launch, cuda: bool, pg_timeout: timedelta,
           dist_backend: str | None) -> runtime.Runtime:
    """Backends, world group, tables (checked equal on all ranks), logger, dispatcher."""
    waits.set_timeout(cfg.timeout_s)
    backends = backends_mod.build(cfg, launched_by_mpi(), cuda)
    default_gpu = "nccl" if dist_backend in (None, "gloo", "rccl") else dist_backend
    base = tdist.group.WORLD
    if names_mcr(tdist.get_backend(base)):
        # torch.distributed was started on mcr's own backend (mcr.integrations.torch_backend),
        # whose calls are mcr's: mcr's checks and libraries need a Gloo world beside it.
        base = tdist.new_group(backend="gloo", timeout=pg_timeout)
    lay = layout.detect(cfg.local_size, launch.world_size, base)
    spec = Spec(ranks=list(range(launch.world_size)), me=launch.rank,
                world_size=launch.world_size, timeout=pg_timeout, cuda=cuda,
                pg=base, layout=lay, name="world")
    world = backends_mod.bind_group(backends, spec, default_gpu)
    tables = runtime.load_tables_for(cfg, cuda, launch.world_size, lay.nodes)
    runtime.check_agreement(world, tables, cfg, cuda)
    logger = CommsLogger()
    logger.configure(enabled=cfg.log)
    disp = Dispatcher(backends, tables, cfg.backend,
                      _uncovered_notice(cfg, cuda, launch.rank) if not cfg.backend else None)
    rt = runtime.Runtime(cfg, launch, backends, world, tables, disp, logger, cuda, lay)
    rt.signature_check = SignatureCheck(tdist.distributed_c10d._get_default_store(),
                                        cfg.check_timeout_s or cfg.timeout_s)
    rdv_turns.TURNS.check = rt.signature_check
    guard.STORE[0], guard.STALL_S[0] = rt.signature_check, cfg.stall_s
    if launch.world_size > 1:
        rt.stall_watch = StallWatch(rt, cfg.stall_s)
    _register(rt, world)
    rt.by_pg[tdist.group.WORLD] = world
    return rt


def _uncovered_notice(cfg: Config, cuda: bool, rank: int) -> Any:
    """Rank 0 says once per device and group size that no table covers it, and how to tune."""
    def notice(key: Any, default: str) -> None:
        if rank == 0:
            eta = "about 1-2 minutes" if key.device == "cuda" else "about a minute"
            what = layout.label(key.group_size, key.nodes)
            what = f"{what} ranks" if key.nodes == 1 else f"groups of {what} (nodes x ranks)"
            print(f"mcr: no tuning table covers {what} of {key.device} tensors "
                  f"on this machine ({runtime.system_class(cfg, cuda)}); those calls go to the "
                  f"default library ({default}). To tune ({eta}): "
                  f"{runtime.tune_command(cfg, key.device == 'cuda', key.group_size, key.nodes)}",
                  flush=True)
    return notice


def _register(rt: runtime.Runtime, g: Group) -> None:
    """Map every torch group among g's handles back to g."""
    for h in g.handles.values():
        if isinstance(h, tdist.ProcessGroup):
            rt.by_pg.setdefault(h, g)


# Gloo's worker threads free a finished work after its caller's wait has returned (a barrier
# frees the works that were in flight when it was issued), and that can free tensors' Python
# objects, which takes the GIL. A thread still doing so once the interpreter finalizes is killed
# mid-destructor: std::terminate (after mcr's last all-reduce in 5 of 22 DeepSpeed CPU runs, after
# torch's own barrier ending FSDP2 runs). Sleeping at exit releases the GIL so they finish
# first; 50 ms covers a thread the OS left waiting.
_SETTLE_S = 0.05


def _at_exit() -> None:
    if runtime._RT:
        try:
            destroy_process_group()
        except Exception as e:  # noqa: BLE001 - exiting anyway; say why teardown failed
            print(f"mcr: teardown at exit failed: {e}", flush=True)
    time.sleep(_SETTLE_S)


def is_initialized() -> bool:
    """True after init_distributed()."""
    return bool(runtime._RT)


def destroy_process_group(group: Any = None) -> None:
    """Tear down one group, or (None) everything mcr set up, and torch.distributed if mcr
    started it."""
    if not runtime._RT:
        return
    rt = runtime.get()
    if group is not None:
        g = group_of(group, "destroy_process_group") if not isinstance(group, Group) else group
        if g is rt.world:
            raise CallError("destroy_process_group: the world group goes with "
                            "destroy_process_group() (no argument)")
        backends_mod.release_group(rt.backends, g, world=False)
        return
    rdv_turns.TURNS.check = None   # this session's store keys end with it
    if rt.stall_watch is not None:
        rt.stall_watch.stop()
    try:
        rt.signature_check.leave(rt.launch.rank)   # peers waiting in it for this rank: no more
    except Exception:  # noqa: BLE001, S110 - the store's host is gone: nobody can wait in it
        pass
    if rt.cfg.summary:
        # A script run with MCR_DEEPSPEED=1 or MCR_FSDP=1 has no line of mcr to call it from.
        report.show(rt)
    for g in {id(g): g for g in rt.by_pg.values()}.values():
        if g is not rt.world:
            backends_mod.release_group(rt.backends, g, world=False)
    backends_mod.release_group(rt.backends, rt.world, world=True)
    rt.logger.configure(enabled=False)
    waits.PROGRESS_HOOKS.clear()
    work.SPARE.clear()     # its library's work goes before the library does
    runtime.clear()
    if rt.own_pg and tdist.is_initialized():
        tdist.destroy_process_group()


def new_group(ranks: list[int] | None = None, timeout: timedelta | None = None,
              backend: str | None = None, pg_options: Any = None) -> Group:
    """A sub-group; like torch, every rank of the world must call it, members or not."""
    rt = runtime.get()
    ranks = sorted(set(range(rt.world.size) if ranks is None else ranks))
    bad = [r for r in ranks if not 0 <= r < rt.world.size]
    if bad:
        raise CallError(f"new_group: ranks {bad} are outside the world of {rt.world.size}")
    spec = Spec(ranks=ranks, me=rt.launch.rank, world_size=rt.world.size,
                timeout=timeout or timedelta(seconds=rt.cfg.timeout_s), cuda=rt.cuda,
                layout=rt.layout, name=numbered("new_group"))
    g = backends_mod.bind_group(rt.backends, spec, rt.world.default_gpu)
    _register(rt, g)
    return g


def torch_group(g: Group) -> Any:
    """The torch ProcessGroup that stands for g towards torch and frameworks: its NCCL group
    where it has one, else its Gloo group (torch's non-member sentinel for non-members)."""
    if g.rank < 0:
        return tdist.GroupMember.NON_GROUP_MEMBER
    return g.handles.get("nccl") or g.handles["gloo"]


def group_of(group: Any, what: str) -> Group:
    """The mcr Group serving `group` (None: the world). A torch group mcr did not make gets
    every library on the first call that needs it (only its members take part)."""
    rt = runtime.get()
    if group is None:
        return rt.world
    g = group if isinstance(group, Group) else rt.by_pg.get(group)
    if g is None:
        if group is tdist.GroupMember.NON_GROUP_MEMBER:
            raise CallError(f"{what}: this rank ({rt.launch.rank}) is not a member of the group")
        if not isinstance(group, tdist.ProcessGroup):
            raise CallError(f"{what}: group must be an mcr group (mcr.comm.new_group) or a "
                            f"torch ProcessGroup, got {type(group).__name__}")
        g = _adopt(rt, group)
    if g.rank < 0:
        raise CallError(f"{what}: this rank ({rt.launch.rank}) is not a member of the group "
                        f"{g.ranks}")
    if g.released:
        raise CallError(f"{what}: group {g.ranks} was destroyed (destroy_process_group)")
    return g


def _adopt(rt: runtime.Runtime, pg: tdist.ProcessGroup) -> Group:
    """An mcr Group for a torch group made elsewhere (DeepSpeed, a DeviceMesh, the user)."""
    ranks = tdist.get_process_group_ranks(pg)
    # Members adopt groups of the same ranks in one order (each adoption is at a collective
    # on it); torch's own name of pg may differ between members (split_group's hashed names).
    spec = Spec(ranks=ranks, me=rt.launch.rank, world_size=rt.world.size,
                timeout=timedelta(seconds=rt.cfg.timeout_s), cuda=rt.cuda, pg=pg, local=True,
                layout=rt.layout, name=numbered(f"adopted/{ranks_name(ranks)}"))
    g = backends_mod.bind_group(rt.backends, spec, rt.world.default_gpu)
    rt.by_pg[pg] = g
    _register(rt, g)
    return g


def group_size(group: Any) -> int:
    """Ranks in group; -1 for torch's non-member sentinel (asks no library, binds nothing)."""
    if group is None or isinstance(group, Group):
        return (group or runtime.get().world).size
    if group is tdist.GroupMember.NON_GROUP_MEMBER:
        return -1
    g = runtime.get().by_pg.get(group)
    return g.size if g is not None else group.size()


def group_rank(group: Any) -> int:
    """This process's rank in group; -1 if not a member (binds nothing)."""
    if group is None:
        return runtime.get().world.rank
    if isinstance(group, Group):
        return group.rank
    if group is tdist.GroupMember.NON_GROUP_MEMBER:
        return -1
    g = runtime.get().by_pg.get(group)
    return g.rank if g is not None else group.rank()


def group_ranks(group: Any) -> list[int]:
    """The world ranks of group, in group-rank order (binds nothing)."""
    if group is None or isinstance(group, Group):
        return list((group or runtime.get().world).ranks)
    g = runtime.get().by_pg.get(group)
    return list(g.ranks) if g is not None else tdist.get_process_group_ranks(group)


def get_world_group() -> Group:
    """The group of every rank."""
    return runtime.get().world


def symmetric_empty(*size: int, dtype: torch.dtype = torch.float32, group: Any = None,
                    backend: str = "sdma") -> torch.Tensor:
    """A GPU tensor the copy-engine backends write into without staging (collective on group).

    Every rank of group must call it with the same size and dtype. Outputs of sdma (backend
    "sdma") or nccl_ce (backend "nccl_ce") collectives that lie in such a tensor, at the same
    offset on every rank, skip the transit buffer: the data lands directly.
    """
    g = group_of(group, "symmetric_empty")
    name = backends_mod.canonical(backend)
    b = runtime.get().backends[name]
    alloc = getattr(b, "alloc_symmetric", None)
    if alloc is None or name not in g.handles:
        why = getattr(b, "reason", None) or g.notes.get(name) or "no symmetric allocator"
        raise CallError(f"symmetric_empty: backend {backend!r} cannot allocate here: {why}")
    shape = torch.Size(size[0] if len(size) == 1 and isinstance(size[0], (tuple, list))
                       else size)
    t = alloc(shape.numel() * dtype.itemsize, g).view(dtype).view(shape)
    runtime.get().symmetric.add(t.data_ptr(), t.numel() * t.element_size(), None)
    return t


def can_allocate_symmetric(group: Any, backend: str = "sdma") -> bool:
    """Whether symmetric_empty(..., group=group, backend=backend) can allocate here."""
    g = group_of(group, "can_allocate_symmetric")
    name = backends_mod.canonical(backend)
    return name in g.handles and hasattr(runtime.get().backends[name], "alloc_symmetric")
