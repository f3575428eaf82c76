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
mcr_world = tdist.group.WORLD
dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
dtype = torch.bfloat16 if cuda else torch.float32
h = args.hidden if cuda else 64


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
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    gen = torch.Generator(dev).manual_seed(1 + rank)
    xs = [torch.randn(args.batch * 128, h, device=dev, dtype=dtype, generator=gen)
          for _ in range(args.steps)]
    losses: dict[str, list[float]] = {"mcr": [], "nccl": [], "mcr_nccl": []}
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
    if "mcr_nccl" in t:
        r2 = sorted(b / a for a, b in zip(t["mcr_nccl"], t["nccl"]))
        out[kind + "_mcr_nccl"] = {"ratio_median": statistics.median(r2),
                                   "ratio_range": [r2[0], r2[-1]], "ratio_ci95": ci95(r2)}
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
