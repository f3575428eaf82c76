"""Shared driver of the OSU-style microbenchmarks: sizes, warm-up, timing, checking, output.

Each osu_*.py file states only what differs (how to build buffers for a size, the call, the
check), as nccl-tests does. Sizes are full-buffer bytes (all-gather output, reduce-scatter input),
so busbw uses the nccl-tests factors. Run under mpirun/mpiexec or torchrun.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import mcr.comm as dist
from mcr.errors import BackendUnavailable
from mcr.ops import BUFFER_KEYED, bus_factor
from mcr.units import parse_bytes


@dataclass
class Ctx:
    """What a benchmark's setup needs to build its buffers."""

    rank: int
    n: int
    dtype: torch.dtype
    device: str
    symm: str | None = None   # backend whose symmetric allocator makes output buffers

    def out_buffer(self, numel: int) -> torch.Tensor:
        """An output buffer: symmetric memory of ctx.symm (zero-copy), else plain."""
        if self.symm:
            return dist.symmetric_empty(numel, dtype=self.dtype, backend=self.symm)
        return torch.empty(numel, dtype=self.dtype, device=self.device)


@dataclass
class Case:
    """One size of one benchmark: call(backend) runs the op once; check() validates it."""

    call: Callable[[str | None], Any]
    check: Callable[[], None] | None = None


@dataclass
class Bench:
    """A benchmark: the mcr op it measures and how to set up one size."""

    op: str
    setup: Callable[[Ctx, int], Case]
    title: str = ""


# Benchmarks whose output buffer comes from Ctx.out_buffer (symmetric under --symm).


def rank_data(ctx: Ctx, numel: int, rank: int, salt: int = 0) -> torch.Tensor:
    """Deterministic data of `rank`; every rank can rebuild any rank's buffer for checks."""
    g = torch.Generator().manual_seed(rank * 1000 + salt + 1)
    t = torch.randint(-8, 9, (numel,), generator=g)
    return t.to(ctx.dtype).to(ctx.device)


def expect_equal(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Raise naming the op and the first differing element."""
    if not torch.equal(got.cpu(), want.cpu()):
        i = int((got.cpu() != want.cpu()).nonzero()[0][0])
        raise AssertionError(f"{what}: element {i}: got {got.reshape(-1)[i].item()}, "
                             f"want {want.reshape(-1)[i].item()}")


def parser(title: str) -> argparse.ArgumentParser:
    """The common options (OSU's -m/-i/-x/-c/-d plus mcr's --backend and -t)."""
    ap = argparse.ArgumentParser(description=title)
    ap.add_argument("-m", "--message-size", default="4:16MiB",
                    help="MIN:MAX full-buffer bytes, units allowed (default 4:16MiB)")
    ap.add_argument("-f", "--factor", type=int, default=2, help="size step factor (default 2)")
    ap.add_argument("-i", "--iterations", type=int, default=100)
    ap.add_argument("-x", "--warmup", type=int, default=10)
    ap.add_argument("-d", "--device", choices=["cpu", "cuda"], default=None,
                    help="cpu or cuda (default: cuda if available)")
    ap.add_argument("-c", "--validate", action="store_true", help="check results")
    ap.add_argument("-t", "--dtype", default="float32")
    ap.add_argument("--backend", default="auto",
                    help="comma list of auto and/or backend names, measured side by side")
    ap.add_argument("--csv", default=None, help="append rows to this CSV (rank 0)")
    ap.add_argument("--max-seconds", type=float, default=2.0,
                    help="cap on timed seconds per size and backend (iterations shrink)")
    ap.add_argument("--batch", type=int, default=1,
                    help="calls per timed sample, back to back (1: OSU latency, each call "
                         "synchronized; >1: nccl-tests style throughput per call)")
    ap.add_argument("--graph", action="store_true",
                    help="capture each sample's --batch calls in one CUDA graph and time its "
                         "replays (the cost per call inside a graph-captured training step)")
    ap.add_argument("--symm", default=None, metavar="BACKEND",
                    help="allocate outputs with mcr.comm.symmetric_empty(backend=BACKEND)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure the backends of a size in this many interleaved rounds (A B, "
                         "B A, ...), each with a share of the iterations and time; the 'x first'"
                         " column is the median over rounds of the first backend's median time "
                         "over this one's (> 1: faster than the first)")
    return ap


def sizes(spec: str, factor: int, unit: int) -> list[int]:
    """Byte sizes from MIN:MAX, multiplied by factor, each rounded up to a multiple of unit."""
    lo, _, hi = spec.partition(":")
    lo_b, hi_b = int(parse_bytes(lo)), int(parse_bytes(hi or lo))
    out, s = [], max(lo_b, 1)
    while s <= hi_b:
        out.append(-(-s // unit) * unit)
        s *= factor
    return sorted(set(out))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def graphed(case: Case, backend: str | None, batch: int) -> Callable[[str | None], None]:
    """`batch` calls captured in one CUDA graph; the returned call replays it."""
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g.capture_begin(capture_error_mode="thread_local")
        for _ in range(batch):
            case.call(backend)
        g.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    return lambda _be: g.replay()


def time_case(case: Case, backend: str | None, iters: int, warmup: int, device: str,
              max_seconds: float, batch: int = 1, graph: bool = False) -> list[float]:
    """Per-call seconds of each sample (batch calls between syncs), slowest rank's.
    graph: each sample replays one CUDA graph of the batch's calls."""
    for _ in range(warmup):
        case.call(backend)
    _sync(device)
    if graph:
        case = Case(graphed(case, backend, batch), case.check)
        batch_calls, batch = batch, 1
    else:
        batch_calls = batch
    # Calibrate the iteration count so that big messages stay within max_seconds.
    dist.barrier(backend="gloo")
    t0 = time.perf_counter()
    case.call(backend)
    _sync(device)
    one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX, backend="gloo")
    iters = max(3, min(iters, int(max_seconds / max(float(one[0]) * batch, 1e-7))))
    times = torch.empty(iters, dtype=torch.float64)
    dist.barrier(backend="gloo")
    for i in range(iters):
        t0 = time.perf_counter()
        for _ in range(batch):
            case.call(backend)
        _sync(device)
        times[i] = (time.perf_counter() - t0) / batch_calls
    dist.all_reduce(times, op=dist.ReduceOp.MAX, backend="gloo")
    return times.tolist()


