"""What the step benchmarks (train_step, decode, moe) share: synchronizing ranks, the slowest
rank's time, the garbage collector's clock, a torch.profiler step breakdown, and the statistics
of alternated pairs."""

from __future__ import annotations

import gc
import math
import time
from typing import Any

import torch
import torch.distributed as tdist


def sync(device: torch.device) -> None:
    """Wait for this rank's GPU work, then for every rank."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    tdist.barrier()


class GcClock:
    """Seconds the garbage collector has run in this process (gc.callbacks): a host-bound
    step pays its pauses, and a layer that makes more objects per call makes more of them."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0


GC = GcClock()


# Kernels and copies that belong to communication: NCCL's, torch symmetric memory's (barriers,
# one-/two-shot all-reduce) and device copies (mcr's copy-engine pushes are peer memcpys; local
# copies of the same kind are counted with them).
_COMM_WORDS = ("nccl", "memcpy ptop", "memcpy dtod", "barrier", "one_shot", "two_shot",
               "symm", "multimem", "mcr_ll")


def slowest(x: float, device: torch.device) -> float:
    """The largest of every rank's x (torch's world group, outside any timed region): ranks
    coupled by collectives run at the slowest rank's pace, so a block is that rank's time
    and a floor measured without communication is the floor of the slowest rank."""
    if not tdist.is_initialized() or tdist.get_world_size() == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64, device=device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return float(t[0])


def profile_breakdown(prof: Any, wall_us: float, steps: int) -> dict[str, Any]:
    """Per step, ms, from a torch.profiler run of `steps` steps that took wall_us: wall, GPU
    compute, communication (incl. device copies), the part of it not under compute, and GPU
    idle (host-bound) time; the ten GPU activities that took most; where the host's time went."""
    comp, comm = [], []
    by_name: dict[str, float] = {}
    for e in prof.events():
        # A record_function range is shown on the GPU too, spanning its kernels and the gaps
        # between them ("FSDP::post_backward_reduce (model.layers.3)", "nccl:_all_gather_base"):
        # not work of its own. Counted as compute (before 2026-11-26), such spans, 9.6 ms a
        # layer for FSDP2 large's reduce-scatters through mcr, made communication look hidden.
        if e.device_type != torch.autograd.DeviceType.CUDA or getattr(e, "is_user_annotation",
                                                                       False):
            continue
        span = (e.time_range.start, e.time_range.end)
        name = e.name.lower()
        (comm if any(w in name for w in _COMM_WORDS) else comp).append(span)
        by_name[e.name[:60]] = by_name.get(e.name[:60], 0.0) + span[1] - span[0]
    busy, u_comp = _length(_union(comp + comm)), _length(_union(comp))
    ms = 1e-3 / steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:10]
    return {"wall_ms": wall_us * ms, "compute_ms": u_comp * ms,
            "comm_ms": _length(_union(comm)) * ms, "comm_exposed_ms": (busy - u_comp) * ms,
            "gpu_idle_ms": max(0.0, wall_us - busy) * ms,
            "top_ms": {k: round(v * ms, 3) for k, v in top}, **host_side(prof, ms)}


def profiled(step: Any, steps: int, device: torch.device) -> dict[str, float]:
    """step(i) for i < steps under torch.profiler: ms per step of wall, GPU compute,
    communication, communication not under compute, GPU idle (profile_breakdown's)."""
    from torch.profiler import ProfilerActivity, profile
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        sync(device)
        wall_us = (time.perf_counter() - t0) * 1e6
    b = profile_breakdown(prof, wall_us, steps)
    return {k: b[k] for k in ("wall_ms", "compute_ms", "comm_ms", "comm_exposed_ms",
                              "gpu_idle_ms")}


# Host-side ranges worth seeing whole: the frameworks' own collective ranges (FSDP::*,
# torch's c10d/nccl ops) and CUDA runtime calls, synchronizing ones above all.
_HOST_PREFIXES = ("FSDP::", "c10d::", "nccl:", "cuda", "cu")


def host_side(prof: Any, ms: float) -> dict[str, Any]:
    """Where a host-bound step's host time goes, ms per step: the ranges above by inclusive
    time, and the twelve operators that took most host time of their own."""
    incl: dict[str, float] = {}
    own: dict[str, float] = {}
    for r in prof.key_averages():
        # FSDP2 names a range per module ("FSDP::all_gather (model.layers.3)"): one row for all.
        name = r.key.split(" (")[0].split(" for ")[0][:60]
        own[name] = own.get(name, 0.0) + r.self_cpu_time_total
        if name.startswith(_HOST_PREFIXES):
            incl[name] = incl.get(name, 0.0) + r.cpu_time_total

    def top(d: dict[str, float], n: int) -> dict[str, float]:
        return {k: round(v * ms, 3) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n]}
    return {"host_ranges_ms": top(incl, 16), "host_self_ms": top(own, 12)}


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(low, high, coverage): the distribution-free interval for the median of xs, between the
    k-th smallest and k-th largest value for the largest k whose binomial coverage is at least
    `level`; with too few values for that (fewer than 6 at 95%), their whole range and its
    coverage. A pair ratio whose interval holds 1 has not told the two apart."""
    v, n = sorted(xs), len(xs)
    tail = [math.comb(n, j) / 2 ** n for j in range(n + 1)]
    k, below = 0, 0.0
    while k < n // 2 and below + tail[k] <= (1 - level) / 2:
        below += tail[k]
        k += 1
    k = max(k, 1)
    return v[k - 1], v[n - k], 1 - 2 * sum(tail[:k])


