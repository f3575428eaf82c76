"""GPU fast paths (sdma, nccl_ce, symm) against NCCL on the same inputs, one process per GPU.

Run under mpirun/torchrun on 2 or 4 GPUs (`--symm-only`: any number, one included). Copies are
compared bit for bit with NCCL; reductions bit for bit on exactly summable data and within float
tolerance on random data. Prints one `OK <n> checks` line per rank, or raises naming the case.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import re
import sys

import torch
import torch.distributed as tdist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import gen, same  # noqa: E402

import mcr.comm as dist  # noqa: E402
from mcr.config import from_env  # noqa: E402
from mcr.units import parse_bytes  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--big", default="1GiB", help="largest all-gather output (bytes, with unit)")
ap.add_argument("--quick", action="store_true", help="fewer sizes (for the chunked rerun)")
ap.add_argument("--sdma", default="sdma", choices=["sdma", "sdma_pipe"],
                help="which copy-engine schedule the sdma cases run on")
ap.add_argument("--symm-only", action="store_true",
                help="only the symm cases (any number of GPUs, one included)")
args = ap.parse_args()

dist.init_distributed(verbose=True)
R = dist.ReduceOp
N, ME = dist.get_world_size(), dist.get_rank()
DEV = torch.device("cuda", torch.cuda.current_device())
CHECKS = [0]
_SALT = [0]
SDMA = args.sdma
AVAIL = [b for b in (SDMA, "nccl_ce", "symm") if b in dist.get_world_group().handles]
if ME == 0:
    print(f"fast backends bound to the world group: {AVAIL}; notes: "
          f"{dist.get_world_group().notes}", flush=True)


def salt() -> int:
    _SALT[0] += 1
    return _SALT[0]


def data(numel: int, dtype: torch.dtype, s: int, rank: int, exact: bool) -> torch.Tensor:
    if dtype in (torch.uint8, torch.int8):
        g = torch.Generator().manual_seed(s * 31 + rank)
        return torch.randint(0, 100, (numel,), generator=g).to(dtype).to(DEV)
    return gen(rank, numel, dtype, s, exact=exact, device=str(DEV))


def check(what: str, got: torch.Tensor, want: torch.Tensor, tol: float = 0.0,
          scale: torch.Tensor | None = None) -> None:
    """Bit for bit, or (tol > 0) relative error within tol; the error of a rounded sum is
    relative to the sum of magnitudes (`scale`), not to a result that may nearly cancel."""
    CHECKS[0] += 1
    if tol == 0.0:
        same(what, got, want)
        return
    g, w = got.double().cpu(), want.double().cpu()
    if not torch.isfinite(g).all():
        raise AssertionError(f"{what}: non-finite output")
    den = (w if scale is None else scale.double().cpu()).norm().item()
    err = ((g - w).norm() / max(den, 1e-30)).item()
    if err > tol:
        raise AssertionError(f"{what}: relative error {err:.2e} > {tol:.0e}")


def sizes(big_elems: int) -> list[int]:
    base = [1, 3, 1000, 65537, (1 << 20) + 3]
    if args.quick:
        return [1, 1000, (1 << 20) + 3, 3 << 20]
    return base + [4 << 20, big_elems]


def t_all_gather(be: str, dtype: torch.dtype, numel: int, g=None, symm_out: bool = False) -> None:
    gs = dist.get_world_size(g)
    s = salt()
    me = dist.get_rank(g)
    x = data(numel, dtype, s, me, exact=True)
    ref = torch.empty(numel * gs, dtype=dtype, device=DEV)
    dist.all_gather_into_tensor(ref, x, group=g, backend="nccl")
    tag = f"{be} all_gather {dtype} n={numel} gs={gs}{' symm' if symm_out else ''}"
    if symm_out:
        out = dist.symmetric_empty(numel * gs, dtype=dtype, group=g, backend=be)
    else:
        out = torch.full((numel * gs,), 7, dtype=dtype, device=DEV)
    dist.all_gather_into_tensor(out, x, group=g, backend=be)
    check(tag, out, ref)
    # In place, as ZeRO-3 does: the input is this rank's slot of the output.
    out.fill_(3)
    out[me * numel:(me + 1) * numel].copy_(x)
    dist.all_gather_into_tensor(out, out[me * numel:(me + 1) * numel], group=g, backend=be)
    check(tag + " in-place", out, ref)
    if numel <= 1 << 20 and not symm_out:
        # Non-contiguous input and output.
        xs = torch.stack([x, x], 1)[:, 0]
        o2 = torch.zeros(numel * gs, 2, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(o2[:, 1], xs, group=g, backend=be)
        check(tag + " non-contiguous", o2[:, 1], ref)
        lst = [torch.zeros(numel, dtype=dtype, device=DEV) for _ in range(gs)]
        dist.all_gather(lst, x, group=g, backend=be)
        check(tag + " list", torch.cat(lst), ref)


def t_all_to_all(be: str, dtype: torch.dtype, per: int, g=None, symm_out: bool = False) -> None:
    gs = dist.get_world_size(g)
    x = data(per * gs, dtype, salt(), dist.get_rank(g), exact=True)
    ref = torch.empty_like(x)
    dist.all_to_all_single(ref, x, group=g, backend="nccl")
    out = (dist.symmetric_empty(per * gs, dtype=dtype, group=g, backend=be) if symm_out
           else torch.full_like(x, 5))
    dist.all_to_all_single(out, x, group=g, backend=be)
    check(f"{be} all_to_all {dtype} per={per} gs={gs}{' symm' if symm_out else ''}", out, ref)


def t_broadcast(be: str, dtype: torch.dtype, numel: int, g=None, symm: bool = False) -> None:
    gs = dist.get_world_size(g)
    ranks = list(range(N)) if g is None else g.ranks
    for root in (0, gs - 1):
        s = salt()
        want = data(numel, dtype, s, root, exact=True)
        t = (dist.symmetric_empty(numel, dtype=dtype, group=g, backend=be) if symm
             else torch.empty(numel, dtype=dtype, device=DEV))
        if dist.get_rank(g) == root:
            t.copy_(want)
        else:
            t.fill_(9)
        dist.broadcast(t, ranks[root], group=g, backend=be)
        check(f"{be} broadcast {dtype} n={numel} root={root} gs={gs}", t, want)


def t_reduce_scatter(be: str, dtype: torch.dtype, per: int, g=None, redops=None) -> None:
    gs = dist.get_world_size(g)
    me = dist.get_rank(g)
    ops = redops or [R.SUM, R.MAX, R.MIN] + ([R.AVG] if dtype.is_floating_point else [])
    for op in ops:
        for exact in (True, False) if dtype.is_floating_point else (True,):
            x = data(per * gs, dtype, salt(), me, exact=exact)
            ref = torch.empty(per, dtype=dtype, device=DEV)
            dist.reduce_scatter_tensor(ref, x, op=op, group=g, backend="nccl")
            out = torch.full_like(ref, 1)
            dist.reduce_scatter_tensor(out, x, op=op, group=g, backend=be)
            bit = exact and op != R.AVG or op in (R.MAX, R.MIN)
            tol = 0.0 if bit else (2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-5)
            mag = torch.empty(per, dtype=torch.float32, device=DEV)
            dist.reduce_scatter_tensor(mag, x.abs().float(), op=op, group=g, backend="nccl")
            check(f"{be} reduce_scatter {dtype} {op} per={per} gs={gs} exact={exact}", out, ref,
                  tol, mag)


def t_all_reduce(be: str, dtype: torch.dtype, numel: int, g=None, offset: int = 0) -> None:
    me = dist.get_rank(g)
    for op in (R.SUM, R.AVG):
        for exact in (True, False):
            x = data(numel + offset, dtype, salt(), me, exact=exact)
            ref = x.clone()
            dist.all_reduce(ref, op=op, group=g, backend="nccl")
            y = x.clone()
            dist.all_reduce(y[offset:], op=op, group=g, backend=be)
            bit = exact and op == R.SUM
            tol = 0.0 if bit else (2e-2 if dtype == torch.bfloat16 else 1e-5)
            mag = x[offset:].abs().float()
            dist.all_reduce(mag, op=op, group=g, backend="nccl")
            check(f"{be} all_reduce {dtype} {op} n={numel} off={offset} exact={exact}",
                  y[offset:], ref[offset:], tol, mag)


def t_repeat(numel: int, iters: int = 4) -> None:
    """The same buffers again and again with new data (sdma captures and replays CUDA graphs
    from the second call on), once on a side stream, each result against NCCL."""
    side = torch.cuda.Stream(DEV)
    x = torch.empty(numel, dtype=torch.bfloat16, device=DEV)
    xa = torch.empty(numel * N, dtype=torch.float32, device=DEV)
    out = torch.empty(numel * N, dtype=torch.bfloat16, device=DEV)
    zc = dist.symmetric_empty(numel * N, dtype=torch.bfloat16, backend="sdma")
    a2a = torch.empty_like(xa)
    rs = torch.empty(numel, dtype=torch.float32, device=DEV)
    bc = torch.empty(numel, dtype=torch.int32, device=DEV)
    for it in range(iters):
        s = salt()
        x.copy_(data(numel, torch.bfloat16, s, ME, True))
        xa.copy_(data(numel * N, torch.float32, s, ME, True))
        ref = torch.empty_like(out)
        dist.all_gather_into_tensor(ref, x, backend="nccl")
        ra = torch.empty_like(xa)
        dist.all_to_all_single(ra, xa, backend="nccl")
        rr = torch.empty_like(rs)
        dist.reduce_scatter_tensor(rr, xa, backend="nccl")
        want_bc = data(numel, torch.int32, s, it % N, True)
        bc.copy_(want_bc if ME == it % N else torch.zeros_like(want_bc))
        zc[ME * numel:(ME + 1) * numel].copy_(x)
        stream = side if it == 2 else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            dist.all_gather_into_tensor(out, x, backend=SDMA)
            dist.all_gather_into_tensor(zc, zc[ME * numel:(ME + 1) * numel], backend=SDMA)
            dist.all_to_all_single(a2a, xa, backend=SDMA)
            dist.reduce_scatter_tensor(rs, xa, backend=SDMA)
            dist.broadcast(bc, it % N, backend=SDMA)
        torch.cuda.current_stream().wait_stream(stream)
        tag = f"{SDMA} repeat #{it} n={numel}"
        check(tag + " all_gather", out, ref)
        check(tag + " all_gather zero-copy in-place", zc, ref)
        check(tag + " all_to_all", a2a, ra)
        check(tag + " reduce_scatter", rs, rr)
        check(tag + " broadcast", bc, want_bc)


def graph_replays(backend: str = "sdma") -> int:
    """How many calls of a backend this rank replayed from captured graphs, as the summary
    says (sdma_pipe's calls are counted in sdma's note: they share its engine)."""
    notes = [r["text"] for r in dist.log_summary(return_dict=True)
             if r["kind"] == "note" and r["backend"] == backend]
    return sum(int(re.search(r"(\d+) replayed", t).group(1)) for t in notes)


def t_symm_repeat(numel: int, dtype: torch.dtype, iters: int = 5) -> None:
    """symm all-reduces of the same buffers with new data each time (captured on the second
    call, replayed after), sum and avg, once on a side stream; and two calls on two streams
    that the caller does not order against each other (they share the staging buffer)."""
    side = torch.cuda.Stream(DEV)
    x = torch.empty(numel, dtype=dtype, device=DEV)
    y = torch.empty(numel, dtype=dtype, device=DEV)
    for it in range(iters):
        for op in (R.SUM, R.AVG):
            s = salt()
            x.copy_(data(numel, dtype, s, ME, True))
            y.copy_(data(numel, dtype, s + (1 << 16), ME, True))
            ref_x, ref_y = x.clone(), y.clone()
            dist.all_reduce(ref_x, op=op, backend="nccl")
            dist.all_reduce(ref_y, op=op, backend="nccl")
            cur = torch.cuda.current_stream()
            side.wait_stream(cur)   # the data are ready on both streams
            # Rounds 2 and 3: the two calls on two streams, not ordered by the caller.
            with torch.cuda.stream(side if it == 2 else cur):
                dist.all_reduce(x, op=op, backend="symm")
            with torch.cuda.stream(side if it == 3 else cur):
                dist.all_reduce(y, op=op, backend="symm")
            cur.wait_stream(side)
            tol = 0.0 if op == R.SUM else (2e-2 if dtype == torch.bfloat16 else 1e-6)
            check(f"symm repeat #{it} {op} {dtype} n={numel}", x, ref_x, tol)
            check(f"symm repeat #{it} {op} {dtype} n={numel} (second buffer)", y, ref_y, tol)


def t_mixed(ops: int) -> None:
    """Interleaved async ops on nccl, sdma, symm, nccl_ce with shuffled waits."""
    rng = random.Random(1234)  # same sequence on every rank
    _SALT[0] = 1 << 20  # sub-group tests drew different numbers of salts on different ranks
    pend = []
    for i in range(ops):
        kind = rng.choice(["ag", "ar", "a2a", "rs", "bc"])
        be = rng.choice({"ag": [SDMA, "nccl", "nccl_ce"], "ar": ["symm", "nccl"],
                         "a2a": [SDMA, "nccl", "nccl_ce"], "rs": [SDMA, "nccl"],
                         "bc": [SDMA, "nccl"]}[kind])
        be = be if be == "nccl" or be in AVAIL else "nccl"
        n = rng.choice([1, 17, 4096, 100_003])
        s = salt()
        if kind == "ag":
            x = data(n, torch.bfloat16, s, ME, True)
            out = torch.empty(n * N, dtype=x.dtype, device=DEV)
            w = dist.all_gather_into_tensor(out, x, async_op=True, backend=be)
            want = torch.cat([data(n, torch.bfloat16, s, r, True) for r in range(N)])
        elif kind == "ar":
            out = data(n, torch.float32, s, ME, True)
            w = dist.all_reduce(out, async_op=True, backend=be)
            want = sum(data(n, torch.float32, s, r, True) for r in range(N))
        elif kind == "a2a":
            x = data(n * N, torch.bfloat16, s, ME, True)
            out = torch.empty_like(x)
            w = dist.all_to_all_single(out, x, async_op=True, backend=be)
            want = torch.cat([data(n * N, torch.bfloat16, s, r, True)[ME * n:(ME + 1) * n]
                              for r in range(N)])
        elif kind == "rs":
            x = data(n * N, torch.float32, s, ME, True)
            out = torch.empty(n, dtype=x.dtype, device=DEV)
            w = dist.reduce_scatter_tensor(out, x, async_op=True, backend=be)
            want = sum(data(n * N, torch.float32, s, r, True)[ME * n:(ME + 1) * n]
                       for r in range(N))
        else:
            out = data(n, torch.int32, s, ME, True)
            w = dist.broadcast(out, i % N, async_op=True, backend=be)
            want = data(n, torch.int32, s, i % N, True)
        pend.append((f"mixed #{i} {kind} on {be}", w, out, want))
        if len(pend) > 6 or i == ops - 1:
            random.Random(i * 7 + ME).shuffle(pend)  # each rank waits in its own order
            for what, w, out, want in pend:
                w.wait()
                check(what, out, want)
            pend.clear()


def t_symm_streams(numel: int, trials: int = 40) -> None:
    """Pairs of symm all-reduces on two streams that the caller leaves unordered, released
    together by one event: both share the group's staging buffer, so unless mcr orders them one
    call's input becomes the other's result (on a group of one rank too: 166,232 of 524,288
    elements wrong on an H100 without the order)."""
    side, gate = torch.cuda.Stream(DEV), torch.cuda.Stream(DEV)
    x = torch.empty(numel, dtype=torch.bfloat16, device=DEV)
    y = torch.empty_like(x)
    for it in range(trials):
        s = salt()
        x.copy_(data(numel, torch.bfloat16, s, ME, True))
        y.copy_(data(numel, torch.bfloat16, s + (1 << 16), ME, True))
        ref_x, ref_y = x.clone(), y.clone()
        dist.all_reduce(ref_x, backend="nccl")
        dist.all_reduce(ref_y, backend="nccl")
        cur = torch.cuda.current_stream()
        # Both streams held back by one event behind a long kernel, so that the two calls,
        # enqueued meanwhile, would start together unless mcr orders them.
        gate.wait_stream(cur)
        with torch.cuda.stream(gate):
            torch.cuda._sleep(1_000_000)
        ev = torch.cuda.Event()
        ev.record(gate)
        cur.wait_event(ev)
        side.wait_event(ev)
        dist.all_reduce(x, backend="symm")
        with torch.cuda.stream(side):
            dist.all_reduce(y, backend="symm")
        cur.wait_stream(side)
        check(f"symm two streams #{it} n={numel}", x, ref_x)
        check(f"symm two streams #{it} n={numel} (second buffer)", y, ref_y)


def t_symm_ll_ops(numel: int, dtype: torch.dtype, iters: int = 5) -> None:
    """symm all-gathers, reduce-scatters, broadcasts and all-to-alls (MCR_SYMM_OPS) of the same
    buffers with new data each time (captured on the second call, replayed after), against
    NCCL's."""
    x = torch.empty(numel, dtype=dtype, device=DEV)
    out = torch.empty(numel * N, dtype=dtype, device=DEV)
    y = torch.empty(numel * N, dtype=dtype, device=DEV)
    r = torch.empty(numel, dtype=dtype, device=DEV)
    for it in range(iters):
        s = salt()
        x.copy_(data(numel, dtype, s, ME, True))
        y.copy_(data(numel * N, dtype, s + (1 << 16), ME, True))
        ref = torch.empty_like(out)
        dist.all_gather_into_tensor(ref, x, backend="nccl")
        dist.all_gather_into_tensor(out, x, backend="symm")
        check(f"symm all_gather repeat #{it} {dtype} n={numel}", out, ref)
        if dtype in (torch.bfloat16, torch.float32):
            for op in (R.SUM, R.AVG):
                want = torch.empty_like(r)
                dist.reduce_scatter_tensor(want, y, op=op, backend="nccl")
                dist.reduce_scatter_tensor(r, y, op=op, backend="symm")
                tol = 0.0 if op == R.SUM else (2e-2 if dtype == torch.bfloat16 else 1e-6)
                check(f"symm reduce_scatter repeat #{it} {op} {dtype} n={numel}", r, want, tol)
        if "broadcast" in from_env().symm_ops:
            for root in (0, N - 1):
                b = data(numel, dtype, s + root, ME, True)
                want = b.clone()
                dist.broadcast(want, root, backend="nccl")
                x.copy_(b)
                dist.broadcast(x, root, backend="symm")
                check(f"symm broadcast repeat #{it} root={root} {dtype} n={numel}", x, want)
        if "all_to_all" in from_env().symm_ops:
            want = torch.empty_like(y)
            dist.all_to_all_single(want, y, backend="nccl")
            dist.all_to_all_single(out, y, backend="symm")
            check(f"symm all_to_all repeat #{it} {dtype} n={numel}", out, want)


