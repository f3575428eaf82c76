"""Where an eager TP decode step's time goes, per rank: token time, host time to issue a step,
garbage collections, time inside the all-reduce calls; floor, plain NCCL, mcr, and (CUDA) the
low-latency kernel launched with no dispatch at all.

Question (2026-11-28): on 2x H200 eager 8B batch 1 ran plain 22.9, mcr 19.7, floor 14.7
ms/token: mcr costs ~78 us an all-reduce in the step where its host call measured ~16 us.
Is the step host-bound on the slower rank (the floor reported is rank 0's alone), or does the
time go elsewhere?

    torchrun --nproc-per-node 2 -m lab.probes.eager_where --shape 8b --rounds 7
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
import torch.distributed as tdist

import mcr.comm as dist
from benchmarks.decode import comms
from benchmarks.tp_model import SHAPES, Comm, TPDecoder, Weights
from mcr.measure.turns import turn_orders


class Clock:
    """GC collections and their time (gc.callbacks), and time inside wrapped calls."""

    def __init__(self) -> None:
        self.gc_n = self.gc_s = self.in_s = 0.0
        self.calls = 0
        self._t = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.gc_n += 1
            self.gc_s += time.perf_counter() - self._t

    def wrap(self, fn):  # noqa: ANN001, ANN201 - a probe
        def timed(*a):  # noqa: ANN002, ANN202
            t0 = time.perf_counter()
            fn(*a)
            self.in_s += time.perf_counter() - t0
            self.calls += 1
        return timed


def lldirect(world_comm: Comm) -> Comm:
    """The low-latency kernel launched straight from its group state: no dispatch, no plan."""
    from mcr.backends.symm import ll as LL
    from mcr.runtime import get
    st = next(iter(get().backends["symm"]._groups.values()))
    ll = st.ll

    def ar(t: torch.Tensor) -> None:
        ll.issue(LL.ALL_REDUCE, t, t, t.numel() * t.element_size(), False)
    return Comm("lldirect", ar, world_comm.all_gather)


def block(model: TPDecoder, comm: Comm, steps: int, dev: torch.device, clock: Clock
          ) -> dict[str, float]:
    """One block: ms/token, host ms/token to issue, GCs, ms/token inside the comm calls."""
    model.reset()
    torch.cuda.synchronize(dev) if dev.type == "cuda" else None
    g0, gs0, in0 = clock.gc_n, clock.gc_s, clock.in_s
    host = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        h = time.perf_counter()
        model.step(comm)
        host += time.perf_counter() - h
    torch.cuda.synchronize(dev) if dev.type == "cuda" else None
    t = time.perf_counter() - t0
    return {"ms": 1e3 * t / steps, "host_ms": 1e3 * host / steps, "gcs": clock.gc_n - g0,
            "gc_ms": 1e3 * (clock.gc_s - gs0) / steps, "in_ms": 1e3 * (clock.in_s - in0) / steps}


def main() -> None:
    """Run every configuration in alternated rounds; print per-rank medians and profiles."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--profile", type=int, default=0, help="steps per config under the profiler")
    args = ap.parse_args()
    dist.init_distributed(verbose=False)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    rank, world = tdist.get_rank(), tdist.get_world_size()
    wts = Weights(SHAPES[args.shape], rank, world, dev, dtype)
    model = TPDecoder(wts, args.batch, 128, args.rounds * args.steps + 64)
    ways = comms()
    clock = Clock()
    ways["mcr"].all_reduce(torch.zeros(8, dtype=dtype, device=dev))   # symm's group state
    if cuda:
        ways["lldirect"] = lldirect(ways["plain"])
    ways["mcr_timed"] = Comm("mcr_timed", clock.wrap(ways["mcr"].all_reduce),
                             ways["mcr"].all_gather)
    ways["plain_timed"] = Comm("plain_timed", clock.wrap(ways["plain"].all_reduce),
                               ways["plain"].all_gather)
    names = list(ways)
    for n in names:
        block(model, ways[n], 3, dev, clock)
    got: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for order in turn_orders(len(names), args.rounds):
        for i in order:
            got[names[i]].append(block(model, ways[names[i]], args.steps, dev, clock))
    mine = {n: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            for n, rows in got.items()}
    every: list = [None] * world
    tdist.all_gather_object(every, mine)
    if rank == 0:
        print(f"# {args.shape} batch {args.batch}, {world} ranks, {args.rounds} rounds x "
              f"{args.steps} steps; medians per rank", flush=True)
        for n in names:
            for r, m in enumerate(every):
                print(f"{n:12s} rank {r}: " + "  ".join(f"{k} {v:8.3f}" for k, v in m[n].items()),
                      flush=True)
        ratios = {n: [p["ms"] / m["ms"] for p, m in zip(got["plain"], got[n])] for n in names}
        print("rank 0 pair ratios plain/x (median): "
              + ", ".join(f"{n} {statistics.median(v):.3f}" for n, v in ratios.items()))
        fl = max(m["floor"]["ms"] for m in every)
        print(f"floor of the slowest rank {fl:.3f} ms; plain {mine['plain']['ms']:.3f}; "
              f"ceiling plain/floor_max {mine['plain']['ms'] / fl:.3f}")
    if args.profile:
        from benchmarks.common import profiled
        for n in [n for n in ("plain", "mcr", "lldirect", "floor") if n in ways]:
            model.reset()
            b = profiled(lambda _i, n=n: model.step(ways[n]), args.profile, dev)
            every = [None] * world
            tdist.all_gather_object(every, b)
            if rank == 0:
                for r, x in enumerate(every):
                    print(f"profile {n:9s} rank {r}: "
                          + "  ".join(f"{k} {v:7.3f}" for k, v in x.items()), flush=True)
    dist.log_summary()
    tdist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
