"""DeepSpeed's inference_all_reduce with mcr installed, where DeepSpeed runs its own
shared-memory kernel (CPU tensors, LOCAL_SIZE covering the world, as DeepSpeed's launcher
states it): mcr leaves those calls to that kernel and serves the ones the kernel cannot (an
integer dtype, which the kernel skips without a word; a sub-group, which it would sum over the
whole world; MAX). Every result is checked against a sum computed here, and DeepSpeed's
kernel's results bit for bit against plain DeepSpeed's.

    torchrun --nproc_per_node=2 tests/workers/ds_shm_worker.py

Prints `rank R: SHM OK <n>`.
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ["LOCAL_SIZE"] = os.environ["LOCAL_WORLD_SIZE"]   # what DeepSpeed's launcher sets
import deepspeed  # noqa: E402
import deepspeed.comm as ds_comm  # noqa: E402
import torch.distributed as tdist  # noqa: E402

import mcr.integrations.deepspeed as mcr_ds  # noqa: E402
from mcr import bypass  # noqa: E402

deepspeed.init_distributed(dist_backend="gloo")
rank, world = tdist.get_rank(), tdist.get_world_size()
plain = ds_comm.inference_all_reduce
mcr_ds.install()
singles = [ds_comm.new_group([r]) for r in range(world)]
ISA = ds_comm.comm.cdb.shm_vector_kernel_level if hasattr(ds_comm.comm.cdb,
                                                           "shm_vector_kernel_level") else 0
checks = 0


def values(dtype: torch.dtype, r: int, n: int = 1000) -> torch.Tensor:
    """Rank r's input: small integers, so every order of summing gives the same bits."""
    return (torch.arange(n) % 17 * (r + 1)).to(dtype)


def check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Equal bit for bit, or fail naming the call."""
    global checks
    if not torch.equal(got, want):
        raise AssertionError(f"rank {rank}: {what}: {got[:8].tolist()} != {want[:8].tolist()}")
    checks += 1


def kernel_calls() -> int:
    """Calls mcr left to DeepSpeed's kernel so far."""
    return sum(c[0] for (api, name), c in bypass.COUNTS.items()
               if api == "deepspeed.comm" and name.startswith("inference_all_reduce"))


dtypes = [torch.float32] * (ISA >= 1) + [torch.bfloat16] * (ISA >= 2)
for dtype in dtypes:                                   # DeepSpeed's kernel, untouched
    want = sum(values(torch.float64, r) for r in range(world)).to(dtype)
    x, y = values(dtype, rank), values(dtype, rank)
    ds_comm.inference_all_reduce(x)
    mcr_ds.uninstall()
    plain(y)
    mcr_ds.install()
    check(x, want, f"{dtype} on DeepSpeed's kernel")
    check(x, y, f"{dtype} against plain DeepSpeed")
assert kernel_calls() == len(dtypes), (kernel_calls(), dtypes, ISA)

x = values(torch.int64, rank)                          # the kernel would skip it: mcr sums it
ds_comm.inference_all_reduce(x)
check(x, sum(values(torch.int64, r) for r in range(world)), "int64 through mcr")
x = values(torch.float32, rank)                        # a sub-group of one: mcr, not the world
ds_comm.inference_all_reduce(x, group=singles[rank])
check(x, values(torch.float32, rank), "a group of one through mcr")
x = values(torch.float32, rank)
ds_comm.inference_all_reduce(x, op=ds_comm.ReduceOp.MAX)
check(x, values(torch.float32, world - 1), "MAX through mcr")
assert kernel_calls() == len(dtypes), "mcr left a call to DeepSpeed's kernel that it cannot serve"
print(f"rank {rank}: SHM OK {checks} (kernel calls {len(dtypes)}, ISA level {ISA})", flush=True)
tdist.barrier()
