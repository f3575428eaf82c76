"""Randomized run across groups, libraries, dtypes and reduce ops; async waited out of order.

Like random_worker, every rank draws the same sequence of calls from a shared seed; here each
call also draws its group (the world, groups made with mcr's `new_group`, groups made with
torch's own `new_group`, which mcr did not create), its reduce op and a dtype from bool to
float64, and its library from `--backends` (any name, lanes and hier too). Besides the tensor
collectives and point-to-point: the list forms, uneven all-to-all splits (empty blocks too),
coalesced all-reduce, all_gather_object and batch_isend_irecv. A forced library
that cannot serve a call must decline on every rank alike (BackendUnavailable), never on some;
ranks outside the call's group draw the same numbers and skip it. Results are compared bit for
bit with numpy. Prints `rank R: CHAOS OK <checked> checked, <declined> declined, <n> not a
member`. CHAOS_VERBOSE=1 prints each call as it is issued.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Any

import torch
import torch.distributed as tdist

sys.path.insert(0, os.path.dirname(__file__))
from common import WaitAll, gen, ref_reduce, run_shuffled, same  # noqa: E402

import mcr.comm as dist  # noqa: E402
from mcr.errors import BackendUnavailable  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--ops", type=int, default=1000)
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--backends", default="auto,gloo,mpi")
ap.add_argument("--dtypes", default="", help="comma-separated torch dtypes (default: 8 kinds)")
ap.add_argument("--device", default="cpu", help="cuda: GPU LOCAL_RANK (mod the GPU count)")
args = ap.parse_args()
if args.device == "cuda":   # ranks share the GPUs there are (host-staged libraries only)
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
shared = random.Random(args.seed)            # same on every rank: what to call
local = random.Random(args.seed * 31 + r)    # this rank's wait order
R = dist.ReduceOp
BACKENDS = args.backends.split(",")
LIST_OPS = ("all_gather_list", "all_to_all_list", "all_to_all_uneven", "all_reduce_coalesced",
            "objects", "batch_p2p")     # call_list's
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "gather", "scatter", "p2p", "barrier", *LIST_OPS]
SYNC_ONLY = ("objects",)
WORKS = ("p2p", "batch_p2p")    # return works whatever async_op says
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
          torch.int64, torch.uint8, torch.bool]
if args.dtypes:
    DTYPES = [getattr(torch, d) for d in args.dtypes.split(",")]

# every world rank makes every group, as torch and mcr both require
SUBSETS = [list(range(n)), list(range(0, n, 2)), list(range(1, n)), [n - 1, 0]]
GROUPS: list[tuple[Any, list[int], str]] = [(None, SUBSETS[0], "world")]
for ranks in map(sorted, map(set, SUBSETS)):
    if len(ranks) > 1:
        GROUPS.append((dist.new_group(ranks), ranks, f"mcr{ranks}"))
        GROUPS.append((tdist.new_group(ranks), ranks, f"torch{ranks}"))


def reduce_op(dtype: torch.dtype, size: int) -> Any:
    """A reduce op whose result is exact in `dtype` for gen(exact=True) data on `size` ranks."""
    ops = [R.SUM, R.MAX, R.MIN]
    if dtype == torch.bool or dtype == torch.uint8:
        ops = [R.MAX, R.MIN]      # uint8 sums of 0..50 overflow; bool sums are an or
    if dtype.is_floating_point and size in (2, 4):
        ops.append(R.AVG)         # halving and quartering multiples of 1/4 are exact
    return shared.choice(ops)


def data(q: int, numel: int, dtype: torch.dtype, salt: int) -> torch.Tensor:
    """Rank q's exact input on --device; uint8 from the magnitudes of the signed draw."""
    if dtype == torch.uint8:
        t = gen(q, numel, torch.int64, salt, exact=True).abs().to(torch.uint8)
    else:
        t = gen(q, numel, dtype, salt, exact=True)
    return t.to(args.device)


