"""mcr.comm: a drop-in for deepspeed.comm / torch.distributed that picks a library per call.

`import mcr.comm as dist`, then use it as deepspeed.comm. Every collective takes an optional
`backend=` keyword to force one library for that call. Ranks (src, dst) are global ranks, as in
torch.distributed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from . import backends as backends_mod
from . import ops as O
from . import runtime, work
from .backends import Backend
from .config import from_env
from .dispatcher import Dispatcher
from .errors import CallError, MismatchError
from .groups import Group
from .launch import discover, launched_by_mpi, rendezvous_env
from .logger import CommsLogger
from .ops import CallKey
from .work import Work

ReduceOp = tdist.ReduceOp
__all__ = [
    "ReduceOp", "Work", "all_gather", "all_gather_coalesced", "all_gather_into_tensor",
    "all_gather_object", "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single",
    "allgather_fn", "barrier", "broadcast", "broadcast_object_list", "configure",
    "destroy_process_group", "gather", "get_global_rank", "get_local_rank", "get_rank",
    "get_world_group", "get_world_size", "has_all_gather_into_tensor",
    "has_reduce_scatter_tensor", "inference_all_reduce", "init_distributed", "irecv",
    "is_initialized", "isend", "log_summary", "new_group", "profile", "recv", "reduce",
    "reduce_scatter", "reduce_scatter_fn", "reduce_scatter_tensor", "scatter", "send",
    "symmetric_empty",
]
_UNKNOWN = -1  # message size of calls with no rank-invariant size (uneven splits, objects)


# -- setup ------------------------------------------------------------------------------------

def init_distributed(dist_backend: str | None = None, auto_mpi_discovery: bool = True,
                     distributed_port: int | None = None, verbose: bool = True,
                     timeout: timedelta | None = None, init_method: str | None = None,
                     dist_init_required: bool | None = None, config: Any = None,
                     rank: int = -1, world_size: int = -1) -> None:
    """Start mcr under torchrun, mpirun/mpiexec or alone; load tables; check ranks agree."""
    if runtime._RT:
        return
    cfg = from_env()
    if dist_backend is not None and dist_backend not in ("gloo", "nccl", "rccl", "mpi"):
        raise ValueError(f"init_distributed: dist_backend {dist_backend!r} is not one of "
                         "gloo, nccl, rccl, mpi")
    launch = discover()
    if rank >= 0:
        launch.rank = rank
    if world_size > 0:
        launch.world_size = world_size
    if launch.launcher == "mpi" and not auto_mpi_discovery:
        launch.launcher = "single" if launch.world_size == 1 else launch.launcher
    rendezvous_env(launch, distributed_port)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    pg_timeout = timeout or timedelta(seconds=cfg.timeout_s)
    own_pg = not tdist.is_initialized()
    if own_pg:
        tdist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo",
                                 init_method=init_method, timeout=pg_timeout,
                                 rank=launch.rank, world_size=launch.world_size)
    try:
        rt = _setup(cfg, launch, cuda, pg_timeout, dist_backend)
    except BaseException:
        # Leave nothing half-built: a live gloo group aborts the interpreter at exit.
        work.PROGRESS_HOOKS.clear()
        if own_pg:
            tdist.destroy_process_group()
        raise
    runtime.install(rt)
    if verbose and launch.rank == 0:
        avail = [n for n, b in rt.backends.items()
                 if not isinstance(b, backends_mod.Unavailable)]
        print(f"mcr: {launch.world_size} ranks via {launch.launcher}; backends {avail}; "
              f"tables: {rt.tables.describe()}", flush=True)


def _setup(cfg: Any, launch: Any, cuda: bool, pg_timeout: timedelta,
           dist_backend: str | None) -> runtime.Runtime:
    """Backends, world group, tables (checked equal on all ranks), logger, dispatcher."""
    work.set_timeout(cfg.timeout_s)
    backends = backends_mod.build(cfg, launched_by_mpi(), cuda)
    default_gpu = "nccl" if dist_backend in (None, "gloo", "rccl") else dist_backend
    world = runtime.world_group(backends, cuda, pg_timeout, default_gpu)
    tables = runtime.load_tables_for(cfg, cuda)
    runtime.check_same_tables(world, tables, cfg)
    logger = CommsLogger()
    logger.configure(enabled=cfg.log)
    disp = Dispatcher(backends, tables, cfg.backend, cfg.profile)
    rt = runtime.Runtime(cfg, launch, backends, world, tables, disp, logger, cuda)
    rt.by_pg[tdist.group.WORLD] = world
    return rt


def is_initialized() -> bool:
    """True after init_distributed()."""
    return bool(runtime._RT)


def destroy_process_group(group: Group | None = None) -> None:
    """Tear down one group, or (None) everything mcr and torch.distributed set up."""
    if group is not None:
        comm = group.handles.get("mpi")
        if comm is not None and group is not runtime.get().world:
            comm.Free()
        group.handles.clear()
        return
    if not runtime._RT:
        return
    rt = runtime.get()
    for g in set(rt.by_pg.values()):
        if g is not rt.world and "mpi" in g.handles:
            g.handles["mpi"].Free()
    rt.logger.configure(enabled=False)
    work.PROGRESS_HOOKS.clear()
    runtime.clear()
    if tdist.is_initialized():
        tdist.destroy_process_group()


def new_group(ranks: list[int] | None = None, timeout: timedelta | None = None,
              backend: str | None = None, pg_options: Any = None) -> Group:
    """A sub-group; like torch, every rank of the world must call it, members or not."""
    rt = runtime.get()
    ranks = sorted(set(range(rt.world.size) if ranks is None else ranks))
    bad = [r for r in ranks if not 0 <= r < rt.world.size]
    if bad:
        raise CallError(f"new_group: ranks {bad} are outside the world of {rt.world.size}")
    timeout = timeout or timedelta(seconds=rt.cfg.timeout_s)
    me = rt.launch.rank
    handles: dict[str, Any] = {"gloo": tdist.new_group(ranks, timeout=timeout, backend="gloo")}
    if rt.cuda:
        handles["nccl"] = tdist.new_group(ranks, timeout=timeout, backend="nccl")
    if "mpi" in rt.world.handles and me in ranks:
        world_comm = rt.world.handles["mpi"]
        handles["mpi"] = world_comm.Create_group(world_comm.group.Incl(ranks))
    if me not in ranks:
        handles = {}
    notes: dict[str, str] = {}
    if rt.cuda:
        runtime.bind_one_node(rt.backends, handles, notes, ranks, timeout)
    g = Group(ranks=ranks, rank=ranks.index(me) if me in ranks else -1,
              handles=handles, default_gpu=rt.world.default_gpu, notes=notes)
    for name in ("gloo", "nccl"):
        if isinstance(handles.get(name), tdist.ProcessGroup):
            rt.by_pg[handles[name]] = g
    return g


def symmetric_empty(*size: int, dtype: torch.dtype = torch.float32, group: Any = None,
                    backend: str = "sdma") -> torch.Tensor:
    """A GPU tensor the copy-engine backends write into without staging (collective on group).

    Every rank of group must call it with the same size and dtype. Outputs of sdma (backend
    "sdma") or nccl_ce (backend "nccl_ce") collectives that lie in such a tensor, at the same
    offset on every rank, skip the transit buffer: the data lands directly.
    """
    g = _group(group, "symmetric_empty")
    name = backends_mod.canonical(backend)
    b = runtime.get().backends[name]
    alloc = getattr(b, "alloc_symmetric", None)
    if alloc is None or name not in g.handles:
        why = getattr(b, "reason", None) or g.notes.get(name) or "no symmetric allocator"
        raise CallError(f"symmetric_empty: backend {backend!r} cannot allocate here: {why}")
    shape = torch.Size(size[0] if len(size) == 1 and isinstance(size[0], (tuple, list))
                       else size)
    t = alloc(shape.numel() * dtype.itemsize, g).view(dtype).view(shape)
    runtime.get().symmetric.add(t.data_ptr(), _nbytes(t), None)
    return t


def get_world_group() -> Group:
    """The group of every rank."""
    return runtime.get().world


def _group(group: Any, what: str) -> Group:
    rt = runtime.get()
    if group is None:
        return rt.world
    if isinstance(group, Group):
        if group.rank < 0:
            raise CallError(f"{what}: this rank ({rt.launch.rank}) is not a member of the group "
                            f"{group.ranks}")
        return group
    if isinstance(group, tdist.ProcessGroup):
        g = rt.by_pg.get(group)
        if g is None:
            # A torch group mcr did not make: serve it with its own library only.
            names = [n for n in ("gloo", "nccl") if n in tdist.get_backend(group)]
            g = Group(ranks=tdist.get_process_group_ranks(group), rank=group.rank(),
                      handles=dict.fromkeys(names, group), default_gpu="nccl")
            rt.by_pg[group] = g
        return g
    raise CallError(f"{what}: group must be an mcr group (mcr.comm.new_group) or a torch "
                    f"ProcessGroup, got {type(group).__name__}")


def get_rank(group: Any = None) -> int:
    """This process's rank in group (the world by default)."""
    return _group(group, "get_rank").rank


