"""Every mcr.comm call, every dtype, sizes 1 element to 16 MiB, each forced backend and auto.

Run under mpirun/mpiexec (or torchrun): each rank checks its results against numpy references
built from every rank's seeded inputs, and rank 0 prints `API OK <checks>` at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import gen, ref_reduce, same  # noqa: E402

import mcr.comm as dist  # noqa: E402
from mcr import runtime  # noqa: E402
from mcr.errors import BackendUnavailable  # noqa: E402

R = dist.ReduceOp
ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu")
ap.add_argument("--backends", default="gloo,mpi,auto")
ap.add_argument("--dtypes", default="float32,float64,int32,int64,bfloat16")
ap.add_argument("--big", default="16MiB", choices=["1MiB", "16MiB"], help="largest message")
args = ap.parse_args()

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
dev = args.device
DTYPES = [getattr(torch, d) for d in args.dtypes.split(",")]
SIZES = [1, 3, 1001, 65537]
BIG = {"16MiB": 16 << 20, "1MiB": 1 << 20}[args.big]
checks = 0
case_id = 0


def salt() -> int:
    global case_id
    case_id += 1
    return case_id


def inputs(numel: int, dtype: torch.dtype, s: int, exact: bool = False) -> list[torch.Tensor]:
    """Every rank's input for case s (index = rank)."""
    return [gen(q, numel, dtype, s, exact, dev) for q in range(n)]


def run(fn, be, *a, **kw):  # noqa: ANN001, ANN201, ANN002, ANN003
    """Call fn with backend `be` (None: auto) and async/sync alternating; wait."""
    global checks
    checks += 1
    async_op = checks % 2 == 0
    if "async_op" in fn.__code__.co_varnames:
        w = fn(*a, backend=be, async_op=async_op, **kw)
        if async_op:
            assert isinstance(w, torch.distributed.Work), type(w)
            w.wait()
            if dev == "cuda":   # a stream-ordered wait only orders the caller's stream
                torch.cuda.synchronize()
            assert w.is_completed()
    else:
        fn(*a, backend=be, **kw)


def declines(be: str | None, dtype: torch.dtype, redop: object = None) -> bool:
    """Whether the forced backend cannot serve this reduction (checked, not assumed)."""
    if be != "mpi" or redop is None:
        return False
    return dtype in (torch.float16, torch.bfloat16) or (redop == R.AVG and
                                                        not dtype.is_floating_point)


def expect_decline(what: str, fn) -> None:  # noqa: ANN001
    try:
        fn()
    except BackendUnavailable as e:
        assert "cannot serve" in str(e) and "MPI has no" in str(e) or "avg" in str(e), str(e)
        return
    raise AssertionError(f"{what}: forced backend served a call it should decline")


def reductions(dtype: torch.dtype) -> list:
    ops = [R.SUM, R.MAX, R.MIN]
    if dtype.is_floating_point:
        ops.append(R.AVG)
    return ops


def test_all_reduce(be: str | None, dtype: torch.dtype, numel: int) -> None:
    for op in reductions(dtype) + ([R.PRODUCT] if numel < 2000 else []):
        s = salt()
        parts = inputs(numel, dtype, s, exact=True)
        if op == R.PRODUCT:
            parts = [(p.abs() % 2 + 1).to(dtype) if not dtype.is_floating_point else
                     torch.where(p > 0, 2.0, 0.5).to(dtype) for p in parts]
        t = parts[r].clone()
        what = f"all_reduce {op} {be} {dtype} {numel}"
        if declines(be, dtype, op):
            expect_decline(what, lambda: dist.all_reduce(t, op=op, backend=be))
            continue
        run(dist.all_reduce, be, t, op=op)
        same(what, t, ref_reduce(parts, op))
    s = salt()
    parts = inputs(numel, dtype, s, exact=True)
    t = parts[r].clone()
    if not declines(be, dtype, R.SUM):
        dist.inference_all_reduce(t, backend=be)
        same(f"inference_all_reduce {be} {dtype}", t, ref_reduce(parts, R.SUM))
        # coalesced: three tensors of different lengths
        sizes = [numel, 2, 5]
        ps = [inputs(k, dtype, s + 10_000 + i, exact=True) for i, k in enumerate(sizes)]
        ts = [p[r].clone() for p in ps]
        run(dist.all_reduce_coalesced, be, ts)
        for i, (t_, p) in enumerate(zip(ts, ps)):
            same(f"all_reduce_coalesced[{i}] {be} {dtype}", t_, ref_reduce(p, R.SUM))


