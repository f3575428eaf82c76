"""Probe: copy-engine schedules, sync modes and CUDA graphs side by side (NOTES.md issue 3, v5).

Same symmetric output, same in-place input for every variant. Each variant is timed two ways:
GPU time per call over back-to-back calls (CUDA events), and host-clock time per call in
samples of 5 calls with a sync after each (the OSU harness's --batch 5). Then a profile of the
host path of small sdma and symm calls.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable

import torch

import mcr.comm as dist
from lab.probes.probe_util import gpu_us, say, worst
from mcr import runtime
from mcr.backends.cuda.driver import Driver
from mcr.backends.cuda.symm_mem import rendezvous

dist.init_distributed(verbose=False)
rt = runtime.get()
n, me = dist.get_world_size(), dist.get_rank()
dev = torch.device("cuda", torch.cuda.current_device())
drv = Driver()
sdma = rt.backends["sdma"]


def host_time(fn: Callable[[], None], samples: int = 15, batch: int = 5) -> float:
    """Median microseconds per call, samples of `batch` calls with a sync after each."""
    dist.barrier(backend="gloo")
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / batch * 1e6)
    return worst(statistics.median(ts))


own = {(p, k): torch.cuda.Stream(dev) for p in range(n) if p != me for k in range(2)}


def setting(sync: str, graphs: int) -> Callable[[], None]:
    """Switch the world group's sdma engine between sync modes and graph use (collective)."""
    def apply() -> None:
        torch.cuda.synchronize()
        dist.barrier(backend="gloo")
        st = sdma._state(rt.world)
        st.sync = sync
        st.graphs.capacity = graphs
        st.graphs.clear()
    return apply


def run_size(nbytes: int) -> None:
    """Every variant at one all-gather output size."""
    per = nbytes // 2 // n
    out = dist.symmetric_empty(per * n, dtype=torch.bfloat16)
    st = sdma._state(rt.world)
    buf, off = st.find_symm(out)
    inp = out[me * per:(me + 1) * per]
    inp.normal_()
    ref = torch.empty_like(out)
    b = per * 2
    ohdl = rendezvous(buf.tensor, rt.world.handles["nccl"])
    peers = [(me + i) % n for i in range(1, n)]

    def loop(concurrent: int = 1, pull_half: bool = False) -> Callable[[], None]:
        """probe_ce's schedule: one peer after the other, rotated; each push optionally split
        into `concurrent` copies on their own streams, or half pushed and half pulled."""
        def fn() -> None:
            cur = torch.cuda.current_stream()
            ohdl.barrier(channel=0)
            for p in peers:
                piece = b // concurrent
                for k in range(concurrent):
                    s = own[(p, k)]
                    s.wait_stream(cur)
                    o = k * piece
                    ln = b - o if k == concurrent - 1 else piece
                    if pull_half and k == 1:
                        # Pull the matching half of the sender (rank me - i) on my engines.
                        q = (2 * me - p) % n
                        drv.memcpy(out.data_ptr() + q * b + o, buf.ptrs[q] + off + q * b + o,
                                   ln, s.cuda_stream)
                    else:
                        drv.memcpy(buf.ptrs[p] + off + me * b + o, inp.data_ptr() + o, ln,
                                   s.cuda_stream)
                for k in range(concurrent):
                    cur.wait_stream(own[(p, k)])
            ohdl.barrier(channel=0)
        return fn

    mcr_ag = lambda: dist.all_gather_into_tensor(out, inp, backend="sdma")  # noqa: E731
    variants: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
        ("loop (probe_ce)", loop(), None),
        ("loop, 2 copies per peer", loop(2), None),
        ("loop, half push half pull", loop(2, pull_half=True), None),
        ("sdma kernel eager", mcr_ag, setting("kernel", 0)),
        ("sdma kernel graph", mcr_ag, setting("kernel", 64)),
        ("sdma memops eager", mcr_ag, setting("memops", 0)),
        ("sdma memops graph", mcr_ag, setting("memops", 64)),
        ("nccl", lambda: dist.all_gather_into_tensor(ref, inp, backend="nccl"), None),
    ]
    f = (n - 1) / n
    say(f"# all-gather {nbytes} B output (bf16, zero-copy, in place)")
    say(f"  {'variant':>28} {'gpu us':>9} {'busbw':>7} {'host us':>9} {'busbw':>7}")
    want = torch.empty_like(out)
    torch.distributed.all_gather_into_tensor(want, inp.clone(), group=rt.world.handles["nccl"])
    for name, fn, before in variants:
        if before is not None:
            before()
        g = gpu_us(fn)
        h = host_time(fn)
        say(f"  {name:>28} {g:9.1f} {nbytes * f / g / 1e3:7.1f} {h:9.1f} "
            f"{nbytes * f / h / 1e3:7.1f}")
        torch.cuda.synchronize()
        if name != "nccl" and not torch.equal(out, want):
            say(f"  !! {name}: wrong result")
        out.copy_(want)
    setting("kernel", 64)()


def profile_host() -> None:
    """Where the host time of one small sdma / symm call goes (rank 0's profile)."""
    out = dist.symmetric_empty(32768 * n, dtype=torch.bfloat16)
    inp = out[me * 32768:(me + 1) * 32768]
    x = torch.randn(2048, device=dev, dtype=torch.bfloat16)
    for name, fn in (("sdma all_gather 64 KiB/rank, graph",
                      lambda: dist.all_gather_into_tensor(out, inp, backend="sdma")),
                     ("symm all_reduce 4 KiB", lambda: dist.all_reduce(x, backend="symm"))):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            fn()
        pr.disable()
        torch.cuda.synchronize()
        if me == 0:
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
            say(f"# host profile: {name}, 200 calls")
            say("\n".join(s.getvalue().splitlines()[4:26]))


for size in (1 << 30, 1 << 28, 1 << 26, 1 << 24, 1 << 20, 1 << 16):
    run_size(size)
profile_host()
dist.destroy_process_group()