def get_world_size(group: Any = None) -> int:
    """Number of ranks in group (the world by default)."""
    return _group(group, "get_world_size").size


def get_local_rank() -> int:
    """Rank of this process on its node."""
    return runtime.get().launch.local_rank


def get_global_rank(group: Any, group_rank: int) -> int:
    """The world rank of rank group_rank of group."""
    g = _group(group, "get_global_rank")
    if not 0 <= group_rank < g.size:
        raise CallError(f"get_global_rank: group rank {group_rank} outside group of {g.size}")
    return g.ranks[group_rank]


_PROFILE: list[str] = []


@contextlib.contextmanager
def profile(name: str) -> Iterator[None]:
    """Use the table rules of profile `name` (standalone | overlap) inside the block."""
    from .tables import PROFILES
    if name not in PROFILES:
        raise ValueError(f"profile {name!r} is not one of {list(PROFILES)}")
    _PROFILE.append(name)
    try:
        yield
    finally:
        _PROFILE.pop()


def configure(deepspeed_config: Any = None, enabled: bool | None = None,
              prof_all: bool | None = None, prof_ops: list[str] | None = None,
              verbose: bool | None = None, debug: bool | None = None) -> None:
    """Comms logger settings, as deepspeed.comm.configure."""
    runtime.get().logger.configure(enabled=enabled, verbose=verbose, prof_ops=prof_ops,
                                   prof_all=prof_all)


