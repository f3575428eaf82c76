"""mcr's measurement engine: sizes, warm-up, interleaved timing of backends, checking, output.

The tuner (mcr.tuner) and the OSU benchmarks (benchmarks/osu_*.py) measure through it. A
Bench states only what differs per op (buffers for a size, the call, the check;
mcr.measure.cases), as nccl-tests does. Sizes are full-buffer bytes (all-gather output,
reduce-scatter input), so busbw uses the nccl-tests factors. Run under mpirun/mpiexec or torchrun.
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
from mcr import layout
from mcr.config import int_from
from mcr.errors import BackendUnavailable
from mcr.measure.turns import turn_orders
from mcr.ops import BUFFER_KEYED, bus_factor, dtype_name
from mcr.session import group_of
from mcr.units import parse_bytes


@dataclass
class Ctx:
    """What a benchmark's setup needs to build its buffers."""

    rank: int                 # in the group
    n: int                    # the group's size
    dtype: torch.dtype
    device: str
    symm: str | None = None   # backend whose symmetric allocator makes output buffers
    group: Any = None         # an mcr.comm group (None: the world)
    calls: str = "sync"       # "sync", or "async": async_op=True, then wait()
    ranks: tuple[int, ...] = ()   # the group's global ranks (empty: the world's)
    label: int | str = 0      # the group's key in a table: 4 on one node, 2x2 across nodes

    def global_rank(self, i: int) -> int:
        """The global rank of the group's i-th member."""
        return self.ranks[i] if self.ranks else i

    def out_buffer(self, numel: int) -> torch.Tensor:
        """An output buffer: symmetric memory of ctx.symm (zero-copy), else plain."""
        if self.symm:
            return dist.symmetric_empty(numel, dtype=self.dtype, group=self.group,
                                        backend=self.symm)
        return torch.empty(numel, dtype=self.dtype, device=self.device)


@dataclass
class Case:
    """One size of one benchmark: call(backend) runs the op once; check() validates it."""

    call: Callable[[str | None], Any]
    check: Callable[[], None] | None = None
    load_gemms: int = 0                     # GEMMs beside each call (overlap profile)


@dataclass
class Bench:
    """A benchmark: the mcr op it measures and how to set up one size."""

    op: str
    setup: Callable[[Ctx, int], Case]
    title: str = ""


def rank_data(ctx: Ctx, numel: int, rank: int, salt: int = 0) -> torch.Tensor:
    """Deterministic data of `rank`; every rank can rebuild any rank's buffer for checks."""
    # Drawn on the device, as int8 (the values fit): a 1 GiB buffer drawn as int64 on the host
    # took seconds per size, a large share of a GPU tuning run.
    g = torch.Generator(device=ctx.device).manual_seed(rank * 1000 + salt + 1)
    t = torch.randint(-8, 9, (numel,), generator=g, dtype=torch.int8, device=ctx.device)
    return t.to(ctx.dtype)


