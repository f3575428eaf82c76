"""Bad input under mpirun: each scenario must raise a clear error on every rank, never hang.

Each rank prints `EXPECTED <ErrorType>: <message>` for every error it saw, then `ERRORS OK`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import torch

import mcr.comm as dist
from mcr import runtime as mcr_runtime
from mcr import waits
from mcr.errors import (  # noqa: E402
    BackendUnavailable,
    CallError,
    LibraryError,
    McrTimeoutError,
    MismatchError,
    TableError,
)

scenario, tables_dir = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))


def expect(kind: type, fn, *must: str) -> None:  # noqa: ANN001
    """fn() must raise kind with every string of `must` in its message."""
    try:
        fn()
    except kind as e:
        msg = str(e)
        missing = [m for m in must if m not in msg]
        assert not missing, f"{kind.__name__} message lacks {missing}: {msg}"
        print(f"rank {rank}: EXPECTED {kind.__name__}: {msg.replace(chr(10), ' | ')}", flush=True)
        return
    raise AssertionError(f"no {kind.__name__} raised")


def leave_when_all_said(n: int) -> None:
    """Exit without an orderly shutdown (the peers' calls never complete) once every rank has
    said its part, or after 60 s: mpirun stops every rank once one leaves without
    MPI_Finalize, so a rank that leaves early cuts a slower peer's report."""
    from datetime import timedelta

    import torch.distributed as tdist
    # The store's host (rank 0 under mpirun) leaving first ends the others' wait with an
    # error: every report is out by then.
    with contextlib.suppress(Exception):
        store = tdist.distributed_c10d._get_default_store()
        store.set(f"errors_worker_done/{rank}", "1")
        store.wait([f"errors_worker_done/{r}" for r in range(n)], timedelta(seconds=60))
        time.sleep(0.5)      # the store's host stays until its peers have read the last key
    os._exit(0)


def agreeing_calls_still_work() -> None:
    t = torch.ones(5)
    dist.all_reduce(t)
    assert t.tolist() == [dist.get_world_size()] * 5, t


if scenario == "different_tables":
    os.environ["MCR_TUNING_TABLE"] = os.path.join(tables_dir, f"t{rank % 2}.yaml")
    expect(MismatchError, lambda: dist.init_distributed(verbose=False), "ranks [0", "ranks [1")
elif scenario == "different_knob":
    if rank == 1:
        os.environ["MCR_SYMM_MAX_BYTES"] = "2MiB"
    t0 = time.monotonic()
    expect(MismatchError, lambda: dist.init_distributed(verbose=False), "MCR_SYMM_MAX_BYTES",
           "ranks [0] have 1048576", "ranks [1] have 2097152")
    assert time.monotonic() - t0 < 30, "the mismatch took far longer than seconds to report"
elif scenario == "bad_knob":
    os.environ["MCR_PROFILE"] = "fast"
    expect(ValueError, lambda: dist.init_distributed(verbose=False), "MCR_PROFILE='fast'",
           "standalone, overlap")
    os.environ["MCR_PROFILE"] = "standalone"
    os.environ["MCR_CHECK"] = "maybe"
    expect(ValueError, lambda: dist.init_distributed(verbose=False), "MCR_CHECK='maybe'",
           "yes/no")
elif scenario == "mismatch":
    # Ranks that disagree on a call, with no MCR_CHECK: an error on every rank naming what each
    # passed, before any library runs it (Gloo would abort, MPI return wrong data or hang).
    dist.init_distributed(verbose=False)
    t0 = time.monotonic()
    expect(MismatchError, lambda: dist.all_reduce(torch.ones(1000 - rank)),
           "disagree", "all_reduce sum of 1000 x float32", "all_reduce sum of 999 x float32",
           "rank 0", "rank 1")
    expect(MismatchError, lambda: dist.all_gather_into_tensor(
        torch.empty(2 * (1000 - rank)), torch.ones(1000 - rank)), "2000 x float32",
        "1998 x float32")
    x = torch.ones(64, dtype=torch.float32 if rank == 0 else torch.int32)
    expect(MismatchError, lambda: dist.all_reduce(x), "64 x float32", "64 x int32")
    expect(MismatchError, lambda: dist.broadcast(torch.ones(8), src=rank), "root 0", "root 1")
    if dist.get_world_size() == 2 and os.environ.get("MCR_TUNING_TABLE", "").endswith(
            "a2a_boundary_cpu_np2.yaml"):
        n_el = 256 if rank == 0 else 254     # either side of the table's 1 KiB boundary
        expect(MismatchError, lambda: dist.all_to_all_single(torch.empty(n_el),
                                                             torch.ones(n_el)),
               "-> gloo", "-> mpi", "256 x float32", "254 x float32")
    if "mpi" in mcr_runtime.get().world.handles and rank < 2:
        # A recv whose tensor holds more than was sent (MPI completes it, the tail left stale)
        # or less (MPI_ERR_TRUNCATE): a MismatchError naming both sizes.
        for sent, held in ((100, 200), (200, 100)):
            if rank == 0:
                dist.send(torch.arange(sent, dtype=torch.float32), 1, backend="mpi")
            else:
                expect(MismatchError, lambda h=held: dist.recv(torch.zeros(h), 0, backend="mpi"),
                       "rank 0 sent", f"holds {4 * held} bytes", "must match")
        if rank == 0:
            dist.send(torch.arange(5, dtype=torch.float32), 1, backend="mpi")
        else:
            got = torch.zeros(5)
            dist.recv(got, 0, backend="mpi")
            assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0], got
        assert waits.PENDING[0] == 0, "MPI requests left counted as pending"
    assert time.monotonic() - t0 < 30, "mismatches took far longer than seconds to report"
    agreeing_calls_still_work()