def log_summary(show_straggler: bool = False, return_dict: bool = False) -> Any:
    """Print (on rank 0) per op, backend and size: count, bytes, time, algbw, busbw."""
    rt = runtime.get()
    rows = rt.logger.rows()
    if rt.launch.rank == 0:
        print(rt.logger.summary(), flush=True)
        fb = rt.dispatcher.fallbacks
        for (source, name, reason), n in sorted(fb.items()):
            print(f"fallback x{n}: {source} chose {name}: {reason}", flush=True)
    return rows if return_dict else None


def has_all_gather_into_tensor() -> bool:
    """mcr always has all_gather_into_tensor."""
    return True


def has_reduce_scatter_tensor() -> bool:
    """mcr always has reduce_scatter_tensor."""
    return True


# -- the dispatch path ------------------------------------------------------------------------

def _tensor(t: Any, what: str, name: str = "tensor") -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise CallError(f"{what}: {name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _same(what: str, a: torch.Tensor, b: torch.Tensor, an: str, bn: str) -> None:
    if a.dtype != b.dtype:
        raise CallError(f"{what}: {an} dtype {a.dtype} differs from {bn} dtype {b.dtype}")
    if a.device != b.device:
        raise CallError(f"{what}: {an} is on {a.device}, {bn} on {b.device}")


def _buffer(t: torch.Tensor) -> tuple[str, int]:
    """("symmetric", byte offset in its allocation) if t lies in memory from symmetric_empty,
    else ("plain", -1)."""
    spans = runtime.get().symmetric
    hit = spans.find(t) if spans and t.is_cuda else None
    return ("symmetric", hit[1]) if hit else ("plain", -1)


def _key(op: str, g: Group, nbytes: int, t: torch.Tensor | None, redop: Any = None,
         buffer: str = "plain") -> CallKey:
    if redop is not None:
        O.redop_name(redop)  # ValueError naming the op if unsupported
    rt = runtime.get()
    # is_cuda first: t.device builds a torch.device object, a microsecond per call.
    dev = "cpu" if t is None else "cuda" if t.is_cuda else t.device.type
    return CallKey(op, g.size, nbytes, None if t is None else t.dtype, dev, redop,
                   _PROFILE[-1] if _PROFILE else rt.cfg.profile, buffer)


def _choose(key: CallKey, g: Group, backend: str | None, root: int = -1,
            offset: int = -1) -> Backend:
    rt = runtime.get()
    b = rt.dispatcher.choose(key, g, backend)
    if rt.cfg.check:
        _check_across_ranks(key, g, root, b.name, offset)
    return b


_DTYPE_CODES = {dt: i for i, dt in enumerate(
    (None, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
     torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128))}


# Stable codes (str hashes differ between processes).
_REDOP_CODES = {name: i for i, name in enumerate(sorted(O.REDOP_NAMES.values()))}


def _check_across_ranks(key: CallKey, g: Group, root: int, backend: str, offset: int) -> None:
    """MCR_CHECK=1: every rank must call the same op, size, dtype, root and library, with its
    output at the same offset of symmetric memory or in plain memory everywhere."""
    fields = (O.OPS.index(key.op), key.nbytes, _DTYPE_CODES.get(key.dtype, -1),
              _REDOP_CODES.get(O.REDOP_NAMES.get(key.redop, ""), -1), root,
              sorted(backends_mod.NAMES).index(backend), offset)
    mine = torch.tensor(fields, dtype=torch.int64)
    every = torch.empty(g.size * len(fields), dtype=torch.int64)
    tdist.all_gather(list(every.view(g.size, -1).unbind(0)), mine, group=g.handles["gloo"])
    every = every.view(g.size, len(fields))
    if not bool((every == mine).all()):
        names = ("op", "bytes", "dtype", "reduce op", "root", "backend",
                 "symmetric output offset")
        diff = [names[i] for i in range(len(fields)) if not bool((every[:, i] == mine[i]).all())]
        rows = "; ".join(f"rank {g.ranks[r]}: {O.OPS[int(every[r, 0])]} "
                         f"{int(every[r, 1])} B" for r in range(g.size))
        raise MismatchError(f"MCR_CHECK: ranks of group {g.ranks} disagree on {diff} for "
                            f"{key.op}: {rows}")


def _tensor_pair(what: str, output: Any, input_: Any, group: Any, output_is_larger: bool
                 ) -> tuple[torch.Tensor, torch.Tensor, Group]:
    """Checked (output, input, group) of a tensor-form all-gather (output = group size x input)
    or reduce-scatter (input = group size x output)."""
    out, inp = _tensor(output, what, "output_tensor"), _tensor(input_, what, "input_tensor")
    g = _group(group, what)
    _same(what, out, inp, "output_tensor", "input_tensor")
    (big, bn), (small, sn) = ((out, "output"), (inp, "input")) if output_is_larger else \
        ((inp, "input"), (out, "output"))
    if big.numel() != small.numel() * g.size:
        raise CallError(f"{what}: {bn}_tensor has {big.numel()} elements, expected "
                        f"{g.size} x {small.numel()} (group size x {sn})")
    return out, inp, g


def _rooted(what: str, tensor: Any, group: Any, rank: int, role: str
            ) -> tuple[torch.Tensor, Group, int]:
    """Checked (tensor, group, root's group rank) of a rooted call (src/dst is a global rank)."""
    g = _group(group, what)
    return _tensor(tensor, what), g, g.group_rank(rank, f"{what} {role}")


def _finish(w: Work, async_op: bool) -> Work | None:
    if async_op:
        return w
    w.wait_issued()
    return None


def _out(t: torch.Tensor) -> tuple[torch.Tensor, list[Callable[[], None]]]:
    """A contiguous tensor to write into, and the copy-back into t if t was not contiguous."""
    if t.is_contiguous():
        return t, []
    c = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return c, [lambda: t.copy_(c)]


def _inout(t: torch.Tensor) -> tuple[torch.Tensor, list[Callable[[], None]]]:
    """Like _out, for a tensor that is read as well."""
    if t.is_contiguous():
        return t, []
    c = t.contiguous()
    return c, [lambda: t.copy_(c)]


def _then(w: Work, after: list[Callable[[], None]]) -> Work:
    w._after.extend(after)
    return w


# -- collectives ------------------------------------------------------------------------------

def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
               async_op: bool = False, backend: str | None = None, **_: Any) -> Work | None:
    """In-place all-reduce of tensor across group."""
    t = _tensor(tensor, "all_reduce")
    g = _group(group, "all_reduce")
    b = _choose(_key(O.ALL_REDUCE, g, _nbytes(t), t, op), g, backend)
    c, after = _inout(t)
    return _finish(_then(b.all_reduce(c, op, g, sync=not async_op), after), async_op)


