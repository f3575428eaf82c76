"""Mixture-of-experts expert parallelism, where dispatch and combine wait for their all-to-alls:
plain vs mcr vs none.

A stack of MoE blocks (benchmarks/moe_layers.py: DeepSpeed-MoE's `deepspeed.moe.layer.MoE`
with ep_size = ranks, or a drop-less layer with uneven splits), one rank per GPU (or CPU ranks
with `--shape tiny`). Per point, every combination of:
  --step      train (forward and backward) or decode (forward only)
  --tokens    tokens a rank
  --k         experts a token (top-k)
  --capacity  a capacity factor, 1.0, 1.25, ... (DeepSpeed's: equal splits padded to it), dropless
              (DeepSpeed's drop_tokens=False: the largest count over ranks), uneven (every
              routed token and no padding: uneven all_to_all_single)
Configurations, alternated block by block in one process (mcr.measure.turns):
  plain   DeepSpeed's own deepspeed.comm (NCCL on GPUs, Gloo on CPU)
  mcr     the same after mcr.integrations.deepspeed.install()
  floor   every all-to-all a local copy (timing only)
Reported per point: ms a step and tokens/s of each, mcr's pair ratios over plain with the
median's distribution-free interval, the captured share `(plain - mcr) / (plain - floor)`,
whether mcr's losses, outputs and gradients equal plain's bit for bit over the first steps,
on GPUs the exposed communication from the profiler; a JSON and a plot.

    torchrun --nproc_per_node=4 -m benchmarks.moe --shape large --tokens 64,256,4096 \\
        --k 2 --capacity 1.0,uneven --step decode,train --out results/moe
    mpiexec -n 2 python -m benchmarks.moe --shape tiny --tokens 16,64 --capacity 1.0,uneven
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from typing import Any

import torch
import torch.distributed as tdist

from benchmarks.common import profiled, slowest, sync
from benchmarks.decode import CONFIGS, report, say, start, summarize
from benchmarks.decode_deepspeed import Switch
from benchmarks.moe_layers import CAPACITIES, SHAPES, Stack
from mcr.measure.turns import turn_orders

STEPS = ("train", "decode")


def local_copy(output: torch.Tensor, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    """The floor's all-to-all: this rank's own data, no peer's."""
    output.view(-1).copy_(tensor.reshape(-1))


class Point:
    """One model and its inputs; a step is a forward (and backward) over one of them."""

    def __init__(self, model: Stack, tokens: int, kind: str, n_inputs: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.model, self.kind = model, kind
        g = torch.Generator().manual_seed(1 + tdist.get_rank())   # each rank its own tokens
        h = model.blocks[0].norm.normalized_shape[0]
        self.xs = [torch.randn(tokens, h, generator=g).to(device, dtype) for _ in range(n_inputs)]

    def step(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, output) of input i: a training step's backward runs too."""
        x = self.xs[i % len(self.xs)]
        if self.kind == "decode":
            with torch.no_grad():
                y, aux = self.model(x)
            return y.float().pow(2).mean() + 0.01 * aux, y
        self.model.zero_grad(set_to_none=True)
        y, aux = self.model(x)
        loss = y.float().pow(2).mean() + 0.01 * aux
        loss.backward()
        return loss.detach(), y.detach()

    def check(self, steps: int) -> list[tuple[str, str]]:
        """Per step the loss (exact) and a digest of the bits of the output and, in a training
        step, of every gradient (the backward's all-to-alls)."""
        out = []
        for i in range(steps):
            loss, y = self.step(i)
            parts = [y.reshape(-1)] + [p.grad.reshape(-1) for p in self.model.parameters()
                                       if p.grad is not None]
            h = hashlib.blake2b(digest_size=8)
            for t in parts:
                t = t.detach().contiguous()
                h.update(t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)
                         .cpu().numpy().tobytes())
            out.append((float(loss).hex(), h.hexdigest()))
        return out

    def block(self, steps: int, device: torch.device) -> float:
        """ms per step over `steps` steps."""
        sync(device)
        t0 = time.perf_counter()
        for i in range(steps):
            self.step(i)
        sync(device)
        return 1e3 * (time.perf_counter() - t0) / steps