def test_all_gather(be: str | None, dtype: torch.dtype, numel: int) -> None:
    parts = inputs(numel, dtype, salt())
    want = torch.cat(parts)
    for fn in (dist.all_gather_into_tensor, dist.allgather_fn):
        out = torch.full((n * numel,), 7, dtype=dtype, device=dev)
        run(fn, be, out, parts[r])
        same(f"{fn.__name__} {be} {dtype} {numel}", out, want)
    # in place, as ZeRO-3 does: the input is this rank's slice of the output
    out = torch.full((n * numel,), 7, dtype=dtype, device=dev)
    out[r * numel:(r + 1) * numel] = parts[r]
    run(dist.all_gather_into_tensor, be, out, out.narrow(0, r * numel, numel))
    same(f"in-place all_gather_into_tensor {be} {dtype} {numel}", out, want)
    lst = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(n)]
    run(dist.all_gather, be, lst, parts[r])
    for q in range(n):
        same(f"all_gather[{q}] {be} {dtype} {numel}", lst[q], parts[q])
    # coalesced: two tensors
    p2 = inputs(3, dtype, salt())
    outs = [torch.empty(n * numel, dtype=dtype, device=dev),
            torch.empty(n * 3, dtype=dtype, device=dev)]
    run(dist.all_gather_coalesced, be, outs, [parts[r], p2[r]])
    same(f"all_gather_coalesced[0] {be} {dtype}", outs[0], want)
    same(f"all_gather_coalesced[1] {be} {dtype}", outs[1], torch.cat(p2))


def test_reduce_scatter(be: str | None, dtype: torch.dtype, numel: int) -> None:
    for op in reductions(dtype):
        parts = inputs(n * numel, dtype, salt(), exact=True)
        want = ref_reduce(parts, op)[r * numel:(r + 1) * numel]
        what = f"reduce_scatter_tensor {op} {be} {dtype} {numel}"
        if declines(be, dtype, op):
            out = torch.empty(numel, dtype=dtype, device=dev)
            expect_decline(what, lambda: dist.reduce_scatter_tensor(out, parts[r], op=op,
                                                                    backend=be))
            continue
        for fn in (dist.reduce_scatter_tensor, dist.reduce_scatter_fn):
            out = torch.full((numel,), 7, dtype=dtype, device=dev)
            run(fn, be, out, parts[r], op=op)
            same(f"{fn.__name__} {op} {be} {dtype} {numel}", out, want)
        out = torch.full((numel,), 7, dtype=dtype, device=dev)
        run(dist.reduce_scatter, be, out, list(parts[r].chunk(n)), op=op)
        same(f"reduce_scatter {op} {be} {dtype} {numel}", out, want)


def a2a_bytes() -> int:
    """Bytes of all-to-alls that mcr's summary counts as served, every library."""
    return sum(v[1] for (op, _), v in runtime.get().dispatcher.served().items()
               if op == "all_to_all")


