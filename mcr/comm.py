"""mcr.comm: a drop-in for deepspeed.comm / torch.distributed that picks a library per call.

`import mcr.comm as dist`, then use it as deepspeed.comm: the same names, the same arguments in
the same order (DeepSpeed's profiling arguments `prof`, `log_name`, `debug` are accepted and
unused). Every collective also takes a keyword-only `backend=` to force one library for that
call. Ranks (src, dst, peer) are global ranks, as in torch.distributed. `group` is an mcr group
(new_group) or any torch ProcessGroup. Unknown keyword arguments are a TypeError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as tdist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from . import checks, report, runtime
from . import ops as O
from .backends import STREAM, Backend
from .backends import canonical as backends_canonical
from .errors import CallError, MismatchError
from .groups import Group
from .session import (
    can_allocate_symmetric,
    destroy_process_group,
    get_world_group,
    group_of,
    group_rank,
    group_ranks,
    group_size,
    init_distributed,
    is_initialized,
    new_group,
    symmetric_empty,
    torch_group,
)
from .work import ON_COMPLETE, Work

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
]
_UNKNOWN = -1  # message size of calls with no rank-invariant size (uneven splits, objects)


# -- rank queries (answer from what is known; never bind a library) --------------------------

def get_rank(group: Any = None) -> int:
    """This process's rank in group (the world by default); -1 if not a member."""
    return group_rank(group)


def get_world_size(group: Any = None) -> int:
    """Number of ranks in group (the world by default); -1 for torch's non-member group."""
    return group_size(group)


def get_local_rank() -> int:
    """Rank of this process on its node."""
    return runtime.get().launch.local_rank


def get_global_rank(group: Any = None, group_rank: int = 0) -> int:
    """The world rank of rank group_rank of group."""
    ranks = group_ranks(group)
    if not 0 <= group_rank < len(ranks):
        raise CallError(f"get_global_rank: group rank {group_rank} outside group of "
                        f"{len(ranks)}")
    return ranks[group_rank]


def get_all_ranks_from_group(group: Any = None) -> list[int]:
    """The world ranks of group, in group-rank order."""
    return group_ranks(group)


def has_all_gather_into_tensor() -> bool:
    """mcr always has all_gather_into_tensor."""
    return True


def has_reduce_scatter_tensor() -> bool:
    """mcr always has reduce_scatter_tensor."""
    return True


def has_all_reduce_coalesced() -> bool:
    """mcr always has all_reduce_coalesced (one flat message)."""
    return True


def has_coalescing_manager() -> bool:
    """No: mcr has no torch coalescing manager; callers take their per-call path."""
    return False


def enable_symm_mem_for_group(group_name: str) -> None:
    """torch's enable_symm_mem_for_group, where this torch still needs it (a no-op after)."""
    import torch.distributed._symmetric_memory as symm_mem
    fn = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if fn is not None:
        fn(group_name)


def initialize_mesh_device(mesh_shape: tuple[int, ...], mesh_dim_names: tuple[str, ...]
                           ) -> Any:
    """A torch DeviceMesh over the world (its groups are served by mcr like any torch group)."""
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cuda" if runtime.get().cuda else "cpu", tuple(mesh_shape),
                            mesh_dim_names=tuple(mesh_dim_names))


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


def force_backend(name: str | None) -> None:
    """From now on send every call to backend `name` where it can serve it (as MCR_BACKEND does
    at init: calls it declines fall back); None goes back to MCR_BACKEND and the tables. Every
    rank must call it at the same point: it checks that all ranks name the same backend."""
    rt = runtime.get()
    want = backends_canonical(name) if name else rt.cfg.backend
    every: list[Any] = [None] * rt.world.size
    tdist.all_gather_object(every, want, group=rt.world.handles["gloo"])
    if len(set(every)) > 1:
        raise MismatchError(f"force_backend: ranks named different backends: "
                            f"{dict(enumerate(every))}")
    rt.dispatcher.set_env_backend(want)
    rt.fast.clear()


