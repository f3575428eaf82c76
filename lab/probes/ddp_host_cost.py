"""Where a DDP step on the `mcr` backend spends its extra host time, one rank: the same model
(hidden H, L blocks, batch B) as DDP on plain NCCL (`nccl`), on mcr's group (`mcr`), on mcr's
group with its allreduce handing plain NCCL's own Work back (`pass`: torch's Python-backend
layer alone), the same wrapped in mcr's OnStream (`passos`), mcr's allreduce as it was before
torch's own Work was handed on (`mcr_os`), and with no DDP (`floor`).
Blocks alternated; then one instrumented block per variant: host us inside the group's
allreduce and get_future as DDP calls them (on autograd's thread, which cProfile misses), and
one block under torch.profiler (CPU ops of every thread).

    torchrun --nproc_per_node=1 lab/probes/ddp_host_cost.py [--cpu] [--out DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import statistics
import time

import torch
import torch.distributed as tdist
from pairstats import ci95
from probe_util import backend_world
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mcr.comm as dist
from mcr.integrations.torch_backend import McrProcessGroup
from mcr.integrations.torch_works import OnStream

ap = argparse.ArgumentParser()
ap.add_argument("--hidden", type=int, default=1024)
ap.add_argument("--layers", type=int, default=16)
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--rounds", type=int, default=9)
ap.add_argument("--bucket-mb", type=float, default=25.0)
ap.add_argument("--cpu", action="store_true")
ap.add_argument("--out", default="")
ap.add_argument("--cprofile-inside", default="",
                help="cProfile inside each instrumented allreduce, on the thread that calls it "
                     "(autograd's), written to CPROFILE_INSIDE.<variant>.txt")
ap.add_argument("--gc-freeze", action="store_true",
                help="gc.freeze() after the warm-up: the heap so far never collected again")
args = ap.parse_args()

cuda, plain, mw, dev, dtype = backend_world(args.cpu)
h = args.hidden


def sync() -> None:
    """Wait for the GPU."""
    if cuda:
        torch.cuda.synchronize()


orig_allreduce = McrProcessGroup.allreduce


def passthru(self, tensors, opts=None):  # noqa: ANN001, ANN201
    """plain's own Work, through mcr's Python group."""
    return tdist.all_reduce(tensors[0], opts.reduceOp, group=plain, async_op=True)


def pass_onstream(self, tensors, opts=None):  # noqa: ANN001, ANN201
    """plain's own Work wrapped as mcr wraps a GPU call."""
    w = tdist.all_reduce(tensors[0], opts.reduceOp, group=plain, async_op=True)
    return OnStream([w], tensors) if cuda else w


def mcr_onstream(self, tensors, opts=None):  # noqa: ANN001, ANN201
    """mcr's allreduce as before 2026-12-07 (second session): OnStream always on GPU."""
    if tensors[0].is_cuda:
        return OnStream([dist.all_reduce(tensors[0], opts.reduceOp, group=self._g(),
                                         async_op=True)], tensors)
    return orig_allreduce(self, tensors, opts)


IMPL = {"mcr": orig_allreduce, "pass": passthru, "passos": pass_onstream, "mcr_os": mcr_onstream}


