"""FSDP2: comm objects that send FSDP2's all-gathers and reduce-scatters through mcr.

One line after `fully_shard`::

    import mcr.integrations.fsdp; mcr.integrations.fsdp.install(model)

sets them on every FSDPModule of the model (`set_custom_all_gather` /
`set_custom_reduce_scatter`). All-gather outputs come from mcr's symmetric memory where the
group's copy-engine backend can allocate it (GPUs of one node), so a copy-engine all-gather writes
straight into FSDP2's buffer; they run under the `overlap` table profile (FSDP2 overlaps them with
compute). Reduce-scatters take SUM, AVG and PREMUL_SUM (a gradient divide factor). Async results
are torch.distributed.Work objects, which FSDP2 waits on. With HSDP (a 2-D mesh: replicate x
shard), the gradient all-reduce across replicas, which FSDP2 makes through torch.distributed
itself and has no comm-object hook for, goes through mcr too, for the replicate groups of the
models installed.
"""

from __future__ import annotations

import functools
import types
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as tdist
from torch.distributed.fsdp._fully_shard import _fsdp_collectives
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGatherApi
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatterApi

from .. import bypass, runtime
from .. import comm as mcr
from ..errors import CallError
from ..route import AUTO
from ..route import PROFILE as _PROFILE_STACK
from ..streams import StreamId, follow_stream
from ..tables import PROFILES

PROFILE = "overlap"


class _Slot:
    """One buffer of a ring, who holds it, and the stream it was last handed out on."""

    def __init__(self, buf: torch.Tensor) -> None:
        self.buf = buf
        self.holder: weakref.ref | None = None
        self.sid: StreamId | None = None


class BufferRing:
    """Buffers for one group's all-gather outputs, reused in FSDP2's order.

    With symmetric memory, peers write into these buffers, so every rank must hand out the same
    buffer for the same call. FSDP2 asks for all-gather outputs in the same order on every rank:
    each size gets `slots` buffers, allocated together by `alloc` (collectively, for symmetric
    memory) the first time it is asked for, then handed out round-robin. A buffer goes out
    again only after the tensor handed out before was dropped. Reuse is ordered as torch's
    caching allocator orders a freed block: nothing on the stream the buffer was handed out on
    (the holder's uses on other streams were ordered into that one before it was dropped, the
    allocator's contract, which FSDP2 keeps for its own buffers by waiting on its copy-out
    event), a wait for that stream where the stream changed.
    """

    def __init__(self, alloc: Callable[[int, torch.dtype], torch.Tensor], slots: int) -> None:
        self.alloc = alloc
        self.slots = slots
        self._rings: dict[tuple[int, torch.dtype], list[_Slot]] = {}
        self._next: dict[tuple[int, torch.dtype], int] = {}

    def take(self, size: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of this size and dtype in the ring's next buffer for them."""
        numel = 1
        for s in size:
            numel *= int(s)
        key = (numel, dtype)
        ring = self._rings.get(key)
        if ring is None:
            ring = self._rings[key] = [_Slot(self.alloc(numel, dtype))
                                       for _ in range(self.slots)]
            self._next[key] = 0
        i = self._next[key]
        slot = ring[i]
        if slot.holder is not None and slot.holder() is not None:
            raise CallError(f"mcr FSDP2 all-gather: more than {self.slots} outputs of "
                            f"{numel} x {dtype} are alive at once; raise MCR_FSDP_BUFFERS")
        self._next[key] = (i + 1) % self.slots
        if slot.buf.is_cuda:
            slot.sid = follow_stream(slot.sid, slot.buf.get_device())
        # The very tensor FSDP2 gets, a new view each time, is tracked: it dies when FSDP2 drops
        # the all-gather result (torch keeps a tensor's Python object while its TensorImpl
        # lives).
        t = slot.buf.view(size)
        slot.holder = weakref.ref(t)
        return t


class AllGather(_AllGatherApi):
    """FSDP2 all-gather through mcr (zero-copy into symmetric memory where possible).

    buffers: "auto" (a ring of symmetric buffers where the group's copy-engine backend can
    allocate them, else plain torch.empty), "plain", or "ring" (a ring of plain buffers: FSDP2's
    buffer lifetimes exercised on CPU, for tests).
    """

    def __init__(self, group: Any = None, profile: str = PROFILE, buffers: str = "auto") -> None:
        if buffers not in ("auto", "plain", "ring"):
            raise ValueError(f"AllGather: buffers={buffers!r} is not auto, plain or ring")
        if profile not in (*PROFILES, AUTO):
            raise ValueError(f"AllGather: profile={profile!r} is not one of "
                             f"{[*PROFILES, AUTO]}")
        self.group = group
        self.profile = profile
        self.buffers = buffers
        self._ring: BufferRing | None = None

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        """The all-gather output: from the ring where there is one, else torch.empty."""
        if self._ring is None and self.buffers != "plain":
            slots = runtime.get().cfg.fsdp_buffers
            if self.buffers == "ring":
                self._ring = BufferRing(
                    lambda n, dt: torch.empty(n, dtype=dt, device=device), slots)
            elif device.type == "cuda" and mcr.can_allocate_symmetric(self.group):
                self._ring = BufferRing(
                    lambda n, dt: mcr.symmetric_empty(n, dtype=dt, group=self.group), slots)
            else:
                self.buffers = "plain"
        if self._ring is None:
            return torch.empty(*size, dtype=dtype, device=device)
        return self._ring.take([int(s) for s in size], dtype)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: tdist.ProcessGroup, async_op: bool = False) -> Any:
        """mcr.comm.all_gather_into_tensor under this object's table profile."""
        # mcr.comm.profile's stack without its context manager, which costs ~2-3 us a call.
        _PROFILE_STACK.append(self.profile)
        try:
            return mcr.all_gather_into_tensor(output_tensor, input_tensor, group, async_op)
        finally:
            _PROFILE_STACK.pop()