def configure(deepspeed_config: Any = None, enabled: bool | None = None,
              prof_all: bool | None = None, prof_ops: list[str] | None = None,
              verbose: bool | None = None, debug: bool | None = None) -> None:
    """Per-call timing (the comms logger), as deepspeed.comm.configure; a DeepSpeed config's
    comms_logger section is read the same way. Counting calls per library is always on."""
    comms = getattr(deepspeed_config, "comms_config", None)
    if comms is not None and getattr(comms, "comms_logger_enabled", False):
        cl = comms.comms_logger
        enabled = enabled if enabled is not None else cl.enabled
        prof_all = prof_all if prof_all is not None else cl.prof_all
        prof_ops = prof_ops if prof_ops is not None else cl.prof_ops
        verbose = verbose if verbose is not None else cl.verbose
    runtime.get().logger.configure(enabled=enabled, verbose=verbose, prof_ops=prof_ops,
                                   prof_all=prof_all)


def log_summary(show_straggler: bool = False, return_dict: bool = False) -> Any:
    """Print on rank 0 what mcr did: calls and bytes per op and library, fallbacks, calls that
    bypassed mcr, and (with per-call timing on) times and bandwidths."""
    rt = runtime.get()
    if rt.launch.rank == 0:
        print(report.summary(rt), flush=True)
    return report.rows(rt) if return_dict else None


# -- the dispatch path ------------------------------------------------------------------------
# A call's decision depends on (op, group, bytes, dtype, device, reduce op, profile, forced
# backend, buffer kind). After the first call with those values it is one dict lookup on a
# plain tuple of them (runtime.fast); the first goes through the dispatcher, which builds the
# CallKey, and MCR_CHECK sends every call that way.

def _nbytes(t: torch.Tensor) -> int:
    return t.nbytes


def _buffer(t: torch.Tensor) -> tuple[str, int]:
    """("symmetric", byte offset in its allocation) if t lies in memory from symmetric_empty,
    else ("plain", -1)."""
    spans = runtime._RT[0].symmetric
    hit = spans.find(t) if spans and t.is_cuda else None
    return ("symmetric", hit[1]) if hit else ("plain", -1)


def _device(t: torch.Tensor | None) -> str:
    # is_cuda first: t.device builds a torch.device object, a microsecond per call.
    return "cpu" if t is None else "cuda" if t.is_cuda else "cpu" if t.is_cpu else t.device.type


def _route(op: str, g: Group, t: torch.Tensor | None, nbytes: int, redop: Any,
           forced: str | None, buffer: str = "plain", root: int = -1,
           offset: int = -1) -> Backend:
    """The backend for this call (counted: calls and bytes per op and library)."""
    rt = runtime._RT[0]
    prof = _PROFILE[-1] if _PROFILE else rt.cfg.profile
    # Reduce ops by identity (hashing torch's enum costs ~0.4 us); every PREMUL_SUM(factor)
    # decides alike, whatever its factor.
    rk = None if redop is None else -1 if type(redop) is _REDUCE_OP_OBJ else id(redop)
    graph = rt.cuda and _capturing()
    fk = (op, g.id, nbytes, None if t is None else t.dtype,
          0 if t is None else 1 if t.is_cuda else 0 if t.is_cpu else t.device.type,
          rk, prof, forced, buffer, graph, root)
    hit = rt.fast.get(fk)
    if hit is None or rt.cfg.check:
        new = hit is None
        key = O.make_key(op, g.size, nbytes, None if t is None else t.dtype, _device(t), redop,
                         prof, buffer, graph)
        hit = rt.dispatcher.entry(key, g, forced)
        if rt.cfg.check:
            checks.across_ranks(key, g, root, hit[0].name, offset)
        elif new and op != O.P2P and g.size > 1:
            rt.signature_check(key, g, root, hit[0].name)   # a new kind of call: compare
        if len(rt.fast) >= 1 << 16:
            rt.fast.clear()
        rt.fast[fk] = hit
    n = hit[1]
    n[0] += 1
    if nbytes > 0:
        n[1] += nbytes
    return hit[0]


