"""A Gloo world bound to a GPU (what DeepSpeed makes with dist_backend="gloo" on CUDA), mcr
started on it, then an NCCL all-reduce through mcr checked against the sum computed here.

torch (2.11 to 2.13 at least) splits every new NCCL group from such a world's Gloo backend and
fails with a TypeError; the worker prints what torch's own new_group does, for the record, then
needs mcr's NCCL groups to work. Run under torchrun, one rank per GPU (one GPU is enough: torch
decides to split when it builds the group). Prints `rank R: BOUND OK`.
"""

import os

import torch
import torch.distributed as tdist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
tdist.init_process_group("gloo", device_id=dev)
try:
    tdist.new_group(list(range(world)), backend="nccl")
    print(f"rank {rank}: torch new_group(nccl) on the bound Gloo world: ok", flush=True)
except TypeError as e:
    print(f"rank {rank}: torch new_group(nccl) on the bound Gloo world: TypeError: "
          f"{str(e)[:100]}", flush=True)

import mcr.comm as dist  # noqa: E402 - after the world exists, as in a DeepSpeed user's script

dist.init_distributed(verbose=False)
t = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(t, backend="nccl")
torch.cuda.synchronize()
want = world * (world + 1) / 2
assert bool(t.eq(want).all()), f"rank {rank}: got {t[:4].tolist()}, want {want}"
print(f"rank {rank}: BOUND OK", flush=True)
dist.destroy_process_group()