def inference_all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, backend: str | None = None, **_: Any
                         ) -> Work | None:
    """all_reduce under DeepSpeed's inference name."""
    return all_reduce(tensor, op, group, async_op, backend)


def all_reduce_coalesced(tensors: list[torch.Tensor], op: Any = ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, backend: str | None = None, **_: Any
                         ) -> Work | None:
    """All-reduce several tensors of one dtype as one flat message."""
    if not tensors:
        raise CallError("all_reduce_coalesced: empty tensor list")
    ts = [_tensor(t, "all_reduce_coalesced", f"tensors[{i}]") for i, t in enumerate(tensors)]
    for i, t in enumerate(ts[1:], 1):
        _same("all_reduce_coalesced", t, ts[0], f"tensors[{i}]", "tensors[0]")
    flat = _flatten_dense_tensors(ts)
    g = _group(group, "all_reduce_coalesced")
    b = _choose(_key(O.ALL_REDUCE, g, _nbytes(flat), flat, op), g, backend)

    def unflatten() -> None:
        for t, v in zip(ts, _unflatten_dense_tensors(flat, ts)):
            t.copy_(v)
    return _finish(_then(b.all_reduce(flat, op, g, sync=not async_op), [unflatten]),
                   async_op)


def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                           group: Any = None, async_op: bool = False, backend: str | None = None,
                           **_: Any) -> Work | None:
    """output (group size x input, rank order) <- every rank's input."""
    out, inp, g = _tensor_pair("all_gather_into_tensor", output_tensor, input_tensor, group,
                               output_is_larger=True)
    o, after = _out(out)
    kind, off = _buffer(o)
    b = _choose(_key(O.ALL_GATHER, g, _nbytes(out), out, buffer=kind), g, backend, offset=off)
    return _finish(_then(b.all_gather(o, inp.contiguous(), g, sync=not async_op), after),
                   async_op)


