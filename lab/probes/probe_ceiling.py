"""Probe: how fast can one GPU here write to its peers, by copy engine and by SM kernel?

Issue 3 asks for >= 400 GB/s all-gather busbw at 1 GiB; the best copy-engine schedule gives ~385
(NOTES.md v5-v6). This probe measures the ceiling under that number (NOTES.md v9):
  1. one pair alone: rank 0 pushes to rank 1 by copy engine (one copy, two concurrent copies),
     both directions at once, and rank 1 pulling; the same push by an SM kernel;
  2. all-gather schedules at 1 GiB output, zero-copy: the engine's rotated serial order, XOR
     pairs, rotated with a barrier between phases, one cuMemcpyBatchAsync of every peer's copy,
     and an SM kernel per peer (the SM figure is the link's reach, not a candidate: the backend
     exists to leave the SMs to the model).
GPU time per call by CUDA events over back-to-back calls, slowest rank. Run under mpirun -np 4.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

import mcr.comm as dist
from lab.probes.probe_util import gpu_us, say
from mcr import runtime
from mcr.backends.cuda.driver import Driver
from mcr.backends.cuda.symm_mem import rendezvous


def batch_copier() -> Callable[[list[int], list[int], list[int], int], None] | None:
    """cuMemcpyBatchAsync through cuda-bindings, or None (printing why) where it is missing."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        print(f"cuda-bindings missing: {e}", flush=True)
        return None
    attr = cu.CUmemcpyAttributes()
    attr.srcAccessOrder = cu.CUmemcpySrcAccessOrder.CU_MEMCPY_SRC_ACCESS_ORDER_STREAM

    def copy(dsts: list[int], srcs: list[int], sizes: list[int], stream: int) -> None:
        # CUDA 13's form (12.8's had a failIdx argument more)
        r = cu.cuMemcpyBatchAsync([cu.CUdeviceptr(x) for x in dsts],
                                  [cu.CUdeviceptr(x) for x in srcs], sizes, len(dsts), [attr],
                                  [0], 1, cu.CUstream(stream))
        if r[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemcpyBatchAsync: {r[0]}")
    return copy


def main() -> None:
    """Measure and print (rank 0)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pair-bytes", type=int, default=1 << 30)
    ap.add_argument("--ag-bytes", type=int, default=1 << 30)
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()
    dist.init_distributed(verbose=False)
    rt = runtime.get()
    n, me = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device())
    drv = Driver()
    st = rt.backends["sdma"]._state(rt.world)
    pg = rt.world.handles["nccl"]

    # One symmetric buffer for everything: all-gather output, pair targets in its slices.
    out = dist.symmetric_empty(args.ag_bytes // 2, dtype=torch.bfloat16)
    buf, off = st.find_symm(out)
    hdl = rendezvous(buf.tensor, pg)
    base = [p + off for p in buf.ptrs]
    b = args.ag_bytes // n                       # each rank's block of the all-gather
    inp = out[me * (b // 2):(me + 1) * (b // 2)]
    inp.normal_()
    src = torch.randn(args.pair_bytes // 2, device=dev, dtype=torch.bfloat16)
    streams = [torch.cuda.Stream(dev) for _ in range(n)]
    peer_views = [hdl.get_buffer(p, (args.ag_bytes // 2,), torch.bfloat16, off // 2)
                  for p in range(n)]

    def on(streams_used: list[torch.cuda.Stream], body: Callable[[], None]) -> None:
        cur = torch.cuda.current_stream()
        for s in streams_used:
            s.wait_stream(cur)
        body()
        for s in streams_used:
            cur.wait_stream(s)

    # -- 1. one pair -------------------------------------------------------------------------
    pb = args.pair_bytes

    def pair(kind: str) -> Callable[[], None]:
        def fn() -> None:
            hdl.barrier(channel=0)
            cur = torch.cuda.current_stream().cuda_stream
            if kind == "ce push" and me == 0:
                drv.memcpy(base[1], src.data_ptr(), pb, cur)
            elif kind == "ce push, 2 copies" and me == 0:
                on(streams[:2], lambda: [drv.memcpy(base[1] + k * pb // 2,
                                                    src.data_ptr() + k * pb // 2, pb // 2,
                                                    streams[k].cuda_stream) for k in range(2)])
            elif kind == "ce both ways" and me in (0, 1):
                drv.memcpy(base[1 - me], src.data_ptr(), pb, cur)
            elif kind == "ce pull" and me == 1:
                drv.memcpy(src.data_ptr(), base[0], pb, cur)
            elif kind == "ce 2 senders -> rank 1" and me in (0, 2):
                drv.memcpy(base[1] + (me // 2) * (pb // 2), src.data_ptr(), pb // 2, cur)
            elif kind == "ce rank 0 -> 2 peers" and me == 0:
                on(streams[:2], lambda: [drv.memcpy(base[1 + k] + k * pb // 2, src.data_ptr(),
                                                    pb // 2, streams[k].cuda_stream)
                                         for k in range(2)])
            elif kind == "sm push" and me == 0:
                torch.neg(src, out=peer_views[1][:pb // 2])
            hdl.barrier(channel=0)
        return fn

    say(f"# one pair, {pb} B, rank 0 -> rank 1 (others idle), GPU us and GB/s per direction")
    kinds = ["ce push", "ce push, 2 copies", "ce both ways", "ce pull", "sm push"]
    if n >= 3:   # fan-in and fan-out, pb bytes in all: GB/s is the receiver's / sender's total
        kinds += ["ce 2 senders -> rank 1", "ce rank 0 -> 2 peers"]
    for kind in kinds:
        us = gpu_us(pair(kind), args.iters, 2)
        say(f"  {kind:>20} {us:9.1f} {pb / us / 1e3:7.1f}")

    # -- 2. all-gather schedules ------------------------------------------------------------
    rot = [(me + i) % n for i in range(1, n)]
    xor = [me ^ i for i in range(1, n)] if n & (n - 1) == 0 else rot
    my = inp.data_ptr()
    batch = batch_copier()

    def serial(order: list[int], phase_barrier: bool = False) -> Callable[[], None]:
        def fn() -> None:
            hdl.barrier(channel=0)
            cur = torch.cuda.current_stream().cuda_stream
            for i, p in enumerate(order):
                if phase_barrier and i:
                    hdl.barrier(channel=0)
                drv.memcpy(base[p] + me * b, my, b, cur)
            hdl.barrier(channel=0)
        return fn

    def batched() -> None:
        hdl.barrier(channel=0)
        batch([base[p] + me * b for p in rot], [my] * len(rot), [b] * len(rot),
              torch.cuda.current_stream().cuda_stream)
        hdl.barrier(channel=0)

    def sm() -> None:
        hdl.barrier(channel=0)
        for p in rot:
            torch.neg(inp, out=peer_views[p][me * (b // 2):(me + 1) * (b // 2)])
        hdl.barrier(channel=0)

    want = torch.empty_like(out)
    torch.distributed.all_gather_into_tensor(want, inp.clone(), group=pg)
    f = (n - 1) / n
    say(f"# all-gather {args.ag_bytes} B output, zero-copy in place, GPU us and busbw")
    variants = [("rotated serial (engine)", serial(rot)), ("xor pairs serial", serial(xor)),
                ("rotated, barrier per phase", serial(rot, True))]
    if batch is not None:
        variants.append(("cuMemcpyBatchAsync", batched))
    variants.append(("sm kernel per peer (neg)", sm))
    for name, fn in variants:
        try:
            us = gpu_us(fn, args.iters, 2)
        except Exception as e:  # noqa: BLE001 - a probe reports and goes on
            say(f"  {name:>28} failed: {e}")
            torch.cuda.synchronize()
            continue
        torch.cuda.synchronize()
        dist.barrier(backend="gloo")
        exp = want.view(n, -1).clone()
        if name.startswith("sm"):   # the SM variant writes -x: a copy kernel that cannot cheat
            exp[torch.arange(n) != me] *= -1
        ok = torch.equal(out.view(n, -1), exp)
        say(f"  {name:>28} {us:9.1f} {args.ag_bytes * f / us / 1e3:7.1f}"
            f"{'' if ok else '  !! wrong result'}")
        out.copy_(want)
        torch.cuda.synchronize()
        dist.barrier(backend="gloo")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
