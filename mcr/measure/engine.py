"""mcr's measurement engine: a benchmark's context and cases, warm-up, interleaved timing of
backends.

The tuner (mcr.tuner) and the OSU benchmarks (benchmarks/osu_*.py) measure through it. A
Bench states only what differs per op (buffers for a size, the call, the check;
mcr.measure.cases), as nccl-tests does; options.py holds the options, sweep.py the OSU-style
sweep and its rows. Run under mpirun/mpiexec or torchrun.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import mcr.comm as dist
from mcr import layout
from mcr.errors import BackendUnavailable
from mcr.measure.turns import turn_orders
from mcr.session import group_of


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
    even: bool = True     # False: an all-to-all with split sizes (keyed and tabled apart)

    @property
    def heading(self) -> str:
        """What the sweep's help and printed header call it."""
        return self.title or f"mcr OSU-style {self.op}"


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


def device_sync(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing on CPU."""
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
        device_sync(ctx.device)
        one[0] = max(float(one[0]), time.perf_counter() - t0)
    dist.all_reduce(one, op=dist.ReduceOp.MAX, group=ctx.group, backend="gloo")
    return max(3, min(iters, int(max_seconds / max(float(one[0]), 1e-7))))


def prepared(ctx: Ctx, case: Case, backend: str | None, warmup: int, batch: int,
             graph: bool) -> Sample:
    """Warm the backend up; return one sample's work: batch calls, or with graph one replay of
    them captured in a CUDA graph."""
    for _ in range(warmup):
        case.call(backend)
    device_sync(ctx.device)

    def lead() -> None:
        case.call(backend)
        device_sync(ctx.device)
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
            device_sync(ctx.device)
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


def make_ctx(args: argparse.Namespace, group: Any = None,
             ranks: tuple[int, ...] = ()) -> Ctx:
    """The context of a sweep: this rank in `group` (None: the world), options from args."""
    if not dist.is_initialized():
        dist.init_distributed(verbose=False)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    g = group_of(group, "benchmark")
    return Ctx(g.rank, g.size, getattr(torch, args.dtype), device, args.symm, group, args.calls,
               ranks, layout.label(g.size, g.span) or g.size)
