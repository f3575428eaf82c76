"""The same MPI all-reduces made synchronously on even ranks and asynchronously on odd ones
(legal in torch.distributed): a synchronous call runs MPI's blocking form only where every rank
does (mcr.guard's board), since MPI never matches it with a non-blocking one. Each result
against its sum; prints `SYNC-ASYNC OK` per rank.

    mpirun -np 3 python tests/workers/sync_async_worker.py
"""

from __future__ import annotations

import torch

import mcr.comm as dist

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
for i, k in enumerate([1, 7, 64, 1000, 4099, 65536] * 10):
    t = torch.full((k,), float(r + 1))
    if r % 2 == 0:
        dist.all_reduce(t, backend="mpi")
    else:
        dist.all_reduce(t, backend="mpi", async_op=True).wait()
    want = torch.full((k,), float(n * (n + 1) // 2))
    assert torch.equal(t, want), f"call {i}: rank {r} got {t[:4]} for {k} elements"
print(f"rank {r}: SYNC-ASYNC OK", flush=True)
dist.destroy_process_group()
