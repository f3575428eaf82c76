"""Host time of one asynchronous all-reduce through each layer, one rank, on the main thread:
torch's C++ group method (`cpp`), torch.distributed.all_reduce on torch's group (`tdist`),
mcr.comm.all_reduce (`mcr`), the mcr group's allreduce called from Python (`mcrpg`),
torch.distributed.all_reduce on the mcr group (`mcrpg_tdist`: torch's Python, C++, the
trampoline back into Python), and pieces mcr calls on the way; then cProfile of mcr's call.

    torchrun --nproc_per_node=1 lab/probes/call_pieces.py [--cpu] [--bytes 512]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import torch
import torch.distributed as tdist
from probe_util import backend_world

import mcr.comm as dist
from mcr import streams

ap = argparse.ArgumentParser()
ap.add_argument("--cpu", action="store_true")
ap.add_argument("--bytes", type=int, default=512)
ap.add_argument("--calls", type=int, default=200)
ap.add_argument("--rounds", type=int, default=9)
ap.add_argument("--out", default="")
args = ap.parse_args()

cuda, plain, mw, dev, dtype = backend_world(args.cpu)
t = torch.ones(args.bytes // (2 if cuda else 4), device=dev, dtype=dtype)
opts = tdist.AllreduceOptions()
SUM = tdist.ReduceOp.SUM


def sync() -> None:
    """Wait for the GPU."""
    if cuda:
        torch.cuda.synchronize()


V = {
    "cpp": lambda: plain.allreduce([t], opts),
    "tdist": lambda: tdist.all_reduce(t, group=plain, async_op=True),
    "mcr": lambda: dist.all_reduce(t, async_op=True),
    "mcrpg": lambda: mw.allreduce([t], opts),
    "mcrpg_tdist": lambda: tdist.all_reduce(t, group=mw, async_op=True),
    "capturing": (streams.capturing if cuda else (lambda: None)),
    "is_capturing": (torch.cuda.is_current_stream_capturing if cuda else (lambda: None)),
    "current_stream": (torch.cuda.current_stream if cuda else (lambda: None)),
    "noop": lambda: None,
}


def block(fn) -> float:  # noqa: ANN001
    """us a call over args.calls calls (the GPU drained first)."""
    sync()
    t0 = time.perf_counter()
    for _ in range(args.calls):
        fn()
    dt = time.perf_counter() - t0
    return dt / args.calls * 1e6


for fn in V.values():
    block(fn)
res: dict[str, list[float]] = {k: [] for k in V}
order = list(V)
for r in range(args.rounds):
    for k in (order if r % 2 == 0 else order[::-1]):
        res[k].append(block(V[k]))
med = {k: round(statistics.median(v), 2) for k, v in res.items()}
print("RESULT " + json.dumps({"bytes": args.bytes, "us": med}), flush=True)

cp = cProfile.Profile()
sync()
cp.enable()
for _ in range(2000):
    dist.all_reduce(t, async_op=True)
cp.disable()
buf = io.StringIO()
pstats.Stats(cp, stream=buf).sort_stats("tottime").print_stats(30)
text = buf.getvalue()
if args.out:
    with open(f"{args.out}.{args.bytes}.txt", "w") as f:
        f.write(text)
else:
    print(text)
sync()
tdist.destroy_process_group()