elif scenario == "peer_gone":
    os.environ["MCR_TIMEOUT_S"] = "20"
    dist.init_distributed(verbose=False)
    t = torch.ones(100)
    dist.all_reduce(t, backend="gloo")      # this kind of call is checked and known now
    if rank == 1:
        os._exit(0)                          # the peer goes away without a word
    time.sleep(1)
    expect(LibraryError, lambda: dist.all_reduce(t, backend="gloo"), "all_reduce",
           "'gloo'", "400 bytes", "group [0, 1]", "failed in the library")
    print(f"rank {rank}: ERRORS OK", flush=True)
    os._exit(0)
elif scenario == "uncaught":
    dist.init_distributed(verbose=False)
    t = torch.ones(100)
    dist.all_reduce(t)
    if rank == 1:
        raise RuntimeError("a planned failure on rank 1")
    t0 = time.monotonic()
    dist.all_reduce(t)                       # waits for rank 1 until the job is aborted
    print(f"rank {rank}: NOT ABORTED: all_reduce returned after {time.monotonic() - t0:.0f} s")
elif scenario in ("exit", "exit_p2p", "exit_new"):
    # Rank 1 ends with sys.exit; rank 0 then waits for it in an all-reduce or a receive, or
    # (exit_new) in a call of a kind not seen before, which waits first in the always-on
    # signature check (torch's store), where no library can tell that rank 1 left. exit_new
    # exits 0: torchrun would stop rank 0 itself on a failing rank.
    dist.init_distributed(verbose=False)
    t = torch.ones(100)
    dist.all_reduce(t)
    if rank == 1:
        sys.exit(0 if scenario == "exit_new" else 3)
    t0 = time.monotonic()
    try:
        if scenario == "exit_new":
            dist.all_gather_into_tensor(torch.empty(2 * 7), torch.ones(7))
        else:
            dist.all_reduce(t) if scenario == "exit" else dist.recv(t, src=1)
    except Exception as e:                   # noqa: BLE001
        print(f"rank {rank}: RAISED after {time.monotonic() - t0:.1f} s: {type(e).__name__}: {e}")
        raise
    print(f"rank {rank}: NOT ABORTED: returned after {time.monotonic() - t0:.0f} s")
elif scenario == "reinit_owned":
    # torch.distributed is the script's (as DeepSpeed's is); mcr is started, stopped and
    # started again on its store. The second session's first call is the first session's
    # second kind, and rank 1 comes late: the old session's keys must not answer for it.
    import torch.distributed as tdist
    tdist.init_process_group("gloo")
    for n in range(2):
        dist.init_distributed(verbose=False)
        if n == 1 and rank == 1:
            time.sleep(2)
        for size in (20,) if n else (10, 20):
            t = torch.full((size,), float(rank + 1))
            dist.all_reduce(t)
            assert torch.equal(t, torch.full((size,), 3.0)), t
        dist.destroy_process_group()
    assert tdist.is_initialized()
    tdist.destroy_process_group()