def issue(i: int) -> tuple[object, object]:
    """Issue op i on its group if this rank is in it; return (work or None, check)."""
    op, be, dtype = shared.choice(OPS), shared.choice(BACKENDS), shared.choice(DTYPES)
    if op == "batch_p2p" and be != "auto":
        op = "p2p"      # batch_isend_irecv takes no backend=: a forced library gets single ones
    group, members, gname = shared.choice(GROUPS)
    numel = shared.choice([1, 3, 64, 1000, 4099, 65536])
    async_op = shared.random() < 0.5 and op not in SYNC_ONLY
    root = shared.choice(members)
    redop = reduce_op(dtype, len(members))
    # a rank that makes no call still holds a stand-in work where members hold one, so that
    # every rank waits its pending works at the same points
    skipped = (WaitAll([]), lambda: None) if async_op or op in WORKS else (None, lambda: None)
    if r not in members:
        OUTSIDE.append(i)
        return skipped
    m, me = len(members), members.index(r)
    parts = [data(q, numel, dtype, i) for q in members]
    tag = f"op {i}: {op} {be} {dtype} {numel} on {gname} {redop} async={async_op}"
    kw = dict(group=group, async_op=async_op, backend=None if be == "auto" else be)
    if os.environ.get("CHAOS_VERBOSE"):
        print(f"rank {r}: issue {tag}", flush=True)
    try:
        if op in LIST_OPS:
            return call_list(op, kw, parts, members, me, m, numel, dtype, tag, i)
        return call(op, kw, parts, members, me, m, root, redop, numel, dtype, tag)
    except BackendUnavailable:
        DECLINED.append(tag)
        return skipped


def call(op: str, kw: dict[str, Any], parts: list[torch.Tensor], members: list[int], me: int,
         m: int, root: int, redop: Any, numel: int, dtype: torch.dtype, tag: str
         ) -> tuple[object, object]:
    """Make one call; return (work or None, check)."""
    if op == "p2p" and m == 1:      # nobody to send to: a barrier, held as a work as p2p's is
        op, kw["async_op"] = "barrier", True
    if op == "all_reduce":
        t = parts[me].clone()
        w = dist.all_reduce(t, op=redop, **kw)
        return w, lambda: same(tag, t, ref_reduce(parts, redop))
    if op == "all_gather":
        out = torch.empty(m * numel, dtype=dtype, device=args.device)
        w = dist.all_gather_into_tensor(out, parts[me], **kw)
        return w, lambda: same(tag, out, torch.cat(parts))
    if op == "reduce_scatter":
        big = [data(q, m * numel, dtype, numel + 7) for q in members]
        out = torch.empty(numel, dtype=dtype, device=args.device)
        w = dist.reduce_scatter_tensor(out, big[me], op=redop, **kw)
        want = ref_reduce(big, redop)[me * numel:(me + 1) * numel]
        return w, lambda: same(tag, out, want)
    if op == "all_to_all":
        big = [data(q, m * numel, dtype, numel + 11) for q in members]
        out = torch.empty(m * numel, dtype=dtype, device=args.device)
        w = dist.all_to_all_single(out, big[me], **kw)
        want = torch.cat([big[q][me * numel:(me + 1) * numel] for q in range(m)])
        return w, lambda: same(tag, out, want)
    if op == "broadcast":
        t = parts[me].clone()
        w = dist.broadcast(t, root, **kw)
        return w, lambda: same(tag, t, parts[members.index(root)])
    mine = r == root
    if op == "reduce":
        t = parts[me].clone()
        w = dist.reduce(t, root, op=redop, **kw)
        return w, lambda: same(tag, t, ref_reduce(parts, redop) if mine else parts[me])
    if op == "gather":
        lst = [torch.empty(numel, dtype=dtype, device=args.device) for _ in range(m)] \
            if mine else None
        w = dist.gather(parts[me], lst, root, **kw)
        return w, lambda: [same(tag, lst[q], parts[q]) for q in range(m)] if mine else None
    if op == "scatter":
        t = torch.empty(numel, dtype=dtype, device=args.device)
        w = dist.scatter(t, parts if mine else None, root, **kw)
        return w, lambda: same(tag, t, parts[me])
    if op == "p2p":
        got = torch.empty(numel, dtype=dtype, device=args.device)
        nxt, prv = members[(me + 1) % m], members[(me - 1) % m]
        kw.pop("async_op")
        send = lambda: dist.isend(parts[me], nxt, tag=1, **kw)  # noqa: E731
        recv = lambda: dist.irecv(got, prv, tag=1, **kw)  # noqa: E731
        ws = [send(), recv()] if me % 2 == 0 else [recv(), send()]  # NCCL pair setup order
        return WaitAll(ws), lambda: same(tag, got, parts[(me - 1) % m])
    return dist.barrier(**kw), lambda: None