# Is the current stream capturing a CUDA graph? (torch's C call: the Python wrapper costs more)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or \
    torch.cuda.is_current_stream_capturing


def which_backend(op: str, nbytes: int, dtype: torch.dtype, device: str = "cpu",
                  group: Any = None, redop: Any = None, buffer: str = "plain") -> str:
    """The library mcr would choose for such a call (nbytes as nccl-tests counts them: the
    full buffer); no call is made and nothing is counted. Raises BackendUnavailable if none
    can serve it."""
    rt = runtime.get()
    g = group_of(group, "which_backend")
    key = O.make_key(op, g.size, nbytes, dtype, device, None if redop is None else
                     _redop(redop, "which_backend"), _PROFILE[-1] if _PROFILE else rt.cfg.profile,
                     buffer)
    return rt.dispatcher.entry(key, g)[0].name


def _redop(op: Any, what: str) -> Any:
    return op if id(op) in _TORCH_REDOP_IDS else O.as_redop(op, what)


_TORCH_REDOP_IDS = frozenset(id(op) for op in O.REDOP_NAMES)   # torch's enum values are singletons
_REDUCE_OP_OBJ = ReduceOp            # type of a ReduceOp object, e.g. PREMUL_SUM(factor)
_SUM = ReduceOp.SUM


def _reduction(b: Backend, t: torch.Tensor, op: Any, inplace: bool) -> tuple[torch.Tensor, Any]:
    """(tensor, op) for b: ReduceOp.PREMUL_SUM(f) becomes f * t and SUM where b has no premul
    (a copy unless the call overwrites t anyway)."""
    if op is _SUM or b.native_premul or not O.is_premul(op):
        return t, op
    f = O.premul_factor(op)
    return (t.mul_(f) if inplace else t * f), _SUM


def _sync(async_op: bool) -> bool:
    """Whether the backend may finish the call as synchronous (no Work): not when the caller
    wants a handle, nor when per-call timing needs one."""
    return not async_op and not ON_COMPLETE


def _end(w: Any, after: list[Callable[[], None]] | None, async_op: bool, b: Backend) -> Any:
    """Hand the caller its Work (async_op), or complete the call; copy-backs run after the
    library is done (now, if the backend already completed a synchronous call). w is mcr's
    Work, torch's own (a torch-backed call with nothing to do after it) or None (done)."""
    if after:
        if w is None:
            for fn in after:
                fn()
        elif type(w) is Work:
            w._after = (w._after or []) + after
        else:
            w = Work("call", b.name, 0, 0, torch_work=w, stream_ordered=b.domain == STREAM,
                     after=after)
    if async_op:
        return w
    if w is not None:
        if type(w) is Work:
            w.wait_issued()
        else:
            w.wait()
    return None


def _out(t: torch.Tensor) -> tuple[torch.Tensor, list[Callable[[], None]] | None]:
    """A contiguous tensor to write into, and the copy-back into t if t was not contiguous."""
    if t.is_contiguous():
        return t, None
    c = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return c, [lambda: t.copy_(c)]


def _inout(t: torch.Tensor) -> tuple[torch.Tensor, list[Callable[[], None]] | None]:
    """Like _out, for a tensor that is read as well."""
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, [lambda: t.copy_(c)]


def _rooted(what: str, tensor: Any, group: Any, rank: int, role: str
            ) -> tuple[torch.Tensor, Group, int]:
    """Checked (tensor, group, root's group rank) of a rooted call (src/dst is a global rank)."""
    g = group_of(group, what)
    return checks.tensor(tensor, what), g, g.group_rank(rank, f"{what} {role}")


# -- collectives ------------------------------------------------------------------------------

def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
               async_op: bool = False, prof: bool = False, log_name: str = "all_reduce",
               debug: Any = None, *, backend: str | None = None) -> Work | None:
    """In-place all-reduce of tensor across group."""
    t = tensor if isinstance(tensor, torch.Tensor) else checks.tensor(tensor, "all_reduce")
    g = group_of(group, "all_reduce")
    op = _redop(op, "all_reduce")
    b = _route(O.ALL_REDUCE, g, t, t.nbytes, op, backend)
    c, after = (t, None) if t.is_contiguous() else _inout(t)
    if op is not _SUM:
        c, op = _reduction(b, c, op, inplace=True)
    w = b.all_reduce(c, op, g, sync=not async_op and not ON_COMPLETE)
    return _end(w, after, async_op, b) if after or async_op or w is not None else None