def allgather_fn(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None,
                 async_op: bool = False, debug: Any = None, backend: str | None = None
                 ) -> Work | None:
    """DeepSpeed's name for all_gather_into_tensor."""
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op, backend)


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None,
               async_op: bool = False, backend: str | None = None, **_: Any) -> Work | None:
    """tensor_list[i] <- tensor of rank i."""
    inp = _tensor(tensor, "all_gather")
    g = _group(group, "all_gather")
    _check_list("all_gather", "tensor_list", tensor_list, inp, g.size)
    flat = torch.empty(g.size * inp.numel(), dtype=inp.dtype, device=inp.device)
    b = _choose(_key(O.ALL_GATHER, g, _nbytes(flat), flat), g, backend)

    def split() -> None:
        for t, v in zip(tensor_list, flat.view(g.size, -1).unbind(0)):
            t.copy_(v.view(t.shape))
    return _finish(_then(b.all_gather(flat, inp.contiguous(), g, sync=not async_op), [split]),
                   async_op)


def all_gather_coalesced(output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                         group: Any = None, async_op: bool = False, backend: str | None = None,
                         **_: Any) -> Work | None:
    """output_tensors[i] (group size x input_tensors[i]) <- all-gather, as one message."""
    what = "all_gather_coalesced"
    if len(output_tensors) != len(input_tensors) or not input_tensors:
        raise CallError(f"{what}: {len(output_tensors)} outputs for {len(input_tensors)} inputs")
    g = _group(group, what)
    for i, (o, t) in enumerate(zip(output_tensors, input_tensors)):
        _same(what, _tensor(o, what, f"output_tensors[{i}]"),
              _tensor(t, what, f"input_tensors[{i}]"), f"output_tensors[{i}]",
              f"input_tensors[{i}]")
        _same(what, t, input_tensors[0], f"input_tensors[{i}]", "input_tensors[0]")
        if o.numel() != t.numel() * g.size:
            raise CallError(f"{what}: output_tensors[{i}] has {o.numel()} elements, expected "
                            f"{g.size} x {t.numel()}")
    flat_in = _flatten_dense_tensors(list(input_tensors))
    flat_out = torch.empty(flat_in.numel() * g.size, dtype=flat_in.dtype, device=flat_in.device)
    b = _choose(_key(O.ALL_GATHER, g, _nbytes(flat_out), flat_out), g, backend)
    sizes = [t.numel() for t in input_tensors]

    def split() -> None:
        per_rank = flat_out.view(g.size, -1)
        for i, part in enumerate(per_rank.split(sizes, dim=1)):
            output_tensors[i].view(g.size, -1).copy_(part)
    return _finish(_then(b.all_gather(flat_out, flat_in, g, sync=not async_op), [split]),
                   async_op)