def t_symm_moving(numel: int, calls: int = 120) -> None:
    """symm all-to-alls and all-gathers whose buffers move differently on each rank (as an MoE
    layer's allocations do): rank 0 cycles 3 buffers, its peers 8, so their captures stop at
    MOVING per size while graphs that exist still replay; every call must run exactly once on
    every rank (a rank that ran one twice would leave its peers' next call waiting), and match
    NCCL's."""
    pool = [(torch.empty(numel * N, dtype=torch.bfloat16, device=DEV),
             torch.empty(numel * N, dtype=torch.bfloat16, device=DEV)) for _ in range(8)]
    ops = from_env().symm_ops
    for i in range(calls):
        y, out = pool[i % 3 if ME == 0 else (3 * i) % 8]
        y.copy_(data(numel * N, torch.bfloat16, salt(), ME, True))
        want = torch.empty_like(out)
        if "all_to_all" in ops:
            dist.all_to_all_single(want, y, backend="nccl")
            dist.all_to_all_single(out, y, backend="symm")
            check(f"symm all_to_all moving #{i} n={numel}", out, want)
        if "all_gather" in ops:
            dist.all_gather_into_tensor(want, y[:numel], backend="nccl")
            dist.all_gather_into_tensor(out, y[:numel], backend="symm")
            check(f"symm all_gather moving #{i} n={numel}", out, want)