def inference_all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, prof: bool = False,
                         log_name: str = "all_reduce", debug: Any = None, *,
                         backend: str | None = None) -> Work | None:
    """all_reduce under DeepSpeed's inference name."""
    return all_reduce(tensor, op, group, async_op, backend=backend)


def all_reduce_coalesced(tensors: list[torch.Tensor], op: Any = ReduceOp.SUM, group: Any = None,
                         async_op: bool = False, prof: bool = False,
                         log_name: str = "all_reduce", debug: Any = None, *,
                         backend: str | None = None) -> Work | None:
    """All-reduce several tensors of one dtype as one flat message."""
    what = "all_reduce_coalesced"
    if not tensors:
        raise CallError(f"{what}: empty tensor list")
    ts = [checks.tensor(t, what, f"tensors[{i}]") for i, t in enumerate(tensors)]
    for i, t in enumerate(ts[1:], 1):
        checks.same(what, t, ts[0], f"tensors[{i}]", "tensors[0]")
    g = group_of(group, what)
    op = _redop(op, what)
    flat = _flatten_dense_tensors(ts)
    b = _route(O.ALL_REDUCE, g, flat, _nbytes(flat), op, backend)
    flat, op = _reduction(b, flat, op, inplace=True)

    def unflatten() -> None:
        for t, v in zip(ts, _unflatten_dense_tensors(flat, ts)):
            t.copy_(v)
    w = b.all_reduce(flat, op, g, sync=_sync(async_op))
    return _end(w, [unflatten], async_op, b)


def all_gather_into_tensor(output_tensor: torch.Tensor, tensor: torch.Tensor,
                           group: Any = None, async_op: bool = False, prof: bool = False,
                           log_name: str = "all_gather_into_tensor", debug: Any = None, *,
                           backend: str | None = None) -> Work | None:
    """output_tensor (group size x tensor, rank order) <- every rank's tensor."""
    what = "all_gather_into_tensor"
    g = group_of(group, what)
    out, inp = checks.tensor_pair(what, output_tensor, tensor, g, output_is_larger=True)
    o, after = _out(out)
    kind, off = _buffer(o)
    b = _route(O.ALL_GATHER, g, out, _nbytes(out), None, backend, kind, offset=off)
    w = b.all_gather(o, inp.contiguous(), g, sync=_sync(async_op))
    return _end(w, after, async_op, b)


def allgather_fn(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None,
                 async_op: bool = False, debug: Any = None, *, backend: str | None = None
                 ) -> Work | None:
    """DeepSpeed's name for all_gather_into_tensor."""
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op, backend=backend)


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None,
               async_op: bool = False, prof: bool = False, log_name: str = "all_gather",
               debug: Any = None, *, backend: str | None = None) -> Work | None:
    """tensor_list[i] <- tensor of rank i."""
    inp = checks.tensor(tensor, "all_gather")
    g = group_of(group, "all_gather")
    checks.check_list("all_gather", "tensor_list", tensor_list, inp, g.size)
    flat = torch.empty(g.size * inp.numel(), dtype=inp.dtype, device=inp.device)
    b = _route(O.ALL_GATHER, g, flat, _nbytes(flat), None, backend)

    def split() -> None:
        for t, v in zip(tensor_list, flat.view(g.size, -1).unbind(0)):
            t.copy_(v.view(t.shape))
    return _end(b.all_gather(flat, inp.contiguous(), g, sync=_sync(async_op)), [split],
                async_op, b)


