"""The standard overlap benchmark (baselines.md): GEMMs on the main stream, all-gathers beside.

20 bf16 8192^3 GEMMs on the main stream and, at the same time, 10 all-gathers of 256 MiB output
on a side stream. Reports per backend: GEMM slowdown against GEMMs alone, communication time under
overlap against communication alone, and the whole window; medians over --reps repetitions,
each pairing GEMMs alone with GEMMs beside every backend's all-gathers. The GEMMs are issued after
the all-gathers, from the same thread, as a training step does: the host time the all-gathers take
to issue delays them and counts in their slowdown; "issue ms" (host) and "gemm gpu" (GEMMs from
their issue) split the two.
Run under mpirun/torchrun on the GPUs of one node.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
import time

import torch

import mcr.comm as dist
from mcr.units import parse_bytes


def main() -> None:
    """Measure each backend of --backend, print a table, optionally append CSV rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="nccl,sdma",
                    help="comma list of backend names and auto (the dispatcher's pick, by the "
                         "table's overlap profile on this side stream); NAME+symm allocates the "
                         "output in NAME's symmetric memory (auto+symm: sdma's)")
    ap.add_argument("--gemm", type=int, default=8192, help="square GEMM size")
    ap.add_argument("--gemms", type=int, default=20)
    ap.add_argument("--size", default="256MiB", help="all-gather output bytes")
    ap.add_argument("--gathers", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    dist.init_distributed(verbose=False)
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(args.gemm, args.gemm, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.gemm, args.gemm, device=dev, dtype=torch.bfloat16)
    per = int(parse_bytes(args.size)) // 2 // n
    inp = torch.randn(per, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream(dev)
    main_s = torch.cuda.current_stream(dev)

    def window(comm: object | None) -> tuple[float, ...]:
        """(gemm ms, comm ms, window ms, issue ms, gemm gpu ms) of one repetition, slowest
        rank; issue: host time to issue the all-gathers; gemm gpu: GEMMs from their issue."""
        torch.cuda.synchronize()
        dist.barrier(backend="gloo")
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
        ev[0].record(main_s)
        t0 = time.perf_counter()
        if comm is not None:
            side.wait_stream(main_s)
            with torch.cuda.stream(side):
                ev[2].record(side)
                for _ in range(args.gathers):
                    comm()
                ev[3].record(side)
        issue = (time.perf_counter() - t0) * 1e3
        ev[4].record(main_s)
        for _ in range(args.gemms):
            torch.mm(a, b)
        ev[1].record(main_s)
        main_s.wait_stream(side)
        end = torch.cuda.Event(enable_timing=True)
        end.record(main_s)
        torch.cuda.synchronize()
        t = torch.tensor([ev[0].elapsed_time(ev[1]),
                          ev[2].elapsed_time(ev[3]) if comm is not None else 0.0,
                          ev[0].elapsed_time(end), issue, ev[4].elapsed_time(ev[1])],
                         dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, backend="gloo")
        return tuple(float(x) for x in t)

    def comm_alone(comm: object) -> float:
        torch.cuda.synchronize()
        dist.barrier(backend="gloo")
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            s.record(side)
            for _ in range(args.gathers):
                comm()
            e.record(side)
        torch.cuda.synchronize()
        t = torch.tensor([s.elapsed_time(e)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, backend="gloo")
        return float(t[0])

    comms = {}
    for spec in args.backend.split(","):
        name, _, mode = spec.partition("+")
        if mode not in ("", "symm"):
            raise SystemExit(f"overlap: --backend {spec}: only NAME or NAME+symm")
        out = (dist.symmetric_empty(per * n, dtype=torch.bfloat16,
                                    backend="sdma" if name == "auto" else name)
               if mode == "symm" else torch.empty(per * n, device=dev, dtype=torch.bfloat16))
        src = inp
        if mode == "symm":
            src = out[rank * per:(rank + 1) * per]
            src.copy_(inp)

        def comm(out: torch.Tensor = out, src: torch.Tensor = src,
                 name: str | None = None if name == "auto" else name) -> None:
            dist.all_gather_into_tensor(out, src, backend=name)
        comm_alone(comm)
        comms[spec] = (comm, statistics.median(comm_alone(comm) for _ in range(args.reps)))
    # Paired repetitions: GEMMs alone, then with each backend's all-gathers, back to back, so
    # slow drifts of the GPU's clock hit both sides of each ratio alike.
    window(None)
    for comm, _ in comms.values():
        window(comm)
    alone: list[float] = []
    res: dict[str, list[tuple[float, float, float]]] = {spec: [] for spec in comms}
    for _ in range(args.reps):
        alone.append(window(None)[0])
        for spec, (comm, _) in comms.items():
            res[spec].append(window(comm))
    g0 = statistics.median(alone)
    rows = []
    if rank == 0:
        print(f"# overlap: {args.gemms} x bf16 {args.gemm}^3 GEMM with {args.gathers} x "
              f"{args.size} all-gathers, {n} x {torch.cuda.get_device_name()}, "
              f"{datetime.datetime.now().isoformat(timespec='seconds')}")
        print(f"# command: {' '.join(sys.argv)}")
        print(f"# GEMM alone {g0:.2f} ms (median of {args.reps}; min-max "
              f"{min(alone):.2f}-{max(alone):.2f}); slowdown = median over paired reps of "
              f"(GEMMs with comm / GEMMs alone just before) - 1")
        print(f"# {'backend':>12} {'gemm ms':>9} {'slowdown':>9} {'p10-p90':>13} {'comm ms':>9}"
              f" {'alone ms':>9} {'stretch':>8} {'window ms':>10} {'issue ms':>9}"
              f" {'gemm gpu':>9}")
    for spec, (_, alone_c) in comms.items():
        rs = res[spec]
        slow = [(r[0] / a - 1) * 100 for r, a in zip(rs, alone)]
        q = statistics.quantiles(slow, n=10) if len(slow) >= 2 else [slow[0]] * 9
        g = statistics.median(r[0] for r in rs)
        c = statistics.median(r[1] for r in rs)
        w = statistics.median(r[2] for r in rs)
        issue = statistics.median(r[3] for r in rs)
        ggpu = statistics.median(r[4] for r in rs)
        row = {"backend": spec, "gemm_ms": g, "gemm_alone_ms": g0,
               "slowdown_pct": statistics.median(slow), "slowdown_p10": q[0],
               "slowdown_p90": q[-1], "comm_ms": c, "comm_alone_ms": alone_c,
               "stretch": c / alone_c, "window_ms": w, "issue_ms": issue,
               "gemm_gpu_ms": ggpu, "reps": args.reps}
        rows.append(row)
        if rank == 0:
            print(f"  {spec:>12} {g:>9.2f} {row['slowdown_pct']:>8.1f}% "
                  f"{q[0]:>6.1f}-{q[-1]:<5.1f}% {c:>9.2f} {alone_c:>9.2f} "
                  f"{row['stretch']:>8.2f} {w:>10.2f} {issue:>9.2f} {ggpu:>9.2f}", flush=True)
    if rank == 0 and args.csv:
        with open(args.csv, "a", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            if f.tell() == 0:
                wr.writeheader()
            wr.writerows(rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
