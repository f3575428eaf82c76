"""python -m tuner: measure backends with the OSU harness, write table YAML, CSV and PNG.

Run under the launcher and rank count the table is for, e.g.
  mpiexec -n 2 python -m tuner --backends gloo,mpi --out tuning_tables/cpu_np2
With `--symm sdma` (GPU), the ops that write an output buffer (all-gather, all-to-all, broadcast)
are measured a second time with outputs in that backend's symmetric memory, and their winners
become `buffer: symmetric` rules: what zero-copy callers (symmetric_empty) are dispatched by.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib
import platform
import sys
from pathlib import Path
from typing import Any

import torch

import mcr
import mcr.comm as dist
from benchmarks.harness import parser, sweep
from mcr.backends import Unavailable, default_backend
from mcr.ops import BUFFER_KEYED, CallKey, make_key
from mcr.runtime import get as get_runtime
from mcr.runtime import system_class
from mcr.tables import dump
from mcr.units import format_bytes
from tuner.decide import ranges, winners

BENCH_OF = {"all_reduce": "osu_allreduce", "all_gather": "osu_allgather",
            "reduce_scatter": "osu_reducescatter", "all_to_all": "osu_alltoall",
            "broadcast": "osu_bcast"}


def _probe_key(device: str) -> CallKey:
    """A plain float32 all-reduce key: which backends serve this device at all."""
    return make_key("all_reduce", 2, 4, torch.float32, device)


def _versions(backends: list[str]) -> dict[str, str]:
    v = {"torch": str(torch.__version__), "mcr": mcr.__version__,
         "python": platform.python_version()}
    if "mpi" in backends:
        from mpi4py import MPI
        v["mpi"] = MPI.Get_library_version().split(",")[0].strip()
    if torch.cuda.is_available():
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        v["cuda"] = str(torch.version.cuda)
    return v


def write_yaml(path: Path, rows: list[dict[str, Any]], args: argparse.Namespace,
               device: str, n: int, cls: str) -> None:
    """The table, through mcr.tables.dump, with each op's measured medians as comments."""
    default = default_backend(device)
    plain = [r for r in rows if not r["symm"]]
    symm = [r for r in rows if r["symm"]]
    win, win_symm = winners(plain, default), winners(symm, default)
    ops: dict[str, list[dict[str, Any]]] = {}
    comments: dict[tuple[int, str], list[str]] = {}
    for op, seq in win.items():
        ops[op] = _rules(win[op])
        comments[(n, op)] = _medians(plain, op, seq)
        if op in win_symm:
            ops[op] += [dict(e, buffer="symmetric") for e in _rules(win_symm[op])]
            comments[(n, op)] += [f"outputs in {symm[0]['symm']} symmetric memory (zero-copy):",
                                  *_medians(symm, op, win_symm[op])]
    doc = {
        "system": {"class": cls,
                   "gpu": torch.cuda.get_device_name() if device == "cuda" else "none",
                   "cpu": platform.processor() or platform.machine(),
                   "interconnect": args.interconnect, "nodes": 1,
                   "gpus_per_node": n if device == "cuda" else 0,
                   "libraries": _versions(args.backends.split(","))},
        "provenance": {"tool": f"mcr.tuner {mcr.__version__}",
                       "date": datetime.date.today().isoformat(),
                       "iterations": args.iterations,
                       "statistic": "median of per-iteration slowest-rank time",
                       "command": args.command, "dtype": args.dtype},
        "device": device,
        "groups": {n: ops},
    }
    header = (f"mcr tuning table: {cls}, {n} ranks, {device} tensors. Written by python -m tuner;",
              "re-run it rather than editing by hand. Comments list the medians (us) it measured.")
    path.write_text(dump(doc, comments, header))


def _yaml_size(n: float) -> int | str:
    """A size as the table writes it: a plain integer, or with a unit (64KiB, inf)."""
    text = format_bytes(n)
    return int(text) if text.isdigit() else text


def _rules(seq: list[tuple[int, str]]) -> list[dict[str, Any]]:
    return [{"min": _yaml_size(lo), "max": _yaml_size(hi), "backend": be}
            for lo, hi, be in ranges(seq)]


def _medians(rows: list[dict[str, Any]], op: str, seq: list[tuple[int, str]]) -> list[str]:
    """One op's medians per size and backend, as comment lines."""
    med = {(int(r["bytes"]), r["backend"]): r["median_us"] for r in rows if r["op"] == op}
    bes = sorted({r["backend"] for r in rows})
    return [f"{format_bytes(size)}: " + ", ".join(f"{b} {med[(size, b)]:.1f}" for b in bes
                                                   if (size, b) in med) for size, _ in seq]


def plot(path: Path, rows: list[dict[str, Any]], title: str) -> None:
    """Median latency against size, one panel per op, one line per backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ops = sorted({r["op"] for r in rows})
    fig, axes = plt.subplots(1, len(ops), figsize=(4 * len(ops), 3.6), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for be in sorted({r["backend"] for r in rows}):
            pts = sorted((r["bytes"], r["median_us"]) for r in rows
                         if r["op"] == op and r["backend"] == be)
            if pts:
                ax.loglog(*zip(*pts), marker="o", ms=3, label=be)
        ax.set_title(op)
        ax.set_xlabel("bytes")
        ax.set_ylabel("median us")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Measure, decide, write."""
    ap = parser("mcr autotuner")
    ap.add_argument("--ops", default=",".join(BENCH_OF))
    ap.add_argument("--out", required=True, help="path stem: writes STEM.yaml, .csv, .png")
    ap.add_argument("--interconnect", default="shared memory / loopback")
    ap.set_defaults(backend=None, message_size="4:16MiB", iterations=50, max_seconds=1.0)
    args = ap.parse_args()
    args.command = " ".join(["python -m tuner", *sys.argv[1:]])
    dist.init_distributed(verbose=False)
    rt = get_runtime()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    avail = [n for n, b in rt.backends.items() if not isinstance(b, Unavailable)
             and b.decline_key(_probe_key(device)) is None]
    args.backends = args.backend or ",".join(avail)
    args.backend = args.backends
    rows: list[dict[str, Any]] = []
    ops = args.ops.split(",")
    symm = args.symm
    passes = [(op, None) for op in ops]
    passes += [(op, symm) for op in ops if symm and op in BUFFER_KEYED]
    progress = None
    if dist.get_rank() == 0:
        from tqdm import tqdm
        progress = tqdm(total=len(passes), desc="tuner", unit="sweep", file=sys.stderr)
    for op, where in passes:
        bench = importlib.import_module(f"benchmarks.{BENCH_OF[op]}").BENCH
        args.symm = where
        rows += sweep(bench, args)
        if progress:
            progress.update(1)
    args.symm = symm
    if dist.get_rank() == 0:
        progress.close()
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.with_suffix(".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        cls = system_class(rt.cfg, device == "cuda")
        n = dist.get_world_size()
        write_yaml(out.with_suffix(".yaml"), rows, args, device, n, cls)
        plot(out.with_suffix(".png"), rows, f"{cls}, {n} ranks, {device} {args.dtype}")
        print(f"tuner: wrote {out.with_suffix('.yaml')}, .csv, .png", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
