"""Host cost of MCR_PROFILE=auto on the dispatch path: route.pick for a GPU all-reduce under
`standalone` and `auto` (for an op the tables have no profile rule for; for one they have,
on the default stream and on a side stream), interleaved in rounds, one rank.

    torchrun --standalone --nproc_per_node=1 lab/probes/probe_profile_cost.py
"""

from __future__ import annotations

import statistics
import time
import timeit

import torch

import mcr.comm as dist
from mcr import route, runtime
from mcr.ops import ALL_REDUCE

torch.cuda.set_device(0)
dist.init_distributed(verbose=False)
g = runtime.get().world
t = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
side = torch.cuda.Stream()
SUM = dist.ReduceOp.SUM
N = 20000


def pick_us(prof: str, stream: torch.cuda.Stream | None) -> float:
    """Microseconds per route.pick under profile `prof` on `stream` (None: default)."""
    with dist.profile(prof), torch.cuda.stream(stream):
        route.pick(ALL_REDUCE, g, t, t.nbytes, SUM, None)   # cached after the first
        t0 = time.perf_counter()
        for _ in range(N):
            route.pick(ALL_REDUCE, g, t, t.nbytes, SUM, None)
        return (time.perf_counter() - t0) / N * 1e6


parts = {"get_device": lambda: t.get_device(),
         "side_stream": lambda: route._side_stream(0)}
for name, fn in parts.items():
    per = min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6
    print(f"{name}: {per:.3f} us", flush=True)
variants = {"standalone": ("standalone", None), "auto, no profile rule": ("auto", None),
            "auto default stream": ("auto", None), "auto side stream": ("auto", side)}
tables = runtime.get().dispatcher.tables
profiled = {"auto, no profile rule": frozenset(), "auto default stream": frozenset({ALL_REDUCE}),
            "auto side stream": frozenset({ALL_REDUCE}), "standalone": frozenset()}
res: dict[str, list[float]] = {k: [] for k in variants}
for _ in range(15):
    for k, (p, s) in variants.items():
        # as if a table had a profile rule for all-reduces (a stand-in: no table covers a
        # group of one), so that auto looks at the stream
        tables.profiled_ops = profiled[k]
        res[k].append(pick_us(p, s))
base = statistics.median(res["standalone"])
for k, v in res.items():
    q = sorted(v)
    print(f"pick {k}: median {statistics.median(v):.3f} us (p10 {q[1]:.3f}, p90 {q[-2]:.3f}), "
          f"+{statistics.median(v) - base:.3f} us over standalone", flush=True)
served = runtime.get().dispatcher.served()
print("served:", {f"{op}/{be}": n[0] for (op, be), n in served.items()}, flush=True)
dist.destroy_process_group()
