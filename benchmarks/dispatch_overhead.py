"""What mcr adds per call over calling the library directly (target: < 5 us on CPU tensors).

Interleaves, round by round, torch.distributed.all_reduce on the same Gloo group and the same
call through mcr.comm (forced gloo, and auto), on a 1-element CPU tensor; reports medians and
spread of each and of the difference. Also times the decision path alone (key + cached choose).
Run alone (1 rank: the library's own cost is smallest, so the overhead stands out) or under a
launcher.

`-d cuda` (GPU, 2+ ranks): the same for a small bf16 GPU all-reduce, against torch's NCCL call,
and mcr's symm against the bare symmetric-memory kernel it launches. A sample is `--reps` calls
then a device sync, so each figure is per call, host or device, whichever is slower.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr import runtime
from mcr.ops import ALL_REDUCE, CallKey


def _time(fn: Callable[[], Any], reps: int, sync: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def _cpu_variants(rt: runtime.Runtime) -> tuple[dict[str, Callable[[], Any]], str]:
    pg = rt.world.handles["gloo"]
    t = torch.ones(1)
    return {
        "torch.distributed (gloo)": lambda: tdist.all_reduce(t, group=pg),
        "mcr backend=gloo": lambda: dist.all_reduce(t, backend="gloo"),
        "mcr auto": lambda: dist.all_reduce(t),
    }, "1-element float32 CPU all_reduce"


def _gpu_variants(rt: runtime.Runtime, nbytes: int) -> tuple[dict[str, Callable[[], Any]], str]:
    from mcr.backends.ce_engine import rendezvous, symm_empty
    pg = rt.world.handles["nccl"]
    dev = torch.device("cuda", torch.cuda.current_device())
    t = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=dev)
    stage = symm_empty(nbytes, dev).view(torch.bfloat16)
    rendezvous(stage, pg)
    kernel = torch.ops.symm_mem.one_shot_all_reduce_copy_out
    v = {
        "torch.distributed (nccl)": lambda: tdist.all_reduce(t, group=pg),
        # torch's own gap between its synchronous call and async_op=True + wait().
        "torch.distributed (nccl) async+wait": lambda: tdist.all_reduce(
            t, group=pg, async_op=True).wait(),
        "mcr backend=nccl": lambda: dist.all_reduce(t, backend="nccl"),
        "mcr backend=nccl async+wait": lambda: dist.all_reduce(t, backend="nccl",
                                                               async_op=True).wait(),
        "mcr auto": lambda: dist.all_reduce(t),
        # What mcr's symm launches for this size, called bare: the floor of mcr symm's path.
        "symm kernel alone (torch.ops)": lambda: kernel(stage, t, "sum", pg.group_name, t),
        "mcr backend=symm": lambda: dist.all_reduce(t, backend="symm"),
        "mcr backend=symm async+wait": lambda: dist.all_reduce(t, backend="symm",
                                                               async_op=True).wait(),
    }
    return v, f"{nbytes} B bfloat16 GPU all_reduce"


def main() -> None:
    """Measure and print."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--reps", type=int, default=50, help="calls per round and variant")
    ap.add_argument("-d", "--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--bytes", type=int, default=4096, help="GPU message size (-d cuda)")
    ap.add_argument("--profile", action="store_true",
                    help="then print rank 0's cProfile of each mcr variant (top 12 by own time)")
    args = ap.parse_args()
    dist.init_distributed(verbose=False)
    rt = runtime.get()
    cuda = args.device == "cuda"
    variants, what = _gpu_variants(rt, args.bytes) if cuda else _cpu_variants(rt)
    key = CallKey(ALL_REDUCE, rt.world.size, args.bytes if cuda else 4,
                  torch.bfloat16 if cuda else torch.float32, args.device, dist.ReduceOp.SUM,
                  rt.cfg.profile)
    variants["decision only (key + choose)"] = lambda: rt.dispatcher.choose(key, rt.world)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for fn in variants.values():
        _time(fn, args.reps, sync)
    res: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for k, fn in variants.items():
            res[k].append(_time(fn, args.reps, sync) * 1e6)
    base = next(iter(res.values()))
    if dist.get_rank() == 0:
        print(f"# dispatch overhead, {dist.get_world_size()} rank(s), {what}, {args.rounds} "
              f"rounds x {args.reps} calls, torch {torch.__version__}")
        print(f"# {'variant':<36} {'median us':>10} {'p10':>8} {'p90':>8} {'minus torch':>12}")
        for k, v in res.items():
            q = statistics.quantiles(v, n=10)
            diff = statistics.median([a - b for a, b in zip(v, base)]) \
                if not k.startswith("decision") else float("nan")
            print(f"  {k:<36} {statistics.median(v):>10.2f} {q[0]:>8.2f} {q[-1]:>8.2f} "
                  f"{diff:>12.2f}")
    if args.profile:
        _profile({k: fn for k, fn in variants.items() if k.startswith("mcr")}, args.reps, sync)
    dist.destroy_process_group()


def _profile(variants: dict[str, Callable[[], Any]], reps: int, sync: Callable[[], Any]) -> None:
    """Where each variant's host time goes (profiling inflates it; read the shares)."""
    for name, fn in variants.items():
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(10):
            _time(fn, reps, sync)
        pr.disable()
        if dist.get_rank() == 0:
            out = io.StringIO()
            pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(12)
            print(f"# profile: {name}, {10 * reps} calls")
            print("\n".join(ln for ln in out.getvalue().splitlines()[6:] if ln.strip()))


if __name__ == "__main__":
    main()