def chosen_backend(op: str, nbytes: int, dtype: torch.dtype, device: str,
                   buffer: str = "plain") -> str:
    """Which backend the dispatcher picks for this op and size (what `auto` ran on)."""
    try:
        return dist.which_backend(op, nbytes, dtype, device, buffer=buffer)
    except BackendUnavailable as e:
        return f"none ({e})"


def run(bench: Bench, argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse options, sweep sizes for each backend, print OSU-style rows; return them."""
    args = parser(bench.title or f"mcr OSU-style {bench.op}").parse_args(argv)
    return sweep(bench, args)


def sweep(bench: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The sweep itself, for tools that build args themselves (the tuner)."""
    if not dist.is_initialized():
        dist.init_distributed(verbose=False)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)
    ctx = Ctx(rank, n, dtype, device, getattr(args, "symm", None))
    backends = [b.strip() for b in args.backend.split(",")]
    unit = n * dtype.itemsize
    rows: list[dict[str, Any]] = []
    if rank == 0:
        now = datetime.datetime.now().isoformat(timespec="seconds")
        dev = torch.cuda.get_device_name() if device == "cuda" else "cpu"
        print(f"# mcr OSU-style {bench.op}: {n} ranks, {dev}, {args.dtype}, "
              f"iterations <= {args.iterations} (warm-up {args.warmup}), {now}")
        print(f"# command: {' '.join(sys.argv)}")
        batch = getattr(args, "batch", 1)
        print(f"# timing: {batch} call(s) per sample"
              + (", replayed from one CUDA graph" if getattr(args, "graph", False) else "")
              + (f", outputs in {args.symm} symmetric memory" if ctx.symm else ""))
        print(f"# {'Size':>10} {'Backend':>12} {'Avg Latency(us)':>16} {'Median(us)':>11} "
              f"{'P10(us)':>9} {'P90(us)':>9} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} "
              f"{'x first':>8}", flush=True)
    rounds = max(1, getattr(args, "rounds", 1))
    for size in sizes(args.message_size, args.factor, unit):
        case = bench.setup(ctx, size)
        buf = "symmetric" if ctx.symm and bench.op in BUFFER_KEYED else "plain"
        samples: dict[str, list[float]] = {}
        per_round: dict[str, list[float]] = {}
        for k in range(rounds):
            for be in backends[k % len(backends):] + backends[:k % len(backends)]:
                if be in samples and samples[be] is None:
                    continue            # declined in an earlier round
                try:
                    t = time_case(case, None if be == "auto" else be, args.iterations,
                                  args.warmup, device, args.max_seconds / rounds,
                                  getattr(args, "batch", 1), getattr(args, "graph", False))
                except BackendUnavailable as e:
                    samples[be] = None  # type: ignore[assignment]
                    if rank == 0:
                        print(f"  {size:>10} {be:>12}   declined: {str(e).splitlines()[0]}")
                    continue
                samples.setdefault(be, []).extend(t)
                per_round.setdefault(be, []).append(statistics.median(t))
        first = next((b for b in backends if samples.get(b)), None)
        for be in backends:
            t = samples.get(be)
            if not t:
                continue
            name = None if be == "auto" else be
            label = f"auto={chosen_backend(bench.op, size, dtype, device, buf)}" \
                if name is None else be
            if args.validate and case.check is not None:
                case.call(name)
                _sync(device)
                case.check()
            med = statistics.median(t)
            q = statistics.quantiles(t, n=10) if len(t) >= 2 else [med] * 9
            algbw = size / med / 1e9
            vs_first = statistics.median(a / b for a, b in zip(per_round[first], per_round[be]))
            row = {"op": bench.op, "ranks": n, "device": device, "dtype": args.dtype,
                   "bytes": size, "backend": be, "served_by": label.removeprefix("auto="),
                   "avg_us": statistics.fmean(t) * 1e6, "median_us": med * 1e6,
                   "p10_us": q[0] * 1e6, "p90_us": q[-1] * 1e6, "min_us": min(t) * 1e6,
                   "max_us": max(t) * 1e6, "iters": len(t), "algbw_gbs": algbw,
                   "busbw_gbs": algbw * bus_factor(bench.op, n),
                   "batch": getattr(args, "batch", 1), "symm": ctx.symm or "",
                   "graph": int(getattr(args, "graph", False)), "rounds": rounds,
                   "vs_first": vs_first}
            rows.append(row)
            if rank == 0:
                print(f"  {size:>10} {label:>12} {row['avg_us']:>16.2f} {row['median_us']:>11.2f}"
                      f" {row['p10_us']:>9.2f} {row['p90_us']:>9.2f} {algbw:>12.3f}"
                      f" {row['busbw_gbs']:>12.3f} {vs_first:>8.3f}", flush=True)
    if rank == 0 and args.csv and rows:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                w.writeheader()
            w.writerows(rows)
    return rows
