"""mcr as a torch.distributed backend. After `register()`, `init_process_group(backend="mcr")`
(or `new_group(backend="mcr")`) makes process groups whose collectives are mcr.comm's calls, so
code that only knows torch.distributed (DDP, FSDP2, DTensor tensor parallelism and its
functional collectives, DeviceMesh) is served by mcr's tables. `install()` also sends a
script's own `init_process_group()` with torch's default or a standard backend to `mcr`;
`MCR_TORCH=1` does that with no change to the script. mcr itself starts inside that
init_process_group (after register() alone, at the first collective), with Gloo/NCCL groups of
its own beside this one.

Every collective completes before it returns (the Work handed back is done, its future set):
DDP's overlap of gradient all-reduces with the backward pass is lost on host libraries. On
GPUs a stream-ordered library's call returns once enqueued, as torch's does, and an all-reduce,
all-gather or reduce-scatter into one tensor outside graph capture hands back a Work under way
whose wait() is a stream wait and whose future completes on the GPU (DDP's buckets, FSDP2's
all-gathers and reduce-scatters, as with torch's NCCL group).
Point-to-point calls are under way when they return, so a batch in which every rank sends
first does not wait."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr.launch import mpi_launch, rendezvous_env, state_ranks
from mcr.streams import capturing
from mcr.work import Work as McrWork

from .imports import after_import

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
        if backend in STANDARD or backend == NAME:
            backend = NAME
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


class _Done(tdist.Work):
    """A finished call's Work: wait() returns at once; its future holds the tensors."""

    def __init__(self, result: list[torch.Tensor], source: int = -1) -> None:
        super().__init__()
        self._result, self._source = result, source

    def wait(self, timeout: Any = None) -> bool:
        """Done already."""
        return True

    def is_completed(self) -> bool:
        """Done already."""
        return True

    def _source_rank(self) -> int:
        """Group rank that sent a receive from any source (torch's recv asks)."""
        if self._source < 0:
            raise RuntimeError("source rank: this Work is not a receive from any source")
        return self._source

    def get_future(self) -> torch.futures.Future:
        """A completed future of the call's output tensors."""
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._result)
        return fut


class _Pending(_Done):
    """A point-to-point call under way: mcr's Work, waited when torch waits."""

    def __init__(self, work: Any, result: list[torch.Tensor]) -> None:
        super().__init__(result)
        self._work = work

    def wait(self, timeout: Any = None) -> bool:
        """Wait for mcr's Work."""
        return self._work.wait()

    def is_completed(self) -> bool:
        """Whether mcr's Work is done."""
        return self._work.is_completed()

    def _source_rank(self) -> int:
        self._work.wait()
        return self._work.source_rank()

    def get_future(self) -> torch.futures.Future:
        """A future of the output tensors, completed once the call is (waited here)."""
        self._work.wait()
        return super().get_future()


class _OnStream(_Done):
    """GPU collectives under way on their library's stream, as torch's NCCL work is: wait()
    makes the caller's current stream wait for them; the future (made when asked: each CUDA
    call costs microseconds) completes on the GPU when they do, a CUDA future whose events
    are recorded on a stream that waits for them, so DDP's bucket hooks run behind the
    all-reduce without holding back the backward pass."""

    def __init__(self, works: list[Any], result: list[torch.Tensor]) -> None:
        super().__init__(result)
        self._works = [w for w in works if w is not None]
        self._fut: torch.futures.Future | None = None

    def wait(self, timeout: Any = None) -> bool:
        """The caller's current stream waits for the collectives."""
        for w in self._works:
            w.wait()
        return True

    def is_completed(self) -> bool:
        """Whether the library has finished on the GPU."""
        return all(w.is_completed() for w in self._works)

    def get_future(self) -> torch.futures.Future:
        """A CUDA future of the tensors, completed when the collectives are."""
        w0 = self._works[0] if len(self._works) == 1 else None
        if self._fut is None and isinstance(w0, tdist.Work) and not isinstance(w0, McrWork):
            # torch's own work (NCCL's): its future already completes on the GPU; chained so
            # that its value is the caller's tensors (the library may have had a view).
            result = self._result
            self._fut = w0.get_future().then(lambda _: result)
        if self._fut is None:
            dev = self._result[0].device
            side = _WAITERS.get(dev)
            if side is None:
                side = _WAITERS[dev] = torch.cuda.Stream(dev)
            with torch.cuda.stream(side):
                for w in self._works:
                    w.wait()
                self._fut = torch.futures.Future(devices=[dev])
                self._fut.set_result(self._result)
        return self._fut


_WAITERS: dict[torch.device, Any] = {}   # device -> the stream futures are completed on