def make() -> nn.Module:
    """The same stack of MLP blocks (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
                           for _ in range(args.layers)]).to(dev, dtype)


def ddp(group: object) -> nn.Module:
    """A fresh copy under DDP on `group`."""
    return DDP(make(), device_ids=[dev.index] if cuda else None, process_group=group,
               bucket_cap_mb=args.bucket_mb)


models = {"floor": make(), "nccl": ddp(plain), "mcr": ddp(mw), "pass": ddp(mw),
          "passos": ddp(mw), "mcr_os": ddp(mw)}
opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
xs = [torch.randn(args.batch * 128, h, device=dev, dtype=dtype) for _ in range(args.steps)]
stamps: list[tuple[str, float]] = []


def block(k: str) -> tuple[float, float]:
    """(wall ms, host ms before the final sync) per step over args.steps steps."""
    McrProcessGroup.allreduce = IMPL.get(k, orig_allreduce)
    m, opt = models[k], opts[k]
    sync()
    t0 = time.perf_counter()
    for x in xs:
        m(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    host = time.perf_counter() - t0
    sync()
    return ((time.perf_counter() - t0) / args.steps * 1e3, host / args.steps * 1e3)


for k in models:
    block(k)
if args.gc_freeze:
    gc.collect()
    gc.freeze()
# Time in Python's cyclic collector during each variant's rounds, and its passes by generation.
gc_now: list[str] = [""]
gc_ms: dict[str, float] = {k: 0.0 for k in models}
gc_n: dict[str, list[int]] = {k: [0, 0, 0] for k in models}
gc_t0 = [0.0]


def on_gc(phase: str, info: dict) -> None:
    """Adds the collector's passes to the variant running now."""
    if not gc_now[0]:
        return
    if phase == "start":
        gc_t0[0] = time.perf_counter()
    else:
        gc_ms[gc_now[0]] += (time.perf_counter() - gc_t0[0]) * 1e3
        gc_n[gc_now[0]][info["generation"]] += 1


gc.callbacks.append(on_gc)
wall: dict[str, list[float]] = {k: [] for k in models}
host: dict[str, list[float]] = {k: [] for k in models}
order = list(models)
for r in range(args.rounds):
    for k in (order if r % 2 == 0 else order[::-1]):
        gc_now[0] = k
        w, hs = block(k)
        gc_now[0] = ""
        wall[k].append(w)
        host[k].append(hs)
gc.callbacks.remove(on_gc)

# Instrumented: host time inside allreduce and get_future, as DDP makes them.
inside: dict[str, dict[str, list[float]]] = {}
for k in ("mcr", "pass", "passos", "mcr_os"):
    impl = IMPL[k]
    rec: dict[str, list[float]] = {"allreduce": [], "get_future": []}
    prof = cProfile.Profile() if args.cprofile_inside else None

    def timed(self, tensors, opts=None, impl=impl, rec=rec, prof=prof):  # noqa: ANN001, ANN201
        """impl, its host time and its Work's get_future's recorded."""
        if prof is not None:
            prof.enable()
        t0 = time.perf_counter()
        w = impl(self, tensors, opts)
        rec["allreduce"].append((time.perf_counter() - t0) * 1e6)
        if prof is not None:
            prof.disable()
        gf = w.get_future

        def get_future():  # noqa: ANN202
            t1 = time.perf_counter()
            f = gf()
            rec["get_future"].append((time.perf_counter() - t1) * 1e6)
            return f
        try:
            w.get_future = get_future
        except (AttributeError, TypeError):
            pass
        return w
    IMPL[k] = timed
    block(k)
    IMPL[k] = impl
    inside[k] = {n: [len(v), statistics.median(v) if v else 0.0] for n, v in rec.items()}
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
        with open(f"{args.cprofile_inside}.{k}.txt", "w") as f:
            f.write(buf.getvalue())

res = {"ms": {k: statistics.median(v) for k, v in wall.items()},
       "host_ms": {k: statistics.median(v) for k, v in host.items()},
       "inside_us": inside, "gc_ms": gc_ms, "gc_passes": gc_n, "blocks": wall}
for k in ("mcr", "pass", "passos", "mcr_os"):
    r = sorted(b / a for a, b in zip(wall[k], wall["nccl"]))
    res[f"nccl_over_{k}"] = [statistics.median(r), ci95(r)]
print("RESULT " + json.dumps(res), flush=True)

if args.out:
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    for k in models:
        with profile(activities=acts) as prof:
            block(k)
        with open(f"{args.out}.{k}.txt", "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
dist.log_summary()
tdist.destroy_process_group()
