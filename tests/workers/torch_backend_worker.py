"""torch.distributed code on the `mcr` backend trains as on plain Gloo, bit for bit: DDP, FSDP2
(no mcr line: the backend gives FSDP2 mcr's comm objects; each rank says which served),
DTensor tensor parallelism (parallelize_module; `tpc` under torch.compile, `tpcg` compiled into
CUDA graphs), DDP under torch.compile (`ddpc`), on 4 ranks a 2-D mesh (FSDP2 x TP), and FSDP2
saved and loaded with DCP (`ckpt`, into the folder of a fourth argument). One workload a run,
on plain Gloo or on the `mcr` backend (torch's default backend sent there by install(); `reg`:
register() alone, then init_process_group("mcr"); `regdev`, `regmix`: with "cpu:mcr,cuda:mcr"
and "cpu:gloo,cuda:mcr")); each rank prints its losses exactly (float.hex), rank 0 of an mcr
run the summary of what served it. A third argument `cuda` runs it on GPUs (plain is then
`nccl`).

    torchrun --nproc_per_node=2 tests/workers/torch_backend_worker.py ddp mcr
    mpirun -np 4 python tests/workers/torch_backend_worker.py mesh gloo
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as tdist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))
from common import torch_env_from_mpi  # noqa: E402


class Block(torch.nn.Module):
    """An MLP block: up (column-parallel under TP), down (row-parallel)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


DEVICE = sys.argv[3] if len(sys.argv) > 3 else "cpu"
# register() alone, then init_process_group with these backend strings
REGISTERED = {"reg": "mcr", "regdev": "cpu:mcr,cuda:mcr", "regmix": "cpu:gloo,cuda:mcr"}


