"""Where the host time of a hier all-gather goes (lab/scripts/gpu_hier.sh's setting: the GPUs as
2 nodes, its parts table): per-call issue time on a side stream, then a cProfile of rank 0.

    MCR_LOCAL_SIZE=2 MCR_TUNING_TABLE=/tmp/gpu_hier/hier_parts.yaml \
        torchrun --standalone --nproc_per_node=4 lab/probes/probe_hier_host.py
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time

import torch

import mcr.comm as dist


def main() -> None:
    """Print per-call host ms at a few sizes, then rank 0's top functions by own time."""
    dist.init_distributed(verbose=False)
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream(dev)
    for nbytes in (16 << 20, 256 << 20):
        per = nbytes // 2 // n
        inp = torch.randn(per, device=dev, dtype=torch.bfloat16)
        out = torch.empty(per * n, device=dev, dtype=torch.bfloat16)

        def calls(k: int) -> float:
            torch.cuda.synchronize()
            dist.barrier(backend="gloo")
            t0 = time.perf_counter()
            with torch.cuda.stream(side):
                for _ in range(k):
                    dist.all_gather_into_tensor(out, inp, backend="hier")
            t = (time.perf_counter() - t0) * 1e3 / k
            torch.cuda.synchronize()
            return t
        calls(2)
        ts = [calls(5) for _ in range(3)]
        if rank == 0:
            print(f"hier all-gather {nbytes >> 20} MiB: issue {statistics.median(ts):.3f} ms "
                  f"a call (rounds {', '.join(f'{t:.3f}' for t in ts)})", flush=True)
        if nbytes == 256 << 20:
            prof = cProfile.Profile()
            prof.enable()
            calls(5)
            prof.disable()
            if rank == 0:
                pstats.Stats(prof).sort_stats("tottime").print_stats(18)
                pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
