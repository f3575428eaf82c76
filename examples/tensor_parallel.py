"""Tensor parallelism by hand with mcr.comm: a column- then row-parallel MLP whose output is
all-reduced, as each layer of a tensor-parallel decoder does twice. The all-reduce goes to the
library the table picks for its size (on GPUs, symmetric-memory kernels for the small ones).

    torchrun --nproc_per_node=2 examples/tensor_parallel.py
    mpirun -np 2 python examples/tensor_parallel.py

Each rank checks its output against the unsharded MLP's.
"""

import torch

import mcr.comm as dist

dist.init_distributed()
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
    else torch.device("cpu")
torch.manual_seed(0)                           # every rank draws the same full weights
hidden, ffn = 512, 2048
w_up, w_down = torch.randn(hidden, ffn) / hidden ** 0.5, torch.randn(ffn, hidden) / ffn ** 0.5
cols = slice(rank * ffn // world, (rank + 1) * ffn // world)
up, down = w_up[:, cols].to(device), w_down[cols].to(device)   # this rank's shards
for batch in (1, 16, 64):
    x = torch.randn(batch, hidden)              # the same input on every rank
    y = torch.relu(x.to(device) @ up) @ down   # this rank's part of the output
    dist.all_reduce(y)                         # the sum of every rank's part
    want = torch.relu(x @ w_up) @ w_down
    err = ((y.cpu() - want).norm() / want.norm()).item()
    assert err < 1e-5, f"rank {rank}: batch {batch} differs from the unsharded MLP by {err:.1e}"
    lib = dist.which_backend("all_reduce", y.nbytes, y.dtype, y.device.type)
    if rank == 0:
        print(f"batch {batch}: {y.nbytes} B all-reduce on {lib}, matches the unsharded MLP",
              flush=True)
dist.destroy_process_group()
