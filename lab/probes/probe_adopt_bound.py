"""Torch Gloo groups adopted by mcr on a world bound to a GPU: mcr makes each group's NCCL
side itself, members only (groups.members_only_group), with the world's binding hidden; the
groups of the ranks of one parity first (no non-member may be waited for), then all ranks.

    torchrun --standalone --nproc_per_node=N lab/probes/probe_adopt_bound.py
"""

import os

import torch
import torch.distributed as tdist

import mcr.comm as dist

rank = int(os.environ["RANK"])
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
torch.cuda.set_device(dev)
tdist.init_process_group("nccl", device_id=dev)
dist.init_distributed(verbose=False)
n = tdist.get_world_size()
mine = [r for r in range(n) if r % 2 == rank % 2]
groups = [tdist.new_group([r for r in range(n) if r % 2 == k], backend="gloo")
          for k in range(min(n, 2))]
g = groups[rank % 2]
t = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(t, group=g)
want = float(sum(r + 1 for r in mine))
assert torch.all(t == want), (t[:4], want)
both = tdist.new_group(list(range(n)), backend="gloo")     # every rank, its NCCL side by mcr
t = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(t, group=both)
assert torch.all(t == n * (n + 1) / 2), t[:4]
rows = dist.log_summary(return_dict=True) if rank == 0 else []
print(f"rank {rank}: ADOPT OK {t[0].item()} via "
      f"{sorted({(r['op'], r['backend']) for r in rows if r['kind'] == 'served'})}", flush=True)
dist.destroy_process_group()
