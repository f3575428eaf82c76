"""symm's low-latency kernel against torch's one-shot kernel, in one process, interleaved.

Two SymmBackends over the world group, one with MCR_SYMM_LL_BYTES=0 (torch's kernels) and one
with the low-latency kernel to the largest size, and NCCL beside them; graphs on in both, as a
training loop or OSU runs them (`--op all_gather` / `reduce_scatter` / `broadcast`, from rank 0:
NCCL and the low-latency kernel). Per size and round, each variant is timed two ways:

- `call us`: --reps calls, then a device sync (host or device, whichever is slower);
- `gpu us`: the same calls enqueued behind a 2 ms GPU sleep, timed by events from the sleep's
  end: the GPU's time per call when the host is not what it waits for.

Slowest rank, medians and the 10th-90th percentiles over --rounds. Then every variant's result
on fresh random data is compared with NCCL's (bf16, tolerance of a rounded sum).

    torchrun --standalone --nproc_per_node=N lab/probes/probe_symm_ll.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as tdist

from lab.probes.probe_util import nccl_world
from mcr.backends.symm.backend import SymmBackend
from mcr.config import Config


def _slowest(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64, device="cuda")
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return float(t[0])


def _call_us(fn: Callable[[], None], reps: int) -> float:
    torch.cuda.synchronize()
    tdist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return _slowest((time.perf_counter() - t0) / reps * 1e6)


def _gpu_us(fn: Callable[[], None], reps: int) -> float:
    torch.cuda.synchronize()
    tdist.barrier()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)   # ~1 ms or more: the host enqueues every call meanwhile
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return _slowest(s.elapsed_time(e) / reps * 1e3)


def main() -> None:
    """Time each variant per size in interleaved rounds; print medians and spread on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,1024,16384,65536,262144,1048576",
                    help="bytes, comma-separated")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--op", default="all_reduce",
                    choices=["all_reduce", "all_gather", "reduce_scatter", "broadcast"],
                    help="all but all-reduce: NCCL against the low-latency kernel "
                         "(sizes: the whole buffer, as nccl-tests counts)")
    args = ap.parse_args()
    pg, rank, world, dev, group = nccl_world()
    sizes = [int(s) for s in args.sizes.split(",")]
    top = max(sizes)
    ops = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    inplace = args.op in ("all_reduce", "broadcast")
    backends = {"symm low-latency": SymmBackend(Config(symm_max_bytes=top, symm_ll_bytes=top,
                                                       symm_ops=ops))}
    if args.op == "all_reduce":
        backends["symm torch kernels"] = SymmBackend(Config(symm_max_bytes=top, symm_ll_bytes=0))
    S = tdist.ReduceOp.SUM
    if rank == 0:
        print(f"# {torch.cuda.get_device_name()} x{world}, torch {torch.__version__}, {args.op}, "
              f"{args.rounds} rounds x {args.reps} calls, bf16 sum, slowest rank", flush=True)
        print(f"# {'bytes':>7} {'variant':<20} {'call us':>8} {'spread':>13} {'gpu us':>7} "
              f"{'spread':>13}", flush=True)
    bad = []
    for nbytes in sizes:
        per = max(1, nbytes // 2 // (1 if inplace else world))
        t = torch.ones(per * (world if args.op == "reduce_scatter" else 1), dtype=torch.bfloat16,
                       device=dev)
        o = torch.empty(per * (world if args.op == "all_gather" else 1), dtype=torch.bfloat16,
                        device=dev)

        def call(b: SymmBackend | None) -> None:
            if args.op == "all_reduce":
                tdist.all_reduce(t, group=pg) if b is None else b.all_reduce(t, S, group,
                                                                              sync=True)
            elif args.op == "broadcast":
                tdist.broadcast(t, src=0, group=pg) if b is None else \
                    b.broadcast(t, 0, group, sync=True)
            elif args.op == "all_gather":
                tdist.all_gather_into_tensor(o, t, group=pg) if b is None else \
                    b.all_gather(o, t, group, sync=True)
            else:
                tdist.reduce_scatter_tensor(o, t, group=pg) if b is None else \
                    b.reduce_scatter(o, t, S, group, sync=True)
        variants = {"nccl (torch)": lambda: call(None)}
        for n, b in backends.items():
            variants[n] = lambda b=b: call(b)
        res: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in variants}
        for fn in variants.values():
            for _ in range(3):   # seen, captured, replayed
                fn()
        for _ in range(args.rounds):
            for k, fn in variants.items():
                t.fill_(1.0 / 64)   # keeps the sums finite however many calls run
                res[k][0].append(_call_us(fn, args.reps))
                res[k][1].append(_gpu_us(fn, args.reps))
        for k, b in backends.items():
            torch.manual_seed(1000 * nbytes + rank)
            t.copy_(torch.randn(t.shape, device=dev).to(torch.bfloat16))
            call(None)
            ref = (t if inplace else o).clone()
            if inplace:   # the input again
                torch.manual_seed(1000 * nbytes + rank)
                t.copy_(torch.randn(t.shape, device=dev).to(torch.bfloat16))
            call(b)
            torch.cuda.synchronize()
            got = t if inplace else o
            err = ((got.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-30))
            if not err <= 2e-2:
                bad.append(f"{k} at {nbytes} bytes: relative error {float(err):.2e}")
        if rank == 0:
            for k, (call_t, gpu) in res.items():
                qc, qg = statistics.quantiles(call_t, n=10), statistics.quantiles(gpu, n=10)
                print(f"  {nbytes:>7} {k:<20} {statistics.median(call_t):>8.2f} "
                      f"{qc[0]:>6.2f}-{qc[-1]:<6.2f} {statistics.median(gpu):>7.2f} "
                      f"{qg[0]:>6.2f}-{qg[-1]:<6.2f}", flush=True)
    for line in backends["symm low-latency"].summary_lines():
        if rank == 0:
            print("#", line, flush=True)
    print(f"rank {rank}: results {'OK' if not bad else 'WRONG: ' + '; '.join(bad)}", flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
