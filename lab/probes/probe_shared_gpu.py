"""Can two ranks that share one GPU rendezvous torch symmetric memory and copy into each other's
buffers (what sdma does across GPUs)? If so, sdma's correctness could be tested on a one-GPU
lease, the shared GPU standing in for two peers (speed means nothing there).

    torchrun --nproc_per_node=2 -m lab.probes.probe_shared_gpu

Answer (1x H100, torch 2.11, 2026-11-24): no. torch's rendezvous refuses it ("CUDASymmetric
MemoryAllocator::rendezvous: detected allocations from overlapping devices from different
ranks"), so sdma stays testable only with two GPUs.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as tdist
import torch.distributed._symmetric_memory as symm_mem


def main() -> None:
    """Rendezvous over a gloo+nccl world on one GPU; each rank pushes into its peer's buffer."""
    torch.cuda.set_device(0)
    tdist.init_process_group("cpu:gloo,cuda:nccl")
    rank, world = tdist.get_rank(), tdist.get_world_size()
    n = 1 << 20
    t0 = time.perf_counter()
    buf = symm_mem.empty(2 * n, dtype=torch.float32, device="cuda:0")
    try:
        hdl = symm_mem.rendezvous(buf, tdist.group.WORLD.group_name)
    except Exception as e:  # noqa: BLE001 - the probe's answer
        print(f"rank {rank}: rendezvous failed: {type(e).__name__}: {e}", flush=True)
        raise
    print(f"rank {rank}: rendezvous {1e3 * (time.perf_counter() - t0):.1f} ms, "
          f"ptrs {[hex(p) for p in hdl.buffer_ptrs]}", flush=True)
    mine = torch.full((n,), float(rank + 1), device="cuda:0")
    buf[rank * n:(rank + 1) * n].copy_(mine)
    hdl.barrier()
    for p in range(world):
        if p != rank:
            peer = hdl.get_buffer(p, (2 * n,), torch.float32)
            peer[rank * n:(rank + 1) * n].copy_(mine)
    hdl.barrier()
    torch.cuda.synchronize()
    want = torch.cat([torch.full((n,), float(p + 1), device="cuda:0") for p in range(world)])
    ok = torch.equal(buf, want)
    print(f"rank {rank}: peer pushes landed: {ok}", flush=True)
    tdist.barrier()
    tdist.destroy_process_group()
    assert ok


if __name__ == "__main__":
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    main()
