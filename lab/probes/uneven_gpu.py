"""Uneven all_to_all_single on GPUs: torch on a plain NCCL group against mcr (which checks the
splits across ranks first, through the group's board), mcr with the exchange left out, the
board's exchange before torch's own call, and the exchange alone; each rank says its host time
a call (issue only), its wall time a call over a stream of calls and synchronized every call,
and the time in mcr's split check.

    torchrun --nproc_per_node=N lab/probes/uneven_gpu.py
"""
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

import mcr.checks as checks
import mcr.comm as dist

cuda = torch.cuda.is_available()     # on CPU (Gloo) a smoke test of the probe
if cuda:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
pg = tdist.new_group(backend="nccl" if cuda else "gloo")
spent = [0.0]
real = checks.uneven_splits


def timed(*a: Any, **k: Any) -> Any:
    """mcr's split check, its time added up."""
    t0 = time.perf_counter()
    try:
        return real(*a, **k)
    finally:
        spent[0] += time.perf_counter() - t0


checks.uneven_splits = timed
dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")


def sync() -> None:
    """Wait for the GPU (nothing on CPU)."""
    if cuda:
        torch.cuda.synchronize()


def case(i: int) -> tuple:
    """(output, input, output splits, input splits) of the i-th shape."""
    a = 64 + (i * 37) % 97
    ins = [a + j for j in range(n)]
    outs = [a + r for _ in range(n)]
    return (torch.empty(sum(outs), 4096 if cuda else 64, device=dev, dtype=torch.bfloat16),
            torch.ones(sum(ins), 4096 if cuda else 64, device=dev, dtype=torch.bfloat16), outs, ins)


def unchecked(y: Any, x: Any, o: list, i: list) -> None:
    """mcr's call with the split check's exchange left out (each rank's own key)."""
    checks.uneven_splits = lambda what, g, ic, oc, row, dt: (n * 1024, False)
    try:
        dist.all_to_all_single(y, x, o, i)
    finally:
        checks.uneven_splits = timed


def board_then_torch(y: Any, x: Any, o: list, i: list) -> None:
    """The board's exchange (as mcr's check makes it), then torch's own call."""
    dist.get_world_group().board.exchange([*i, *o, 1], "probe")
    tdist.all_to_all_single(y, x, o, i, group=pg)


def board_only(y: Any, x: Any, o: list, i: list) -> None:
    """The board's exchange alone."""
    dist.get_world_group().board.exchange([*i, *o, 1], "probe")


cases = [case(i) for i in range(16)]
calls: dict[str, Callable] = {
    "torch": lambda y, x, o, i: tdist.all_to_all_single(y, x, o, i, group=pg),
    "mcr": lambda y, x, o, i: dist.all_to_all_single(y, x, o, i),
    "mcr-unchecked": unchecked, "board+torch": board_then_torch, "board": board_only}
for _ in range(2):
    for name, fn in calls.items():
        for c in cases:
            fn(*c)
        sync()
        spent[0] = 0.0
        t0 = time.perf_counter()
        for k in range(300):
            fn(*cases[k % 16])
        host = (time.perf_counter() - t0) / 300 * 1e6
        sync()
        total = (time.perf_counter() - t0) / 300 * 1e6
        chk = spent[0] / 300 * 1e6
        ts = []
        for k in range(100):
            t1 = time.perf_counter()
            fn(*cases[k % 16])
            sync()
            ts.append(time.perf_counter() - t1)
        print(f"UNEVEN rank {r} {name:13s} issue {host:7.1f} us/call, stream of 300 "
              f"{total:7.1f}, synchronized {statistics.median(ts) * 1e6:7.1f}"
              + (f", split check {chk:6.1f}" if name == "mcr" else ""), flush=True)
if r == 0:
    dist.log_summary()
