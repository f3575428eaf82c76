"""mcr as a torch.distributed backend. After `register()`, `init_process_group(backend="mcr")`
(or `new_group(backend="mcr")`) makes process groups whose collectives are mcr.comm's calls, so
code that only knows torch.distributed (DDP, FSDP2, DTensor tensor parallelism and its
functional collectives, DeviceMesh) is served by mcr's tables. `install()` also sends a
script's own `init_process_group()` with torch's default or a standard backend to `mcr`;
`MCR_TORCH=1` does that with no change to the script. mcr itself starts inside that
init_process_group (after register() alone, at the first collective), with Gloo/NCCL groups of
its own beside this one.

On GPUs a stream-ordered library's call returns once enqueued, as torch's does, and an
all-reduce, all-gather or reduce-scatter into one tensor outside graph capture hands back a
Work under way whose wait() is a stream wait and whose future completes on the GPU (DDP's
buckets, as with torch's NCCL group). On host tensors an asynchronous all-reduce that the tables
give to Gloo is left under way on Gloo's threads, its future completed there (DDP's buckets
overlap the backward pass, as on torch's Gloo group); every other host call completes before it
returns (the Work handed back is done, its future set): MPI's blocking form, which the
synchronous call takes, is its fastest. FSDP2 calls mcr's comm objects directly (register()).
Point-to-point calls are under way when they return, so a batch in which every rank sends
first does not wait."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr import runtime
from mcr.imports import after_import
from mcr.launch import mpi_launch, rendezvous_env, state_ranks
from mcr.session import names_mcr
from mcr.streams import capturing
from mcr.work import Work as McrWork

from .torch_works import Done, HostUnderWay, OnStream, Pending

NAME = "mcr"
# Backend strings a script's init_process_group may name that install() sends to mcr: torch's
# default (None) and the standard libraries mcr serves itself.
STANDARD = (None, "gloo", "nccl", "cpu:gloo,cuda:nccl", "cuda:nccl,cpu:gloo")


def register() -> None:
    """Register the `mcr` backend with torch.distributed (once; later calls do nothing), make
    torch's destroy_process_group() of a world on it end mcr's session first, and FSDP2 on its
    groups call mcr directly (mcr.integrations.fsdp.serve_groups)."""
    if NAME.upper() in tdist.Backend._plugins:
        return
    tdist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])
    after_import("torch.distributed.fsdp", _serve_fsdp)
    import torch.distributed.distributed_c10d as c10d
    original = c10d.destroy_process_group

    def destroy_process_group(group: Any = None) -> None:
        # mcr's own groups go while the world they were made from is still there.
        if group is None and dist.is_initialized() and isinstance(tdist.group.WORLD,
                                                                   McrProcessGroup):
            dist.destroy_process_group()
        original(group)
    destroy_process_group.__doc__ = original.__doc__
    c10d.destroy_process_group = tdist.destroy_process_group = destroy_process_group


def _serve_fsdp(_package: Any) -> None:
    from .fsdp import serve_groups
    serve_groups(lambda pg: isinstance(pg, McrProcessGroup))


def install() -> None:
    """register(), and make init_process_group() with torch's default or a standard backend
    (gloo, nccl, both) start the `mcr` backend instead; other backends are left alone. Under
    an MPI launcher, RANK, WORLD_SIZE and LOCAL_RANK are set here where unset."""
    register()
    state_ranks()
    import torch.distributed.distributed_c10d as c10d
    if getattr(tdist.init_process_group, "_mcr", False):
        return
    # torch's own, not MCR_TORCH's stand-in (which calls install() and then this module's)
    original = c10d.__dict__.get("_mcr_original") or c10d.init_process_group
    c10d._mcr_original = original  # type: ignore[attr-defined]

    def init_process_group(backend: str | None = None, *args: Any, **kwargs: Any) -> None:
        if backend in STANDARD:
            backend = NAME
        if names_mcr(backend):
            # torch connects a group bound to a device eagerly through its C++ backend, which
            # a Python group has none of (transformers binds one): the device is set instead.
            device = kwargs.pop("device_id", None)
            if device is not None and torch.cuda.is_available():
                torch.cuda.set_device(device)
            _launcher_env(args, kwargs)
            original(backend, *args, **kwargs)
            # Every rank is here together: mcr starts now, not at a first call that some
            # ranks might make on a sub-group without the others.
            dist.init_distributed(verbose=False)
            return None
        return original(backend, *args, **kwargs)
    init_process_group.__doc__ = original.__doc__
    init_process_group._mcr = True  # type: ignore[attr-defined]
    c10d.init_process_group = tdist.init_process_group = init_process_group


def _launcher_env(args: tuple, kwargs: dict[str, Any]) -> None:
    """Under mpirun/mpiexec, the variables of torch's env:// rendezvous (RANK, WORLD_SIZE,
    MASTER_ADDR, ...) as mcr.comm.init_distributed sets them, where the script names no
    rendezvous of its own: torch's own start stops with "RANK expected, but not set"."""
    env = os.environ
    if args or kwargs.get("init_method") or kwargs.get("store") is not None or \
            ("MASTER_ADDR" in env and "MASTER_PORT" in env):
        return
    launch = mpi_launch()
    if launch is not None:
        rendezvous_env(launch, None)