def train(what: str) -> list[float]:
    """Five steps of `what`; the losses averaged over ranks."""
    rank, world = tdist.get_rank(), tdist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block()).to(DEVICE)
    tp = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    if what == "ddp":
        model = DDP(model)
    elif what == "ddpc":   # compiled DDP: its bucket rebuild calls the group from a graph break
        model = torch.compile(DDP(model))
    elif what == "fsdp":
        for m in model:
            fully_shard(m)
        fully_shard(model)
    elif what in ("tp", "tpc", "tpcg"):
        mesh = init_device_mesh(DEVICE, (world,))
        for m in model:
            parallelize_module(m, mesh, tp)
        if what != "tp":    # torch.compile (inductor): DTensor's functional collectives;
            # tpcg: in CUDA graphs (reduce-overhead), on GPUs
            model = torch.compile(model, mode="reduce-overhead" if what == "tpcg" else None)
    else:   # mesh: FSDP2 over dim 0, TP over dim 1
        mesh = init_device_mesh(DEVICE, (world // 2, 2), mesh_dim_names=("dp", "tp"))
        for m in model:
            parallelize_module(m, mesh["tp"], tp)
            fully_shard(m, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dp_rank = rank if what in ("ddp", "ddpc", "fsdp") else rank // 2 if what == "mesh" else 0
    gen = torch.Generator().manual_seed(1 + dp_rank)
    losses = []
    for _ in range(5):
        x = torch.randn(8, 32, generator=gen).to(DEVICE)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        tdist.all_reduce(total)
        losses.append(total.item() / world)
    if what in ("fsdp", "mesh"):   # which comm objects FSDP2 used: its own or mcr's
        state = model[0]._get_fsdp_state()
        group = (getattr(state, "_fsdp_param_groups", None) or [state._fsdp_param_group])[0]
        names = [f"{type(c).__module__}.{type(c).__name__}"
                 for c in (group._all_gather_comm, group._reduce_scatter_comm)]
        print(f"rank {rank}: COMMS {' '.join(names)}", flush=True)
    return losses


def checkpoint(folder: str) -> list[float]:
    """FSDP2 saved with DCP's async_save (which wants a CPU backend on the group) after 2 steps,
    then 2 more steps; the same 2 steps again from a fresh model loaded with dcp.load, and from
    one loaded from rank 0's full state dict (set_model_state_dict's broadcast_from_rank0):
    the three runs' losses, which must repeat."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    def build(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(Block(), Block()).to(DEVICE)
        for m in model:
            fully_shard(m)
        fully_shard(model)
        return model, torch.optim.SGD(model.parameters(), lr=0.05)

    def steps(model: torch.nn.Module, opt: torch.optim.Optimizer, seed: int) -> list[float]:
        gen, out = torch.Generator().manual_seed(seed + tdist.get_rank()), []
        for _ in range(2):
            loss = model(torch.randn(8, 32, generator=gen).to(DEVICE)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total = loss.detach().clone()
            tdist.all_reduce(total)
            out.append(total.item())
        return out

    model, opt = build(0)
    steps(model, opt, 1)
    msd, osd = get_state_dict(model, opt)
    dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=folder).result()
    # Cloned: on one host rank the full state dict's tensors are the parameters themselves.
    full = {k: v.clone() for k, v in get_model_state_dict(model, options=StateDictOptions(
        full_state_dict=True, cpu_offload=True)).items()}
    losses = steps(model, opt, 2)
    loaded, lopt = build(5)
    msd, osd = get_state_dict(loaded, lopt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(loaded, lopt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    losses += steps(loaded, lopt, 2)
    sent, sopt = build(6)      # SGD without momentum: the model's state is all there is
    set_model_state_dict(sent, full if tdist.get_rank() == 0 else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return losses + steps(sent, sopt, 2)


def calls() -> list[float]:
    """torch.distributed's other calls on the group, each checked against what it must give;
    returns [number of checks]."""
    rank, n = tdist.get_rank(), tdist.get_world_size()
    checks = 0

    def ok(cond: bool, what: str) -> None:
        nonlocal checks
        assert cond, f"rank {rank}: {what}"
        checks += 1
    t = torch.full((3,), float(rank))
    tdist.reduce(t, dst=0)
    ok(rank != 0 or t.tolist() == [n * (n - 1) / 2] * 3, "reduce")
    got = torch.empty(2)
    tdist.scatter(got, [torch.full((2,), float(i)) for i in range(n)] if rank == 0 else None, 0)
    ok(got.tolist() == [float(rank)] * 2, "scatter")
    outs = [torch.empty(2) for _ in range(n)] if rank == 0 else None
    tdist.gather(torch.full((2,), float(rank)), outs, dst=0)
    ok(rank != 0 or [o[0].item() for o in outs] == [float(i) for i in range(n)], "gather")
    outs = [torch.empty(1) for _ in range(n)]
    tdist.all_to_all(outs, [torch.full((1,), float(rank * n + i)) for i in range(n)])
    ok([o.item() for o in outs] == [float(i * n + rank) for i in range(n)], "all_to_all")
    sizes = [1 + (rank + p) % n for p in range(n)]          # symmetric: p sends me as many
    out = torch.empty(sum(sizes))
    tdist.all_to_all_single(out, torch.full((sum(sizes),), float(rank)), sizes, sizes)
    ok(out.tolist() == [float(q) for q in range(n) for _ in range(sizes[q])], "uneven a2a")
    objs = [None] * n
    tdist.all_gather_object(objs, {"rank": rank})
    ok(objs == [{"rank": i} for i in range(n)], "all_gather_object")
    box = [{"from": rank}]
    tdist.broadcast_object_list(box, src=n - 1)
    ok(box == [{"from": n - 1}], "broadcast_object_list")
    objs = [None] * n if rank == 0 else None
    tdist.gather_object(rank * 3, objs, dst=0)
    ok(rank != 0 or objs == [i * 3 for i in range(n)], "gather_object")
    box = [None]
    tdist.scatter_object_list(box, [f"to {i}" for i in range(n)] if rank == 0 else None, src=0)
    ok(box == [f"to {rank}"], "scatter_object_list")
    ring = torch.empty(2)                                   # every rank sends first: no wait
    for w in tdist.batch_isend_irecv([tdist.P2POp(tdist.isend, torch.full((2,), float(rank)),
                                                  (rank + 1) % n),
                                      tdist.P2POp(tdist.irecv, ring, (rank - 1) % n)]):
        w.wait()
    ok(ring.tolist() == [float((rank - 1) % n)] * 2, "batch_isend_irecv ring")
    if rank < 2:                                            # a pair: 0 sends, 1 receives
        t = torch.full((4,), 7.0)
        if rank == 0:
            tdist.send(t, 1)
        else:
            t.zero_()
            ok(tdist.recv(t) == 0 and t.tolist() == [7.0] * 4, "recv from any source")
    # An asynchronous host all-reduce (DDP's buckets) that its library finishes alone (Gloo)
    # is under way when it returns, as on torch's Gloo group: rank 0 issues it while its peers
    # sleep (a kind of call already made: a new kind's first call waits for every rank's).
    import mcr.comm as dist
    from mcr import runtime
    under_way = 0
    for numel in (4096, 1 << 20):
        t = torch.full((numel,), float(rank + 1))
        lib = dist.which_backend("all_reduce", t.nbytes, t.dtype, "cpu")
        alone = runtime.get().backends[lib].completes_alone
        tdist.all_reduce(t.clone())      # the kind's first call waits for every rank
        if rank != 0:
            time.sleep(1.0)
        t0 = time.perf_counter()
        w = tdist.all_reduce(t, async_op=True)
        issued, running = time.perf_counter() - t0, not w.is_completed()
        ok(rank != 0 or not alone or (issued < 0.5 and running),
           f"async all_reduce of {t.nbytes} B on {lib}: returned after {issued:.3f} s, under "
           f"way {running}")
        under_way += alone
        ok(w.get_future().wait()[0] is t and t.tolist() == [n * (n + 1) / 2] * numel,
           f"async all_reduce's future ({t.nbytes} B on {lib})")
        ok(w.wait() and w.is_completed(), "async all_reduce's wait")
    print(f"rank {rank}: UNDER WAY {under_way}", flush=True)
    tdist.barrier()
    try:                       # torch runs it on Gloo alone: mcr.comm.monitored_barrier instead
        tdist.monitored_barrier()
    except ValueError as e:
        ok("only implemented for GLOO" in str(e), f"monitored_barrier: {e}")
    return [float(checks)]


def gone() -> None:
    """Rank 1 leaves the job after a first all-reduce; rank 0's asynchronous all-reduce of the
    same kind (under way on Gloo) then fails, its future raising mcr's error naming the call.
    Both ranks end here (os._exit: the group cannot be torn down with a rank gone)."""
    rank, t = tdist.get_rank(), torch.ones(4096)
    tdist.all_reduce(t.clone())
    if rank == 1:
        time.sleep(0.5)
        os._exit(0)
    time.sleep(1.5)
    try:
        tdist.all_reduce(t, async_op=True).get_future().wait()
        print("rank 0: GONE no error", flush=True)
    except Exception as e:  # noqa: BLE001 - what the script would see, printed
        print(f"rank 0: GONE {type(e).__name__}: {e}"[:600], flush=True)
    os._exit(0)


if __name__ == "__main__":
    what, backend = sys.argv[1], sys.argv[2]
    if backend not in ("mcr", "env"):
        # Plain torch needs its rendezvous variables under mpirun (so do the REGISTERED runs:
        # torch's own init_process_group); mcr's sets them itself (the `mcr` and `env` runs
        # test that).
        torch_env_from_mpi()
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", os.environ.get(
            "OMPI_COMM_WORLD_LOCAL_RANK", "0"))))
    if backend == "mcr":
        from mcr.integrations import torch_backend
        torch_backend.install()
        tdist.init_process_group()                 # torch's default backend: now mcr's
        assert tdist.get_backend() == "mcr", tdist.get_backend()
    elif backend in REGISTERED:   # register() alone: torch's own start of the named backend
        from mcr.integrations import torch_backend
        torch_backend.register()
        tdist.init_process_group(REGISTERED[backend])
        backend = "mcr"
    elif backend == "env":                         # MCR_TORCH=1: the script knows no mcr
        tdist.init_process_group("gloo")
        assert tdist.get_backend() == "mcr", tdist.get_backend()
        backend = "mcr"
    else:
        tdist.init_process_group(backend)
    if what == "gone":
        gone()
    losses = calls() if what == "calls" else checkpoint(sys.argv[4]) if what == "ckpt" else \
        train(what)
    if what in ("tpc", "tpcg"):   # compiled, and the collectives inside the compiled graphs
        from torch._dynamo.utils import counters
        print(f"rank {tdist.get_rank()}: COMPILED graphs {counters['stats']['unique_graphs']} "
              f"breaks {sum(counters['graph_break'].values())}", flush=True)
    rank = tdist.get_rank()
    if backend == "mcr" and rank == 0:
        import mcr.comm as dist
        dist.log_summary()
    # Gloo's worker thread drops each finished work's tensors after the waiter is woken: a
    # barrier first, so that none is left to free a Python object while the interpreter exits
    # (seen once in CI: plain Gloo's FSDP2 run aborted at exit in ProcessGroupGloo::runLoop).
    tdist.barrier()
    tdist.destroy_process_group()
    print(f"rank {rank}: LOSSES {what} {backend} {[float.hex(v) for v in losses]}", flush=True)
    if backend != "mcr":
        # A reference run's exit is torch's own, and it has aborted at interpreter exit (CI:
        # plain Gloo's TP run, under torchrun and under mpirun, "terminate called without an
        # active exception" from ProcessGroupGloo's thread, after both ranks had printed): it
        # says nothing about mcr, so the reference skips the teardown, finalizing MPI first
        # where it was started (an MPI launcher counts a rank that never finalizes as failed).
        sys.stdout.flush()
        sys.stderr.flush()
        if "mpi4py.MPI" in sys.modules:
            from mpi4py import MPI
            if MPI.Is_initialized() and not MPI.Is_finalized():
                MPI.Finalize()
        os._exit(0)
