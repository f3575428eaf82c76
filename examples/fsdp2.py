"""FSDP2 through mcr: a small model sharded per layer, trained for a few steps.

    torchrun --nproc_per_node=2 examples/fsdp2.py
    mpirun -np 2 python examples/fsdp2.py          # MPI joins the libraries mcr can mix

mcr.comm.init_distributed() starts torch.distributed under either launcher (under mpirun torch
alone would stop with "RANK expected, but not set"); one line then routes FSDP2's all-gathers
and reduce-scatters through mcr. Runs on CPUs (Gloo, MPI) and on GPUs (one per rank).
"""

import torch
from torch.distributed.fsdp import fully_shard

import mcr.comm as dist
import mcr.integrations.fsdp

dist.init_distributed()
device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
    else torch.device("cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).to(device)
for layer in model:
    fully_shard(layer)
fully_shard(model)
mcr.integrations.fsdp.install(model)          # the one line: after fully_shard, before training
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(5):
    x = torch.randn(8, 256, device=device)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if dist.get_rank() == 0:
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
dist.log_summary()                            # rank 0: which library served which calls
dist.destroy_process_group()