def t_symm_uneven(calls: int = 60, row: int = 64) -> None:
    """symm's all-to-all with split sizes against NCCL's, bit for bit: random row splits the
    same on every rank (empty blocks, everything to one rank, and all equal, which the key
    sends to the equal-split kernel), the same splits twice in a row, and equal-split
    all-to-alls between them (the two kernels share the per-block call numbers)."""
    rng = random.Random(7)
    most = 1000      # rows a block: 128 KiB of bf16, within the 4-rank low-latency limit
    for i in range(calls):
        kind = rng.choice(("random", "random", "one", "equal"))
        if kind == "equal":
            c = rng.randint(0, most)
            m = [[c] * N for _ in range(N)]
        elif kind == "one":      # every rank routes everything to one rank
            to = rng.randrange(N)
            m = [[rng.randint(1, most) if p == to else 0 for p in range(N)] for _ in range(N)]
        else:
            m = [[rng.choice((0, rng.randint(1, most))) for _ in range(N)] for _ in range(N)]
        ins, outs = m[ME], [m[s][ME] for s in range(N)]
        dt = rng.choice((torch.bfloat16, torch.float32, torch.uint8))
        x = data(sum(ins) * row, dt, salt(), ME, True).view(-1, row)
        want = torch.empty(sum(outs), row, dtype=dt, device=DEV)
        dist.all_to_all_single(want, x, outs, ins, backend="nccl")
        for rep in range(2 if i % 3 == 0 else 1):
            got = torch.full_like(want, 5)
            dist.all_to_all_single(got, x, outs, ins, backend="symm")
            check(f"symm all_to_all uneven #{i}.{rep} {kind} {dt} splits={ins}", got, want)
        if i % 4 == 0:
            t_all_to_all("symm", torch.bfloat16, rng.choice((1, 300, 4096)))