def all_gather_coalesced(output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                         group: Any = None, async_op: bool = False, *,
                         backend: str | None = None) -> Work | None:
    """output_tensors[i] (group size x input_tensors[i]) <- all-gather, as one message."""
    what = "all_gather_coalesced"
    if len(output_tensors) != len(input_tensors) or not input_tensors:
        raise CallError(f"{what}: {len(output_tensors)} outputs for {len(input_tensors)} inputs")
    g = group_of(group, what)
    for i, (o, t) in enumerate(zip(output_tensors, input_tensors)):
        checks.same(what, checks.tensor(o, what, f"output_tensors[{i}]"),
                    checks.tensor(t, what, f"input_tensors[{i}]"), f"output_tensors[{i}]",
                    f"input_tensors[{i}]")
        checks.same(what, t, input_tensors[0], f"input_tensors[{i}]", "input_tensors[0]")
        if o.numel() != t.numel() * g.size:
            raise CallError(f"{what}: output_tensors[{i}] has {o.numel()} elements, expected "
                            f"{g.size} x {t.numel()}")
    flat_in = _flatten_dense_tensors(list(input_tensors))
    flat_out = torch.empty(flat_in.numel() * g.size, dtype=flat_in.dtype, device=flat_in.device)
    b = _route(O.ALL_GATHER, g, flat_out, _nbytes(flat_out), None, backend)
    sizes = [t.numel() for t in input_tensors]

    def split() -> None:
        per_rank = flat_out.view(g.size, -1)
        for i, part in enumerate(per_rank.split(sizes, dim=1)):
            output_tensors[i].view(g.size, -1).copy_(part)
    w = b.all_gather(flat_out, flat_in, g, sync=_sync(async_op))
    return _end(w, [split], async_op, b)


def reduce_scatter_tensor(output_tensor: torch.Tensor, tensor: torch.Tensor,
                          op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False,
                          prof: bool = False, log_name: str = "reduce_scatter_tensor",
                          debug: Any = None, *, backend: str | None = None) -> Work | None:
    """output_tensor <- this rank's block of the reduction of every rank's tensor."""
    what = "reduce_scatter_tensor"
    g = group_of(group, what)
    out, inp = checks.tensor_pair(what, output_tensor, tensor, g, output_is_larger=False)
    op = _redop(op, what)
    b = _route(O.REDUCE_SCATTER, g, inp, _nbytes(inp), op, backend)
    o, after = _out(out)
    inp, op = _reduction(b, inp.contiguous(), op, inplace=False)
    return _end(b.reduce_scatter(o, inp, op, g, sync=_sync(async_op)), after, async_op, b)


def reduce_scatter_fn(output_tensor: torch.Tensor, tensor: torch.Tensor, op: Any = ReduceOp.SUM,
                      group: Any = None, async_op: bool = False, prof: bool = False,
                      debug: Any = None, *, backend: str | None = None) -> Work | None:
    """DeepSpeed's name for reduce_scatter_tensor."""
    return reduce_scatter_tensor(output_tensor, tensor, op, group, async_op, backend=backend)


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], op: Any = ReduceOp.SUM,
                   group: Any = None, async_op: bool = False, prof: bool = False,
                   log_name: str = "reduce_scatter", debug: Any = None, *,
                   backend: str | None = None) -> Work | None:
    """output <- reduction over ranks of input_list[this rank]."""
    g = group_of(group, "reduce_scatter")
    out = checks.tensor(output, "reduce_scatter", "output")
    checks.check_list("reduce_scatter", "input_list", input_list, out, g.size, tname="output")
    flat = torch.cat([t.reshape(-1) for t in input_list])
    return reduce_scatter_tensor(out, flat, op, g, async_op, backend=backend)


