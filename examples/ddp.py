"""Plain torch DDP on mcr's torch.distributed backend: the script's own init_process_group()
starts `mcr`, and DDP's gradient all-reduces go through mcr's tables.

    torchrun --nproc_per_node=2 examples/ddp.py
    mpirun -np 2 python examples/ddp.py            # MPI joins the libraries mcr can mix

The one line is install(); with MCR_TORCH=1 in the environment (a regular install) not even
that. Runs on CPUs (Gloo, MPI) and on GPUs (one per rank).
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import mcr.comm
import mcr.integrations.torch_backend as mcr_torch

mcr_torch.install()                           # the one line: before init_process_group
dist.init_process_group()                     # starts the `mcr` backend, under either launcher
rank = dist.get_rank()
device = torch.device("cuda", rank % torch.cuda.device_count()) if torch.cuda.is_available() \
    else torch.device("cpu")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).to(device))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(1 + rank)                   # each rank its own data
for step in range(5):
    x = torch.randn(8, 256, device=device)
    loss = model(x).pow(2).mean()
    loss.backward()                           # DDP's bucket all-reduces: through mcr
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print(f"step {step}: loss {loss.item():.4f} (backend {dist.get_backend()})", flush=True)
mcr.comm.log_summary()                        # rank 0: which library served which calls
dist.destroy_process_group()