def reduce_scatter_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                          op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False,
                          backend: str | None = None, **_: Any) -> Work | None:
    """output <- this rank's block of the reduction of every rank's input."""
    out, inp, g = _tensor_pair("reduce_scatter_tensor", output_tensor, input_tensor, group,
                               output_is_larger=False)
    b = _choose(_key(O.REDUCE_SCATTER, g, _nbytes(inp), inp, op), g, backend)
    o, after = _out(out)
    return _finish(_then(b.reduce_scatter(o, inp.contiguous(), op, g, sync=not async_op),
                         after), async_op)


def reduce_scatter_fn(output_tensor: torch.Tensor, tensor: torch.Tensor, op: Any = ReduceOp.SUM,
                      group: Any = None, async_op: bool = False, prof: bool = False,
                      debug: Any = None, backend: str | None = None) -> Work | None:
    """DeepSpeed's name for reduce_scatter_tensor."""
    return reduce_scatter_tensor(output_tensor, tensor, op, group, async_op, backend)


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], op: Any = ReduceOp.SUM,
                   group: Any = None, async_op: bool = False, backend: str | None = None,
                   **_: Any) -> Work | None:
    """output <- reduction over ranks of input_list[this rank]."""
    g = _group(group, "reduce_scatter")
    out = _tensor(output, "reduce_scatter", "output")
    _check_list("reduce_scatter", "input_list", input_list, out, g.size, tname="output")
    flat = torch.cat([t.reshape(-1) for t in input_list])
    return reduce_scatter_tensor(out, flat, op, g, async_op, backend)


def all_to_all_single(output: torch.Tensor, tensor: torch.Tensor,
                      output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None, group: Any = None,
                      async_op: bool = False, backend: str | None = None, **_: Any
                      ) -> Work | None:
    """Split tensor along dim 0, send block i to rank i, concatenate what arrives into output."""
    what = "all_to_all_single"
    out, inp = _tensor(output, what, "output"), _tensor(tensor, what, "tensor")
    g = _group(group, what)
    _same(what, out, inp, "output", "tensor")
    in_counts = _counts(what, "input", inp, input_split_sizes, g.size)
    out_counts = _counts(what, "output", out, output_split_sizes, g.size)
    even = input_split_sizes is None and output_split_sizes is None
    if even and inp.numel() != out.numel():
        raise CallError(f"{what}: output has {out.numel()} elements, tensor {inp.numel()}")
    # Split sizes may differ by rank, so no size is known to be the same everywhere.
    o, after = _out(out)
    kind, off = _buffer(o)
    key = _key(O.ALL_TO_ALL, g, _nbytes(inp) if even else _UNKNOWN, inp, buffer=kind)
    b = _choose(key, g, backend, offset=off)
    # Backends move flat element counts; views keep the caller's memory.
    work_ = b.all_to_all(o.view(-1), inp.contiguous().view(-1), out_counts, in_counts, g,
                         sync=not async_op)
    return _finish(_then(work_, after), async_op)


