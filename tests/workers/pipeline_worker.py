"""Real DeepSpeed pipeline parallelism on CPU (--stages, 2 by default), plain and through mcr,
losses compared.

In one process: train a PipelineModule for --steps batches of 4 micro-batches with
plain DeepSpeed, then install mcr and train the same model on the same data again. The stages
pass activations and gradients with deepspeed.comm's send/recv and broadcast, which mcr must
serve (every call; --expect names the library that must serve them all). Prints
`rank R: PIPELINE OK <steps>`.
"""

from __future__ import annotations

import argparse
import os

import torch
from common import same_losses

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
from deepspeed.pipe import PipelineModule  # noqa: E402

import mcr.comm as dist  # noqa: E402
import mcr.integrations.deepspeed as mcr_ds  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--expect", default="", help="the library that must serve every call")
ap.add_argument("--stages", type=int, default=2)
args = ap.parse_args()
CONFIG = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
          "steps_per_print": 10_000,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}


def train() -> list[float]:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
              torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
              torch.nn.Linear(64, 16)]
    net = PipelineModule(layers=layers, num_stages=args.stages, loss_fn=torch.nn.MSELoss(),
                         partition_method="uniform")
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=list(net.parameters()),
                                           config=CONFIG)
    g = torch.Generator().manual_seed(1)
    batches = iter([(torch.randn(4, 32, generator=g), torch.randn(4, 16, generator=g))
                    for _ in range(4 * args.steps)])
    losses = [engine.train_batch(data_iter=batches).item() for _ in range(args.steps)]
    engine.destroy()
    return losses


deepspeed.init_distributed(dist_backend="gloo")
rank = int(os.environ["RANK"])
plain = train()
mcr_ds.install()
through_mcr = train()
same_losses(rank, plain, through_mcr)
rows = dist.log_summary(return_dict=True)
missed = [r for r in rows if r["kind"] == "bypass"]
assert not missed, f"calls bypassed mcr: {missed}"
served = {(r["op"], r["backend"]) for r in rows if r["kind"] == "served"}
assert {op for op, _ in served} >= {"p2p", "broadcast"}, served
assert not args.expect or {lib for _, lib in served} == {args.expect}, served
print(f"rank {rank}: PIPELINE OK {len(through_mcr)} losses {through_mcr}", flush=True)
deepspeed.comm.destroy_process_group()