elif scenario == "stagger":
    # Rank 1 ends first; 0 and 2 then wait long for each other in a group without it: fine.
    dist.init_distributed(verbose=False)
    pair = dist.new_group([0, 2])
    t = torch.ones(100)
    dist.all_reduce(t)
    if rank == 1:
        sys.exit(0)
    if rank == 2:
        time.sleep(4)
    dist.all_reduce(t, group=pair)
    assert torch.equal(t, torch.full((100,), 6.0)), t
    print(f"rank {rank}: STAGGER OK")
elif scenario == "relay":
    # A broadcast whose tree passes through rank 2, which comes 5 s late; every other rank
    # gets its part, ends and leaves. Those still waiting wait for rank 2, which is alive:
    # the ranks that left made the call, so their leaving is no error.
    dist.init_distributed(verbose=False)
    t = torch.full((1 << 20,), float(rank))
    dist.broadcast(t.clone(), src=0)          # the call's first sighting (checked across ranks)
    if rank == 2:
        time.sleep(5)
    t0 = time.monotonic()
    dist.broadcast(t, src=0)
    assert torch.equal(t, torch.zeros(1 << 20)), t
    print(f"rank {rank}: RELAY OK after {time.monotonic() - t0:.1f} s", flush=True)
    sys.exit(0)                               # no barrier: each rank leaves when it is done
elif scenario == "reinit":
    dist.init_distributed(verbose=False)
    dist.init_distributed(verbose=False)     # the same again: fine
    expect(CallError, lambda: dist.init_distributed(dist_backend="mpi"), "already initialized",
           "dist_backend")
elif scenario == "sessions":
    # mcr started and stopped three times in one process, each time with sub-groups (mcr's
    # and torch's) in use: each session's groups must not read the last one's store keys.
    import torch.distributed as tdist
    for i in range(3):
        dist.init_distributed(verbose=False)
        mine, theirs = dist.new_group([0, 1]), tdist.new_group([0, 1])
        dist.new_group([0])
        for g in (None, mine, theirs):
            t = torch.full((4,), float(rank + i))
            dist.all_reduce(t, group=g)
            assert t.tolist() == [float(1 + 2 * i)] * 4, (i, t)
        dist.destroy_process_group()
    dist.init_distributed(verbose=False)
elif scenario == "bad_table":
    os.environ["MCR_TUNING_TABLE"] = os.path.join(tables_dir, "bad.yaml")
    expect(TableError, lambda: dist.init_distributed(verbose=False), "bad.yaml:")
elif scenario == "local":
    dist.init_distributed(verbose=False)
    n = dist.get_world_size()
    x = torch.ones(10)
    expect(CallError, lambda: dist.all_gather_into_tensor(torch.empty(10 * n + 1), x),
           "all_gather_into_tensor", str(10 * n + 1))
    expect(CallError, lambda: dist.all_gather_into_tensor(torch.empty(10 * n,
                                                                      dtype=torch.float64), x),
           "dtype", "float64")
    expect(CallError, lambda: dist.reduce_scatter_tensor(torch.empty(3), x),
           "reduce_scatter_tensor", "tensor has 10 elements", "group size x output_tensor")
    expect(CallError, lambda: dist.all_to_all_single(torch.empty(10), x, [1] * n, [2] * n),
           "split_sizes")
    xn = torch.ones(2 * n)      # equal splits
    expect(CallError, lambda: dist.all_to_all_single(torch.empty(2 * n, dtype=torch.int32), xn),
           "all_to_all_single", "dtype", "int32")
    expect(CallError, lambda: dist.all_to_all_single(torch.empty(2 * n + n), xn),
           "all_to_all_single", f"{3 * n} elements")
    expect(CallError, lambda: dist.all_to_all_single(torch.empty(2 * n, device="meta"), xn),
           "all_to_all_single", "output is on meta", "tensor on cpu")
    if n > 1:
        expect(CallError, lambda: dist.all_to_all_single(torch.empty(2 * n + 1),
                                                         torch.ones(2 * n + 1)),
               "all_to_all_single", f"not divisible by group size {n}")
    expect(CallError, lambda: dist.all_reduce([1, 2, 3]), "torch.Tensor", "list")
    expect(CallError, lambda: dist.broadcast(x, n + 3), "rank", str(n + 3))
    expect(BackendUnavailable, lambda: dist.all_reduce(x, backend="nosuch"),
           "unknown backend 'nosuch'")
    expect(BackendUnavailable,
           lambda: dist.all_reduce(torch.ones(4, dtype=torch.bfloat16), backend="mpi"),
           "backend 'mpi'", "cannot serve", "all_reduce (sum)", "bfloat16", "MPI has no")
    expect(BackendUnavailable, lambda: dist.all_reduce(x, backend="nccl"),
           "nccl", "CUDA")
    expect(ValueError, lambda: dist.all_reduce(x, op="sum"), "reduce op")
    expect(TypeError, lambda: dist.all_reduce(x, sync_op=True), "sync_op")
    expect(TypeError, lambda: dist.all_gather_into_tensor(torch.empty(10 * n), input_tensor=x),
           "input_tensor")
    sub = dist.new_group([0])
    if rank != 0:
        expect(CallError, lambda: dist.all_reduce(x, group=sub), "not a member")
        assert dist.get_rank(sub) == -1
    gone = dist.new_group(list(range(n)))
    dist.all_reduce(torch.ones(2), group=gone)
    dist.destroy_process_group(gone)
    expect(CallError, lambda: dist.all_reduce(x, group=gone), "destroyed")
    dist.barrier()
