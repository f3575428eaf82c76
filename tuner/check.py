"""`mcr-tune check TABLE`: measure at sizes off the tuning grid, report each op's regret (the
time of the backend the table chose over the fastest one's). A point that seems to lose by more
than the tuner's margin is measured again, with twice the rounds, and counts as far as it
reproduced (the lower of the two); both values are printed. Beside it, regret with each
backend timed by its fastest round, as the tuner compares them."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

from mcr.backends import SERVES
from mcr.measure.engine import make_ctx
from mcr.measure.options import sizes
from mcr.ops import BUFFER_KEYED
from mcr.table_file import load_table
from mcr.tables import TableSet

from .decide import TIE, regret
from .search import Measurer, Pass, call_key, timed_as


def off_grid(spec: str, factor: int, unit: int) -> list[int]:
    """Sizes between the tuning grid's points: each grid size times factor ** 0.5, rounded to
    a multiple of unit (the grid's own sizes are what the table was fitted to), up to the
    grid's largest size."""
    grid = sizes(spec, factor, unit)
    out = {round(s * factor ** 0.5 / unit) * unit for s in grid}
    return sorted(s for s in out if 0 < s < grid[-1])


def confirmed(rows: list[dict[str, Any]], chosen: dict[tuple[str, int], str],
              again: Callable[[str, int], list[dict[str, Any]]]
              ) -> tuple[dict[str, list[tuple[int, float]]], list[tuple[str, int, float]]]:
    """Regret per op, where a point the table seems to lose by more than the tuner's margin
    was measured again (again(op, size) -> its new rows) and counts as far as it reproduced:
    one run's outlier must not make a regret, as it must not make a rule. Also
    [(op, size, first regret)] of the points measured again."""
    out = regret(rows, chosen)
    todo = [(op, size, r) for op, pts in out.items() for size, r in pts if r > TIE]
    if todo:
        rows = rows + [r for op, size, _ in todo for r in again(op, size)]
        # A loss counts as far as it reproduced: the lower of the two measurements. A default
        # that swings between modes (NCCL's ~31 or ~50 us) loses in its slow one only.
        first = {(op, size): r for op, size, r in todo}
        out = {op: [(size, min(r, first.get((op, size), r))) for size, r in pts]
               for op, pts in regret(rows, chosen).items()}
    return out, todo


def check(args: argparse.Namespace, backends: list[str]) -> None:
    """Measure every pass of the table's group of this job's size; print regret per op."""
    table = load_table(args.table, SERVES)
    ts = TableSet([table])
    ctx = make_ctx(args)
    k = ctx.label
    ops = sorted({op for g, op in table.rules if g == k})
    if not ops:
        raise SystemExit(f"mcr-tune check: {args.table} has no rules for a group of {k} "
                         "(this job's world)")
    passes = [Pass(op) for op in ops]
    passes += [Pass(op, args.symm) for op in ops if args.symm and op in BUFFER_KEYED]
    between = off_grid(args.message_size, args.factor, ctx.n * ctx.dtype.itemsize)
    todo = [(p, size, key, hit) for p in passes for size in between
            for key in [call_key(ctx, p, size)] for hit in [ts.lookup(key)] if hit is not None]
    bar = None
    if ctx.rank == 0:
        from tqdm import tqdm
        print(f"mcr-tune check: {len(todo)} points off the grid ({len(passes)} curve(s)), "
              f"backends {backends}", file=sys.stderr, flush=True)
        bar = tqdm(total=len(todo), desc="mcr-tune check", unit="size", file=sys.stderr,
                   dynamic_ncols=True)
    m = Measurer(ctx, args, backends, [], lambda rows: None,
                 lambda i: bar.update(i) if bar is not None else None)
    rows: list[dict[str, Any]] = []
    chosen: dict[tuple[str, int], str] = {}
    for p, size, key, hit in todo:
        rows += [dict(r, op=p.label()) for r in m.point(p, size, "check")]
        chosen[(p.label(), size)] = timed_as(hit[0], key, backends)
    extra: list[dict[str, Any]] = []

    def measure_again(op: str, size: int) -> list[dict[str, Any]]:
        if bar is not None:
            bar.total += 1
        got = [dict(r, op=op) for r in m.point(next(p for p in passes if p.label() == op),
                                                size, "recheck", rounds=2 * args.rounds)]
        extra.extend(got)
        return got
    out, again = confirmed(rows, chosen, measure_again)
    if bar is not None:
        bar.close()
    best = regret(rows + extra, chosen, at_best=True)
    if ctx.rank == 0:
        print(f"# mcr-tune check {args.table}: group {k}, regret = chosen / fastest - 1 at "
              f"sizes off the tuning grid")
        for op, size, first in again:
            now = dict(out[op])[size]
            print(f"# re-measured {op} {size} B ({chosen[(op, size)]}), {2 * args.rounds} "
                  f"rounds: regret {first:.1%}, counted {now:.1%} (the lower)")
        print("# at best: the same, each backend timed by its fastest round (what the tuner "
              "compares): a loss only by medians is a library's slow spell more likely than "
              "the table's choice")
        print(f"# {'op':<28} {'sizes':>5} {'median':>8} {'worst':>8}  {'worst at':<26} "
              f"{'at best: median':>15} {'worst':>8}")
        for op, pts in out.items():
            rs = [r for _, r in pts]
            worst = max(pts, key=lambda x: x[1])
            bs = [r for _, r in best[op]]
            at = f"{worst[0]} B ({chosen[(op, worst[0])]})"
            print(f"  {op:<28} {len(rs):>5} {statistics.median(rs):>8.1%} {worst[1]:>8.1%}  "
                  f"{at:<26} {statistics.median(bs):>15.1%} {max(bs):>8.1%}", flush=True)