class ReduceScatter(_ReduceScatterApi):
    """FSDP2 reduce-scatter through mcr (SUM, AVG, PREMUL_SUM)."""

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        """Plain memory: reduce-scatter inputs are read, not written, by peers."""
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: tdist.ProcessGroup, op: Any, async_op: bool = False) -> Any:
        """mcr.comm.reduce_scatter_tensor."""
        return mcr.reduce_scatter_tensor(output_tensor, input_tensor, op, group, async_op)


class _ReplicaDist(types.ModuleType):
    """torch.distributed as FSDP2's collectives module sees it once mcr is installed: all_reduce
    on the replicate group of an installed model (HSDP's gradient all-reduce) goes through
    mcr; every other name and group is torch.distributed's own."""

    def __init__(self, real: types.ModuleType) -> None:
        super().__init__(real.__name__)
        self._real = real
        self._groups: dict[int, Any] = {}   # id -> group (held: ids of dead objects are reused)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def route(self, group: Any) -> None:
        """Send FSDP2's all-reduces on this group through mcr."""
        self._groups[id(group)] = group

    def all_reduce(self, tensor: torch.Tensor, op: Any = tdist.ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> Any:
        """mcr.comm.all_reduce on a routed group, else torch.distributed.all_reduce."""
        if group is not None and id(group) in self._groups:
            return mcr.all_reduce(tensor, op, group, async_op)
        f = self._real.all_reduce
        if hasattr(f, "__mcr_wrapped__"):   # counted here: the counter skips calls from mcr
            bypass.count("torch.distributed", "all_reduce", (tensor,), {})
            f = f.__mcr_wrapped__
        return f(tensor, op=op, group=group, async_op=async_op)


def _route_replicas(group: Any) -> None:
    """Route HSDP's all-reduce on `group` through mcr, where this torch's FSDP2 makes it through
    its collectives module's `dist` (elsewhere it stays torch's, counted as bypassing mcr)."""
    d = getattr(_fsdp_collectives, "dist", None)
    if d is tdist:
        d = _fsdp_collectives.dist = _ReplicaDist(tdist)
    if isinstance(d, _ReplicaDist):
        d.route(group)


def _param_groups(module: Any) -> list[Any]:
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)     # torch >= 2.12
    if groups is None:
        groups = [state._fsdp_param_group]
    return [g for g in groups if g is not None]


def _install_one(m: Any, all_gather: bool, reduce_scatter: bool, buffers: str) -> bool:
    """Set mcr's comm objects on one FSDPModule; False if it holds no parameters."""
    groups = _param_groups(m)
    if not groups:
        return False
    if all_gather:
        m.set_custom_all_gather(AllGather(groups[0].mesh_info.shard_process_group,
                                          buffers=buffers))
    if reduce_scatter:
        m.set_custom_reduce_scatter(ReduceScatter())
        replicas = getattr(groups[0].mesh_info, "replicate_process_group", None)
        if replicas is not None:
            _route_replicas(replicas)
    return True


