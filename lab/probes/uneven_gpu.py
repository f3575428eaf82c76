"""Uneven all_to_all_single on GPUs: torch on a plain NCCL group against mcr (which checks the
splits across ranks first), host time a call (issue only) and wall time a call (synchronized
every call), and the time mcr spends in its split check.

    torchrun --nproc_per_node=N lab/probes/uneven_gpu.py
"""
import os
import statistics
import time

import torch
import torch.distributed as tdist

import mcr.checks as checks
import mcr.comm as dist

torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
pg = tdist.new_group(backend="nccl")
spent = [0.0]
real = checks.uneven_splits


def timed(*a, **k):
    t0 = time.perf_counter()
    try:
        return real(*a, **k)
    finally:
        spent[0] += time.perf_counter() - t0


checks.uneven_splits = timed
import mcr.collectives as coll  # noqa: E402
coll.checks.uneven_splits = timed
dev = torch.device("cuda", torch.cuda.current_device())


def case(i: int) -> tuple:
    a = 64 + (i * 37) % 97
    ins = [a + j for j in range(n)]
    outs = [a + r for _ in range(n)]
    return (torch.empty(sum(outs), 4096, device=dev, dtype=torch.bfloat16),
            torch.ones(sum(ins), 4096, device=dev, dtype=torch.bfloat16), outs, ins)


cases = [case(i) for i in range(16)]
calls = {"torch": lambda y, x, o, i: tdist.all_to_all_single(y, x, o, i, group=pg),
         "mcr": lambda y, x, o, i: dist.all_to_all_single(y, x, o, i)}
for rep in range(3):
    for name, fn in calls.items():
        for c in cases:
            fn(*c)
        torch.cuda.synchronize()
        spent[0] = 0.0
        t0 = time.perf_counter()
        for k in range(300):
            fn(*cases[k % 16])
        host = (time.perf_counter() - t0) / 300 * 1e6
        torch.cuda.synchronize()
        total = (time.perf_counter() - t0) / 300 * 1e6
        chk = spent[0] / 300 * 1e6
        ts = []
        for k in range(100):
            t1 = time.perf_counter()
            fn(*cases[k % 16])
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t1)
        if r == 0:
            print(f"UNEVEN {name:5s} issue {host:7.1f} us/call, stream of 300 {total:7.1f} "
                  f"us/call, synchronized {statistics.median(ts) * 1e6:7.1f} us/call"
                  + (f", split check {chk:6.1f} us/call" if name == "mcr" else ""), flush=True)
if r == 0:
    dist.log_summary()