elif scenario == "check_sizes":
    os.environ["MCR_CHECK"] = "1"
    dist.init_distributed(verbose=False)
    expect(MismatchError, lambda: dist.all_reduce(torch.ones(10 + rank)), "disagree",
           "bytes", "rank 0", "rank 1")
    expect(MismatchError, lambda: dist.all_reduce(
        torch.ones(10, dtype=torch.float32 if rank == 0 else torch.float64)), "dtype",
        "10 x float32", "10 x float64")
    agreeing_calls_still_work()
elif scenario == "timeout":
    os.environ["MCR_TIMEOUT_S"] = "2"
    dist.init_distributed(verbose=False)
    # mpi twice: a synchronous call (waiting for its peer on the board, before MPI's
    # blocking form in this thread), then an asynchronous one of MCR_MPI_BLOCKING_BYTES,
    # whose blocking form runs on mcr's worker, which no deadline can interrupt inside MPI.
    calls = (("mpi", 1000, False), ("mpi", 1 << 21, True), ("gloo", 1000, False))

    def call(be: str, numel: int, async_op: bool) -> None:
        w = dist.all_reduce(torch.ones(numel), backend=be, async_op=async_op)
        if w is not None:
            w.wait()
    for be, numel, _ in calls:
        # Made once together, so that the repeats below pass mcr's first-call signature check
        # and reach the libraries (a new kind of call would time out in the check instead).
        dist.all_reduce(torch.ones(numel), backend=be)
    if rank == 0:
        for be, numel, async_op in calls:
            t0 = time.monotonic()
            expect(McrTimeoutError, lambda: call(be, numel, async_op),
                   "all_reduce", f"'{be}'", f"{4 * numel} bytes", "did not complete within 2 s",
                   "MCR_TIMEOUT_S")
            assert time.monotonic() - t0 < 30, "timeout took far longer than MCR_TIMEOUT_S"
        # The worker is still inside the blocking call: the next MPI call is refused at once.
        t0 = time.monotonic()
        expect(McrTimeoutError, lambda: dist.all_reduce(torch.ones(1000), backend="mpi"),
               "MPI_Allreduce not issued", "inside an earlier blocking MPI collective")
        assert time.monotonic() - t0 < 1, "a call behind a stuck worker waited a deadline"
    else:
        time.sleep(14)  # never joins: rank 0 must time out rather than hang
    print(f"rank {rank}: ERRORS OK", flush=True)
    os._exit(0)  # pending collectives would make MPI_Finalize wait forever
elif scenario == "capture":
    # GPU tensors (ranks may share a GPU): a host library forced inside CUDA graph capture is
    # refused with the reason, before anything is captured or any rank waits.
    dist.init_distributed(verbose=False)
    t = torch.ones(1000, device="cuda")
    for be in ("mpi", "gloo_lanes2", "mpi_lanes2"):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            expect(BackendUnavailable, lambda: dist.all_reduce(t, backend=be),
                   f"'{be}'", "cannot run inside CUDA graph capture")
    dist.all_reduce(t, backend="mpi")   # outside capture the same call runs
    assert t.tolist() == [float(dist.get_world_size())] * 1000