class McrProcessGroup(tdist.ProcessGroup):
    """A torch process group whose collectives are mcr.comm's calls on the same ranks."""

    def __init__(self, rank: int, size: int, ranks: list[int]) -> None:
        super().__init__(rank, size)
        self._ranks = ranks
        self._mcr_group: Any = None
        self._name = ""

    # torch keeps a group's name on its C++ backends, which a Python group has none of:
    # DeviceMesh and functional collectives find groups by this name.
    def _set_group_name(self, name: str) -> None:
        self._name = name

    @property
    def group_name(self) -> str:
        """The name torch registered this group under."""
        return self._name

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
            return _OnStream([dist.all_reduce(t, op, group=self._g(), async_op=True)
                              for t in tensors], tensors)
        for t in tensors:
            dist.all_reduce(t, op, group=self._g())
        return _Done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> tdist.Work:
        """All-reduce several tensors as one message."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        dist.all_reduce_coalesced(tensors, op, group=self._g())
        return _Done(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> tdist.Work:
        """Broadcast from group rank opts.rootRank."""
        g = self._g()
        src = self._ranks[opts.rootRank]
        for t in tensors:
            dist.broadcast(t, src, group=g)
        return _Done(tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> tdist.Work:
        """outputs[0][i] <- inputs[0] of group rank i."""
        dist.all_gather(outputs[0], inputs[0], group=self._g())
        return _Done(outputs[0])

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                        opts: Any = None) -> tdist.Work:
        """output <- every rank's input, in rank order (all_gather_into_tensor)."""
        if output.is_cuda and not capturing():
            return _OnStream([dist.all_gather_into_tensor(output, input, group=self._g(),
                                                          async_op=True)], [output])
        dist.all_gather_into_tensor(output, input, group=self._g())
        return _Done([output])

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: Any = None) -> tdist.Work:
        """all_gather_into_tensor of each pair, in order."""
        for o, i in zip(outputs, inputs):
            dist.all_gather_into_tensor(o, i, group=self._g())
        return _Done(outputs)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> tdist.Work:
        """all_gather of each input into its list, in order."""
        for o, i in zip(outputs, inputs):
            dist.all_gather(o, i, group=self._g())
        return _Done([t for o in outputs for t in o])

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                             opts: Any = None) -> tdist.Work:
        """output <- this rank's block of the reduction (reduce_scatter_tensor)."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        if output.is_cuda and not capturing():
            return _OnStream([dist.reduce_scatter_tensor(output, input, op, group=self._g(),
                                                         async_op=True)], [output])
        dist.reduce_scatter_tensor(output, input, op, group=self._g())
        return _Done([output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: Any = None) -> tdist.Work:
        """reduce_scatter_tensor of each pair, in order."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        for o, i in zip(outputs, inputs):
            dist.reduce_scatter_tensor(o, i, op, group=self._g())
        return _Done(outputs)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> tdist.Work:
        """outputs[0] <- reduction over ranks of inputs[0][this rank]."""
        op = opts.reduceOp if opts is not None else tdist.ReduceOp.SUM
        dist.reduce_scatter(outputs[0], inputs[0], op, group=self._g())
        return _Done(outputs)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                      output_splits: list[int], input_splits: list[int],
                      opts: Any = None) -> tdist.Work:
        """all_to_all_single, with split sizes where given (empty: equal)."""
        dist.all_to_all_single(output, input, output_splits or None, input_splits or None,
                               group=self._g())
        return _Done([output])

    all_to_all_single = alltoall_base

    def barrier(self, opts: Any = None) -> tdist.Work:
        """Every rank of the group arrives."""
        dist.barrier(group=self._g())
        return _Done([])

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> tdist.Work:
        """tensors[0] on group rank opts.rootRank <- the reduction over ranks."""
        dist.reduce(tensors[0], self._ranks[opts.rootRank], opts.reduceOp, group=self._g())
        return _Done(tensors)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                opts: Any) -> tdist.Work:
        """outputs[0] on rank i <- inputs[0][i] on group rank opts.rootRank."""
        root = opts.rootRank
        dist.scatter(outputs[0], inputs[0] if self.rank() == root else None,
                     self._ranks[root], group=self._g())
        return _Done(outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any) -> tdist.Work:
        """outputs[0][i] on group rank opts.rootRank <- inputs[0] of rank i."""
        root = opts.rootRank
        dist.gather(inputs[0], outputs[0] if self.rank() == root else None,
                    self._ranks[root], group=self._g())
        return _Done(outputs[0] if outputs else [])

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: Any = None) -> tdist.Work:
        """outputs[i] <- inputs[this rank] of rank i."""
        dist.all_to_all(outputs, inputs, group=self._g())
        return _Done(outputs)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> tdist.Work:
        """Send tensors[0] to group rank dst (under way when it returns: a batch of sends and
        receives must not wait for each other)."""
        return _Pending(dist.isend(tensors[0], self._ranks[dst], group=self._g(), tag=tag),
                        tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> tdist.Work:
        """Receive tensors[0] from group rank src (under way when it returns)."""
        return _Pending(dist.irecv(tensors[0], self._ranks[src], group=self._g(), tag=tag),
                        tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> tdist.Work:
        """Receive tensors[0] from whichever rank sends first; torch asks the Work who."""
        return _Pending(dist.irecv(tensors[0], None, group=self._g(), tag=tag), tensors)
