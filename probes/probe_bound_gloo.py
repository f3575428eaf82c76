"""A Gloo world bound to a GPU (what DeepSpeed makes with dist_backend="gloo" on CUDA), then
torch's own new NCCL group and mcr started on that world with an NCCL all-reduce. One process
(world of one) is enough: torch decides to split at group creation, before any peer is met."""

import os
import traceback

import torch
import torch.distributed as tdist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
tdist.init_process_group("gloo", device_id=dev, rank=0, world_size=1)
print("torch", torch.__version__, "world bound to", tdist.distributed_c10d._get_default_group()
      .bound_device_id)
try:
    tdist.new_group([0], backend="nccl")
    print("torch new_group(nccl): ok")
except Exception as e:  # noqa: BLE001 - the probe reports whatever torch raises
    print(f"torch new_group(nccl): {type(e).__name__}: {str(e).splitlines()[0]}")

import mcr.comm as dist  # noqa: E402 - after the world exists, as a DeepSpeed user's script

try:
    dist.init_distributed(verbose=False)
    t = torch.ones(1024, device=dev)
    dist.all_reduce(t, backend="nccl")
    torch.cuda.synchronize()
    print("mcr on the bound Gloo world, nccl all-reduce:", "ok" if t.eq(1).all() else "WRONG")
except Exception:  # noqa: BLE001
    traceback.print_exc()
