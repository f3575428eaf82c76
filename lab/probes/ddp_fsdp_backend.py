"""DDP and FSDP2 training steps through the mcr torch.distributed backend against the same
steps on a plain NCCL group, in one process: the world is the mcr backend's
(`install()`), a second group of the same ranks is torch's NCCL; two copies of one model (same
weights), one on each group, and a third with no communication (the floor: DDP's and
FSDP2's collectives left out, timing only). Steps alternated A/B/C/C/B/A in blocks; losses of
the two compared step by step. On CPU (--cpu): Gloo for the plain group, a smoke test.

    torchrun --nproc_per_node=N lab/probes/ddp_fsdp_backend.py [--what ddp,fsdp] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as tdist
from pairstats import ci95
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--what", default="ddp,fsdp")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--hidden", type=int, default=4096)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--cpu", action="store_true")
ap.add_argument("--mcr-nccl", action="store_true",
                help="a fourth copy on the mcr backend with every call sent to NCCL")
ap.add_argument("--passthru", action="store_true",
                help="a copy on a minimal Python process group that hands each call to the plain "
                     "NCCL group (torch's Python-backend cost alone, without mcr)")
ap.add_argument("--cprofile", default="",
                help="after the rounds: one block of each copy under cProfile (rank 0), the "
                     "top functions by own time written to CPROFILE.<kind>.<copy>.txt")
ap.add_argument("--profile", default="",
                help="after the rounds: one block of each copy under torch.profiler, its top "
                     "kernels and CPU ops written to PROFILE.<kind>.<copy>.txt (rank 0)")
args = ap.parse_args()

from mcr.integrations import torch_backend  # noqa: E402

torch_backend.install()
cuda = not args.cpu
if cuda:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
tdist.init_process_group("nccl" if cuda else "gloo")   # install(): the mcr backend
rank, n = tdist.get_rank(), tdist.get_world_size()
plain = tdist.new_group(backend="nccl" if cuda else "gloo")


class Passthru(tdist.ProcessGroup):
    """The least a Python process group can do: each call straight to `plain`, torch's Work
    handed back."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self._name = ""

    def _set_group_name(self, name: str) -> None:
        self._name = name

    @property
    def group_name(self) -> str:
        return self._name

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "passthru"

    def allreduce(self, tensors, opts=None):  # noqa: ANN001, ANN201 - torch's signature
        return tdist.all_reduce(tensors[0], opts.reduceOp, group=plain, async_op=True)

    def broadcast(self, tensors, opts):  # noqa: ANN001, ANN201
        return tdist.broadcast(tensors[0], group_src=opts.rootRank, group=plain, async_op=True)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002, ANN001, ANN201
        return tdist.all_gather_into_tensor(output, input, group=plain, async_op=True)

    all_gather_single = _allgather_base   # the name newer torch calls

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002, ANN001, ANN201
        return tdist.reduce_scatter_tensor(output, input, opts.reduceOp, group=plain,
                                           async_op=True)

    reduce_scatter_single = _reduce_scatter_base

    def barrier(self, opts=None):  # noqa: ANN001, ANN201
        return tdist.barrier(group=plain, async_op=True)


if args.passthru:
    tdist.Backend.register_backend("passthru", lambda o, b: Passthru(o.group_rank, o.group_size),
                                   extended_api=True, devices=["cuda", "cpu"])
    passthru = tdist.new_group(backend="passthru")
mcr_world = tdist.group.WORLD
dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
dtype = torch.bfloat16 if cuda else torch.float32
h = args.hidden if cuda else int(os.environ.get("CPU_HIDDEN", "64"))


