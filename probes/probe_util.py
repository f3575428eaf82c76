"""Helpers the GPU probes share: print on rank 0, the slowest rank's value, GPU time per call."""

from __future__ import annotations

from collections.abc import Callable

import torch

import mcr.comm as dist


def say(*a: object) -> None:
    """Print on rank 0."""
    if dist.get_rank() == 0:
        print(*a, flush=True)


def worst(x: float) -> float:
    """The slowest rank's value."""
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, backend="gloo")
    return float(t[0])


def gpu_us(fn: Callable[[], None], iters: int = 10, warm: int = 3) -> float:
    """Microseconds per call over `iters` back-to-back calls, by CUDA events, slowest rank."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    dist.barrier(backend="gloo")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return worst(s.elapsed_time(e) / iters * 1e3)
