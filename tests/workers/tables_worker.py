"""Print which library each rank's tables pick for a few calls, and the tables in force."""

import torch

import mcr.comm as dist
from mcr import runtime

dist.init_distributed(verbose=False)
t = torch.ones(16)
dist.all_reduce(t)
assert t.eq(dist.get_world_size()).all()
picks = ", ".join(f"{op} {n} -> {dist.which_backend(op, n, torch.float32)}"
                  for op in ("all_reduce", "all_gather") for n in (64, 1 << 20))
print(f"rank {dist.get_rank()}: {picks}; tables: {runtime.get().tables.describe()}", flush=True)
dist.destroy_process_group()
