"""Tensor-parallel decode, where every all-reduce is on the critical path: plain vs mcr vs none.

Two ways in, one rank per GPU (or 2 CPU ranks with `--shape tiny`):
  --impl torch      a Llama-style decoder sharded by hand (benchmarks/tp_model.py): two
                    all-reduces of batch x hidden per layer, one all-gather of the logits per
                    step; eager, or one decode step captured in a CUDA graph and replayed
                    (static KV cache, as serving engines run it)
  --impl deepspeed  DeepSpeed AutoTP inference (`deepspeed.init_inference`,
                    replace_with_kernel_inject=False) of a random-init Hugging Face Llama of the
                    same shape, decoding eagerly through HF's forward and its KV cache; mcr comes
                    in through `mcr.integrations.deepspeed.install()`, toggled between blocks
Configurations, alternated block by block in one process (mcr.measure.turns):
  plain   the library torch gives the group (NCCL on GPUs, Gloo on CPU), or DeepSpeed's own
  mcr     mcr.comm: the tables pick the library per call
  floor   no communication at all (timing only: its tokens are not a model's)
Per shape, batch and mode: ms/token of each, mcr's pair ratios over plain with the median's
distribution-free interval, the captured share of what there is to win
`(plain - mcr) / (plain - floor)`, whether mcr's greedy tokens equal plain's, a JSON and a plot.

    torchrun --nproc_per_node=4 -m benchmarks.decode --shape 8b --batch 1,16,64 \\
        --mode graph,eager --out results/decode
    mpiexec -n 2 python -m benchmarks.decode --shape tiny --batch 1,8 --mode eager
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from benchmarks.common import median_interval, profiled, slowest, sync
from benchmarks.tp_model import SHAPES, Comm, TPDecoder, Weights
from mcr.measure.turns import turn_orders

CONFIGS = ("plain", "mcr", "floor")


def comms() -> dict[str, Comm]:
    """The three ways a step communicates."""
    gather = getattr(tdist, "all_gather_single", None) or tdist.all_gather_into_tensor

    def plain_ag(out: torch.Tensor, inp: torch.Tensor) -> None:
        gather(out, inp)
    return {"plain": Comm("plain", tdist.all_reduce, plain_ag),
            "mcr": Comm("mcr", dist.all_reduce, dist.all_gather_into_tensor),
            "floor": Comm("floor", lambda t: None, lambda out, inp: None)}


class Runner:
    """One configuration's way of making a step: eager, or its captured graph."""

    def __init__(self, model: TPDecoder, comm: Comm, mode: str) -> None:
        self.model, self.comm, self.mode = model, comm, mode
        self.graph: torch.cuda.CUDAGraph | None = None
        if mode == "graph":
            # Warm up outside the capture (libraries set up their buffers at a first call),
            # on a side stream as torch asks, then capture one step.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model.reset()
                    model.step(comm)
            torch.cuda.current_stream().wait_stream(side)
            model.reset()
            torch.cuda.synchronize()
            tdist.barrier()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                model.step(comm)
            torch.cuda.synchronize()

    def tokens(self, steps: int) -> list[tuple[list[int], str]]:
        """Decode `steps` tokens from the start; per step the tokens and a digest of the
        logits' bits (equal digests: bit-identical logits)."""
        self.model.reset()
        out = []
        for _ in range(steps):
            self.step()
            bits = self.model.logits.view(torch.uint8) if self.model.logits.dtype != \
                torch.bfloat16 else self.model.logits.view(torch.int16)
            out.append((self.model.tok.tolist(),
                        hashlib.blake2b(bits.cpu().numpy().tobytes(), digest_size=8).hexdigest()))
        return out

    def step(self) -> None:
        """One decode step."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self.model.step(self.comm)

    def block(self, steps: int, device: torch.device) -> float:
        """ms per token over `steps` decode steps from the start of the sequence."""
        self.model.reset()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        sync(device)
        return 1e3 * (time.perf_counter() - t0) / steps


def measure(runners: dict[str, Runner], pairs: int, steps: int,
            device: torch.device) -> dict[str, list[float]]:
    """ms/token of each runner, `pairs` rounds of blocks in carryover-balanced orders."""
    names = list(runners)
    for n in names:
        runners[n].block(2, device)   # warm
    ms: dict[str, list[float]] = {n: [] for n in names}
    for order in turn_orders(len(names), pairs):
        for i in order:
            ms[names[i]].append(slowest(runners[names[i]].block(steps, device), device))
    return ms


def breakdowns(runners: dict[str, Runner], steps: int, device: torch.device
               ) -> dict[str, dict[str, Any]]:
    """Per configuration, from torch.profiler over `steps` decode steps: ms per token of GPU
    compute, communication, communication not under compute, GPU idle."""
    out = {}
    for name, r in runners.items():
        r.model.reset()
        out[name] = profiled(lambda _i, r=r: r.step(), steps, device)
    return out


def summarize(ms: dict[str, list[float]], tokens: dict[str, list]) -> dict[str, Any]:
    """Medians, mcr's pair ratios over plain with the median's interval, the captured share."""
    row: dict[str, Any] = {f"{n}_ms": statistics.median(v) for n, v in ms.items()}
    row["ms"] = ms
    if "plain" in ms and "mcr" in ms:
        ratios = [p / m for p, m in zip(ms["plain"], ms["mcr"])]
        lo, hi, cover = median_interval(ratios)
        row.update(ratio=statistics.median(ratios), ratios=ratios, interval=[lo, hi],
                   coverage=cover, pairs_ahead=sum(r > 1 for r in ratios))
        if "floor" in ms:
            room = row["plain_ms"] - row["floor_ms"]
            row["captured"] = (row["plain_ms"] - row["mcr_ms"]) / room if room > 0 else None
        if "plain" in tokens and "mcr" in tokens:
            a, b = tokens["plain"], tokens["mcr"]
            row["tokens_equal"] = [t for t, *_ in a] == [t for t, *_ in b]
            row["first_differing_step"] = next((i for i, (x, y) in enumerate(zip(a, b))
                                                if x[0] != y[0]), None)
            if all(len(t) > 1 for t in a + b):
                row["logits_equal"] = [d for _, d in a] == [d for _, d in b]
    return row


def run_torch(args: argparse.Namespace, device: torch.device, dtype: torch.dtype
              ) -> list[dict[str, Any]]:
    """The hand-sharded decoder: every batch and mode asked for."""
    rank, world = tdist.get_rank(), tdist.get_world_size()
    ways, rows = comms(), []
    wts = Weights(SHAPES[args.shape], rank, world, device, dtype)
    for batch in args.batch:
        model = TPDecoder(wts, batch, args.prompt, max(args.steps, args.check_steps) + 4)
        for mode in args.mode:
            if mode == "graph" and device.type != "cuda":
                continue
            runners = {c: Runner(model, ways[c], mode) for c in args.configs}
            tokens = {c: runners[c].tokens(args.check_steps) for c in ("plain", "mcr")
                      if c in runners}
            row = summarize(measure(runners, args.pairs, args.steps, device), tokens)
            row.update(impl="torch", shape=args.shape, batch=batch, mode=mode)
            if args.profile_steps and mode == "graph":
                # Eager steps are host-bound: a communication kernel's time there is mostly
                # waiting for a peer's host, not communication.
                row["breakdown"] = breakdowns(runners, args.profile_steps, device)
            rows.append(row)
            say(row)
            del runners
    return rows


def say(row: dict[str, Any], head: str = "", unit: str = "token",
        compared: tuple[str, str] = ("tokens", "logits")) -> None:
    """One line per measured point, on rank 0 (head: the point's name; compared: the row's
    `<name>_equal` keys, the first compared step by step, the second bit for bit)."""
    if tdist.get_rank() != 0:
        return
    parts = [head or f"{row['impl']} {row['shape']} batch {row['batch']} {row['mode']}:"]
    parts += [f"{c} {row[c + '_ms']:.3f}" for c in CONFIGS if c + "_ms" in row]
    if "ratio" in row:
        lo, hi = row["interval"]
        parts.append(f"ms/{unit}; mcr {row['ratio']:.3f}x [{lo:.3f}-{hi:.3f}]")
    if row.get("captured") is not None:
        parts.append(f"captured {100 * row['captured']:.0f}%")
    steps, bits = compared
    if f"{steps}_equal" in row:
        parts.append(f"{steps} equal" if row[f"{steps}_equal"] else
                     f"{steps} differ from step {row['first_differing_step']}")
    for c, b in row.get("breakdown", {}).items():
        if c != "floor" and b["wall_ms"] > 0:
            parts.append(f"{c} comm {b['comm_ms']:.3f} ms ({100 * b['comm_ms'] / b['wall_ms']:.0f}%"
                         f", exposed {b['comm_exposed_ms']:.3f})")
    if f"{bits}_equal" in row:
        parts.append(f"{bits} bit-identical" if row[f"{bits}_equal"] else f"{bits} differ")
    print(" ".join(parts), flush=True)


def plot(rows: list[dict[str, Any]], path: Path, title: str, labels: list[str] | None = None,
         unit: str = "token") -> None:
    """ms per `unit` of each configuration per point (labels: one a row), and mcr's ratio over
    plain."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    many = len(rows) > 10     # then one panel above the other, wide enough for every label
    fig, (a, b) = plt.subplots(*((2, 1) if many else (1, 2)),
                               figsize=(max(12.0, 0.42 * len(rows)), 9 if many else 4.2))
    if labels is None:
        impl = {"deepspeed": "DS", "torch": "torch"}
        labels = [f"{impl[r['impl']]} {r['shape']}\nb{r['batch']} {r['mode']}" for r in rows]
    x = range(len(rows))
    for k, c in enumerate(CONFIGS):
        if all(c + "_ms" in r for r in rows):
            a.bar([i + (k - 1) * 0.27 for i in x], [r[c + "_ms"] for r in rows], 0.27, label=c)
    a.set_xticks(list(x), labels, fontsize=7, rotation=90 if many else 0)
    a.set(ylabel=f"ms per {unit} (lower is better)", title=title)
    a.legend()
    ratios = [r.get("ratio", float("nan")) for r in rows]
    b.bar(list(x), ratios, color=["tab:green" if v >= 1 else "tab:red" for v in ratios])
    for i, r in enumerate(rows):
        if "interval" in r:
            b.plot([i, i], r["interval"], color="black", lw=1)
    b.axhline(1.0, color="gray", lw=0.8)
    b.set_xticks(list(x), labels, fontsize=7, rotation=90 if many else 0)
    b.set(ylabel=f"{unit}s/s, mcr over plain",
          title="mcr's speed-up (bar: median; line: interval)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse() -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=("torch", "deepspeed"), default="torch")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--batch", default="1", help="comma-separated batch sizes")
    ap.add_argument("--mode", default="eager", help="eager, graph (CUDA only), or both")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--pairs", type=int, default=5, help="rounds of alternated blocks")
    ap.add_argument("--steps", type=int, default=32, help="decode steps per block")
    ap.add_argument("--prompt", type=int, default=128, help="tokens already in the KV cache")
    ap.add_argument("--check-steps", type=int, default=16, help="greedy tokens compared")
    ap.add_argument("--profile-steps", type=int, default=8,
                    help="steps per configuration under torch.profiler (CUDA graph mode only; "
                         "0: none)")
    ap.add_argument("--out", default="", help="folder for the JSON and the plot (rank 0)")
    args = ap.parse_args()
    args.batch = [int(b) for b in args.batch.split(",")]
    args.mode = args.mode.split(",")
    args.configs = args.configs.split(",")
    bad = [c for c in args.configs if c not in CONFIGS] + \
        [m for m in args.mode if m not in ("eager", "graph")]
    if bad:
        ap.error(f"unknown configuration or mode {bad}: configurations {CONFIGS}, "
                 "modes eager, graph")
    return args