def _counts(what: str, name: str, t: torch.Tensor, splits: list[int] | None, n: int) -> list[int]:
    """Element counts per rank from split sizes along dim 0."""
    rows = t.shape[0] if t.dim() else 1
    row = t.numel() // rows if rows else 0
    if splits is None:
        if rows % n:
            raise CallError(f"{what}: {name} dim 0 ({rows}) is not divisible by group size {n}; "
                            f"pass {name}_split_sizes")
        return [rows // n * row] * n
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != rows:
        raise CallError(f"{what}: {name}_split_sizes {list(splits)} must be {n} non-negative "
                        f"sizes summing to dim 0 of {name} ({rows})")
    return [s * row for s in splits]


def all_to_all(output_tensor_list: list[torch.Tensor], input_tensor_list: list[torch.Tensor],
               group: Any = None, async_op: bool = False, backend: str | None = None, **_: Any
               ) -> Work | None:
    """input_tensor_list[i] goes to rank i; output_tensor_list[i] comes from rank i."""
    what = "all_to_all"
    g = _group(group, what)
    if len(output_tensor_list) != g.size or len(input_tensor_list) != g.size:
        raise CallError(f"{what}: both lists must hold {g.size} tensors (group size)")
    ins = [_tensor(t, what, f"input_tensor_list[{i}]") for i, t in enumerate(input_tensor_list)]
    outs = [_tensor(t, what, f"output_tensor_list[{i}]") for i, t in enumerate(output_tensor_list)]
    for i, t in enumerate(ins + outs):
        _same(what, t, ins[0], f"tensor {i}", "input_tensor_list[0]")
    flat_in = torch.cat([t.reshape(-1) for t in ins])
    out_counts, in_counts = [t.numel() for t in outs], [t.numel() for t in ins]
    flat_out = torch.empty(sum(out_counts), dtype=flat_in.dtype, device=flat_in.device)
    even = len(set(in_counts + out_counts)) == 1
    key = _key(O.ALL_TO_ALL, g, _nbytes(flat_in) if even else _UNKNOWN, flat_in)
    b = _choose(key, g, backend)

    def split() -> None:
        for t, v in zip(outs, flat_out.split(out_counts)):
            t.copy_(v.view(t.shape))
    return _finish(_then(b.all_to_all(flat_out, flat_in, out_counts, in_counts, g,
                                        sync=not async_op), [split]),
                   async_op)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False,
              backend: str | None = None, **_: Any) -> Work | None:
    """tensor on every rank <- tensor on global rank src."""
    t, g, root = _rooted("broadcast", tensor, group, src, "src")
    c, after = _inout(t)
    kind, off = _buffer(c)
    b = _choose(_key(O.BROADCAST, g, _nbytes(t), t, buffer=kind), g, backend, root, off)
    return _finish(_then(b.broadcast(c, root, g, sync=not async_op), after), async_op)


def reduce(tensor: torch.Tensor, dst: int, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False, backend: str | None = None, **_: Any) -> Work | None:
    """tensor on global rank dst <- reduction of every rank's tensor."""
    t, g, root = _rooted("reduce", tensor, group, dst, "dst")
    b = _choose(_key(O.REDUCE, g, _nbytes(t), t, op), g, backend, root)
    c, after = _inout(t)
    return _finish(_then(b.reduce(c, op, root, g, sync=not async_op), after), async_op)


def gather(tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None, dst: int = 0,
           group: Any = None, async_op: bool = False, backend: str | None = None, **_: Any
           ) -> Work | None:
    """gather_list[i] on global rank dst <- tensor of rank i."""
    t, g, root = _rooted("gather", tensor, group, dst, "dst")
    flat, after = None, []
    if g.rank == root:
        _check_list("gather", "gather_list", gather_list, t, g.size, "on the root, ")
        flat = torch.empty(g.size * t.numel(), dtype=t.dtype, device=t.device)

        def split() -> None:
            for o, v in zip(gather_list, flat.view(g.size, -1).unbind(0)):
                o.copy_(v.view(o.shape))
        after = [split]
    b = _choose(_key(O.GATHER, g, _nbytes(t) * g.size, t), g, backend, root)
    return _finish(_then(b.gather(flat, t.contiguous(), root, g, sync=not async_op), after),
                   async_op)


def scatter(tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None, src: int = 0,
            group: Any = None, async_op: bool = False, backend: str | None = None, **_: Any
            ) -> Work | None:
    """tensor on rank i <- scatter_list[i] on global rank src."""
    t, g, root = _rooted("scatter", tensor, group, src, "src")
    flat = None
    if g.rank == root:
        _check_list("scatter", "scatter_list", scatter_list, t, g.size, "on the root, ")
        flat = torch.cat([s.reshape(-1) for s in scatter_list])
    b = _choose(_key(O.SCATTER, g, _nbytes(t) * g.size, t), g, backend, root)
    c, after = _out(t)
    return _finish(_then(b.scatter(c, flat, root, g, sync=not async_op), after), async_op)


