"""Real FSDP2 on CPU (Gloo, or MPI through mcr), plain and with mcr installed, losses compared.

In one process: two copies of a small model from the same seed, each fully_shard-ed per layer;
one trains with FSDP2's own collectives, the other after mcr.integrations.fsdp.install(); both
see the same data. Losses must be equal bit for bit at every step. --async uses FSDP2's async
all-gather (the Work must be a torch.distributed.Work for FSDP2 to wait on it); --divide F sets
a gradient divide factor, which FSDP2 reduce-scatters with PREMUL_SUM(1/F) (Gloo has no
PREMUL_SUM, so the plain copy sums and divides after: equal bits for a power-of-two F).
--hsdp shards over half the ranks and replicates over 2 (HSDP); the gradient all-reduce across
replicas must go through mcr as well (each copy has its own mesh, so the plain one's stays
torch's). --tp: a (world / 2) shard x 2 tensor-parallel mesh, torchtitan's 2-D layout: the
Linear pairs are column- then row-parallel over "tp" and FSDP2 shards over "shard"; TP's
all-reduces are DTensor's and bypass mcr (listed in the summary). --autoload runs under
MCR_FSDP=1: fully_shard itself installs mcr (the plain copy is sharded by torch's own
fully_shard, which the hook keeps as __mcr_wrapped__). --variant: other fully_shard settings
users pick (mixed precision, no resharding, resharding to a smaller group, accumulation,
explicit prefetching, dim-1 shards); --compile compiles each sharded layer.
Prints `rank R: FSDP OK <steps>`.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.distributed as tdist
from common import same_losses, served_summary
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

import mcr.comm as dist
import mcr.integrations.fsdp as mcr_fsdp
from mcr import bypass

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--async", dest="async_op", action="store_true")
ap.add_argument("--divide", type=float, default=0.0)
ap.add_argument("--ring", action="store_true",
                help="all-gather outputs from mcr's buffer ring (plain memory on CPU)")
ap.add_argument("--hsdp", action="store_true", help="a 2 x (world / 2) replicate x shard mesh")
ap.add_argument("--tp", action="store_true", help="(world / 2) shard x 2 tensor-parallel mesh")
ap.add_argument("--variant", default="",
                choices=["", "mp", "keep", "reshard2", "accum", "prefetch", "shard1"],
                help="mp: bf16 parameters, fp32 reduction; keep: reshard_after_forward=False; "
                     "reshard2: reshard to 2 ranks after forward; accum: 3 micro-batches a step, "
                     "gradient sync only on the last; prefetch: each layer prefetches the next "
                     "one's all-gather (forward) and the previous one's (backward) explicitly, "
                     "as torchtitan does; shard1: parameters sharded along dim 1 "
                     "(shard_placement_fn), so FSDP2 reorders what the all-gather returns")
ap.add_argument("--compile", action="store_true", help="torch.compile each layer after sharding")
ap.add_argument("--expect", default="", help="op:lib,... that must appear in mcr's summary")
ap.add_argument("--rtol", type=float, default=0.0,
                help="losses equal within this relative difference (0: bit for bit)")
ap.add_argument("--autoload", action="store_true",
                help="MCR_FSDP=1 is set: fully_shard must install mcr by itself")
args = ap.parse_args()
if args.autoload:
    assert hasattr(fully_shard, "__mcr_wrapped__"), "MCR_FSDP=1 did not hook fully_shard"

dist.init_distributed(verbose=False)
rank, world = dist.get_rank(), dist.get_world_size()


def build(shard: Any) -> torch.nn.Module:
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard")) \
        if args.hsdp else init_device_mesh("cpu", (world,))
    torch.manual_seed(4321)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 16))
    if args.tp:
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )
        mesh2 = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("shard", "tp"))
        parallelize_module(model, mesh2["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel(),
                                                "4": ColwiseParallel(), "6": RowwiseParallel()})
        mesh = mesh2["shard"]
    kw: dict[str, Any] = {}
    if args.variant == "mp":
        from torch.distributed.fsdp import MixedPrecisionPolicy
        # fp32 out, as the loss wants it (torch 2.11's CPU backward of a bf16-fp32 mse fails)
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                               reduce_dtype=torch.float32,
                                               output_dtype=torch.float32)
    elif args.variant in ("keep", "reshard2"):
        kw["reshard_after_forward"] = False if args.variant == "keep" else 2
    elif args.variant == "shard1":
        from torch.distributed.tensor import Shard
        kw["shard_placement_fn"] = lambda p: Shard(1) if p.dim() == 2 else Shard(0)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            shard(layer, mesh=mesh, **kw)
            if args.compile:
                layer.compile()
    shard(model, mesh=mesh, **kw)
    if args.variant == "prefetch":
        layers = [m for m in model if isinstance(m, FSDPModule)]
        for a, b in zip(layers, layers[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    for m in model.modules():
        if isinstance(m, FSDPModule):
            if args.async_op:
                m._set_unshard_async_op(True)
            if args.divide:
                m.set_gradient_divide_factor(args.divide)
    return model


plain = build(fully_shard.__mcr_wrapped__ if args.autoload else fully_shard)
ours = build(fully_shard)
if args.divide:
    for m in plain.modules():
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)   # Gloo has no PREMUL_SUM
if args.autoload:
    n_fsdp = sum(isinstance(g._all_gather_comm, mcr_fsdp.AllGather) for m in ours.modules()
                 if isinstance(m, FSDPModule) for g in mcr_fsdp._param_groups(m))
else:
    n_fsdp = mcr_fsdp.install(ours, buffers="ring" if args.ring else "auto")
assert n_fsdp == 4, n_fsdp    # the four Linear layers hold parameters
# SGD: the update scales with the gradient, so a wrong divide factor changes the losses.
opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (plain, ours)]
losses: dict[int, list[float]] = {0: [], 1: []}
plain_calls = 0      # the plain copy's collectives reach torch directly: not mcr's to serve


def bypassed() -> int:
    return sum(c for c, _ in bypass.COUNTS.values())


for step in range(args.steps):
    # Ranks of one tensor-parallel pair must see the same batch.
    g = torch.Generator().manual_seed(step * 100 + (rank // 2 if args.tp else rank))
    x, y = torch.randn(8, 32, generator=g), torch.randn(8, 16, generator=g)
    for i, (model, opt) in enumerate(zip((plain, ours), opts)):
        before = bypassed()
        micro = 3 if args.variant == "accum" else 1
        for j in range(micro):
            if micro > 1:
                model.set_requires_gradient_sync(j == micro - 1)
            xs, ys = x.chunk(micro)[j], y.chunk(micro)[j]
            loss = torch.nn.functional.mse_loss(model(xs), ys)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # DTensor: bypasses mcr
        opt.step()
        opt.zero_grad()
        losses[i].append(loss.item())
        if i == 0:
            plain_calls += bypassed() - before
same_losses(rank, losses[0], losses[1], args.rtol)
rows = dist.log_summary(return_dict=True)
# TP's all-reduces are DTensor's own: not mcr's to serve, but listed; with keep there are no
# backward all-gathers, 8 FSDP2 calls a step to clip_grad_norm_'s one.
share = 0.0 if args.tp or args.variant == "keep" else 0.9
served, missed = served_summary(rows, args.expect, plain_calls, share)
libs = {(r["op"], r["backend"]) for r in rows if r["kind"] == "served"}
if args.tp:
    assert missed > 0 and {op for op, _ in libs} >= {"all_gather", "reduce_scatter"}, rows
else:
    # What bypasses mcr is clip_grad_norm_'s DTensor all-reduce, one a step; FSDP2's are mcr's.
    assert missed <= args.steps, f"{missed} calls bypassed mcr in {args.steps} steps: {rows}"
if args.hsdp:
    assert any(op == "all_reduce" for op, _ in libs), f"HSDP's all-reduce bypassed mcr: {rows}"
print(f"rank {rank}: served {served}, bypassed {missed}: "
      f"{[(r['op'], r['count']) for r in rows if r['kind'] == 'bypass']}", flush=True)
print(f"rank {rank}: FSDP OK {args.steps} losses {losses[1][0]:.6f}..{losses[1][-1]:.6f}",
      flush=True)
tdist.barrier()
dist.destroy_process_group()
