"""Where a PREMUL_SUM reduce-scatter through mcr spends its extra host time over torch's own
call (dispatch_overhead --fsdp: +21-25 us on NCCL, where AVG costs +4-5): the same call peeled
layer by layer, interleaved rounds, one process.

    torchrun --standalone --nproc_per_node=1 lab/probes/probe_premul.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr import runtime
from mcr.backends.torch_pg import common as torch_pg
from mcr.session import group_of


def main() -> None:
    """Print us per call of each layer, PREMUL_SUM and AVG."""
    dist.init_distributed(verbose=False)
    rt = runtime.get()
    lib = "nccl" if torch.cuda.is_available() else "gloo"
    dev = "cuda" if lib == "nccl" else "cpu"
    pg = rt.world.handles[lib]
    g = group_of(None, "probe")
    b = rt.backends[lib]
    n = dist.get_world_size()
    out, inp = torch.ones(256, device=dev), torch.ones(256 * n, device=dev)
    C = torch._C._distributed_c10d
    rs = getattr(pg, torch_pg._PG_REDUCE_SCATTER)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    ops = {"avg": tdist.ReduceOp.AVG}
    if lib == "nccl":
        ops["premul"] = tdist._make_nccl_premul_sum(0.5)
        ops["premul fresh"] = None   # a new PREMUL_SUM object per call, as FSDP2 makes per step
    variants: dict[str, Callable[[], object]] = {}

    def done(w: object) -> None:
        if w is not None:    # a synchronous NCCL call (asyncOp=False) may return no work
            w.wait()
    for name, op in ops.items():
        def mk(o: object = op) -> object:
            return tdist._make_nccl_premul_sum(0.5) if o is None else o
        opts = torch_pg._options(C.ReduceScatterOptions, True, reduceOp=mk())
        variants[f"{name}: torch.distributed.reduce_scatter_tensor"] = \
            lambda mk=mk: tdist.reduce_scatter_tensor(out, inp, op=mk(), group=pg)
        variants[f"{name}: ProcessGroup call, options built once"] = \
            lambda opts=opts: done(rs(out, inp, opts))
        variants[f"{name}: ProcessGroup call, options per call"] = \
            lambda mk=mk: done(rs(out, inp, torch_pg._options(C.ReduceScatterOptions, True,
                                                              reduceOp=mk())))
        variants[f"{name}: mcr backend"] = lambda mk=mk: b.reduce_scatter(out, inp, mk(), g,
                                                                         sync=True)
        variants[f"{name}: mcr.comm.reduce_scatter_tensor"] = \
            lambda mk=mk: dist.reduce_scatter_tensor(out, inp, mk(), pg)
    res: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn()
    for _ in range(100):
        for k, fn in variants.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            sync()
            res[k].append((time.perf_counter() - t0) / 20 * 1e6)
    if dist.get_rank() == 0:
        for k, v in res.items():
            q = statistics.quantiles(v, n=10)
            print(f"{k:<55} {statistics.median(v):8.2f} us  (p10 {q[0]:.2f}, p90 {q[-1]:.2f})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
