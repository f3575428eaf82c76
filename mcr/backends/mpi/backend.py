"""MPI through mpi4py: CPU buffers directly; GPU tensors CUDA-aware or through pinned staging.

Available only when the job was started by an MPI launcher (mpirun/mpiexec), so that importing
mpi4py never turns a torchrun job into MPI singletons. Which form of MPI's collective a call
takes (blocking here, blocking on a worker, non-blocking and polled) is mcr.backends.mpi.issue's
part; it depends only on values every rank shares or has seen every rank share: MPI does not
match a blocking collective with a non-blocking one.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist

from ...config import Config
from ...errors import MismatchError
from ...groups import Group, Spec
from ...ops import ALL_REDUCE, REDUCTIONS, CallKey
from ...threads import Worker
from ...waits import PROGRESS_HOOKS
from ...work import Work
from ..base import HOST, Backend
from .departures import Departures
from .issue import Issuing
from .library import abort_job_on_uncaught_exception, cuda_aware_mpi, overflowing_reductions
from .staging import PinnedPool, host_visible

_INT_MAX = 2**31 - 1


class MpiBackend(Issuing, Backend):
    """mpi4py over the communicator of each mcr group."""

    name = "mpi"
    domain = HOST

    def __init__(self, cfg: Config) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        abort_job_on_uncaught_exception(MPI)
        self.departures = Departures(MPI)
        self.cuda_aware = cuda_aware_mpi(cfg.mpi_cuda_aware)
        self.pool = PinnedPool(cfg.mpi_pinned_max_bytes)
        self._types = {
            torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE, torch.int8: MPI.INT8_T,
            torch.uint8: MPI.UINT8_T, torch.int16: MPI.INT16_T, torch.int32: MPI.INT32_T,
            torch.int64: MPI.INT64_T, torch.complex64: MPI.C_FLOAT_COMPLEX,
            torch.complex128: MPI.C_DOUBLE_COMPLEX,
        }
        R = tdist.ReduceOp
        self._ops = {R.SUM: MPI.SUM, R.AVG: MPI.SUM, R.PRODUCT: MPI.PROD, R.MIN: MPI.MIN,
                     R.MAX: MPI.MAX, R.BAND: MPI.BAND, R.BOR: MPI.BOR, R.BXOR: MPI.BXOR}
        # Looked up by identity on the hot path: hashing or comparing torch's ReduceOp costs
        # 0.5-1 us a time (mcr.comm hands backends torch's own enum values).
        self._by_id = {id(k): (v, k == R.AVG) for k, v in self._ops.items()}
        # A raw view of a tensor's memory: 1.5 us cheaper a buffer than t.numpy() (mpi4py 4
        # calls it MPI.buffer, 3 MPI.memory). The caller holds the tensor until MPI is done.
        self._at = (getattr(MPI, "buffer", None) or MPI.memory).fromaddress
        self._bitwise = {R.BAND, R.BOR, R.BXOR}
        self._ordered = {R.MIN, R.MAX}
        self._wrong_on_overflow = overflowing_reductions(MPI, self._types, self._ops)
        self._multiple = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        # Blocking collectives from this size run on a worker thread: Open MPI's non-blocking
        # ones (libnbc) were 1.4-1.6x slower from 1 MiB, but the hand-off to the worker cost
        # more than that gained below 16 MiB on the H200 host.
        self.blocking_bytes = cfg.mpi_blocking_bytes   # inf: never
        # ... and a blocking all-reduce goes in chunks: Open MPI's 64 MiB all-reduce took 12x
        # its 16 MiB one on the H200 host.
        self.chunk_bytes = cfg.mpi_chunk_bytes         # inf: one piece
        self._worker: Worker | None = None
        PROGRESS_HOOKS.append(self._progress)

    def bind(self, spec: Spec) -> Any:
        """COMM_WORLD for the world in rank order, else a communicator made by the members
        alone (MPI_Comm_create_group)."""
        if not spec.member:
            return None
        self.drain()
        world = self.MPI.COMM_WORLD
        if spec.ranks == list(range(world.size)):
            self.departures.start(world)
            return world
        comm = world.Create_group(world.group.Incl(spec.ranks))
        self.departures.name(comm, spec.name)
        return comm

    def release(self, handle: Any, world: bool) -> None:
        """Free a communicator bind() created."""
        if handle is not self.MPI.COMM_WORLD and handle != self.MPI.COMM_NULL:
            self.departures.forget(handle)
            handle.Free()

    def _progress(self) -> None:
        # Any MPI call drives Open MPI's progress engine, which moves our peers' pending messages.
        self.MPI.COMM_WORLD.Iprobe(self.MPI.ANY_SOURCE, self.MPI.ANY_TAG)

    def decline_key(self, key: CallKey) -> str | None:
        """MPI reduces only the types MPI names; counts are C ints."""
        if key.device == "cuda" and not torch.cuda.is_available():
            return "CUDA is not available in this process"
        if key.nbytes > _INT_MAX:
            return f"message of {key.nbytes} bytes exceeds MPI's int count (2 GiB)"
        if key.op in REDUCTIONS and key.redop is not None:
            dt = key.dtype
            if dt not in self._types:
                return f"MPI has no {dt} reduction type"
            if key.redop not in self._ops:
                return f"MPI has no {key.redop} reduction"
            if key.redop in self._bitwise and (dt.is_floating_point or dt.is_complex):
                return "MPI bitwise reductions need integer tensors"
            if (dt, key.redop) in self._wrong_on_overflow:
                return (f"this MPI's {key.redop} of {dt} saturates on overflow instead of "
                        "wrapping as torch does (Open MPI's AVX reductions, open-mpi/ompi#8045); "
                        "OMPI_MCA_op=^avx in the environment before MPI starts turns them off")
            if key.redop in self._ordered and dt.is_complex:
                return "MPI min/max need ordered (non-complex) types"
            if key.redop == tdist.ReduceOp.AVG and not dt.is_floating_point:
                return "avg needs a floating-point tensor"
        return None

    # -- buffers ---------------------------------------------------------------------------

    def _stage(self, tensors: list[tuple[torch.Tensor, bool]]
               ) -> tuple[list[torch.Tensor], list[Callable[[], None]]]:
        """Host-visible stand-ins for (tensor, copy_in) pairs, and their copy-backs."""
        return host_visible(self.pool, self.cuda_aware, tensors)

    def _bytes(self, t: torch.Tensor) -> Any:
        return t.reshape(-1).view(torch.uint8) if t.is_cuda else self._np(t)

    def _np(self, t: torch.Tensor) -> Any:
        # mpi4py reads CUDA memory through __cuda_array_interface__; host memory by address
        # (a contiguous tensor: mcr.comm hands backends no other).
        return t if t.is_cuda else self._at(t.data_ptr(), t.nbytes)

    def _typed(self, t: torch.Tensor) -> list:
        # A contiguous tensor of any shape is one buffer to MPI: no reshape needed.
        return [self._np(t), self._types[t.dtype]]

    def _reduction(self, redop: Any) -> tuple[Any, bool]:
        """(MPI's op, whether to divide after: avg) for a torch ReduceOp."""
        hit = self._by_id.get(id(redop))
        return hit if hit is not None else (self._ops[redop], redop == tdist.ReduceOp.AVG)

    @staticmethod
    def _avg(t: torch.Tensor, avg: bool, n: int) -> list[Callable[[], None]]:
        return [lambda: t.div_(n)] if avg else []

    # -- collectives -----------------------------------------------------------------------

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *,
                   sync: bool = False) -> Work | None:
        """MPI_Allreduce in place, blocking ones in chunks of MCR_MPI_CHUNK_BYTES (avg: sum,
        then divide)."""
        (h,), after = self._stage([(t, True)])
        op, avg = self._reduction(redop)
        return self._coll(ALL_REDUCE, g, "Allreduce", (self.MPI.IN_PLACE, self._typed(h), op),
                          t.nbytes, True, self._avg(h, avg, g.size) + after, (t, h),
                          (lambda comm: self._chunks(comm, h, op))
                          if h.nbytes > self.chunk_bytes else None, sync=sync)

    def _chunks(self, comm: Any, h: torch.Tensor, op: Any) -> None:
        """Blocking all-reduce of h in place, MCR_MPI_CHUNK_BYTES at a time."""
        flat = h.reshape(-1)
        step = max(1, int(self.chunk_bytes // h.element_size()))   # only h above a chunk
        for a in range(0, flat.numel(), step):
            comm.Allreduce(self.MPI.IN_PLACE, self._typed(flat[a:a + step]), op)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work | None:
        """MPI_Allgather of bytes."""
        (hi, ho), after = self._stage([(inp, True), (out, False)])
        return self._coll("all_gather", g, "Allgather",
                          ([self._bytes(hi), self.MPI.BYTE], [self._bytes(ho), self.MPI.BYTE]),
                          out.numel() * out.element_size(), True, after, (hi, ho, inp, out),
                          sync=sync)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work | None:
        """MPI_Reduce_scatter_block (avg: sum, then divide)."""
        (hi, ho), after = self._stage([(inp, True), (out, False)])
        op, avg = self._reduction(redop)
        return self._coll("reduce_scatter", g, "Reduce_scatter_block",
                          (self._typed(hi), self._typed(ho), op), inp.nbytes, True,
                          self._avg(ho, avg, g.size) + after, (hi, ho, inp, out), sync=sync)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_counts: list[int],
                   in_counts: list[int], g: Group, *, sync: bool = False,
                   even: bool = True) -> Work | None:
        """MPI_Alltoallv of bytes (non-blocking form always: counts may differ by rank)."""
        (hi, ho), after = self._stage([(inp, True), (out, False)])
        es = inp.element_size()

        def layout(counts: list[int]) -> tuple[list[int], list[int]]:
            b = [c * es for c in counts]
            return b, [int(x) for x in np.concatenate(([0], np.cumsum(b)[:-1]))]

        return self._coll("all_to_all", g, "Alltoallv",
                          ([self._bytes(hi), layout(in_counts), self.MPI.BYTE],
                           [self._bytes(ho), layout(out_counts), self.MPI.BYTE]),
                          inp.numel() * es, False, after, (hi, ho, inp, out), sync=sync)

    def broadcast(self, t: torch.Tensor, root: int, g: Group, *, sync: bool = False) -> Work | None:
        """MPI_Bcast of bytes."""
        (h,), after = self._stage([(t, g.rank == root)])
        return self._coll("broadcast", g, "Bcast", ([self._bytes(h), self.MPI.BYTE], root),
                          t.numel() * t.element_size(), True, after, (t, h), sync=sync)

    def reduce(self, t: torch.Tensor, redop: Any, root: int, g: Group, *,
               sync: bool = False) -> Work | None:
        """MPI_Reduce in place at the root (avg: sum, then divide at the root)."""
        (h,), after = self._stage([(t, True)])
        op, avg = self._reduction(redop)
        if g.rank == root:
            args: tuple = (self.MPI.IN_PLACE, self._typed(h), op, root)
            after = self._avg(h, avg, g.size) + after
        else:
            args = (self._typed(h), None, op, root)
        return self._coll("reduce", g, "Reduce", args, t.numel() * t.element_size(), True,
                          after, (t, h), sync=sync)

    def gather(self, out: torch.Tensor | None, inp: torch.Tensor, root: int, g: Group, *,
               sync: bool = False) -> Work | None:
        """MPI_Gather of bytes."""
        pairs = [(inp, True)] + ([(out, False)] if out is not None else [])
        views, after = self._stage(pairs)
        recv = [self._bytes(views[1]), self.MPI.BYTE] if out is not None else None
        return self._coll("gather", g, "Gather",
                          ([self._bytes(views[0]), self.MPI.BYTE], recv, root),
                          inp.numel() * inp.element_size() * g.size, True, after,
                          (views, inp, out), sync=sync)

    def scatter(self, out: torch.Tensor, inp: torch.Tensor | None, root: int, g: Group, *,
                sync: bool = False) -> Work | None:
        """MPI_Scatter of bytes."""
        pairs = [(out, False)] + ([(inp, True)] if inp is not None else [])
        views, after = self._stage(pairs)
        send = [self._bytes(views[1]), self.MPI.BYTE] if inp is not None else None
        return self._coll("scatter", g, "Scatter",
                          (send, [self._bytes(views[0]), self.MPI.BYTE], root),
                          out.numel() * out.element_size() * g.size, True, after,
                          (views, inp, out), sync=sync)

    def send(self, t: torch.Tensor, peer: int, tag: int, g: Group) -> Work:
        """MPI_Isend of bytes."""
        (h,), after = self._stage([(t, True)])
        req = g.handles[self.name].Isend([self._bytes(h), self.MPI.BYTE], peer, tag)
        return self._work("send", t.numel() * t.element_size(), g, [req], after, (t, h),
                          peer=peer)

    def recv(self, t: torch.Tensor, peer: int | None, tag: int, g: Group) -> Work:
        """MPI_Irecv of bytes (peer None: any source; the Work reports the sender)."""
        (h,), after = self._stage([(t, False)])
        src = self.MPI.ANY_SOURCE if peer is None else peer
        req = g.handles[self.name].Irecv([self._bytes(h), self.MPI.BYTE], src, tag)
        status = self.MPI.Status()
        nbytes = t.numel() * t.element_size()

        def unlike(got: int | None) -> MismatchError:     # got None: more than nbytes
            sender = g.ranks[peer if peer is not None else status.Get_source()]
            sent = "more" if got is None else f"{got} bytes"
            return MismatchError(
                f"mcr: recv on backend '{self.name}': rank {sender} sent {sent}, this rank's "
                f"tensor ({tuple(t.shape)} {t.dtype}) holds {nbytes} bytes: the sizes of a "
                "send and its recv must match")

        truncated: list[Exception] = []

        def test(reqs: list) -> bool:
            try:
                return reqs[0].Test(status)
            except self.MPI.Exception as e:
                if e.Get_error_class() != self.MPI.ERR_TRUNCATE:
                    raise
                truncated.append(e)    # the receive is over: said by whole(), at completion
                return True

        def whole() -> None:
            if truncated:
                raise unlike(None) from truncated[0]
            # MPI completes a receive of fewer bytes than its buffer holds (torch's Gloo too):
            # the tensor's tail would keep its old values, silently.
            got = status.Get_count(self.MPI.BYTE)
            if got != nbytes:
                raise unlike(got)
        w = self._work("recv", nbytes, g, [req], [whole, *after], (t, h),
                       source=status.Get_source, peer=peer)
        w._mpi_test = test
        return w

    def barrier(self, g: Group, *, sync: bool = False) -> Work | None:
        """MPI_Ibarrier."""
        return self._coll("barrier", g, "Barrier", (), 0, False, [], (), sync=sync)

    # -- objects ---------------------------------------------------------------------------

    def _wait(self, g: Group, name: str, args: tuple, what: str) -> None:
        """Run a collective's non-blocking form to completion (object sizes differ by rank)."""
        reqs, fut, call = self._issue(g, name, args)
        self._work(what, 0, g, reqs, [], args, on_worker=fut, call=call).wait()

    def broadcast_object_list(self, objs: list[Any], root: int, g: Group) -> None:
        """Pickle on the root, broadcast length then bytes, unpickle in place."""
        data = np.frombuffer(pickle.dumps(objs), dtype=np.uint8) if g.rank == root else None
        n = np.array([0 if data is None else data.size], dtype=np.int64)
        self._wait(g, "Bcast", (n, root), "broadcast_object_list")
        buf = data if data is not None else np.empty(int(n[0]), dtype=np.uint8)
        self._wait(g, "Bcast", (buf, root), "broadcast_object_list")
        if g.rank != root:
            got = pickle.loads(buf.tobytes())  # noqa: S301 - peers of one job, as torch does
            if len(got) != len(objs):
                raise ValueError(f"broadcast_object_list: root sent {len(got)} objects, this "
                                 f"rank's list has {len(objs)}")
            objs[:] = got

    def all_gather_object(self, out: list[Any], obj: Any, g: Group) -> None:
        """Pickle, all-gather lengths then bytes (Iallgatherv), unpickle."""
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        sizes = np.empty(g.size, dtype=np.int64)
        mine = np.array([data.size], dtype=np.int64)
        self._wait(g, "Allgather", (mine, sizes), "all_gather_object")
        displs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._wait(g, "Allgatherv", (data, [buf, (sizes.tolist(), displs.tolist()),
                                            self.MPI.BYTE]), "all_gather_object")
        for i in range(g.size):
            out[i] = pickle.loads(buf[displs[i]:displs[i] + sizes[i]].tobytes())  # noqa: S301
