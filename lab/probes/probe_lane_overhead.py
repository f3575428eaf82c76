"""Where mpi_lanesN spends the host time the bare process-lane probe did not (issue 13).

Under mpirun -np 2: times N all-reduces through mcr's mpi_lanesN, split into issue (the call
with async_op=True: staging and doorbells) and wait (the lanes, the copy back), per device and
with torch's intra-op threads as they are or at 1 (torch's CPU copies fan out to OpenMP
threads that spin after each copy, on the cores the helpers need).

  mpirun -np 2 --oversubscribe --bind-to none python3 lab/probes/probe_lane_overhead.py
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import mcr.comm as dist
from mcr.backends.lanes import helper as lane_helper
from mcr.backends.lanes import mpi_lanes as lanes

SPENT: dict[str, list[float]] = {}


def _timed(owner: object, name: str) -> None:
    """Wrap owner.name to add its time per call to SPENT[name]."""
    fn = getattr(owner, name)

    def wrapper(*args: object, **kw: object) -> object:
        t = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            SPENT.setdefault(name, []).append(time.perf_counter() - t)
    setattr(owner, name, wrapper)


for _owner, _name in ((lanes.LaneProcs, "start"), (lanes.LaneProcs, "ensure"),
                      (lane_helper.Block, "ring"), (lanes.LaneCall, "finish"),
                      (lanes.MpiLanesBackend, "all_reduce")):
    _timed(_owner, _name)


def main() -> None:
    """Print median issue and wait times per (device, threads, size)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--sizes", default="262144,1048576,4194304")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--profile", action="store_true", help="cProfile the issue calls (rank 0)")
    a = ap.parse_args()
    prof = cProfile.Profile() if a.profile else None
    dist.init_distributed(verbose=False)
    rank = dist.get_rank()
    be = f"mpi_lanes{a.lanes}"
    devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    default_threads = torch.get_num_threads()
    for dev in devs:
        for threads in (default_threads, 1):
            torch.set_num_threads(threads)
            for nbytes in (int(s) for s in a.sizes.split(",")):
                x = torch.ones(nbytes // 4, device=dev)
                issue, wait, whole = [], [], []
                SPENT.clear()
                for i in range(a.iters + 5):
                    dist.barrier(backend="gloo")
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    if prof is not None:
                        prof.enable()
                    w = dist.all_reduce(x, backend=be, async_op=True)
                    if prof is not None:
                        prof.disable()
                    t1 = time.perf_counter()
                    w.wait()
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    t2 = time.perf_counter()
                    if i >= 5:
                        issue.append(t1 - t0)
                        wait.append(t2 - t1)
                        whole.append(t2 - t0)
                    x.fill_(1.0)
                if rank == 0:
                    print(f"{dev:>4} threads {threads:>2} {nbytes:>9} B  issue "
                          f"{statistics.median(issue) * 1e6:7.1f} us  wait "
                          f"{statistics.median(wait) * 1e6:7.1f} us  whole "
                          f"{statistics.median(whole) * 1e6:7.1f} us", flush=True)
                    print("      inside: " + "  ".join(
                        f"{k} {statistics.median(v) * 1e6:.1f} us x{len(v) // (a.iters + 5)}"
                        for k, v in SPENT.items()), flush=True)
    torch.set_num_threads(default_threads)
    if prof is not None and rank == 0:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