def all_to_all_single(output: torch.Tensor, tensor: torch.Tensor,
                      output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None, group: Any = None,
                      async_op: bool = False, prof: bool = False,
                      log_name: str = "all_to_all_single", debug: Any = None, *,
                      backend: str | None = None) -> Work | None:
    """Split tensor along dim 0, send block i to rank i, concatenate what arrives into output."""
    what = "all_to_all_single"
    out, inp = checks.tensor(output, what, "output"), checks.tensor(tensor, what, "tensor")
    g = group_of(group, what)
    checks.same(what, out, inp, "output", "tensor")
    in_counts = checks.counts(what, "input", inp, input_split_sizes, g.size)
    out_counts = checks.counts(what, "output", out, output_split_sizes, g.size)
    even = input_split_sizes is None and output_split_sizes is None
    if even and inp.numel() != out.numel():
        raise CallError(f"{what}: output has {out.numel()} elements, tensor {inp.numel()}")
    # Split sizes may differ by rank, so no size is known to be the same everywhere.
    o, after = _out(out)
    kind, off = _buffer(o)
    b = _route(O.ALL_TO_ALL, g, inp, _nbytes(inp) if even else _UNKNOWN, None, backend, kind,
               offset=off)
    # Backends move flat element counts; views keep the caller's memory.
    w = b.all_to_all(o.view(-1), inp.contiguous().view(-1), out_counts, in_counts, g,
                     sync=_sync(async_op))
    return _end(w, after, async_op, b)


def all_to_all(output_tensor_list: list[torch.Tensor], input_tensor_list: list[torch.Tensor],
               group: Any = None, async_op: bool = False, prof: bool = False,
               log_name: str = "all_to_all", debug: Any = None, *,
               backend: str | None = None) -> Work | None:
    """input_tensor_list[i] goes to rank i; output_tensor_list[i] comes from rank i."""
    what = "all_to_all"
    g = group_of(group, what)
    if len(output_tensor_list) != g.size or len(input_tensor_list) != g.size:
        raise CallError(f"{what}: both lists must hold {g.size} tensors (group size)")
    ins = [checks.tensor(t, what, f"input_tensor_list[{i}]")
           for i, t in enumerate(input_tensor_list)]
    outs = [checks.tensor(t, what, f"output_tensor_list[{i}]")
            for i, t in enumerate(output_tensor_list)]
    for i, t in enumerate(ins + outs):
        checks.same(what, t, ins[0], f"tensor {i}", "input_tensor_list[0]")
    flat_in = torch.cat([t.reshape(-1) for t in ins])
    out_counts, in_counts = [t.numel() for t in outs], [t.numel() for t in ins]
    flat_out = torch.empty(sum(out_counts), dtype=flat_in.dtype, device=flat_in.device)
    even = len(set(in_counts + out_counts)) == 1
    b = _route(O.ALL_TO_ALL, g, flat_in, _nbytes(flat_in) if even else _UNKNOWN, None, backend)

    def split() -> None:
        for t, v in zip(outs, flat_out.split(out_counts)):
            t.copy_(v.view(t.shape))
    w = b.all_to_all(flat_out, flat_in, out_counts, in_counts, g, sync=_sync(async_op))
    return _end(w, [split], async_op, b)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False,
              prof: bool = False, log_name: str = "broadcast", debug: Any = None, *,
              backend: str | None = None) -> Work | None:
    """tensor on every rank <- tensor on global rank src."""
    t, g, root = _rooted("broadcast", tensor, group, src, "src")
    c, after = _inout(t)
    kind, off = _buffer(c)
    b = _route(O.BROADCAST, g, t, _nbytes(t), None, backend, kind, root, off)
    return _end(b.broadcast(c, root, g, sync=_sync(async_op)), after, async_op, b)


def reduce(tensor: torch.Tensor, dst: int, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False, prof: bool = False, log_name: str = "reduce",
           debug: Any = None, *, backend: str | None = None) -> Work | None:
    """tensor on global rank dst <- reduction of every rank's tensor; on every other rank,
    whatever the library, tensor stays as it was."""
    t, g, root = _rooted("reduce", tensor, group, dst, "dst")
    op = _redop(op, "reduce")
    b = _route(O.REDUCE, g, t, _nbytes(t), op, backend, root=root)
    c, after = _inout(t)
    c, op = _reduction(b, c, op, inplace=g.rank == root)   # other ranks keep their tensor
    return _end(b.reduce(c, op, root, g, sync=_sync(async_op)), after, async_op, b)


