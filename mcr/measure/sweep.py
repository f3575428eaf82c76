"""An OSU-style sweep: every size, every backend side by side, rows printed in OSU format with
nccl-tests bandwidth columns and appended to a CSV. Sizes are full-buffer bytes (all-gather
output, reduce-scatter input), so busbw uses the nccl-tests factors."""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import sys
from typing import Any

import torch

import mcr.comm as dist
from mcr.errors import BackendUnavailable
from mcr.measure.engine import Bench, Ctx, Timing, device_sync, make_ctx, measure_size
from mcr.measure.options import parser, sizes
from mcr.ops import BUFFER_KEYED, bus_factor, dtype_name


def chosen_backend(op: str, nbytes: int, dtype: torch.dtype, device: str,
                   buffer: str = "plain", group: Any = None, even: bool = True) -> str:
    """Which backend the dispatcher picks for this op and size (what `auto` ran on; even=False:
    an all-to-all with split sizes, nbytes its key)."""
    try:
        return dist.which_backend(op, nbytes, dtype, device, group=group, buffer=buffer,
                                  even=even)
    except BackendUnavailable as e:
        return f"none ({e})"


def make_row(bench: Bench, ctx: Ctx, size: int, be: str, t: Timing, first: Timing,
             args: argparse.Namespace) -> dict[str, Any]:
    """One CSV/printed row: a backend's statistics at a size (first: the reference backend)."""
    buf = "symmetric" if ctx.symm and bench.op in BUFFER_KEYED else "plain"
    served = chosen_backend(bench.op, size, ctx.dtype, ctx.device, buf, ctx.group,
                            bench.even) if be == "auto" else be
    med = t.median
    q = statistics.quantiles(t.samples, n=10) if len(t.samples) >= 2 else [med] * 9
    algbw = size / med / 1e9
    return {"op": bench.op, "ranks": ctx.n, "group": ctx.label, "device": ctx.device,
            "dtype": dtype_name(ctx.dtype),
            "bytes": size, "backend": be, "served_by": served,
            "avg_us": statistics.fmean(t.samples) * 1e6, "median_us": med * 1e6,
            "p10_us": q[0] * 1e6, "p90_us": q[-1] * 1e6, "min_us": min(t.samples) * 1e6,
            "max_us": max(t.samples) * 1e6, "iters": len(t.samples), "algbw_gbs": algbw,
            "busbw_gbs": algbw * bus_factor(bench.op, ctx.n), "batch": args.batch,
            "symm": ctx.symm or "", "graph": int(args.graph), "calls": ctx.calls,
            "rounds": len(t.rounds), "round_medians_us": ";".join(f"{r * 1e6:.3f}"
                                                                  for r in t.rounds),
            "spread": t.spread,
            "vs_first": t.speedup_over(first), "splits": "" if bench.even else "uneven"}


def run(bench: Bench, argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse options, sweep sizes for each backend, print OSU-style rows; return them."""
    args = parser(bench.heading).parse_args(argv)
    return sweep(bench, args)


def _header(bench: Bench, ctx: Ctx, args: argparse.Namespace) -> None:
    now = datetime.datetime.now().isoformat(timespec="seconds")
    dev = torch.cuda.get_device_name() if ctx.device == "cuda" else "cpu"
    print(f"# {bench.heading}: {ctx.n} ranks, {dev}, {args.dtype}, "
          f"iterations <= {args.iterations} (warm-up {args.warmup}), {now}")
    print(f"# command: {' '.join(sys.argv)}")
    print(f"# timing: {args.batch} call(s) per sample, {ctx.calls} calls"
          + (", replayed from one CUDA graph" if args.graph else "")
          + (f", outputs in {ctx.symm} symmetric memory" if ctx.symm else "")
          + (f", {args.rounds} rounds" if args.rounds > 1 else "")
          + (", backends in turns sample by sample" if args.interleave == "sample" else ""))
    print(f"# {'Size':>10} {'Backend':>12} {'Avg Latency(us)':>16} {'Median(us)':>11} "
          f"{'P10(us)':>9} {'P90(us)':>9} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} "
          f"{'x first':>8}", flush=True)


def print_row(row: dict[str, Any]) -> None:
    """A row in OSU format with nccl-tests bandwidth columns."""
    label = row["backend"] if row["backend"] != "auto" else f"auto={row['served_by']}"
    print(f"  {row['bytes']:>10} {label:>12} {row['avg_us']:>16.2f} {row['median_us']:>11.2f}"
          f" {row['p10_us']:>9.2f} {row['p90_us']:>9.2f} {row['algbw_gbs']:>12.3f}"
          f" {row['busbw_gbs']:>12.3f} {row['vs_first']:>8.3f}", flush=True)


def append_csv(path: str, rows: list[dict[str, Any]]) -> None:
    """Append rows to a CSV file under its own header (written if the file is new). A file
    from another version (its columns in another order, or fewer) keeps its rows: columns
    the rows add are appended to its header and the file is rewritten once."""
    fields = list(dict.fromkeys(k for r in rows for k in r))
    header: list[str] = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
    if header and not set(fields) <= set(header):
        with open(path, newline="") as f:
            old = list(csv.DictReader(f))
        header += [k for k in fields if k not in header]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(old)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header or fields)
        if not header:
            w.writeheader()
        w.writerows(rows)


def sweep(bench: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every size of args.message_size, every backend of args.backend, printed as it goes."""
    ctx = make_ctx(args)
    backends = [b.strip() for b in args.backend.split(",")]
    rows: list[dict[str, Any]] = []
    if ctx.rank == 0:
        _header(bench, ctx, args)
    for size in sizes(args.message_size, args.factor, ctx.n * ctx.dtype.itemsize):
        case = bench.setup(ctx, size)
        got = measure_size(ctx, case, backends, args, max(1, args.rounds))
        timed = [b for b in backends if isinstance(got.get(b), Timing)]
        for be in backends:
            t = got.get(be)
            if isinstance(t, str):
                if ctx.rank == 0:
                    print(f"  {size:>10} {be:>12}   declined: {t}")
                continue
            if args.validate and case.check is not None:
                case.call(None if be == "auto" else be)
                device_sync(ctx.device)
                case.check()
            rows.append(make_row(bench, ctx, size, be, t, got[timed[0]], args))
            if ctx.rank == 0:
                print_row(rows[-1])
    if ctx.rank == 0 and args.csv and rows:
        append_csv(args.csv, rows)
    return rows