def test_all_to_all(be: str | None, dtype: torch.dtype, numel: int) -> None:
    parts = inputs(n * numel, dtype, salt())
    out = torch.full((n * numel,), 7, dtype=dtype, device=dev)
    run(dist.all_to_all_single, be, out, parts[r])
    want = torch.cat([parts[q][r * numel:(r + 1) * numel] for q in range(n)])
    same(f"all_to_all_single {be} {dtype} {numel}", out, want)
    # rows of a 2-D input into a flat output, and into a non-contiguous one of other shape
    flat = torch.full((n * numel,), 7, dtype=dtype, device=dev)
    run(dist.all_to_all_single, be, flat, parts[r].view(n, numel))
    same(f"all_to_all_single 2-D in {be} {dtype} {numel}", flat, want)
    strided = torch.full((numel, n), 7, dtype=dtype, device=dev).t()
    run(dist.all_to_all_single, be, strided, parts[r].view(n, numel))
    same(f"all_to_all_single strided out {be} {dtype} {numel}", strided.reshape(-1), want)
    # uneven: rank q sends (q + p + 1) * k rows of 2 elements to rank p
    k = max(1, numel // 64)

    def rows(src: int, dst: int) -> int:
        return (src + dst + 1) * k
    s = salt()
    ins = [gen(q, 2 * sum(rows(q, p) for p in range(n)), dtype, s, device=dev).view(-1, 2)
           for q in range(n)]
    out = torch.empty(sum(rows(q, r) for q in range(n)), 2, dtype=dtype, device=dev)
    before = a2a_bytes()
    run(dist.all_to_all_single, be, out, ins[r],
        output_split_sizes=[rows(q, r) for q in range(n)],
        input_split_sizes=[rows(r, p) for p in range(n)])
    # The summary counts an uneven call's bytes too (this rank's input), though no table
    # size applies to it.
    assert a2a_bytes() - before == ins[r].nbytes, (a2a_bytes() - before, ins[r].nbytes)
    want = torch.cat([ins[q][sum(rows(q, p) for p in range(r)):][:rows(q, r)] for q in range(n)])
    same(f"all_to_all_single uneven {be} {dtype}", out, want)
    # list form
    outs = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(n)]
    run(dist.all_to_all, be, outs, list(parts[r].chunk(n)))
    for q in range(n):
        same(f"all_to_all[{q}] {be} {dtype}", outs[q], parts[q][r * numel:(r + 1) * numel])


def test_rooted(be: str | None, dtype: torch.dtype, numel: int) -> None:
    root = n - 1
    parts = inputs(numel, dtype, salt())
    t = parts[r].clone()
    run(dist.broadcast, be, t, root)
    same(f"broadcast {be} {dtype} {numel}", t, parts[root])
    root = 1 % n
    for op in (R.SUM, R.MAX):
        parts = inputs(numel, dtype, salt(), exact=True)
        t = parts[r].clone()
        if declines(be, dtype, op):
            expect_decline("reduce", lambda: dist.reduce(t, root, op=op, backend=be))
            continue
        run(dist.reduce, be, t, root, op=op)
        if r == root:
            same(f"reduce {op} {be} {dtype} {numel}", t, ref_reduce(parts, op))
        else:   # the same on every library: other ranks' tensors stay as they were
            same(f"reduce {op} {be} {dtype} {numel} leaves rank {r}'s tensor", t, parts[r])
    parts = inputs(numel, dtype, salt())
    lst = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(n)] if r == root else None
    run(dist.gather, be, parts[r], lst, root)
    if r == root:
        for q in range(n):
            same(f"gather[{q}] {be} {dtype} {numel}", lst[q], parts[q])
    src_parts = inputs(numel, dtype, salt())  # rank `root` scatters these
    t = torch.full((numel,), 7, dtype=dtype, device=dev)
    run(dist.scatter, be, t, src_parts if r == root else None, root)
    same(f"scatter {be} {dtype} {numel}", t, src_parts[r])


def test_p2p(be: str | None, dtype: torch.dtype, numel: int) -> None:
    s = salt()
    mine = gen(r, numel, dtype, s, device=dev)
    prev, nxt = (r - 1) % n, (r + 1) % n
    got = torch.empty(numel, dtype=dtype, device=dev)
    # Even ranks send first, odd ranks receive first: NCCL sets up one communicator per pair
    # on first use and blocks there, so a ring where everyone sends first deadlocks (torch too).
    send = lambda: dist.isend(mine, nxt, backend=be, tag=3)  # noqa: E731
    recv = lambda: dist.irecv(got, prev, backend=be, tag=3)  # noqa: E731
    ws = [send(), recv()] if r % 2 == 0 else [recv(), send()]
    for w in reversed(ws):
        w.wait()
    same(f"isend/irecv {be} {dtype} {numel}", got, gen(prev, numel, dtype, s, device=dev))
    got.fill_(0)
    # Any-source receives where the library has them (NCCL has none).
    any_src = n == 2 and (be == "mpi" or dev == "cpu")
    if r % 2 == 0:
        dist.send(mine, nxt, backend=be)
        src = dist.recv(got, None if any_src else prev, backend=be)
    else:
        src = dist.recv(got, None if any_src else prev, backend=be)
        dist.send(mine, nxt, backend=be)
    assert src == prev, f"recv reported sender {src}, want {prev}"
    same(f"send/recv {be} {dtype} {numel}", got, gen(prev, numel, dtype, s, device=dev))


