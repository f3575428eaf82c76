"""What mcr adds per call over calling the library directly (target: < 5 us on CPU tensors).

Interleaves, round by round, torch.distributed.all_reduce on the same Gloo group and the same
call through mcr.comm (forced gloo, and auto), on a 1-element CPU tensor; reports medians and
spread of each and of the difference. Also times the decision path alone (key + cached choose).
Run alone (1 rank: the library's own cost is smallest, so the overhead stands out) or under a
launcher.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr import runtime
from mcr.ops import ALL_REDUCE, CallKey


def _time(fn, reps: int) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main() -> None:
    """Measure and print."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--reps", type=int, default=50, help="calls per round and variant")
    args = ap.parse_args()
    dist.init_distributed(verbose=False)
    rt = runtime.get()
    pg = rt.world.handles["gloo"]
    t = torch.ones(1)
    variants = {
        "torch.distributed (gloo)": lambda: tdist.all_reduce(t, group=pg),
        "mcr backend=gloo": lambda: dist.all_reduce(t, backend="gloo"),
        "mcr auto": lambda: dist.all_reduce(t),
    }
    key = CallKey(ALL_REDUCE, rt.world.size, 4, torch.float32, "cpu", dist.ReduceOp.SUM,
                  rt.cfg.profile)
    variants["decision only (key + choose)"] = lambda: rt.dispatcher.choose(key, rt.world)
    for fn in variants.values():
        _time(fn, args.reps)
    res: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for k, fn in variants.items():
            res[k].append(_time(fn, args.reps) * 1e6)
    base = res["torch.distributed (gloo)"]
    if dist.get_rank() == 0:
        print(f"# dispatch overhead, {dist.get_world_size()} rank(s), 1-element float32 CPU "
              f"all_reduce, {args.rounds} rounds x {args.reps} calls, torch {torch.__version__}")
        print(f"# {'variant':<32} {'median us':>10} {'p10':>8} {'p90':>8} {'minus torch':>12}")
        for k, v in res.items():
            q = statistics.quantiles(v, n=10)
            diff = statistics.median([a - b for a, b in zip(v, base)]) \
                if not k.startswith("decision") else float("nan")
            print(f"  {k:<32} {statistics.median(v):>10.2f} {q[0]:>8.2f} {q[-1]:>8.2f} "
                  f"{diff:>12.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
