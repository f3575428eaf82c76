"""Every collective through torch.distributed and through mcr.comm on the same inputs: shapes
(0-d, empty, 1- to 3-D), ten dtypes (bool to complex), collectives of both forms, object
collectives and point-to-point. Each case must give the same bits both ways, or fail both ways
(the first case that does not ends the run); mcr may be more lenient than torch, never less,
except where a forced library other than torch's own declines with BackendUnavailable (MPI has
no half-precision or bool reductions). torch's side runs on the world group torch.distributed
was started with (Gloo; with --device cuda, NCCL for GPU tensors). --api deepspeed compares
DeepSpeed's own deepspeed.comm functions with the ones mcr's install() puts there, adding
DeepSpeed's own names (allgather_fn, reduce_scatter_fn, all_reduce_coalesced). Prints
`rank R: DIFF OK <n>`.
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Callable
from types import SimpleNamespace

import torch
import torch.distributed as tdist
from common import same

import mcr.comm as dist
from mcr.errors import BackendUnavailable

ap = argparse.ArgumentParser()
ap.add_argument("--backends", default="gloo,auto", help="mcr's side: forced libraries or auto")
ap.add_argument("--device", default="cpu", help="cuda: GPU tensors, torch's side on NCCL")
ap.add_argument("--async", dest="async_op", action="store_true",
                help="collectives with async_op=True, waited on before their results are read")
ap.add_argument("--api", default="torch", choices=("torch", "deepspeed"),
                help="deepspeed: DeepSpeed's own deepspeed.comm functions against the same "
                     "names once mcr.integrations.deepspeed.install() replaced them (MCR_BACKEND "
                     "picks mcr's library; --backends must be auto)")
args = ap.parse_args()
dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
if args.device == "cuda":
    torch.cuda.set_device(dist.get_local_rank())
REF = "nccl" if args.device == "cuda" else "gloo"   # torch's library: mcr's must serve alike


def sides() -> tuple[object, object]:
    """(the reference API, mcr's): torch.distributed and mcr.comm, or DeepSpeed's
    deepspeed.comm functions before and after install()."""
    if args.api == "torch":
        return tdist, dist
    os.environ.setdefault("DS_ACCELERATOR", args.device)
    import deepspeed.comm as ds

    import mcr.integrations.deepspeed as mcr_ds
    ds.init_distributed(REF)     # on the torch.distributed that mcr started
    names = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce",
             "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all",
             "gather", "scatter", "send", "recv", "isend", "irecv", "batch_isend_irecv",
             "allgather_fn", "reduce_scatter_fn", "all_reduce_coalesced", "all_gather_object",
             "broadcast_object_list")
    plain = SimpleNamespace(ReduceOp=ds.ReduceOp, P2POp=ds.P2POp,
                            **{k: getattr(ds, k) for k in names})
    mcr_ds.install()
    return plain, ds


REFERENCE, OURS = sides()
SHAPES = [(), (0,), (1,), (4,), (2, 3), (2, 0, 3), (3, 1, 2)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool, torch.complex64]
Case = Callable[[object, str | None], list[torch.Tensor]]


def data(shape: tuple[int, ...], dtype: torch.dtype, rank: int, salt: int) -> torch.Tensor:
    """Small integers (exact sums in every dtype and order) shaped and typed as asked."""
    g = torch.Generator().manual_seed(rank * 1000 + salt)
    t = torch.randint(-3, 4, shape, generator=g)
    if dtype == torch.bool:
        return (t > 0).to(args.device)
    if dtype == torch.uint8:
        return t.abs().to(dtype).to(args.device)
    if dtype.is_complex:
        return torch.complex(t.float(), 2 * t.float()).to(dtype).to(args.device)
    return t.to(dtype).to(args.device)


def cases(x: torch.Tensor, per_rank: list[torch.Tensor]) -> dict[str, Case]:
    """op name -> call(lib, backend) returning what this rank ends up holding. lib is one of
    sides(); the backend keyword goes to mcr.comm only."""
    def kw(lib: object, be: str | None) -> dict[str, object]:
        return {"backend": be} if lib is dist else {}

    def coll(lib: object, be: str | None) -> dict[str, object]:
        """A collective's keywords: with --async, async_op and a wait on what it returns."""
        return dict(kw(lib, be), async_op=True) if args.async_op else kw(lib, be)
    stacked = torch.cat([x] * n) if x.dim() else None    # n copies along dim 0
    root = n - 1

    def all_reduce(lib, be, op="SUM"):  # noqa: ANN001, ANN202
        t = x.clone()
        done(lib.all_reduce(t, op=getattr(lib.ReduceOp, op), **coll(lib, be)))
        return [t]

    def all_reduce_coalesced(lib, be):  # noqa: ANN001, ANN202
        ts = [x.clone(), x.clone() * 2]
        done(lib.all_reduce_coalesced(ts, op=lib.ReduceOp.SUM, **coll(lib, be)))
        return ts

    def all_gather(lib, be):  # noqa: ANN001, ANN202
        lst = [torch.zeros_like(x) for _ in range(n)]
        done(lib.all_gather(lst, x, **coll(lib, be)))
        return lst

    def all_gather_into_tensor(lib, be, fn="all_gather_into_tensor"):  # noqa: ANN001, ANN202
        out = torch.zeros((n * x.numel(),), dtype=x.dtype, device=x.device)
        done(getattr(lib, fn)(out, x, **coll(lib, be)))
        return [out]

    def broadcast(lib, be):  # noqa: ANN001, ANN202
        t = x.clone()
        done(lib.broadcast(t, root, **coll(lib, be)))
        return [t]

    def reduce(lib, be):  # noqa: ANN001, ANN202
        t = x.clone()
        done(lib.reduce(t, 0, **coll(lib, be)))
        return [t] if r == 0 else []

    def reduce_scatter_tensor(lib, be, fn="reduce_scatter_tensor"):  # noqa: ANN001, ANN202
        out = torch.zeros_like(x)
        done(getattr(lib, fn)(out, stacked, **coll(lib, be)))
        return [out]

    def reduce_scatter(lib, be):  # noqa: ANN001, ANN202
        out = torch.zeros_like(x)
        done(lib.reduce_scatter(out, [p.clone() for p in per_rank], **coll(lib, be)))
        return [out]

    def all_to_all_single(lib, be):  # noqa: ANN001, ANN202
        out = torch.zeros_like(stacked)
        done(lib.all_to_all_single(out, stacked, **coll(lib, be)))
        return [out]

    def all_to_all(lib, be):  # noqa: ANN001, ANN202
        outs = [torch.zeros_like(x) for _ in range(n)]
        done(lib.all_to_all(outs, [p.clone() for p in per_rank], **coll(lib, be)))
        return outs

    def gather(lib, be):  # noqa: ANN001, ANN202
        got = [torch.zeros_like(x) for _ in range(n)] if r == root else None
        done(lib.gather(x, got, root, **coll(lib, be)))
        return got or []

    def scatter(lib, be):  # noqa: ANN001, ANN202
        t = torch.zeros_like(x)
        done(lib.scatter(t, [p.clone() for p in per_rank] if r == root else None, root,
                         **coll(lib, be)))
        return [t]

    def ring(lib, be):  # noqa: ANN001, ANN202
        """Each rank sends x to the next and receives the previous one's, in one batch."""
        got = torch.zeros_like(x)
        ops = [lib.P2POp(lib.isend, x, (r + 1) % n), lib.P2POp(lib.irecv, got, (r - 1) % n)]
        for w in lib.batch_isend_irecv(ops):
            w.wait()
        return [got]

    def all_gather_object(lib, be):  # noqa: ANN001, ANN202
        """The tensor as a Python object, pickled and gathered."""
        got = [None] * n
        lib.all_gather_object(got, {"rank": r, "t": x}, **kw(lib, be))
        assert [o["rank"] for o in got] == list(range(n)), got
        return [o["t"] for o in got]

    def broadcast_object_list(lib, be):  # noqa: ANN001, ANN202
        objs = [x, "from root"] if r == root else [None, None]
        lib.broadcast_object_list(objs, root, **kw(lib, be))
        assert objs[1] == "from root", objs
        return [objs[0]]

    def send_recv(lib, be):  # noqa: ANN001, ANN202
        """Rank 0 sends to rank 1, blocking."""
        got = torch.zeros_like(x)
        if r == 0:
            lib.send(x, 1, **kw(lib, be))
        elif r == 1:
            lib.recv(got, 0, **kw(lib, be))
        return [got]

    out: dict[str, Case] = {
        "all_reduce": all_reduce,
        "all_reduce max": lambda lib, be: all_reduce(lib, be, "MAX"),
        "all_reduce min": lambda lib, be: all_reduce(lib, be, "MIN"),
        "all_reduce product": lambda lib, be: all_reduce(lib, be, "PRODUCT"),
        "all_reduce avg": lambda lib, be: all_reduce(lib, be, "AVG"),
        "all_gather": all_gather, "all_gather_into_tensor": all_gather_into_tensor,
        "broadcast": broadcast, "reduce": reduce, "reduce_scatter": reduce_scatter,
        "all_to_all": all_to_all, "gather": gather, "scatter": scatter,
        "all_gather_object": all_gather_object, "broadcast_object_list": broadcast_object_list}
    if n > 1:   # a rank's send to itself is no case to compare
        out.update({"send/recv": send_recv, "batch_isend_irecv ring": ring})
    if stacked is not None:
        out.update(reduce_scatter_tensor=reduce_scatter_tensor,
                   all_to_all_single=all_to_all_single)
    if args.api == "deepspeed":   # DeepSpeed's own names and helpers
        out.update({
            "allgather_fn": lambda lib, be: all_gather_into_tensor(lib, be, "allgather_fn"),
            "all_reduce_coalesced": all_reduce_coalesced})
        if stacked is not None:
            out["reduce_scatter_fn"] = lambda lib, be: reduce_scatter_tensor(
                lib, be, "reduce_scatter_fn")
    return out


def done(work: object) -> None:
    """Wait on an async call's Work (a sync call returns None)."""
    if work is not None:
        work.wait()
        if args.device == "cuda":   # a stream-ordered wait orders only the caller's stream
            torch.cuda.synchronize()


def outcome(call: Callable[[], list[torch.Tensor]]) -> tuple[str, object]:
    try:
        return "ok", call()
    except Exception as e:  # noqa: BLE001 - any failure is an outcome to compare
        return "error", e


def fail(msg: str) -> None:
    """At the first difference: a case that failed on one rank only leaves its peers in the
    call, so going on could hang; raising ends the job (mcr's abort hook, or a closed peer)."""
    raise AssertionError(f"rank {r}: {msg}")


count = 0
for salt, (shape, dtype) in enumerate(itertools.product(SHAPES, DTYPES)):
    x = data(shape, dtype, r, salt)
    per_rank = [data(shape, dtype, r * n + q, salt) for q in range(n)]
    for name, case in cases(x, per_rank).items():
        want = outcome(lambda: case(REFERENCE, None))
        for be in args.backends.split(","):
            count += 1
            got = outcome(lambda: case(OURS, None if be == "auto" else be))
            what = f"{name} {dtype} {shape} backend {be}"
            if got[0] == "error":
                declined = be not in (REF, "auto") and isinstance(got[1], BackendUnavailable)
                if want[0] == "ok" and not declined:
                    fail(f"{what}: torch served it, mcr raised {got[1]!r}")
            elif want[0] == "ok":
                if len(got[1]) != len(want[1]):
                    fail(f"{what}: {len(got[1])} results, torch {len(want[1])}")
                for i, (a, b) in enumerate(zip(got[1], want[1])):
                    same(f"rank {r}: {what} [{i}] against torch", a, b)
print(f"rank {r}: DIFF OK {count}", flush=True)
dist.destroy_process_group()