def measure_point(pt: Point, switch: Switch, args: argparse.Namespace,
                  device: torch.device) -> dict[str, Any]:
    """Check, then time, every configuration at one point."""
    checks, ms = {}, {c: [] for c in args.configs}
    for c in args.configs:           # warm up, and the first steps' losses and outputs
        switch.to(c)
        pt.block(2, device)
        if c != "floor":
            checks[c] = pt.check(args.check_steps)
    for order in turn_orders(len(args.configs), args.pairs):
        for i in order:
            switch.to(args.configs[i])
            ms[args.configs[i]].append(slowest(pt.block(args.steps, device), device))
    row = summarize(ms, checks)
    for old, new in (("tokens_equal", "losses_equal"), ("logits_equal", "outputs_equal"),
                     ("first_differing_step", "first_differing_step")):
        if old in row:
            row[new] = row.pop(old)
    if args.profile_steps and device.type == "cuda":
        row["breakdown"] = {}
        for c in args.configs:
            switch.to(c)
            row["breakdown"][c] = profiled(pt.step, args.profile_steps, device)
    switch.to("plain")
    return row


def label(row: dict[str, Any]) -> str:
    """A point's short name."""
    return (f"{row['step']} {row['tokens']} tok\ntop-{row['k']} "
            f"{'cap ' if row['capacity'][0].isdigit() else ''}{row['capacity']}")


def ds_init(cuda: bool) -> None:
    """DeepSpeed's communication on top of the torch.distributed that mcr started."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if cuda else "cpu")
    import deepspeed
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")


def _factor(v: str) -> bool:
    """Whether v is a capacity factor (a number above 0)."""
    try:
        return float(v) > 0
    except ValueError:
        return False


def parse() -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--tokens", default="16,64", help="comma-separated tokens a rank")
    ap.add_argument("--k", default="2", help="comma-separated experts a token (1, 2)")
    ap.add_argument("--capacity", default="1.0,uneven",
                    help="comma-separated: capacity factors (1.0, 1.25, ...), dropless, uneven")
    ap.add_argument("--step", default="train,decode", help="train, decode, or both")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--pairs", type=int, default=5, help="rounds of alternated blocks")
    ap.add_argument("--steps", type=int, default=8, help="steps per block")
    ap.add_argument("--check-steps", type=int, default=3, help="steps whose losses are compared")
    ap.add_argument("--profile-steps", type=int, default=4,
                    help="steps per configuration under torch.profiler (GPUs; 0: none)")
    ap.add_argument("--out", default="", help="folder for the JSON and the plot (rank 0)")
    args = ap.parse_args()
    for name, allowed in (("capacity", CAPACITIES), ("step", STEPS), ("configs", CONFIGS)):
        vals = getattr(args, name).split(",")
        bad = [v for v in vals if v not in allowed and not (name == "capacity" and _factor(v))]
        if bad:
            ap.error(f"--{name} {bad}: choose from {list(allowed)}"
                     + (" or a capacity factor above 0" if name == "capacity" else ""))
        setattr(args, name, vals)
    try:
        args.tokens = [int(t) for t in args.tokens.split(",")]
        args.k = [int(k) for k in args.k.split(",")]
    except ValueError as e:
        ap.error(f"--tokens and --k take comma-separated integers: {e}")
    if min(args.tokens) < 1 or any(k not in (1, 2) for k in args.k) or args.pairs < 1 or \
            args.steps < 1:
        ap.error("--tokens at least 1, --k 1 or 2, --pairs and --steps at least 1")
    return args


def main() -> None:
    """Start, run every point, report."""
    args = parse()
    device, dtype = start()
    rank, world = tdist.get_rank(), tdist.get_world_size()
    ds_init(device.type == "cuda")
    shape = SHAPES[args.shape]
    switch = Switch({"all_to_all_single": local_copy})
    rows = []
    for k in args.k:
        for capacity in args.capacity:
            model = Stack(shape, world, rank, k, capacity, device, dtype)
            for kind in args.step:
                model.train(kind == "train")
                for tokens in args.tokens:
                    pt = Point(model, tokens, kind, max(args.steps, args.check_steps), device,
                               dtype)
                    row = {"step": kind, "tokens": tokens, "k": k, "capacity": capacity}
                    row.update(measure_point(pt, switch, args, device))
                    row["tokens_per_s"] = {c: tokens * world * 1e3 / row[c + "_ms"]
                                           for c in args.configs}
                    rows.append(row)
                    say(row, label(row).replace("\n", " ") + ":", "step", ("losses", "outputs"))
            del model
    report(rows, args.out, f"moe_{args.shape}", "MoE expert parallel", [label(r) for r in rows],
           unit="step")


if __name__ == "__main__":
    main()
