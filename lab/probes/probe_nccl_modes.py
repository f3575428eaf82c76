"""Probe: why NCCL's small-call latency is bimodal between processes (NOTES.md, issue 18).

On 2x H100 and 2x H200 leases NCCL's small reduce-scatters took ~30 us in one process and
~52 us in the next, for a whole process at a time: the tuner measured one mode and OSU met the
other. Not mpirun's core binding (2026-11-25 entry). This probe times plain torch.distributed
NCCL calls (no mcr) in one launch and prints, per rank, the latency with what could decide the
mode: the cores the rank may run on, the core it runs on, the GPU's SM clock. Run it several
times under one launcher with NCCL_DEBUG=INFO and compare a fast launch's NCCL lines with a
slow one's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as td


def timed(fn: Callable[[], object], iters: int = 200) -> float:
    """Median microseconds of fn() over iters calls, each synchronized."""
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(out)


def pipelined(fn: Callable[[], object], iters: int = 200) -> float:
    """Microseconds per call of iters calls launched back to back, one synchronize at the end:
    the GPU's time per call without the host's wait and wake between calls."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / iters


def main() -> None:
    """Time NCCL all-reduce and reduce-scatter of 64 KiB; print one line per rank and
    communicator."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comms", type=int, default=0, help="new communicators to time as well")
    ap.add_argument("--rounds", type=int, default=0,
                    help="then time every communicator's all-reduce again, round-robin, this "
                         "many rounds: a communicator's mode stays with it, a time's does not")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    td.init_process_group("nccl", rank=rank, world_size=world,
                          device_id=torch.device("cuda", torch.cuda.current_device()))
    x = torch.ones(32768, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(32768 // world, dtype=torch.bfloat16, device="cuda")
    groups = [None] + [td.new_group(list(range(world))) for _ in range(args.comms)]
    times = []
    for g in groups:
        for _ in range(20):
            td.all_reduce(x, group=g)
        times.append((timed(lambda: td.all_reduce(x, group=g)),
                      timed(lambda: td.reduce_scatter_tensor(out, x, group=g))))
    ar, rs = times[0]
    # If the slow mode is the host's wait and wake, back-to-back calls run at the fast rate.
    ar_pipe = pipelined(lambda: td.all_reduce(x))
    try:
        clock = torch.cuda.clock_rate()
    except Exception:  # pynvml missing: the clock is a hint, not the point
        clock = -1
    cpu = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36]
    print(f"MODE rank {rank} all_reduce {ar:.1f} us reduce_scatter {rs:.1f} us "
          f"cpus {sorted(os.sched_getaffinity(0))[:4]}..({len(os.sched_getaffinity(0))}) "
          f"on cpu {cpu} sm_clock {clock} all_reduce back-to-back {ar_pipe:.1f} us",
          flush=True)
    if args.comms:
        print(f"MODE rank {rank} new communicators (all-reduce/reduce-scatter us): "
              + " ".join(f"{a:.0f}/{r:.0f}" for a, r in times[1:]), flush=True)
    if args.rounds:
        # Beside them, what is not NCCL: a one-element kernel (launch and wait) and a 64 KiB
        # copy to the other GPU over NVLink by its copy engine. If these swing with NCCL, the
        # slow mode is the host's or the link's, and every backend meets it alike.
        peer = torch.empty_like(x, device=(torch.cuda.current_device() + 1)
                            % torch.cuda.device_count())
        one = torch.zeros(1, device="cuda")
        others = {"kernel": lambda: one.add_(1), "peer copy": lambda: peer.copy_(x)}
        rows = [[timed(lambda: td.all_reduce(x, group=g), 100) for g in groups]
                + [timed(fn, 100) for fn in others.values()] for _ in range(args.rounds)]
        names = [f"communicator {i} all-reduce" for i in range(len(groups))] + list(others)
        for i, name in enumerate(names):
            print(f"MODE rank {rank} {name} by round (us): "
                  + " ".join(f"{r[i]:.0f}" for r in rows), flush=True)
    td.destroy_process_group()


if __name__ == "__main__":
    main()
