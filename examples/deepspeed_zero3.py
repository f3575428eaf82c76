"""DeepSpeed ZeRO-3 through mcr: every deepspeed.comm call goes to the library mcr picks.

    DS_ACCELERATOR=cpu torchrun --nproc_per_node=2 examples/deepspeed_zero3.py   # CPUs
    torchrun --nproc_per_node=2 examples/deepspeed_zero3.py                      # GPUs
    mpirun -np 2 python examples/deepspeed_zero3.py                              # with MPI

The one line is mcr.integrations.deepspeed.install(), anywhere before the first step (or no
line at all: MCR_DEEPSPEED=1 in the environment).
"""

import deepspeed
import torch

import mcr.comm as dist
import mcr.integrations.deepspeed

mcr.integrations.deepspeed.install()          # the one line
deepspeed.init_distributed(dist_backend="gloo" if not torch.cuda.is_available() else "nccl")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 3},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                  config=config)
for step in range(5):
    x = torch.randn(8, 256, device=engine.device)
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()
    if dist.get_rank() == 0:
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
dist.log_summary()