def gather(tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None, dst: int = 0,
           group: Any = None, async_op: bool = False, prof: bool = False,
           log_name: str = "gather", debug: Any = None, *, backend: str | None = None
           ) -> Work | None:
    """gather_list[i] on global rank dst <- tensor of rank i."""
    t, g, root = _rooted("gather", tensor, group, dst, "dst")
    flat, after = None, None
    if g.rank == root:
        checks.check_list("gather", "gather_list", gather_list, t, g.size, "on the root, ")
        flat = torch.empty(g.size * t.numel(), dtype=t.dtype, device=t.device)

        def split() -> None:
            for o, v in zip(gather_list, flat.view(g.size, -1).unbind(0)):
                o.copy_(v.view(o.shape))
        after = [split]
    b = _route(O.GATHER, g, t, _nbytes(t) * g.size, None, backend, root=root)
    w = b.gather(flat, t.contiguous(), root, g, sync=_sync(async_op))
    return _end(w, after, async_op, b)


def scatter(tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None, src: int = 0,
            group: Any = None, async_op: bool = False, prof: bool = False,
            log_name: str = "scatter", debug: Any = None, *, backend: str | None = None
            ) -> Work | None:
    """tensor on rank i <- scatter_list[i] on global rank src."""
    t, g, root = _rooted("scatter", tensor, group, src, "src")
    flat = None
    if g.rank == root:
        checks.check_list("scatter", "scatter_list", scatter_list, t, g.size, "on the root, ")
        flat = torch.cat([s.reshape(-1) for s in scatter_list])
    b = _route(O.SCATTER, g, t, _nbytes(t) * g.size, None, backend, root=root)
    c, after = _out(t)
    return _end(b.scatter(c, flat, root, g, sync=_sync(async_op)), after, async_op, b)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None,
            prof: bool = False, log_name: str = "barrier", debug: Any = None, *,
            backend: str | None = None) -> Work | None:
    """Every rank of group has reached this point."""
    g = group_of(group, "barrier")
    b = _route(O.BARRIER, g, None, 0, None, backend)
    return _end(b.barrier(g, sync=_sync(async_op)), None, async_op, b)


def monitored_barrier(group: Any = None, timeout: Any = None, wait_all_ranks: bool = False,
                      prof: bool = False, log_name: str = "monitored_barrier",
                      debug: Any = None) -> None:
    """torch's monitored_barrier (names the ranks that did not arrive); Gloo is the one
    library that has it, so it runs on the group's Gloo group."""
    g = group_of(group, "monitored_barrier")
    from datetime import timedelta
    tdist.monitored_barrier(group=g.handles["gloo"],
                            timeout=timeout or timedelta(seconds=runtime.get().cfg.timeout_s),
                            wait_all_ranks=wait_all_ranks)


# -- point to point ---------------------------------------------------------------------------

def _p2p(what: str, tensor: torch.Tensor, peer: int | None, group: Any, tag: int,
         backend: str | None) -> tuple[Backend, Group, int | None, torch.Tensor]:
    t = checks.tensor(tensor, what)
    g = group_of(group, what)
    gp = None if peer is None else g.group_rank(peer, f"{what} peer")
    if gp == g.rank:
        raise CallError(f"{what}: rank {g.ranks[g.rank]} cannot {what} to itself")
    checks.tag(what, tag)
    return _route(O.P2P, g, t, _nbytes(t), None, backend), g, gp, t


def isend(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0, prof: bool = False,
          log_name: str = "isend", debug: Any = None, *, backend: str | None = None) -> Work:
    """Non-blocking send of tensor to global rank dst."""
    b, g, gp, t = _p2p("isend", tensor, dst, group, tag, backend)
    return b.send(t.contiguous(), gp, tag, g)


def irecv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0,
          prof: bool = False, log_name: str = "irecv", debug: Any = None, *,
          backend: str | None = None) -> Work:
    """Non-blocking receive into tensor from global rank src (None: any)."""
    b, g, gp, t = _p2p("irecv", tensor, src, group, tag, backend)
    if gp is None and not b.any_source:
        # The sender chose the same library from the same key, so another cannot step in.
        raise CallError(f"irecv: {b.name} cannot receive from any source; pass src, or route "
                        "this size of point-to-point to a library that can (backend=mpi, or "
                        "gloo for CPU tensors, on both sides)")
    c, after = _out(t)
    return _end(b.recv(c, gp, tag, g), after, True, b)