elif scenario == "no_mpi":
    dist.init_distributed(verbose=False)
    expect(BackendUnavailable, lambda: dist.all_reduce(torch.ones(3), backend="mpi"),
           "not launched by an MPI launcher")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [dist.get_world_size()] * 3
elif scenario in ("new_vs_old", "new_vs_old_exit"):
    # With the default settings, rank 0 makes a new kind of call while its peers make one of a
    # kind made before, at the same point: within MCR_STALL_S (10 s) and a second every rank
    # gets a MismatchError naming both calls (it waited MCR_TIMEOUT_S, 600 s, naming neither).
    # _exit: each rank's program ends as soon as it has its error, as a real one would; rank
    # 0, still waiting then, names both calls all the same (not "rank 1 left").
    dist.init_distributed(verbose=False)
    dist.all_reduce(torch.ones(100))
    t0 = time.monotonic()
    mine, theirs = (200, 100) if rank == 0 else (100, 200)
    expect(MismatchError, lambda: dist.all_reduce(torch.ones(mine)),
           "made different calls at call 2 of the group", f"all_reduce sum of {mine} x float32",
           f"all_reduce sum of {theirs} x float32")
    took = time.monotonic() - t0
    assert took < 60, f"the mismatch took {took:.0f} s to report"
    print(f"rank {rank}: ERRORS OK after {took:.1f} s", flush=True)
    if scenario.endswith("_exit"):
        raise SystemExit(0)
    leave_when_all_said(dist.get_world_size())
elif scenario.startswith("warm_"):
    # After warm-up (every rank has made both kinds of call, twice), rank 0 makes one kind
    # while its peers make the other, at the same point, MCR_CHECK unset: every rank gets a
    # MismatchError naming both calls.
    # warm_<case>_<library>; LATE_RANK=r: rank r comes to the mismatch a second late (the
    # others are inside their library by then).
    cases, lib = scenario[len("warm_"):].rsplit("_", 1)
    dist.init_distributed(verbose=False)
    be = None if lib == "auto" else lib
    ws = dist.get_world_size()
    R = dist.ReduceOp

    def ar(n_el: int, dtype: torch.dtype = torch.float32, op: object = R.SUM,
           async_op: bool = False) -> tuple:
        x = torch.ones(n_el, dtype=dtype)
        if async_op:
            return (lambda: dist.all_reduce(x, op=op, backend=be, async_op=True).wait()), x
        return (lambda: dist.all_reduce(x, op=op, backend=be)), x

    def gather() -> tuple:
        out = torch.zeros(32 * ws)
        return (lambda: dist.all_gather_into_tensor(out, torch.ones(32), backend=be)), out

    def bcast(root: int) -> tuple:
        x = torch.full((64,), float(rank))
        return (lambda: dist.broadcast(x, src=root, backend=be)), x

    def straddle(n_el: int) -> tuple:    # the table's boundary: gloo below 1 KiB, lanes above
        x = torch.ones(n_el)
        return (lambda: dist.all_reduce(x)), x

    calls = {"size": (lambda: ar(1000), lambda: ar(999)),
             "sizebig": (lambda: ar(20000), lambda: ar(19999)),
             "dtype": (lambda: ar(64), lambda: ar(64, torch.int32)),
             "redop": (lambda: ar(64), lambda: ar(64, op=R.MAX)),
             "redopint": (lambda: ar(64, torch.int32), lambda: ar(64, torch.int32, R.BAND)),
             "op": (lambda: ar(64), gather),
             "root": (lambda: bcast(0), lambda: bcast(1)),
             "straddle": (lambda: straddle(256), lambda: straddle(254)),
             "async": (lambda: ar(64, async_op=True), lambda: ar(64, torch.int32, async_op=True)),
             # sizes no rank made before, in the size class and guard band of one warmed up:
             # each rank decides from that kind's last decision (mcr.route's new-size path)
             "new": (lambda: ar(777), lambda: ar(778))}
    kinds = calls[cases]
    warm_up = ((lambda: ar(1000)),) if cases == "new" else kinds
    for _ in range(2):
        for make in warm_up:
            make()[0]()
    fn, x = kinds[0 if rank == 0 else 1]()
    if os.environ.get("LATE_RANK") == str(rank):
        time.sleep(1.0)
    before = x.clone()
    t0 = time.monotonic()
    try:
        fn()
    except MismatchError as e:
        msg = str(e)
        print(f"rank {rank}: EXPECTED MismatchError: {msg}", flush=True)
        # A rank that saw it before its library ran keeps its tensor; one already inside
        # its library when a peer parted learns it from the stall watch.
        assert f"made different calls at call {2 * len(warm_up) + 1}" in msg, msg
        if "left as they were" in msg:
            assert torch.equal(x, before), f"{cases}: the tensor changed"
    else:
        raise AssertionError("no MismatchError raised")
    took = time.monotonic() - t0
    print(f"rank {rank}: ERRORS OK after {took:.1f} s", flush=True)
    if scenario.endswith("_exit"):
        raise SystemExit(0)
    leave_when_all_said(dist.get_world_size())