def test_misc(be: str | None) -> None:
    global checks
    run(dist.barrier, be)
    objs = [{"rank": r, "x": [r] * r}, "s" * r] if r == 0 else [None, None]
    dist.broadcast_object_list(objs, 0, backend=be)
    assert objs == [{"rank": 0, "x": []}, ""], objs
    got = [None] * n
    dist.all_gather_object(got, ("obj", r, "y" * (100 * r)), backend=be)
    assert got == [("obj", q, "y" * (100 * q)) for q in range(n)], got
    # non-contiguous tensors in and out
    dtype = torch.float32
    parts = inputs(12, dtype, salt(), exact=True)
    big = torch.zeros(12, 2, dtype=dtype, device=dev)
    big[:, 0] = parts[r]
    col = big[:, 0]
    assert not col.is_contiguous()
    dist.all_reduce(col, backend=be)
    same(f"non-contiguous all_reduce {be}", big[:, 0], ref_reduce(parts, R.SUM))
    assert bool((big[:, 1] == 0).all()), "non-contiguous all_reduce wrote outside its view"
    out = torch.zeros(n * 3, 2, dtype=dtype, device=dev)
    dist.all_gather_into_tensor(out[:, 1], parts[r][:6:2].clone(), backend=be)
    same(f"non-contiguous all_gather output {be}", out[:, 1],
         torch.cat([p[:6:2] for p in parts]))
    checks += 4


def test_shapes(be: str | None) -> None:
    """Multi-dimensional tensors, as user code passes them (torch.distributed takes any shape
    of the right element count; Gloo itself wants an output chunk shaped like the input)."""
    global checks
    dtype, rows, cols = torch.float32, 3, 5
    parts = [p.view(rows, cols) for p in inputs(rows * cols, dtype, salt(), exact=True)]
    lst = [torch.full((rows, cols), 7.0, dtype=dtype, device=dev) for _ in range(n)]
    run(dist.all_gather, be, lst, parts[r])
    for q in range(n):
        same(f"all_gather 2-D [{q}] {be}", lst[q], parts[q])
    for shape in ((n * rows, cols), (n * rows * cols,), (n, rows, cols)):
        out = torch.zeros(shape, dtype=dtype, device=dev)
        run(dist.all_gather_into_tensor, be, out, parts[r])
        same(f"all_gather_into_tensor {shape} {be}", out.view(-1),
             torch.cat([p.view(-1) for p in parts]))
    if declines(be, dtype, R.SUM):
        return
    big = [p.view(n * rows, cols) for p in inputs(n * rows * cols, dtype, salt(), exact=True)]
    want = ref_reduce(big, R.SUM)[r * rows:(r + 1) * rows]
    out = torch.zeros(rows, cols, dtype=dtype, device=dev)
    run(dist.reduce_scatter_tensor, be, out, big[r])
    same(f"reduce_scatter_tensor 2-D {be}", out, want)
    out = torch.zeros(rows, cols, dtype=dtype, device=dev)
    run(dist.reduce_scatter, be, out, list(big[r].chunk(n)))
    same(f"reduce_scatter 2-D list {be}", out, want)
    out = torch.zeros(n * rows, cols, dtype=dtype, device=dev)
    run(dist.all_to_all_single, be, out, big[r])
    same(f"all_to_all_single 2-D {be}", out,
         torch.cat([b[r * rows:(r + 1) * rows] for b in big]))
    t = big[r].clone()
    run(dist.all_reduce, be, t)
    same(f"all_reduce 2-D {be}", t, ref_reduce(big, R.SUM))
    t = big[r].clone()
    run(dist.broadcast, be, t, n - 1)
    same(f"broadcast 2-D {be}", t, big[n - 1])
    outs = [torch.zeros(rows, cols, dtype=dtype, device=dev) for _ in range(n)]
    run(dist.all_to_all, be, outs, list(big[r].chunk(n)))
    for q in range(n):
        same(f"all_to_all 2-D [{q}] {be}", outs[q], big[q][r * rows:(r + 1) * rows])
    root = n - 1
    got = [torch.zeros(rows, cols, dtype=dtype, device=dev) for _ in range(n)] \
        if r == root else None
    run(dist.gather, be, parts[r], got, root)
    if r == root:
        for q in range(n):
            same(f"gather 2-D [{q}] {be}", got[q], parts[q])
    t = torch.zeros(rows, cols, dtype=dtype, device=dev)
    run(dist.scatter, be, t, list(big[root].chunk(n)) if r == root else None, root)
    same(f"scatter 2-D {be}", t, big[root][r * rows:(r + 1) * rows])
    # complex: torch sends the real view, two numbers per element, so splits double
    cplx = [torch.complex(b, -b) for b in big]
    out = torch.zeros(n * rows, cols, dtype=cplx[0].dtype, device=dev)
    run(dist.all_to_all_single, be, out, cplx[r])
    same(f"all_to_all_single complex {be}", torch.view_as_real(out),
         torch.view_as_real(torch.cat([c[r * rows:(r + 1) * rows] for c in cplx])))