def call_list(op: str, kw: dict[str, Any], parts: list[torch.Tensor], members: list[int],
              me: int, m: int, numel: int, dtype: torch.dtype, tag: str, i: int
              ) -> tuple[object, object]:
    """The list, uneven, coalesced, object and batched forms; return (work or None, check)."""
    dev = args.device
    if op == "all_gather_list":
        outs = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(m)]
        w = dist.all_gather(outs, parts[me], **kw)
        return w, lambda: [same(tag, outs[q], parts[q]) for q in range(m)]
    if op == "all_to_all_list":
        ins = [[data(q, numel, dtype, i * 64 + j) for j in range(m)] for q in members]
        outs = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(m)]
        w = dist.all_to_all(outs, ins[me], **kw)
        return w, lambda: [same(tag, outs[q], ins[q][me]) for q in range(m)]
    if op == "all_to_all_uneven":
        # rank q sends (q + j + i) % 3 * numel // 2 elements to rank j; some blocks are empty
        cnt = [[(q + j + i) % 3 * numel // 2 for j in range(m)] for q in range(m)]
        ins = [data(members[q], sum(cnt[q]), dtype, i + 5) for q in range(m)]
        out = torch.empty(sum(cnt[q][me] for q in range(m)), dtype=dtype, device=dev)
        w = dist.all_to_all_single(out, ins[me], [cnt[q][me] for q in range(m)], cnt[me], **kw)
        want = torch.cat([ins[q][sum(cnt[q][:me]):sum(cnt[q][:me + 1])] for q in range(m)])
        return w, lambda: same(tag, out, want)
    if op == "all_reduce_coalesced":
        half = [data(q, numel // 2 + 1, dtype, i + 3) for q in members]
        ts = [parts[me].clone(), half[me].clone()]
        redop = R.MAX if dtype in (torch.bool, torch.uint8) else R.SUM
        w = dist.all_reduce_coalesced(ts, op=redop, **kw)
        return w, lambda: (same(tag, ts[0], ref_reduce(parts, redop)),
                           same(tag, ts[1], ref_reduce(half, redop)))
    if op == "objects":
        got: list[Any] = [None] * m
        dist.all_gather_object(got, {"rank": r, "op": i}, kw["group"], backend=kw["backend"])
        want = [{"rank": q, "op": i} for q in members]
        return None, lambda: None if got == want else _fail(f"{tag}: {got} != {want}")
    recv = torch.empty(numel, dtype=dtype, device=dev)
    nxt, prv = members[(me + 1) % m], members[(me - 1) % m]
    ops = [dist.P2POp(dist.isend, parts[me], nxt, kw["group"], 2),
           dist.P2POp(dist.irecv, recv, prv, kw["group"], 2)]
    return WaitAll(dist.batch_isend_irecv(ops)), lambda: same(tag, recv, parts[(me - 1) % m])


def _fail(why: str) -> None:
    raise AssertionError(why)


DECLINED: list[str] = []
OUTSIDE: list[int] = []
done = run_shuffled(args.ops, issue, shared, local, 6, 0.2)
assert done == args.ops, (done, args.ops)
print(f"rank {r}: CHAOS OK {done - len(DECLINED) - len(OUTSIDE)} checked, "
      f"{len(DECLINED)} declined, {len(OUTSIDE)} not a member", flush=True)
dist.destroy_process_group()