def _create(opts: Any, backend_options: Any) -> McrProcessGroup:
    # torch passes no ranks for the world's group
    ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    return McrProcessGroup(opts.group_rank, opts.group_size, ranks)


class _NoLibrary:
    """No torch library object stands behind an mcr group (its own methods serve every call):
    it supports none of the library features torch's code asks about (tensor allocation,
    splitting, coalescing, time estimates, ...), so that code takes its general path, and
    torch.distributed.breakpoint() only warns that it cannot lengthen this group's timeout."""

    def name(self) -> str:
        """The backend's name."""
        return NAME

    def supports_tensor_alloc(self, device: Any) -> bool:
        """No: torch.empty serves (FSDP2's allocating all-gather asks)."""
        return False

    def __getattr__(self, attr: str) -> bool:
        if attr.startswith("supports_"):
            return False
        raise AttributeError(f"an mcr process group has no torch library behind it ({attr})")


_NO_LIBRARY = _NoLibrary()


class McrProcessGroup(tdist.ProcessGroup):
    """A torch process group whose collectives are mcr.comm's calls on the same ranks."""

    def __init__(self, rank: int, size: int, ranks: list[int]) -> None:
        super().__init__(rank, size)
        # Listed as a CPU group (`_device_types`), for torch code that asks before it calls:
        # DCP's async_save wants a CPU backend, set_model_state_dict's broadcast from rank 0
        # picks a listed device. Not CUDA: torch code that finds CUDA listed takes the group
        # for NCCL (inductor's cache hits extend every CUDA group's NCCL timeout).
        self._register_backend(torch.device("cpu"), tdist.ProcessGroup.BackendType.CUSTOM, None)
        self._ranks = ranks
        self._mcr_group: Any = None
        self._name = ""
        # (mcr's runtime, {(bytes, dtype, reduce op): whether its library completes a call
        # alone}): see _under_way
        self._alone: tuple[Any, dict[tuple, bool]] = (None, {})

    # torch keeps a group's name on its C++ backends, which a Python group has none of:
    # DeviceMesh and functional collectives find groups by this name.
    def _set_group_name(self, name: str) -> None:
        self._name = name

    @property
    def group_name(self) -> str:
        """The name torch registered this group under."""
        return self._name

    def _get_backend(self, device: Any) -> Any:
        """What torch's Python code gets when it asks for the library behind a listed device:
        none (_NoLibrary), where torch itself would raise."""
        if torch.device(device).type == "cpu":
            return _NO_LIBRARY
        return super()._get_backend(device)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        """The backend's name, as torch asks it."""
        return NAME

    def _g(self) -> Any:
        """mcr's group for these ranks (mcr started first if init_process_group did not:
        register() alone starts it at the first call, which every rank must make)."""
        if not dist.is_initialized():
            dist.init_distributed(verbose=False)
        if self._mcr_group is None:
            world = dist.get_world_size()
            self._mcr_group = None if self._ranks == list(range(world)) else self
        return self._mcr_group

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> tdist.Work:
        """All-reduce each tensor (torch's allreduce)."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        if tensors and tensors[0].is_cuda and not capturing():
            works = [dist.all_reduce(t, op, group=self._g(), async_op=True) for t in tensors]
            w, t = works[0], tensors[0]
            # torch's own Work (only a stream library's, NCCL's, comes back so) on the caller's
            # very tensor, its future already completing on the GPU with that tensor: handed on
            # as it is. OnStream's wrapper and future cost ~17 us of host a DDP bucket on an
            # H100 host.
            if len(works) == 1 and isinstance(w, tdist.Work) and not isinstance(w, McrWork) \
                    and t.is_contiguous() and not t.is_complex():
                return w
            return OnStream(works, tensors)
        if len(tensors) == 1 and tensors[0].is_cpu and getattr(opts, "asyncOp", True):
            w = self._under_way(tensors[0], op)
            if w is not None:
                return w
        for t in tensors:
            dist.all_reduce(t, op, group=self._g())
        return Done(tensors)

    def _under_way(self, t: torch.Tensor, op: Any) -> tdist.Work | None:
        """An asynchronous all-reduce of host tensor t left under way where its library
        finishes it alone (Gloo's threads), as torch's Gloo group leaves it, so that DDP's
        buckets overlap the backward pass; None where the caller must complete it (MPI: its
        blocking form, which the synchronous call takes, is its fastest; left under way on
        mcr's worker thread, DDP under mpirun on 2 cores ran 1.06-1.09x of plain Gloo's
        against 1.09-1.12x synchronous)."""
        g = self._g()
        rt = runtime.get()
        # The library's answer per call shape, kept for the session (DDP repeats its bucket
        # sizes): asking the dispatcher costs more than the rest of the call.
        if self._alone[0] is not rt or len(self._alone[1]) > 4096:
            self._alone = (rt, {})
        key = (t.nbytes, t.dtype, op)   # torch's ReduceOp hashes and compares by its kind
        alone = self._alone[1].get(key)
        if alone is None:
            try:
                name = dist.which_backend("all_reduce", t.nbytes, t.dtype, "cpu", g, op)
            except Exception:  # noqa: BLE001 - the call itself then says what is wrong
                return None
            alone = self._alone[1][key] = rt.backends[name].completes_alone
        if not alone:
            return None
        w = dist.all_reduce(t, op, group=g, async_op=True)
        if w is not None and not (isinstance(w, McrWork) and w.alone()):
            w.wait()       # mcr has work left after the library (an average's division)
            w = None
        return Done([t]) if w is None else HostUnderWay(w, [t])

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> tdist.Work:
        """All-reduce several tensors as one message."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        dist.all_reduce_coalesced(tensors, op, group=self._g())
        return Done(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> tdist.Work:
        """Broadcast from group rank opts.rootRank."""
        g = self._g()
        src = self._ranks[opts.rootRank]
        for t in tensors:
            dist.broadcast(t, src, group=g)
        return Done(tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> tdist.Work:
        """outputs[0][i] <- inputs[0] of group rank i."""
        dist.all_gather(outputs[0], inputs[0], group=self._g())
        return Done(outputs[0])

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                        opts: Any = None) -> tdist.Work:
        """output <- every rank's input, in rank order (all_gather_into_tensor)."""
        if output.is_cuda and not capturing():
            return OnStream([dist.all_gather_into_tensor(output, input, group=self._g(),
                                                          async_op=True)], [output])
        dist.all_gather_into_tensor(output, input, group=self._g())
        return Done([output])

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: Any = None) -> tdist.Work:
        """all_gather_into_tensor of each pair, in order."""
        for o, i in zip(outputs, inputs):
            dist.all_gather_into_tensor(o, i, group=self._g())
        return Done(outputs)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> tdist.Work:
        """all_gather of each input into its list, in order."""
        for o, i in zip(outputs, inputs):
            dist.all_gather(o, i, group=self._g())
        return Done([t for o in outputs for t in o])

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                             opts: Any = None) -> tdist.Work:
        """output <- this rank's block of the reduction (reduce_scatter_tensor)."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        if output.is_cuda and not capturing():
            return OnStream([dist.reduce_scatter_tensor(output, input, op, group=self._g(),
                                                         async_op=True)], [output])
        dist.reduce_scatter_tensor(output, input, op, group=self._g())
        return Done([output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: Any = None) -> tdist.Work:
        """reduce_scatter_tensor of each pair, in order."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        for o, i in zip(outputs, inputs):
            dist.reduce_scatter_tensor(o, i, op, group=self._g())
        return Done(outputs)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> tdist.Work:
        """outputs[0] <- reduction over ranks of inputs[0][this rank]."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        dist.reduce_scatter(outputs[0], inputs[0], op, group=self._g())
        return Done(outputs)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                      output_splits: list[int], input_splits: list[int],
                      opts: Any = None) -> tdist.Work:
        """all_to_all_single, with split sizes where given (empty: equal)."""
        dist.all_to_all_single(output, input, output_splits or None, input_splits or None,
                               group=self._g())
        return Done([output])

    all_to_all_single = alltoall_base

    def barrier(self, opts: Any = None) -> tdist.Work:
        """Every rank of the group arrives."""
        dist.barrier(group=self._g())
        return Done([])

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> tdist.Work:
        """tensors[0] on group rank opts.rootRank <- the reduction over ranks."""
        dist.reduce(tensors[0], self._ranks[opts.rootRank], opts.reduceOp, group=self._g())
        return Done(tensors)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                opts: Any) -> tdist.Work:
        """outputs[0] on rank i <- inputs[0][i] on group rank opts.rootRank."""
        root = opts.rootRank
        dist.scatter(outputs[0], inputs[0] if self.rank() == root else None,
                     self._ranks[root], group=self._g())
        return Done(outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any) -> tdist.Work:
        """outputs[0][i] on group rank opts.rootRank <- inputs[0] of rank i."""
        root = opts.rootRank
        dist.gather(inputs[0], outputs[0] if self.rank() == root else None,
                    self._ranks[root], group=self._g())
        return Done(outputs[0] if outputs else [])

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: Any = None) -> tdist.Work:
        """outputs[i] <- inputs[this rank] of rank i."""
        dist.all_to_all(outputs, inputs, group=self._g())
        return Done(outputs)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> tdist.Work:
        """Send tensors[0] to group rank dst (under way when it returns: a batch of sends and
        receives must not wait for each other)."""
        return Pending(dist.isend(tensors[0], self._ranks[dst], group=self._g(), tag=tag),
                        tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> tdist.Work:
        """Receive tensors[0] from group rank src (under way when it returns)."""
        return Pending(dist.irecv(tensors[0], self._ranks[src], group=self._g(), tag=tag),
                        tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> tdist.Work:
        """Receive tensors[0] from whichever rank sends first; torch asks the Work who."""
        return Pending(dist.irecv(tensors[0], None, group=self._g(), tag=tag), tensors)