def make() -> nn.Module:
    """The same stack of MLP blocks on every rank (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
                           for _ in range(args.layers)]).to(dev, dtype)


def sync() -> None:
    """Wait for the GPU (nothing on CPU)."""
    if cuda:
        torch.cuda.synchronize()


def wrap(kind: str, group: object | None) -> nn.Module:
    """A fresh copy wrapped for `kind` on `group` (None: the floor, no communication)."""
    m = make()
    if group is None:
        return m
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(m, device_ids=[dev.index] if cuda else None, process_group=group)
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    mesh = DeviceMesh.from_group(group, dev.type)
    for block in m:
        fully_shard(block, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


out: dict = {}
for kind in args.what.split(","):
    models = {"mcr": wrap(kind, mcr_world), "nccl": wrap(kind, plain), "floor": wrap(kind, None)}
    if args.mcr_nccl:       # the same backend, every call sent to NCCL (force_backend)
        models["mcr_nccl"] = wrap(kind, mcr_world)
    if args.passthru and kind == "fsdp":     # DDP's C++ checks find no device type on it
        models["passthru"] = wrap(kind, passthru)
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    gen = torch.Generator(dev).manual_seed(1 + rank)
    xs = [torch.randn(args.batch * 128, h, device=dev, dtype=dtype, generator=gen)
          for _ in range(args.steps)]
    losses: dict[str, list[float]] = {"mcr": [], "nccl": [], "mcr_nccl": [], "passthru": []}
    issued: dict[str, list[float]] = {m: [] for m in models}   # host ms a step, before sync

    def block(mode: str, record: bool = False) -> float:
        """ms per training step over args.steps steps."""
        m, opt = models[mode], opts[mode]
        if args.mcr_nccl and cuda:
            import mcr.comm as dist
            dist.force_backend("nccl" if mode == "mcr_nccl" else None)
        sync()
        tdist.barrier(group=plain)
        t0 = time.perf_counter()
        for x in xs:
            loss = m(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if record and mode in losses:
                losses[mode].append(loss.detach())
        issued[mode].append((time.perf_counter() - t0) / args.steps * 1e3)
        sync()
        return (time.perf_counter() - t0) / args.steps * 1e3

    for mode in models:                     # warm-up, and the losses of the first steps
        block(mode, record=True)
    same = [float(a) == float(b) for a, b in zip(losses["mcr"], losses["nccl"])]
    diff = max(abs(float(a) - float(b)) for a, b in zip(losses["mcr"], losses["nccl"]))
    t: dict[str, list[float]] = {m: [] for m in models}
    order = list(models)
    for r in range(args.rounds):
        for mode in (order if r % 2 == 0 else order[::-1]):
            t[mode].append(block(mode))
    ratios = sorted(b / a for a, b in zip(t["mcr"], t["nccl"]))
    for other in ("mcr_nccl", "passthru"):
        if other in t:
            r2 = sorted(b / a for a, b in zip(t[other], t["nccl"]))
            out[f"{kind}_{other}"] = {"ratio_median": statistics.median(r2),
                                      "ratio_range": [r2[0], r2[-1]], "ratio_ci95": ci95(r2)}
    if args.cprofile and rank == 0:
        import cProfile
        import io
        import pstats
        for mode in models:
            cp = cProfile.Profile()
            cp.enable()
            block(mode)
            cp.disable()
            buf = io.StringIO()
            pstats.Stats(cp, stream=buf).sort_stats("tottime").print_stats(35)
            pstats.Stats(cp, stream=buf).sort_stats("cumulative").print_stats(35)
            with open(f"{args.cprofile}.{kind}.{mode}.txt", "w") as f:
                f.write(buf.getvalue())
    elif args.cprofile:
        for mode in models:
            block(mode)
    if args.profile and cuda:
        from torch.profiler import ProfilerActivity, profile
        for mode in models:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                block(mode)
            if rank == 0:
                ka = prof.key_averages()
                with open(f"{args.profile}.{kind}.{mode}.txt", "w") as f:
                    f.write(ka.table(sort_by="cuda_time_total", row_limit=25) + "\n")
                    f.write(ka.table(sort_by="self_cpu_time_total", row_limit=25) + "\n")
    med = {k: statistics.median(v) for k, v in t.items()}
    gap = med["nccl"] - med["floor"]
    out[kind] = {"ms": med, "ratio_median": statistics.median(ratios),
                 "ratio_range": [ratios[0], ratios[-1]], "ratio_ci95": ci95(ratios),
                 "captured": (med["nccl"] - med["mcr"]) / gap if gap > 0 else None,
                 "losses_equal": all(same), "loss_maxdiff": diff, "blocks": t,
                 "host_ms": {k: statistics.median(v) for k, v in issued.items()}}

if rank == 0:
    print("RESULT " + json.dumps(out), flush=True)
    import mcr.comm as dist
    dist.log_summary()
tdist.destroy_process_group()
