"""mcr.comm's collectives inside torch.compile'd code (inductor) give what the same code gives
uncompiled, and mcr serves them: a tensor-parallel block (row-parallel all-reduce), a
sequence-parallel step (all-gather, reduce-scatter), an MoE-style exchange (all-to-all) and a
broadcast, compiled whole (the math around them exact, so that eager and compiled agree bit for
bit); each rank prints its checks and Dynamo's graph and graph-break counts, rank 0 mcr's
summary. `cuda`: on GPUs, compiled with CUDA graphs (mode="reduce-overhead").

    torchrun --nproc_per_node=2 tests/workers/compile_worker.py
    mpirun -np 2 python tests/workers/compile_worker.py
    torchrun --nproc_per_node=4 tests/workers/compile_worker.py cuda
"""

from __future__ import annotations

import sys

import torch
from torch._dynamo.utils import counters

import mcr.comm as dist

dist.init_distributed(verbose=False)
rank, n = dist.get_rank(), dist.get_world_size()
CUDA = sys.argv[1:] == ["cuda"]
DEV = torch.device("cuda", torch.cuda.current_device()) if CUDA else torch.device("cpu")
MODE = "reduce-overhead" if CUDA else None


def step(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One rank's share of a block, its collectives through mcr, the math around them exact
    (x holds quarters: every sum and product here is exact in float32, in any order)."""
    y = torch.relu(x * 2 - 1)
    dist.all_reduce(y)                                     # row-parallel output
    full = torch.empty(n * y.shape[0], y.shape[1], device=DEV)
    dist.all_gather_into_tensor(full, y * (rank + 1))      # sequence parallel
    part = torch.empty_like(y)
    dist.reduce_scatter_tensor(part, full - 3)
    moved = torch.empty_like(full)
    dist.all_to_all_single(moved, full + rank)             # dispatch / combine
    dist.broadcast(moved, src=n - 1)
    return y + 1, part * 2, moved - 1


compiled = torch.compile(step, mode=MODE)
checks = 0
with torch.no_grad():
    for i, rows in enumerate((2 * n, 4 * n, 2 * n)):      # a new size, then the first again
        g = torch.Generator().manual_seed(10 * i + rank)
        x = (torch.randint(-16, 17, (rows, 16), generator=g).float() / 4).to(DEV)
        for want, got in zip(step(x), compiled(x)):
            assert torch.equal(want, got), f"rank {rank}: step {i}: eager {want} compiled {got}"
            checks += 1
in_graph = (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()))
pair = dist.new_group([0, 1]) if n > 1 else None


def breaks(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Forms that stay outside the graph (a graph break each) and one that enters it on a
    sub-group: an asynchronous all-reduce, an all-to-all with split sizes, all-reduces on mcr's
    group of ranks 0 and 1."""
    y = x * 2
    dist.all_reduce(y, async_op=True).wait()
    sizes = [1 + (rank + p) % n for p in range(n)]        # p sends me as many as I send p
    out = torch.empty(sum(sizes), x.shape[1], device=DEV)
    dist.all_to_all_single(out, x[:sum(sizes)] + rank, sizes, sizes)
    z = x + 1
    if rank < 2:
        dist.all_reduce(z, op=dist.ReduceOp.MAX, group=pair)
    return y - 1, out, z


compiled = torch.compile(breaks, mode=MODE)
with torch.no_grad():
    x = torch.randint(-16, 17, (n * n, 16), generator=torch.Generator().manual_seed(rank)).to(DEV)
    for want, got in zip(breaks(x.float() / 4), compiled(x.float() / 4)):
        assert torch.equal(want, got), f"rank {rank}: breaks: eager {want} compiled {got}"
        checks += 1
print(f"rank {rank}: COMPILE OK {checks} checks, in graph: graphs {in_graph[0]} breaks "
      f"{in_graph[1]}; async and uneven: breaks {sum(counters['graph_break'].values())}",
      flush=True)
dist.log_summary()
dist.destroy_process_group()