elif scenario == "store_keys":
    # A job whose sizes change every call: the keys mcr leaves in torch's store stay a few,
    # not one or two per size (with the guard and without, MCR_GUARD=0).
    import torch.distributed as tdist
    dist.init_distributed(verbose=False)
    store = tdist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(1))
    before = store.num_keys()
    for k in range(2, 400):
        dist.all_reduce(torch.ones(k), backend="gloo")
    grew = store.num_keys() - before
    print(f"rank {rank}: store keys grew by {grew} over 398 new sizes", flush=True)
    assert grew <= 4 * dist.get_world_size(), grew
elif scenario == "uneven_splits":
    # All-to-all with split sizes: ranks whose sends and peers' receives disagree get an error
    # on every rank naming ranks and splits, also once the same calls have run before.
    dist.init_distributed(verbose=False)
    n, me = dist.get_world_size(), dist.get_rank()
    x = torch.arange(3 * n, dtype=torch.float32).view(n * 3, 1) + 100 * me
    for _ in range(2):                               # warm-up: agreeing calls, twice
        out = torch.empty(3 * n, 1)
        dist.all_to_all_single(out, x, [3] * n, [3] * n)
        assert out.view(n, 3)[:, 0].tolist() == [100 * q + 3 * me for q in range(n)], out
        ins = [1 + (me + p) % n for p in range(n)]   # rank me sends 1 + (me + p) % n rows to p
        y = torch.full((sum(ins), 2), float(me))
        got = torch.empty(sum(ins), 2)
        dist.all_to_all_single(got, y, ins, ins)     # symmetric: p sends me as many
        assert got[:, 0].tolist() == [float(q) for q in range(n) for _ in range(ins[q])], got
    # Rank 1 expects one row fewer from rank 0 than rank 0 sends.
    outs = [1 + (me + p) % n - (me == 1 and p == 0) for p in range(n)]
    bad = torch.empty(sum(outs), 2)
    expect(MismatchError, lambda: dist.all_to_all_single(bad, y, outs, ins),
           "split sizes disagree", "rank 0 sends 2 rows to rank 1, which expects 1",
           "input_split_sizes", "output_split_sizes")
    z = torch.zeros(sum(ins), 2, dtype=torch.float32 if me == 0 else torch.int32)
    expect(MismatchError, lambda: dist.all_to_all_single(torch.empty_like(z), z, ins, ins),
           "different dtypes", "rank 0 float32", "rank 1 int32")
    # The list form too: its tensors' sizes are the splits.
    lst_in = [torch.ones(4 if (me, p) != (0, 1) else 5) for p in range(n)]
    lst_out = [torch.empty(4) for _ in range(n)]
    expect(MismatchError, lambda: dist.all_to_all(lst_out, lst_in), "rank 0 sends 5 elements "
           "to rank 1, which expects 4")
    dist.all_to_all_single(got, y, ins, ins)         # agreeing calls still work
    assert got[:, 0].tolist() == [float(q) for q in range(n) for _ in range(ins[q])], got
    # The table decides for uneven calls too (by the largest block, the same on every rank).
    lib = dist.which_backend("all_to_all", n * (1 << (n * 2 * 4 - 1).bit_length()),
                             torch.float32)
    served = mcr_runtime.get().dispatcher.served()
    assert served.get(("all_to_all", lib), [0])[0] >= 3, (lib, served)
    print(f"rank {rank}: uneven all-to-all on {lib}", flush=True)
else:
    raise SystemExit(f"unknown scenario {scenario}")
print(f"rank {rank}: ERRORS OK", flush=True)
if dist.is_initialized():
    dist.destroy_process_group()