def install(model: torch.nn.Module, all_gather: bool = True, reduce_scatter: bool = True,
            buffers: str = "auto") -> int:
    """Set mcr's comm objects on every FSDPModule of model that holds parameters; returns how
    many modules got them. Call after fully_shard, before the first forward. `buffers`: see
    AllGather."""
    from torch.distributed.fsdp import FSDPModule
    if not runtime._RT:
        mcr.init_distributed()
    n = sum(_install_one(m, all_gather, reduce_scatter, buffers) for m in model.modules()
            if isinstance(m, FSDPModule))
    if n == 0:
        raise CallError("mcr.integrations.fsdp.install: the model has no FSDPModule with "
                        "parameters; call it after fully_shard(...)")
    bypass.install()
    return n


def sharding_through_mcr(fully_shard: Callable[..., Any]) -> Callable[..., Any]:
    """fully_shard that also sets mcr's comm objects on the module it shards (MCR_FSDP=1)."""
    @functools.wraps(fully_shard)
    def wrapped(module: Any, *args: Any, **kwargs: Any) -> Any:
        out = fully_shard(module, *args, **kwargs)
        if not runtime._RT:
            mcr.init_distributed()
        # A list of modules shares one FSDP state: one install serves them all.
        first = out[0] if isinstance(out, (list, tuple)) else out
        if len(_param_groups(first)) > 1:
            # FSDP2 takes no custom comm with per-parameter meshes: its own collectives stay.
            warnings.warn(f"MCR_FSDP=1: {type(first).__name__} has parameters on several "
                          "meshes (shard_placement_fn); FSDP2's own collectives serve it",
                          stacklevel=2)
        else:
            _install_one(first, True, True, "auto")
        bypass.install()
        return out
    wrapped.__mcr_wrapped__ = fully_shard   # type: ignore[attr-defined]
    return wrapped


def serve_groups(is_mcr: Callable[[Any], bool]) -> None:
    """FSDP2 parameter groups sharded over a process group for which is_mcr(group) holds (the
    `mcr` torch backend's) get mcr's comm objects as FSDP2 makes them, whenever the script
    imported fully_shard (idempotent). FSDP2 then calls mcr directly, as after install(); through
    torch's process-group path FSDP2 steps measured 0.93-0.96x of NCCL's on 2-4 H200s, even
    with a Python group that only handed each call to NCCL. Comm objects a script sets itself
    replace these."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group
    cls = _fsdp_param_group.FSDPParamGroup
    defaults = tuple(getattr(_fsdp_collectives, n, None) for n in ("DefaultAllGather",
                                                                   "DefaultReduceScatter"))
    if hasattr(cls.__init__, "__mcr_wrapped__") or None in defaults:
        return    # done already, or a torch without FSDP2's comm objects: its own path serves
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - the class's
        original(self, *args, **kwargs)
        pg = getattr(self.mesh_info, "shard_process_group", None)
        if pg is None or not is_mcr(pg):
            return
        if not runtime._RT:
            # After the backend's register() alone mcr starts at its first call, and FSDP2's
            # first (an all-gather output's allocation) needs it; fully_shard runs on every
            # rank alike, so mcr starts here, quietly, as the backend's own first call starts it.
            mcr.init_distributed(verbose=False)
        if type(self._all_gather_comm) is defaults[0]:
            self._all_gather_comm = AllGather(pg)
        if type(self._reduce_scatter_comm) is defaults[1]:
            self._reduce_scatter_comm = ReduceScatter()
            replicas = getattr(self.mesh_info, "replicate_process_group", None)
            if replicas is not None and is_mcr(replicas):
                _route_replicas(replicas)
    __init__.__mcr_wrapped__ = original   # type: ignore[attr-defined]
    cls.__init__ = __init__


def auto(fsdp_package: types.ModuleType) -> None:
    """MCR_FSDP=1: torch.distributed.fsdp.fully_shard installs mcr on each module it shards
    (idempotent); scripts and libraries that import fully_shard from there afterwards get it."""
    if not hasattr(fsdp_package.fully_shard, "__mcr_wrapped__"):
        fsdp_package.fully_shard = sharding_through_mcr(fsdp_package.fully_shard)
