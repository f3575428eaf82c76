"""Does destroy_process_group() return after CUDA graphs captured collectives? One variant a
run: `plain` (torch's NCCL group, no mcr), `mcr` (the mcr backend, its tables), `mcr_nccl`
(the mcr backend sent to NCCL), `mcr_nocap` and `plain_nocap` (no capture). Each rank prints
how long the teardown took, or faulthandler's stacks after 40 s.

    torchrun --nproc_per_node=N lab/probes/destroy_after_capture.py VARIANT [--keep-graph]
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time

import torch
import torch.distributed as tdist

variant = sys.argv[1]
keep = "--keep-graph" in sys.argv
# Where any stage hangs (the 2026-11-27 run printed nothing in 46 s, plain NCCL included).
faulthandler.dump_traceback_later(30, exit=True)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def say(what: str) -> None:
    """A progress line."""
    print(f"rank {os.environ['RANK']}: {what} at {time.monotonic() - T0:.1f} s", flush=True)


T0 = time.monotonic()
if variant.startswith("mcr"):
    from mcr.integrations import torch_backend
    torch_backend.install()
tdist.init_process_group("nccl")
rank = tdist.get_rank()
say("initialized")
if variant == "mcr_nccl":
    import mcr.comm as dist
    dist.force_backend("nccl")
graphs = []
for n in (1024, 65536, 1 << 20):
    x = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    tdist.all_reduce(x)                      # warm-up outside capture
    torch.cuda.synchronize()
    say(f"warm-up all-reduce of {n}")
    if not variant.endswith("_nocap"):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            tdist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        say(f"side-stream all-reduce of {n}")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            tdist.all_reduce(x)
        say(f"captured {n}")
        x.fill_(1)
        g.replay()
        torch.cuda.synchronize()
        assert x[0].item() == tdist.get_world_size(), x[0].item()
        graphs.append(g)
torch.cuda.synchronize()
if not keep:
    graphs.clear()
if variant.startswith("mcr") and rank == 0:
    import mcr.comm as dist
    dist.log_summary()
faulthandler.dump_traceback_later(40, exit=True)
say("destroying")
t0 = time.monotonic()
tdist.destroy_process_group()
print(f"rank {rank}: DESTROYED {variant} keep={keep} in {time.monotonic() - t0:.2f} s",
      flush=True)