def test_groups() -> None:
    """Sub-groups: every world rank calls new_group; members talk through every backend."""
    global checks
    evens = dist.new_group([q for q in range(n) if q % 2 == 0])
    last = dist.new_group([n - 1, 0])
    if r in last.ranks:
        assert dist.get_world_size(last) == 2 and dist.get_global_rank(last, 1) == n - 1
    for g in (evens, last):
        if r not in g.ranks:
            continue
        for be in BACKENDS:
            members = g.ranks
            parts = {q: gen(q, 33, torch.float32, 999, True, dev) for q in members}
            t = parts[r].clone()
            dist.all_reduce(t, group=g, backend=be)
            same(f"sub-group all_reduce {be} {members}", t, ref_reduce(list(parts.values()),
                                                                        R.SUM))
            out = torch.empty(33 * len(members), device=dev)
            dist.all_gather_into_tensor(out, parts[r], group=g, backend=be)
            same(f"sub-group all_gather {be}", out, torch.cat([parts[q] for q in members]))
            t = parts[r].clone()
            dist.broadcast(t, members[-1], group=g, backend=be)
            same(f"sub-group broadcast {be}", t, parts[members[-1]])
            assert dist.get_rank(g) == members.index(r)
            checks += 3


BACKENDS = [None if b == "auto" else b for b in args.backends.split(",")]
t0 = time.time()
dist.configure(enabled=True)
for be in BACKENDS:
    for dtype in DTYPES:
        for numel in SIZES:
            for test in (test_all_reduce, test_all_gather, test_reduce_scatter, test_all_to_all,
                         test_rooted, test_p2p):
                test(be, dtype, numel)
    # largest messages: 16 MiB full buffer, float32 and bf16
    for dtype in (torch.float32, torch.bfloat16):
        if dtype not in DTYPES:
            continue
        numel = BIG // (dtype.itemsize * n)
        test_all_reduce(be, dtype, numel * n)
        test_all_gather(be, dtype, numel)
        test_reduce_scatter(be, dtype, numel)
        test_all_to_all(be, dtype, numel)
        test_rooted(be, dtype, numel * n)
        test_p2p(be, dtype, numel * n)
    test_misc(be)
    test_shapes(be)
    if r == 0:
        print(f"backend {be or 'auto'}: done ({time.time() - t0:.1f} s)", flush=True)
test_groups()
rows = dist.log_summary(return_dict=True)
assert dist.has_all_gather_into_tensor() and dist.has_reduce_scatter_tensor()
seen = {(row["op"], row["backend"]) for row in rows}
for be in BACKENDS:
    if be is not None:
        assert ("all_reduce", be) in seen, f"logger has no all_reduce row for {be}: {seen}"
assert dist.get_local_rank() == int(os.environ.get("LOCAL_RANK", "0"))
print(f"rank {r}: API OK {checks} checks", flush=True)
dist.destroy_process_group()