def t_symm() -> None:
    """symm against NCCL: every size form and offset (the low-latency kernel's sizes, its
    limit, torch's kernels' above, in turn on one group), repeated buffers (graph replays), and
    calls on two streams."""
    for dt in (torch.bfloat16, torch.float32):
        for n in (1, 2, 3, 8, 1000, 4096, 65536, 65537, 131072 + 1, 262144):
            if n * torch.empty((), dtype=dt).element_size() <= 1 << 20:
                t_all_reduce("symm", dt, n)
        for off in (1, 3):
            t_all_reduce("symm", dt, 4099, offset=off)
    before = graph_replays("symm")
    for dt, n in ((torch.bfloat16, 1), (torch.bfloat16, 4099), (torch.float32, 65536),
                  (torch.bfloat16, 300000)):
        t_symm_repeat(n, dt)
    if from_env().symm_graphs and graph_replays("symm") == before:
        raise AssertionError("symm repeat: no call was replayed from a CUDA graph")
    t_symm_streams(1 << 16)
    t_symm_streams(1 << 19)
    ops = from_env().symm_ops
    for dt in (torch.bfloat16, torch.float32, torch.uint8):
        for n in (1, 3, 1000, 16385):
            if "all_gather" in ops:
                t_all_gather("symm", dt, n)
            if "reduce_scatter" in ops and dt != torch.uint8:
                t_reduce_scatter("symm", dt, n, redops=[R.SUM, R.AVG])
            if "broadcast" in ops:
                t_broadcast("symm", dt, n)
            if "all_to_all" in ops:
                t_all_to_all("symm", dt, n)
        if "all_gather" in ops:
            t_symm_ll_ops(4099, dt)
    t_symm_moving(1000)
    if "all_to_all_uneven" in ops:
        t_symm_uneven()
    note = " ".join(r["text"] for r in dist.log_summary(return_dict=True)
                    if r["kind"] == "note" and r["backend"] == "symm")
    if (from_env().symm_ll_bytes != 0 and importlib.util.find_spec("cupy")
            and "on mcr's low-latency kernel" not in note):
        raise AssertionError(f"symm: the low-latency kernel did not serve ({note})")
    if "on mcr's low-latency kernel" in note and "all_to_all_uneven" in ops and \
            "with split sizes launched directly" not in note:
        raise AssertionError(f"symm: no all-to-all with split sizes reached the kernel ({note})")
    if ME == 0:
        print(f"symm: {note}", flush=True)