def start() -> tuple[torch.device, torch.dtype]:
    """mcr started; this rank's device and the dtype the steps run in (bf16 on GPUs)."""
    dist.init_distributed(verbose=False)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device()), torch.bfloat16
    return torch.device("cpu"), torch.float32


def report(rows: list[dict[str, Any]], out_dir: str, stem: str, title: str,
           labels: list[str] | None = None, unit: str = "token") -> None:
    """Rank 0 writes the JSON (the rows, what served mcr's calls, device, command, date) and
    the plot into out_dir, named stem_npN; then every rank leaves mcr."""
    served = dist.log_summary(return_dict=True)
    world = tdist.get_world_size()
    if tdist.get_rank() == 0 and out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{stem}_np{world}"
        dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        res = {"rows": rows, "world_size": world, "device": dev, "torch": torch.__version__,
               "command": " ".join(sys.argv), "mcr_served": served,
               "date": time.strftime("%Y-%m-%d")}
        (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
        plot(rows, out / f"{stem}.png", f"{title}, {world} x {dev}", labels, unit)
        print(f"wrote {out / stem}.json and .png", flush=True)
    tdist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Start, run every point, report."""
    args = parse()
    device, dtype = start()
    if args.impl == "torch":
        rows = run_torch(args, device, dtype)
    else:
        from benchmarks.decode_deepspeed import run_deepspeed
        rows = run_deepspeed(args, device, dtype, summarize, say)
    report(rows, args.out, f"decode_{args.impl}_{args.shape}", f"{args.impl} decode")


if __name__ == "__main__":
    main()
