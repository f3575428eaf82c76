"""Real DeepSpeed ZeRO-3 on CPU, plain and with mcr installed, losses compared bit for bit.

In one process: train a small model for --steps steps with plain DeepSpeed, then call
mcr.integrations.deepspeed.install() and train the same model from the same seed on the same
data again. Every rank asserts identical losses step by step, that mcr served at least 90% of
the calls (the rest were counted and are in the summary) and, with --expect, that the named
libraries served all-gathers and reduce-scatters; --compile runs both under DeepSpeed's
torch.compile; --zero picks another ZeRO configuration; --checkpoint saves and reloads through
mcr. Prints `rank R: DEEPSPEED OK <steps>`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

import torch
from common import same_losses, served_summary

os.environ.setdefault("DS_ACCELERATOR", "cpu")
if "--autoload" in sys.argv:
    # As transformers and accelerate do (is_deepspeed_available) before they import DeepSpeed.
    assert importlib.util.find_spec("deepspeed") is not None
import deepspeed  # noqa: E402

import mcr.comm as dist  # noqa: E402
import mcr.integrations.deepspeed as mcr_ds  # noqa: E402
from mcr import bypass  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--overlap-comm", action="store_true")
ap.add_argument("--install-first", action="store_true",
                help="install() before deepspeed.init_distributed, run only through mcr")
ap.add_argument("--compile", default="", metavar="BACKEND",
                help="engine.compile(backend=BACKEND) after initialize (DeepSpeed's torch.compile)")
ap.add_argument("--zero", default="3",
                help="3, 1, 2, hpz (ZeRO++ hierarchical partitioning), offload (3, parameters and "
                "optimizer on the CPU), accum (3, gradient accumulation) or init (3, the model "
                "made under deepspeed.zero.Init)")
ap.add_argument("--checkpoint", default="", metavar="DIR",
                help="through mcr: save a checkpoint, train on, load it into a new engine and "
                     "train the same steps again: the losses must repeat")
ap.add_argument("--rtol", type=float, default=0.0,
                help="losses equal within this relative difference (0: bit for bit)")
ap.add_argument("--expect", default="", help="op:lib,... that must appear in mcr's summary")
ap.add_argument("--autoload", action="store_true",
                help="MCR_DEEPSPEED=1 is set: importing DeepSpeed must have installed mcr")
args = ap.parse_args()
if args.autoload:
    assert os.environ.get("MCR_DEEPSPEED") == "1" and mcr_ds.installed(), \
        "MCR_DEEPSPEED=1 did not route deepspeed.comm through mcr at import"
    mcr_ds.uninstall()   # the plain run below needs DeepSpeed's own collectives


class Net(torch.nn.Module):
    """Layers of several sizes, so all-gathers and reduce-scatters span a table boundary."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(a, b) for a, b in
                                           ((32, 64), (64, 256), (256, 256), (256, 16))])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.nn.functional.gelu(x)
        return torch.nn.functional.mse_loss(x, y)


CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_clipping": 1.0,       # grad norm: an all-reduce with DeepSpeed's own ReduceOp
    "steps_per_print": 10_000,
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": args.overlap_comm,
        "stage3_param_persistence_threshold": 0,
        "stage3_prefetch_bucket_size": 40_000,
        "reduce_bucket_size": 40_000,
        "allgather_bucket_size": 40_000,
    },
}
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
if args.zero in ("1", "2"):
    CONFIG["zero_optimization"]["stage"] = int(args.zero)
elif args.zero == "hpz":   # ZeRO++: a secondary parameter partition per "node" of 2 ranks
    CONFIG["zero_optimization"]["zero_hpz_partition_size"] = 2
elif args.zero == "offload":   # ZeRO-Infinity's CPU offload of parameters and optimizer
    CONFIG["zero_optimization"]["offload_param"] = {"device": "cpu"}
    CONFIG["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    CONFIG["zero_force_ds_cpu_optimizer"] = False   # keep torch's AdamW: no op to compile
elif args.zero == "accum":
    CONFIG["gradient_accumulation_steps"] = 3
    CONFIG["train_batch_size"] = 8 * 3 * WORLD
elif args.zero not in ("3", "init"):
    ap.error(f"--zero {args.zero}: not one of 3, 1, 2, hpz, offload, accum, init")


def engine_for_run() -> Any:
    torch.manual_seed(1234)
    if args.zero == "init":   # parameters partitioned as they are made, as for large models
        with deepspeed.zero.Init(config_dict_or_path=CONFIG):
            model = Net()
    else:
        model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=CONFIG)
    if args.compile:
        engine.compile(backend=args.compile)
    return engine


def steps(engine: Any, rank: int, first: int, n: int) -> list[float]:
    losses = []
    for step in range(first, first + n):
        g = torch.Generator().manual_seed(step * 100 + rank)
        x, y = torch.randn(8, 32, generator=g), torch.randn(8, 16, generator=g)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def train(rank: int) -> list[float]:
    engine = engine_for_run()
    losses = steps(engine, rank, 0, args.steps)
    engine.destroy()
    return losses


def resume(rank: int) -> None:
    """Save, train 3 steps, load the save into a new engine, train the same 3: equal losses."""
    engine = engine_for_run()
    steps(engine, rank, 0, args.steps)
    engine.save_checkpoint(args.checkpoint, tag="t")
    on = steps(engine, rank, args.steps, 3)
    engine.destroy()
    again = engine_for_run()
    again.load_checkpoint(args.checkpoint, tag="t")
    assert steps(again, rank, args.steps, 3) == on, "losses after loading the checkpoint differ"
    again.destroy()
    print(f"rank {rank}: CHECKPOINT OK", flush=True)


if args.install_first:
    assert mcr_ds.install() > 30
deepspeed.init_distributed(dist_backend="gloo")
rank = int(os.environ["RANK"])
plain = None if args.install_first else train(rank)
if not args.install_first:
    assert not dist.is_initialized(), "mcr started before install()"
    assert mcr_ds.install() > 30 and mcr_ds.install() > 30   # idempotent
assert dist.is_initialized()
bypass.COUNTS.clear()    # count only the run through mcr (autoload counted the plain one too)
through_mcr = train(rank)
if args.checkpoint:
    resume(rank)
served, missed = served_summary(dist.log_summary(return_dict=True), args.expect)
same_losses(rank, through_mcr if plain is None else plain, through_mcr, args.rtol)
print(f"rank {rank}: served {served} of {served + missed} calls", flush=True)
print(f"rank {rank}: DEEPSPEED OK {len(through_mcr)} losses {through_mcr[0]:.6f}.."
      f"{through_mcr[-1]:.6f}", flush=True)
# As a DeepSpeed script ends: through deepspeed.comm, so mcr's teardown runs and then
# DeepSpeed's, which destroys the torch groups it made (mcr's own destroy_process_group leaves
# torch.distributed to its owner, DeepSpeed here). The last all-reduce is ~2 ms before exit:
# this run is where a Gloo runloop freeing a work at exit aborted (see session's _SETTLE_S).
deepspeed.comm.destroy_process_group()
assert not dist.is_initialized() and not torch.distributed.is_initialized()