def expect_equal(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Raise naming the op and the first differing element."""
    if not torch.equal(got.cpu(), want.cpu()):
        i = int((got.cpu() != want.cpu()).nonzero()[0][0])
        raise AssertionError(f"{what}: element {i}: got {got.reshape(-1)[i].item()}, "
                             f"want {want.reshape(-1)[i].item()}")


def _at_least(lo: int, option: str) -> Callable[[str], int]:
    """An argparse type: an integer of at least lo (the knobs' check, config.int_from)."""
    check = int_from(lo)

    def parse(text: str) -> int:
        try:
            return check(option, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def parser(title: str) -> argparse.ArgumentParser:
    """The common options (OSU's -m/-i/-x/-c/-d plus mcr's --backend and -t)."""
    ap = argparse.ArgumentParser(description=title)
    ap.add_argument("-m", "--message-size", default="4:16MiB",
                    help="MIN:MAX full-buffer bytes, units allowed (default 4:16MiB)")
    ap.add_argument("-f", "--factor", type=_at_least(2, "--factor"), default=2,
                    help="size step factor (default 2)")
    ap.add_argument("-i", "--iterations", type=_at_least(1, "--iterations"), default=100)
    ap.add_argument("-x", "--warmup", type=_at_least(0, "--warmup"), default=10)
    ap.add_argument("-d", "--device", choices=["cpu", "cuda"], default=None,
                    help="cpu or cuda (default: cuda if available)")
    ap.add_argument("-c", "--validate", action="store_true", help="check results")
    ap.add_argument("-t", "--dtype", default="float32")
    ap.add_argument("--backend", default="auto",
                    help="comma list of auto and/or backend names, measured side by side")
    ap.add_argument("--csv", default=None, help="append rows to this CSV (rank 0)")
    ap.add_argument("--max-seconds", type=float, default=2.0,
                    help="cap on timed seconds per size and backend (iterations shrink)")
    ap.add_argument("--batch", type=_at_least(1, "--batch"), default=1,
                    help="calls per timed sample, back to back (1: OSU latency, each call "
                         "synchronized; >1: nccl-tests style throughput per call)")
    ap.add_argument("--graph", action="store_true",
                    help="capture each sample's --batch calls in one CUDA graph and time its "
                         "replays (the cost per call inside a graph-captured training step)")
    ap.add_argument("--symm", default=None, metavar="BACKEND",
                    help="allocate outputs with mcr.comm.symmetric_empty(backend=BACKEND)")
    ap.add_argument("--calls", choices=["sync", "async"], default="sync",
                    help="how each call is made: sync, or async_op=True then wait()")
    ap.add_argument("--interleave", choices=["sample", "round"], default="sample",
                    help="sample: within a round the backends take turns sample by sample, "
                         "each after each other equally often, so a slow spell of the machine "
                         "hits them alike and 'x first' is the median of the per-sample "
                         "ratios; round: each backend runs its samples in one block per round")
    ap.add_argument("--lead-in", type=_at_least(0, "--lead-in"), default=1, metavar="N",
                    help="with --interleave sample: N untimed calls (each synchronized) of a "
                         "backend right before each of its samples, so that what the previous "
                         "backend's call left running is not timed (Gloo's threads added 20-40 "
                         "us to the next call on a 2-core VM); 0: none")
    ap.add_argument("--rounds", type=_at_least(1, "--rounds"), default=1,
                    help="measure the backends of a size in this many rounds in rotated order "
                         "(A B, B A, ...), each with up to -i samples and a share of "
                         "--max-seconds; 'x first' is the first backend's time over this one's, "
                         "the median of per-sample ratios (--interleave sample) or of per-round "
                         "ones (> 1: faster than the first)")
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


@dataclass
class Sample:
    """One backend's timed work (`run`: --batch calls, or one graph replay of them) and its
    untimed lead-in (`lead`: one call, synchronized)."""

    run: Callable[[], Any]
    lead: Callable[[], Any]


def _calibrated(ctx: Ctx, work: list[Sample], iters: int, max_seconds: float,
                lead: int) -> int:
    """Samples that fit max_seconds, lead-ins included: one of each backend timed, the group's
    slowest rank's slowest decides (big messages stay within max_seconds)."""
    dist.barrier(group=ctx.group, backend="gloo")
    one = torch.zeros(1, dtype=torch.float64)
    for sample in work:
        t0 = time.perf_counter()
        for _ in range(lead):
            sample.lead()
        sample.run()
        _sync(ctx.device)
        one[0] = max(float(one[0]), time.perf_counter() - t0)
    dist.all_reduce(one, op=dist.ReduceOp.MAX, group=ctx.group, backend="gloo")
    return max(3, min(iters, int(max_seconds / max(float(one[0]), 1e-7))))


def prepared(ctx: Ctx, case: Case, backend: str | None, warmup: int, batch: int,
             graph: bool) -> Sample:
    """Warm the backend up; return one sample's work: batch calls, or with graph one replay of
    them captured in a CUDA graph."""
    for _ in range(warmup):
        case.call(backend)
    _sync(ctx.device)

    def lead() -> None:
        case.call(backend)
        _sync(ctx.device)
    if graph:
        replay = graphed(case, backend, batch)
        return Sample(lambda: replay(backend), lead)

    def run() -> None:
        for _ in range(batch):
            case.call(backend)
    return Sample(run, lead)


def time_samples(ctx: Ctx, work: list[Sample], iters: int, max_seconds: float,
                 batch: int, lead: int = 1) -> list[list[float]]:
    """Per-call seconds of each sample of each backend's work, taken in turns so that drift on
    a shared machine hits them alike (sample i of each is from the same moment) and each runs
    after each other one equally often (turns.turn_orders). With several backends, `lead`
    untimed calls precede each sample: what the previous backend's call left running is paid
    there. Each gets up to max_seconds; the group's slowest rank's times count."""
    k = len(work)
    lead = lead if k > 1 else 0
    iters = _calibrated(ctx, work, iters, max_seconds, lead)
    times = torch.empty(k, iters, dtype=torch.float64)
    dist.barrier(group=ctx.group, backend="gloo")
    for i, order in enumerate(turn_orders(k, iters)):
        for b in order:
            for _ in range(lead):
                work[b].lead()
            t0 = time.perf_counter()
            work[b].run()
            _sync(ctx.device)
            times[b, i] = (time.perf_counter() - t0) / batch
    # Every rank gets the same numbers, so decisions made from them agree across ranks.
    dist.all_reduce(times, op=dist.ReduceOp.MAX, group=ctx.group, backend="gloo")
    return times.tolist()


def time_case(ctx: Ctx, case: Case, backend: str | None, iters: int, warmup: int,
              max_seconds: float, batch: int = 1, graph: bool = False) -> list[float]:
    """Per-call seconds of each sample (batch calls between syncs), the group's slowest rank's.
    graph: each sample replays one CUDA graph of the batch's calls."""
    work = prepared(ctx, case, backend, warmup, batch, graph)
    return time_samples(ctx, [work], iters, max_seconds, batch)[0]


@dataclass
class Timing:
    """One backend at one size: every sample (seconds, slowest rank's) and each round's median;
    paired: sample i was taken beside sample i of the other backends of its size."""

    samples: list[float]
    rounds: list[float]
    paired: bool = False

    @property
    def median(self) -> float:
        """Median of all samples."""
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """How far the rounds' medians scatter: (max - min) / median of them (0 for 1 round)."""
        return (max(self.rounds) - min(self.rounds)) / statistics.median(self.rounds)

    def speedup_over(self, first: Timing) -> float:
        """first's time over this one's: the median of per-sample ratios where the samples were
        taken in turns, else of per-round ratios (> 1: this one is faster)."""
        if self.paired and first.paired and len(self.samples) == len(first.samples):
            pairs = zip(first.samples, self.samples)
        else:
            pairs = zip(first.rounds, self.rounds)
        return statistics.median(a / b for a, b in pairs)


def _add(out: dict[str, Timing | str], be: str, t: list[float], paired: bool) -> None:
    got = out.setdefault(be, Timing([], [], paired))
    assert isinstance(got, Timing)
    got.samples.extend(t)
    got.rounds.append(statistics.median(t))


def measure_size(ctx: Ctx, case: Case, backends: list[str], args: argparse.Namespace,
                 rounds: int) -> dict[str, Timing | str]:
    """Each backend at one size, in `rounds` rounds in rotated order (A B, B A, ...), each round
    with up to --iterations samples and a 1/rounds share of --max-seconds, so drift on a shared
    machine hits all alike; with --interleave sample the backends also take turns sample by
    sample within a round. A str value says why that backend declined."""
    out: dict[str, Timing | str] = {}
    per = args.max_seconds / rounds
    for k in range(rounds):
        order = [be for be in backends[k % len(backends):] + backends[:k % len(backends)]
                 if not isinstance(out.get(be), str)]
        if args.interleave == "sample":
            work = {}
            for be in order:
                try:
                    work[be] = prepared(ctx, case, None if be == "auto" else be, args.warmup,
                                        args.batch, args.graph)
                except BackendUnavailable as e:
                    out[be] = str(e).splitlines()[0]
            times = time_samples(ctx, list(work.values()), args.iterations, per, args.batch,
                                 args.lead_in) if work else []
            for be, t in zip(work, times):
                _add(out, be, t, paired=True)
            continue
        for be in order:
            try:
                t = time_case(ctx, case, None if be == "auto" else be, args.iterations,
                              args.warmup, per, args.batch, args.graph)
            except BackendUnavailable as e:
                out[be] = str(e).splitlines()[0]
                continue
            _add(out, be, t, paired=False)
    return out


def chosen_backend(op: str, nbytes: int, dtype: torch.dtype, device: str,
                   buffer: str = "plain", group: Any = None) -> str:
    """Which backend the dispatcher picks for this op and size (what `auto` ran on)."""
    try:
        return dist.which_backend(op, nbytes, dtype, device, group=group, buffer=buffer)
    except BackendUnavailable as e:
        return f"none ({e})"


def make_ctx(args: argparse.Namespace, group: Any = None,
             ranks: tuple[int, ...] = ()) -> Ctx:
    """The context of a sweep: this rank in `group` (None: the world), options from args."""
    if not dist.is_initialized():
        dist.init_distributed(verbose=False)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    g = group_of(group, "benchmark")
    return Ctx(g.rank, g.size, getattr(torch, args.dtype), device, args.symm, group, args.calls,
               ranks, layout.label(g.size, g.span) or g.size)


def make_row(bench: Bench, ctx: Ctx, size: int, be: str, t: Timing, first: Timing,
             args: argparse.Namespace) -> dict[str, Any]:
    """One CSV/printed row: a backend's statistics at a size (first: the reference backend)."""
    buf = "symmetric" if ctx.symm and bench.op in BUFFER_KEYED else "plain"
    served = chosen_backend(bench.op, size, ctx.dtype, ctx.device, buf, ctx.group) \
        if be == "auto" else be
    med = t.median
    q = statistics.quantiles(t.samples, n=10) if len(t.samples) >= 2 else [med] * 9
    algbw = size / med / 1e9
    return {"op": bench.op, "ranks": ctx.n, "group": ctx.label, "device": ctx.device,
            "dtype": dtype_name(ctx.dtype),
            "bytes": size, "backend": be, "served_by": served,
            "avg_us": statistics.fmean(t.samples) * 1e6, "median_us": med * 1e6,
            "p10_us": q[0] * 1e6, "p90_us": q[-1] * 1e6, "min_us": min(t.samples) * 1e6,
            "max_us": max(t.samples) * 1e6, "iters": len(t.samples), "algbw_gbs": algbw,
            "busbw_gbs": algbw * bus_factor(bench.op, ctx.n), "batch": args.batch,
            "symm": ctx.symm or "", "graph": int(args.graph), "calls": ctx.calls,
            "rounds": len(t.rounds), "round_medians_us": ";".join(f"{r * 1e6:.3f}"
                                                                  for r in t.rounds),
            "spread": t.spread,
            "vs_first": t.speedup_over(first)}


def run(bench: Bench, argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse options, sweep sizes for each backend, print OSU-style rows; return them."""
    args = parser(bench.title or f"mcr OSU-style {bench.op}").parse_args(argv)
    return sweep(bench, args)


def _header(bench: Bench, ctx: Ctx, args: argparse.Namespace) -> None:
    now = datetime.datetime.now().isoformat(timespec="seconds")
    dev = torch.cuda.get_device_name() if ctx.device == "cuda" else "cpu"
    print(f"# mcr OSU-style {bench.op}: {ctx.n} ranks, {dev}, {args.dtype}, "
          f"iterations <= {args.iterations} (warm-up {args.warmup}), {now}")
    print(f"# command: {' '.join(sys.argv)}")
    print(f"# timing: {args.batch} call(s) per sample, {ctx.calls} calls"
          + (", replayed from one CUDA graph" if args.graph else "")
          + (f", outputs in {ctx.symm} symmetric memory" if ctx.symm else "")
          + (f", {args.rounds} rounds" if args.rounds > 1 else "")
          + (", backends in turns sample by sample" if args.interleave == "sample" else ""))
    print(f"# {'Size':>10} {'Backend':>12} {'Avg Latency(us)':>16} {'Median(us)':>11} "
          f"{'P10(us)':>9} {'P90(us)':>9} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} "
          f"{'x first':>8}", flush=True)


def print_row(row: dict[str, Any]) -> None:
    """A row in OSU format with nccl-tests bandwidth columns."""
    label = row["backend"] if row["backend"] != "auto" else f"auto={row['served_by']}"
    print(f"  {row['bytes']:>10} {label:>12} {row['avg_us']:>16.2f} {row['median_us']:>11.2f}"
          f" {row['p10_us']:>9.2f} {row['p90_us']:>9.2f} {row['algbw_gbs']:>12.3f}"
          f" {row['busbw_gbs']:>12.3f} {row['vs_first']:>8.3f}", flush=True)


def append_csv(path: str, rows: list[dict[str, Any]]) -> None:
    """Append rows to a CSV file, writing the header if the file is new."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            w.writeheader()
        w.writerows(rows)


def sweep(bench: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every size of args.message_size, every backend of args.backend, printed as it goes."""
    ctx = make_ctx(args)
    backends = [b.strip() for b in args.backend.split(",")]
    rows: list[dict[str, Any]] = []
    if ctx.rank == 0:
        _header(bench, ctx, args)
    for size in sizes(args.message_size, args.factor, ctx.n * ctx.dtype.itemsize):
        case = bench.setup(ctx, size)
        got = measure_size(ctx, case, backends, args, max(1, args.rounds))
        timed = [b for b in backends if isinstance(got.get(b), Timing)]
        for be in backends:
            t = got.get(be)
            if isinstance(t, str):
                if ctx.rank == 0:
                    print(f"  {size:>10} {be:>12}   declined: {t}")
                continue
            if args.validate and case.check is not None:
                case.call(None if be == "auto" else be)
                _sync(ctx.device)
                case.check()
            rows.append(make_row(bench, ctx, size, be, t, got[timed[0]], args))
            if ctx.rank == 0:
                print_row(rows[-1])
    if ctx.rank == 0 and args.csv and rows:
        append_csv(args.csv, rows)
    return rows
