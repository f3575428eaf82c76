"""Host cost of a small symmetric-memory all-reduce: torch's op called eagerly against a replay of
the same call captured in a CUDA graph (directly, and through mcr's GraphCache).

OSU-style loops of small all-reduces are host-bound: the symm kernel's eager call cost ~8.7 us
where NCCL's call cost ~24 us on 2x H200 (NOTES.md). A graph replay is one driver launch. Any world
size (one rank on a one-GPU lease: the kernel's barrier is then local, so the figures are host
cost). A sample is `--reps` calls then a device sync (per call: host or device, whichever is
slower); `enqueue` is the same calls timed before the sync (host only).

`mcr symm backend` calls mcr's SymmBackend.all_reduce itself, with MCR_SYMM_GRAPHS graphs and
with none, on a Group built here over the world: mcr's dispatcher declines symm for a group of
one rank, so the dispatcher's own ~1 us is not in these figures. After the timing, each variant
runs on fresh data and its copy in the staging buffer is compared with the input (on one rank a
sum is the input itself, so the staging copy is what shows that a replay read the new data).
Last, `churn`: what a key costs that is seen twice and never again (a capture and one replay).

    torchrun --standalone --nproc_per_node=N lab/probes/probe_symm_graph.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as tdist
import torch.distributed._symmetric_memory as symm_mem

from lab.probes.probe_util import nccl_world
from mcr.backends.cuda.graphs import GraphCache
from mcr.backends.symm.backend import SymmBackend
from mcr.config import Config


def _time(fn: Callable[[], None], reps: int) -> tuple[float, float]:
    """(us per call until the device is done, us per call to enqueue)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t2 - t0) / reps * 1e6, (t1 - t0) / reps * 1e6


def main() -> None:
    """Time each variant per size in interleaved rounds; print medians and spread on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,1024,16384,262144", help="bytes, comma-separated")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    pg, rank, world, dev, group = nccl_world()
    sizes = [int(s) for s in args.sizes.split(",")]
    stage = symm_mem.empty(max(sizes) // 2 + 8, dtype=torch.bfloat16, device=dev)
    symm_mem.rendezvous(stage, pg)
    kernel = torch.ops.symm_mem.one_shot_all_reduce_copy_out
    name = pg.group_name
    cache = GraphCache(16, dev)
    backends = {n: SymmBackend(Config(symm_graphs=k, symm_max_bytes=max(sizes)))
                for n, k in (("mcr symm backend", 64), ("mcr symm, no graphs", 0))}
    S = tdist.ReduceOp.SUM
    if rank == 0:
        print(f"# {torch.cuda.get_device_name()} x{world}, torch {torch.__version__}, "
              f"{args.rounds} rounds x {args.reps} calls, bf16 sum", flush=True)
        print(f"# {'bytes':>7} {'variant':<22} {'per call us':>11} {'spread':>15} "
              f"{'enqueue us':>10} {'vs eager':>8}", flush=True)
    for nbytes in sizes:
        t = torch.full((nbytes // 2,), float(rank + 1), dtype=torch.bfloat16, device=dev)
        st = stage[:t.numel()]

        def eager() -> None:
            kernel(st, t, "sum", name, t)

        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            eager()       # warm-up off the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g.capture_begin(capture_error_mode="thread_local")
            eager()
            g.capture_end()
        torch.cuda.synchronize()
        key = ("ar", t.data_ptr(), t.numel())

        def cached() -> None:
            cache.run(key, lambda m: eager(), torch.cuda.current_stream)

        variants = {"torch.ops eager": eager, "graph replay": g.replay,
                    "mcr GraphCache.run": cached,
                    "nccl (torch)": lambda: tdist.all_reduce(t, group=pg)}
        for n, b in backends.items():
            variants[n] = lambda b=b: b.all_reduce(t, S, group, sync=True)
        res: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
        for fn in variants.values():
            fn()
        for _ in range(args.rounds):
            for k, fn in variants.items():
                tdist.barrier()
                res[k].append(_time(fn, args.reps))
        # Correctness after all the calls: every variant is the same in-place sum.
        oks = []
        for i, k in enumerate(("mcr GraphCache.run", "mcr symm backend", "mcr symm, no graphs")):
            torch.manual_seed(nbytes + i)     # the same data on every rank: the sum is x * world
            x = torch.randint(-8, 8, t.shape, device=dev).to(torch.bfloat16)
            t.copy_(x)
            variants[k]()
            torch.cuda.synchronize()
            staged = backends[k]._groups[group.id].buf if k in backends else None
            copy_in = staged is None or bool(
                (staged[:nbytes].view(torch.bfloat16) == x).all())
            oks.append(copy_in and bool((t == x * world).all()))
        ok = all(oks)
        if rank == 0:
            base = statistics.median(x for x, _ in res["torch.ops eager"])
            for k, v in res.items():
                per = [x for x, _ in v]
                q = statistics.quantiles(per, n=10)
                print(f"  {nbytes:>7} {k:<22} {statistics.median(per):>11.2f} "
                      f"{q[0]:>7.2f}-{q[-1]:<7.2f} {statistics.median(e for _, e in v):>10.2f} "
                      f"{base / statistics.median(per):>7.2f}x", flush=True)
            print(f"  {nbytes:>7} graph result {'equal' if ok else 'WRONG'} "
                  f"(sum over {world} ranks)", flush=True)
    if rank == 0:
        print(f"# GraphCache: {cache.captures} captures, {cache.replays} replays, "
              f"{cache.direct} direct", flush=True)
        for line in backends["mcr symm backend"].summary_lines():
            print("#", line, flush=True)
    churn(kernel, stage, name, dev, args.rounds)
    tdist.destroy_process_group()


def churn(kernel: Callable[..., None], stage: torch.Tensor, name: str, dev: torch.device,
          rounds: int) -> None:
    """The cost of a key that is seen twice and never again (an address the allocator does not
    hand out again): its second call is a capture, then one replay. Per key, against two eager
    calls."""
    t = torch.ones(8, dtype=torch.bfloat16, device=dev)
    st = stage[:8]

    def eager() -> None:
        kernel(st, t, "sum", name, t)

    cache = GraphCache(1 << 20, dev)
    keys = iter(range(1 << 30))
    per_key: dict[str, list[float]] = {"two eager calls": [], "seen twice (capture)": []}
    for _ in range(rounds):
        for k in per_key:
            tdist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                if k == "two eager calls":
                    eager()
                    eager()
                else:
                    key = next(keys)
                    cache.run(key, lambda m: eager(), torch.cuda.current_stream)
                    cache.run(key, lambda m: eager(), torch.cuda.current_stream)
            torch.cuda.synchronize()
            per_key[k].append((time.perf_counter() - t0) / 10 * 1e6)
    if tdist.get_rank() == 0:
        for k, v in per_key.items():
            print(f"# churn: {k:<22} {statistics.median(v):8.1f} us per key "
                  f"({min(v):.1f}-{max(v):.1f})", flush=True)


if __name__ == "__main__":
    main()