def _check_list(what: str, name: str, lst: Any, t: torch.Tensor, n: int, where: str = "",
                tname: str = "tensor") -> None:
    """lst must be n tensors of t's dtype, device and element count (`where`: "on the root, ")."""
    if not isinstance(lst, (list, tuple)) or len(lst) != n:
        got = f"{type(lst).__name__} of {len(lst)}" if isinstance(lst, (list, tuple)) else \
            type(lst).__name__
        raise CallError(f"{what}: {where}{name} must be a list of {n} tensors (group size), "
                        f"got {got}")
    for i, x in enumerate(lst):
        _same(what, _tensor(x, what, f"{name}[{i}]"), t, f"{name}[{i}]", tname)
        if x.numel() != t.numel():
            raise CallError(f"{what}: {name}[{i}] has {x.numel()} elements, {tname} has "
                            f"{t.numel()}")


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None,
            backend: str | None = None, **_: Any) -> Work | None:
    """Every rank of group has reached this point."""
    g = _group(group, "barrier")
    b = _choose(_key(O.BARRIER, g, 0, None), g, backend)
    return _finish(b.barrier(g, sync=not async_op), async_op)


# -- point to point ---------------------------------------------------------------------------

def _p2p(what: str, tensor: torch.Tensor, peer: int | None, group: Any, tag: int,
         backend: str | None) -> tuple[Backend, Group, int | None, torch.Tensor]:
    t = _tensor(tensor, what)
    g = _group(group, what)
    gp = None if peer is None else g.group_rank(peer, f"{what} peer")
    if gp == g.rank:
        raise CallError(f"{what}: rank {g.ranks[g.rank]} cannot {what} to itself")
    if not isinstance(tag, int) or tag < 0:
        raise CallError(f"{what}: tag must be a non-negative int, got {tag!r}")
    return _choose(_key(O.P2P, g, _nbytes(t), t), g, backend), g, gp, t


def isend(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0,
          backend: str | None = None, **_: Any) -> Work:
    """Non-blocking send of tensor to global rank dst."""
    b, g, gp, t = _p2p("isend", tensor, dst, group, tag, backend)
    return b.send(t.contiguous(), gp, tag, g)


def irecv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0,
          backend: str | None = None, **_: Any) -> Work:
    """Non-blocking receive into tensor from global rank src (None: any)."""
    b, g, gp, t = _p2p("irecv", tensor, src, group, tag, backend)
    c, after = _out(t)
    return _then(b.recv(c, gp, tag, g), after)


def send(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0,
         backend: str | None = None, **_: Any) -> None:
    """Blocking send of tensor to global rank dst."""
    isend(tensor, dst, group, tag, backend).wait()


def recv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0,
         backend: str | None = None, **_: Any) -> int:
    """Blocking receive into tensor; returns the sender's global rank."""
    w = irecv(tensor, src, group, tag, backend)
    w.wait()
    g = _group(group, "recv")
    if src is not None:
        return src
    if w.source is not None:
        return g.ranks[w.source()]
    return g.ranks[w._torch.source_rank()]


# -- objects ----------------------------------------------------------------------------------

def broadcast_object_list(object_list: list[Any], src: int, group: Any = None,
                          device: Any = None, backend: str | None = None) -> None:
    """object_list on every rank <- object_list on global rank src (pickled)."""
    g = _group(group, "broadcast_object_list")
    root = g.group_rank(src, "broadcast_object_list src")
    b = _choose(_key(O.OBJECT, g, _UNKNOWN, None), g, backend, root)
    b.broadcast_object_list(object_list, root, g)


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None,
                      backend: str | None = None) -> None:
    """object_list[i] <- obj of rank i (pickled)."""
    g = _group(group, "all_gather_object")
    if not isinstance(object_list, list) or len(object_list) != g.size:
        raise CallError(f"all_gather_object: object_list must be a list of {g.size} (group size)")
    b = _choose(_key(O.OBJECT, g, _UNKNOWN, None), g, backend)
    b.all_gather_object(object_list, obj, g)