def send(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0, prof: bool = False,
         log_name: str = "send", debug: Any = None, *, backend: str | None = None) -> None:
    """Blocking send of tensor to global rank dst."""
    isend(tensor, dst, group, tag, backend=backend).wait()


def recv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0,
         prof: bool = False, log_name: str = "recv", debug: Any = None, *,
         backend: str | None = None) -> int:
    """Blocking receive into tensor; returns the sender's global rank."""
    w = irecv(tensor, src, group, tag, backend=backend)
    w.wait()
    if src is not None:
        return src
    return group_ranks(group)[w.source_rank()]


class P2POp:
    """One send or receive of a batch_isend_irecv: op is isend or irecv (mcr's, torch's or
    DeepSpeed's), peer a global rank."""

    def __init__(self, op: Any, tensor: torch.Tensor, peer: int, group: Any = None,
                 tag: int = 0) -> None:
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag


def _p2p_kind(op: Any) -> str:
    """'isend' or 'irecv' from the op of any library's P2POp (DeepSpeed stores the name)."""
    name = op if isinstance(op, str) else getattr(op, "__name__", "")
    if name not in ("isend", "irecv"):
        raise CallError(f"batch_isend_irecv: op must be isend or irecv, got {op!r}")
    return name


def batch_isend_irecv(p2p_op_list: list[Any], prof: bool = False,
                      log_name: str = "batch_isend_irecv", debug: Any = None) -> list[Work]:
    """Start every send and receive of the list (P2POp of mcr, torch or DeepSpeed) as one batch,
    in whatever order each library needs to avoid deadlock; return their Works in list order."""
    if not isinstance(p2p_op_list, (list, tuple)) or not p2p_op_list:
        raise CallError("batch_isend_irecv: expects a non-empty list of P2POp")
    by_backend: dict[str, tuple[Backend, list[int], list[tuple]]] = {}
    afters: list[list[Callable[[], None]] | None] = []
    for i, p in enumerate(p2p_op_list):
        kind = _p2p_kind(p.op)
        b, g, gp, t = _p2p(kind, p.tensor, p.peer, p.group, p.tag, None)
        t, after = _out(t) if kind == "irecv" else (t.contiguous(), None)
        afters.append(after)
        entry = by_backend.setdefault(b.name, (b, [], []))
        entry[1].append(i)
        entry[2].append((kind, t, gp, p.tag, g))
    works: list[Any] = [None] * len(p2p_op_list)
    for b, idx, items in by_backend.values():
        for i, w in zip(idx, b.batch_p2p(items)):
            works[i] = _end(w, afters[i], True, b)
    return works


# -- objects ----------------------------------------------------------------------------------

def broadcast_object_list(object_list: list[Any], src: int, group: Any = None,
                          device: Any = None, prof: bool = False,
                          log_name: str = "broadcast_object_list", debug: Any = None, *,
                          backend: str | None = None) -> None:
    """object_list on every rank <- object_list on global rank src (pickled)."""
    g = group_of(group, "broadcast_object_list")
    root = g.group_rank(src, "broadcast_object_list src")
    b = _route(O.OBJECT, g, None, _UNKNOWN, None, backend, root=root)
    b.broadcast_object_list(object_list, root, g)


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None, prof: bool = False,
                      log_name: str = "all_gather_object", debug: Any = None, *,
                      backend: str | None = None) -> None:
    """object_list[i] <- obj of rank i (pickled)."""
    g = group_of(group, "all_gather_object")
    if not isinstance(object_list, list) or len(object_list) != g.size:
        raise CallError(f"all_gather_object: object_list must be a list of {g.size} (group size)")
    b = _route(O.OBJECT, g, None, _UNKNOWN, None, backend)
    b.all_gather_object(object_list, obj, g)
