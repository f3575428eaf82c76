"""Probe: copy-engine all-gather variants, to find what serializes the pushes (NOTES.md v1-v2).

Times 10 back-to-back zero-copy all-gathers (1 GiB and 64 KiB output, bf16) for: mcr sdma as
configured by the environment, torch copy_ on per-peer streams with barrier kernels (probe2's
method), and the same with the driver's explicit D2D copy. Also host microseconds per sdma call.
"""

from __future__ import annotations

import os
import time

import torch

import mcr.comm as dist
from mcr import runtime
from mcr.backends.ce_engine import rendezvous
from mcr.backends.cudadrv import Driver

dist.init_distributed(verbose=False)
rt = runtime.get()
n, me = dist.get_world_size(), dist.get_rank()
dev = torch.device("cuda", torch.cuda.current_device())
streams = [torch.cuda.Stream(dev) for _ in range(n)]
drv = Driver()


def timed(fn: object, k: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    dist.barrier(backend="gloo")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(k):
        fn()
    e.record()
    torch.cuda.synchronize()
    t = torch.tensor([s.elapsed_time(e) / k * 1e3], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, backend="gloo")
    return float(t[0])


for nbytes in (1 << 30, 1 << 16):
    per = nbytes // 2 // n
    out = dist.symmetric_empty(per * n, dtype=torch.bfloat16)
    st = rt.backends["sdma"]._state(rt.world)
    buf, off = st.find_symm(out)
    inp = out[me * per:(me + 1) * per]
    inp.normal_()
    b = per * 2
    hdl = rendezvous(buf.tensor, rt.world.handles["nccl"])

    def mcr_sdma() -> None:
        dist.all_gather_into_tensor(out, inp, backend="sdma")

    def streams_copy(use_drv: bool) -> None:
        cur = torch.cuda.current_stream()
        hdl.barrier()
        for i in range(1, n):
            p = (me + i) % n
            s = streams[p]
            s.wait_stream(cur)
            dst = buf.ptrs[p] + off + me * b
            if use_drv:
                drv.memcpy(dst, inp.data_ptr(), b, s.cuda_stream)
            else:
                with torch.cuda.stream(s):
                    peer = hdl.get_buffer(p, (buf.nbytes,), torch.uint8)
                    peer[off + me * b:off + (me + 1) * b].copy_(inp.view(torch.uint8))
            cur.wait_stream(s)
        hdl.barrier()

    res = {"mcr sdma": timed(mcr_sdma), "torch copy_ + barrier": timed(lambda: streams_copy(False)),
           "driver D2D + barrier": timed(lambda: streams_copy(True))}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        mcr_sdma()
    host = (time.perf_counter() - t0) / 50 * 1e6
    torch.cuda.synchronize()
    if me == 0:
        f = (n - 1) / n
        print(f"# {nbytes} B output, MCR_SDMA_SYNC={os.environ.get('MCR_SDMA_SYNC', 'kernel')} "
              f"MCR_SDMA_COPY={os.environ.get('MCR_SDMA_COPY', 'dtod')} "
              f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS', '-')}"
              f"; host us per sdma call {host:.1f}")
        for k, v in res.items():
            print(f"  {k:>24}: {v:9.1f} us  busbw {nbytes * f / v / 1e3:7.1f} GB/s", flush=True)
# Host cost of stream memory operations on a flag that is already set (no waiting involved).
flag = torch.zeros(4, dtype=torch.int32, device=dev)
cs = torch.cuda.current_stream().cuda_stream
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(200):
    drv.write32(cs, flag.data_ptr(), 1)
    drv.wait32(cs, flag.data_ptr(), 1)
memop = (time.perf_counter() - t0) / 200 * 1e6
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(200):
    drv.memcpy(flag.data_ptr() + 8, flag.data_ptr(), 4, cs)
cp = (time.perf_counter() - t0) / 200 * 1e6
torch.cuda.synchronize()
if me == 0:
    print(f"# host us per write32+wait32 pair {memop:.1f}; per 4-byte cuMemcpyDtoDAsync {cp:.1f}")
dist.destroy_process_group()