def main() -> None:
    if args.symm_only:
        if "symm" not in AVAIL:
            raise AssertionError(f"--symm-only: symm is not bound ({dist.get_world_group().notes})")
        t_symm()
        torch.cuda.synchronize()
        print(f"rank {ME}: OK {CHECKS[0]} checks", flush=True)
        dist.destroy_process_group()
        return
    big = int(parse_bytes(args.big))
    exact_dtypes = (torch.bfloat16, torch.float16, torch.float32, torch.int32)
    if SDMA in AVAIL:
        for dt in exact_dtypes + (torch.uint8,):
            for n in sizes(big // N // torch.empty((), dtype=dt).element_size()):
                if n * N * torch.empty((), dtype=dt).element_size() > big:
                    continue
                if dt != torch.bfloat16 and n > 4 << 20:
                    continue
                t_all_gather(SDMA, dt, n)
                t_all_to_all(SDMA, dt, max(1, n // N))
                t_broadcast(SDMA, dt, n)
                if dt != torch.uint8:
                    t_reduce_scatter(SDMA, dt, max(1, n // N))
        for n in (1, 1000, (1 << 20) + 4):
            t_all_gather(SDMA, torch.bfloat16, n, symm_out=True)
            t_all_to_all(SDMA, torch.bfloat16, n, symm_out=True)
            t_broadcast(SDMA, torch.bfloat16, n, symm=True)
        before = graph_replays()
        for n in (3, 4096, (1 << 20) + 5):
            t_repeat(n)
        if from_env().sdma_graphs and graph_replays() == before:
            raise AssertionError("sdma repeat: no call was replayed from a CUDA graph")
    if "nccl_ce" in AVAIL:
        for dt in exact_dtypes:
            for n in (1, 3, 65537, (1 << 20) + 3) + (() if args.quick else (16 << 20,)):
                t_all_gather("nccl_ce", dt, n)
                t_all_to_all("nccl_ce", dt, max(1, n // N))
        t_all_gather("nccl_ce", torch.bfloat16, 1 << 20, symm_out=True)
    if "symm" in AVAIL:
        t_symm()
    # Sub-groups: halves, and a group of 3 when there are 4 ranks.
    parts = [[0, 1], [2, 3]] if N == 4 else [[0, 1]]
    subs = [dist.new_group(p) for p in parts]
    trio = dist.new_group([1, 2, 3]) if N == 4 else None
    for grp in [s for s in subs if ME in s.ranks] + ([trio] if trio and ME in trio.ranks else []):
        have = [b for b in AVAIL if b in grp.handles]
        for n in (5, 70000):
            if SDMA in have:
                t_all_gather(SDMA, torch.bfloat16, n, g=grp)
                t_all_to_all(SDMA, torch.float32, n, g=grp)
                t_broadcast(SDMA, torch.int32, n, g=grp)
                t_reduce_scatter(SDMA, torch.float32, n, g=grp)
            if "nccl_ce" in have:
                t_all_gather("nccl_ce", torch.bfloat16, n, g=grp)
            if "symm" in have:
                t_all_reduce("symm", torch.bfloat16, n, g=grp)
                if "all_gather" in from_env().symm_ops:
                    t_all_gather("symm", torch.bfloat16, n, g=grp)
                if "reduce_scatter" in from_env().symm_ops:
                    t_reduce_scatter("symm", torch.float32, n, g=grp, redops=[R.SUM, R.AVG])
                if "broadcast" in from_env().symm_ops:
                    t_broadcast("symm", torch.bfloat16, n, g=grp)
    # The dispatcher falls back when a fast backend declines: results never change.
    x = data(1001, torch.int64, salt(), ME, True)
    ref = x.clone()
    dist.all_reduce(ref, backend="nccl")
    dist.all_reduce(x)  # with MCR_BACKEND=sdma or symm this declines to nccl
    check("fallback all_reduce int64", x, ref)
    t_mixed(300 if not args.quick else 100)
    torch.cuda.synchronize()
    tdist.barrier()
    print(f"rank {ME}: OK {CHECKS[0]} checks", flush=True)
    dist.destroy_process_group()


main()
