"""The tuner's measuring loop: a size grid, re-checked suspects, bisected boundaries; resumable.

Every rank of a group sees the same (slowest-rank) times, so every rank makes the same choices
of what to measure next. Rows go to a partial CSV as they are measured; a run started again with
the same output replays them instead of measuring, so an interrupted run resumes where it
stopped.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcr.backends import canonical
from mcr.layout import parse_label
from mcr.measure.cases import BENCHES, UNEVEN
from mcr.measure.engine import Ctx, Timing, measure_size
from mcr.measure.load import under_load
from mcr.measure.sweep import make_row
from mcr.ops import CallKey, dtype_name, make_key
from mcr.runtime import get as get_runtime

from .decide import gaps, suspects, to_confirm, winners

ROW_KEY = ("group", "op", "symm", "profile", "splits", "load", "calls", "dtype", "bytes",
           "pass")
_NUMERIC = {"ranks", "bytes", "iters", "batch", "graph", "rounds"}


@dataclass(frozen=True)
class Pass:
    """One curve the tuner measures: an op, its output buffers, a profile, its split sizes."""

    op: str
    symm: str | None = None       # backend whose symmetric memory holds outputs (None: plain)
    profile: str = "standalone"   # or "overlap": beside a GEMM, scored by the whole window
    splits: str = "even"          # or "uneven": all_to_all_single with skewed split sizes

    def label(self) -> str:
        """e.g. all_gather, all_gather symmetric overlap, all_to_all uneven."""
        return " ".join([self.op, *(["symmetric"] if self.symm else []),
                         *([self.profile] if self.profile != "standalone" else []),
                         *(["uneven"] if self.splits == "uneven" else [])])

    def matches(self, row: dict[str, Any]) -> bool:
        """Whether a measured row belongs to this curve (rows from before `splits` are even)."""
        return (row["op"] == self.op and (row["symm"] or None) == self.symm
                and row["profile"] == self.profile
                and (row.get("splits") or "even") == self.splits)


def uneven_grid(grid: list[int], n: int, unit: int) -> list[int]:
    """The uneven pass's sizes over the range of `grid`: the keys uneven calls have, group size
    x a power-of-two block of at least one element, every one of them (no size lies between
    two, so this pass bisects nothing)."""
    out, block = [], unit
    while n * block <= grid[-1]:
        if n * block >= grid[0]:
            out.append(n * block)
        block *= 2
    return out


def call_key(ctx: Ctx, p: Pass, size: int) -> CallKey:
    """The key of the calls measured at this size of pass p (as a table looks it up)."""
    return make_key(p.op, ctx.n, size, ctx.dtype, ctx.device, profile=p.profile,
                    buffer="symmetric" if p.symm else "plain", nodes=parse_label(ctx.label)[1],
                    even=p.splits != "uneven")


def timed_as(name: str, key: CallKey, names: list[str]) -> str:
    """The backend whose timing stands for `name` at this call: the one among names that does
    exactly what it would (sdma for sdma_pipe below its threshold), else itself."""
    same = get_runtime().backends[canonical(name)].same_as(key)
    return same if same in names else name


def key_of(row: dict[str, Any]) -> tuple[str, ...]:
    """What identifies a measured point across runs (for resuming)."""
    return tuple(str(row.get(k, "")) for k in ROW_KEY)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a tuner CSV, numbers as numbers; [] if there is none."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if k in _NUMERIC:
                r[k] = int(float(v))
            elif k == "group":
                r[k] = int(v) if v.isdigit() else v   # a table's group key: 4, or 2x2
            elif k != "round_medians_us" and (k.endswith(("_us", "_gbs"))
                                              or k in ("spread", "vs_first")):
                r[k] = float(v)
        # CSVs from before hierarchical groups measured the world only: its group is its ranks.
        r.setdefault("group", r["ranks"])
    return rows


class Measurer:
    """Measures points of a group's passes; replays points an interrupted run already measured;
    hands each new row to `sink` (rank 0 appends it to the partial CSV)."""

    def __init__(self, ctx: Ctx, args: argparse.Namespace, backends: list[str],
                 done: list[dict[str, Any]], sink: Callable[[list[dict[str, Any]]], None],
                 tick: Callable[[int], None]) -> None:
        self.ctx, self.args, self.backends = ctx, args, backends
        self.done: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for r in done:
            self.done.setdefault(key_of(r), []).append(r)
        self.sink, self.tick = sink, tick
        self.replayed = 0

    def point(self, p: Pass, size: int, kind: str, backends: list[str] | None = None,
              rounds: int | None = None, calls: str | None = None) -> list[dict[str, Any]]:
        """Rows of every backend (or those named) at one size of pass p (calls: sync or async,
        default the run's)."""
        ctx = dataclasses.replace(self.ctx, symm=p.symm, calls=calls or self.ctx.calls)
        # The overlap profile's load is in the key: a resumed run with another --overlap-load
        # measures its overlap rows again instead of replaying rows made under another load.
        load = self.args.overlap_load if p.profile == "overlap" else ""
        splits = "uneven" if p.splits == "uneven" else ""
        probe = {"group": ctx.label, "op": p.op, "symm": p.symm or "", "profile": p.profile,
                 "splits": splits, "load": load, "calls": ctx.calls,
                 "dtype": dtype_name(ctx.dtype), "bytes": size, "pass": kind}
        cached = self.done.get(key_of(probe))
        if cached:
            self.replayed += 1
            self.tick(1)
            return cached
        key = call_key(ctx, p, size)
        bes = [b for b in backends or self.backends if timed_as(b, key, self.backends) == b]
        bench = UNEVEN if splits else BENCHES[p.op]
        case = bench.setup(ctx, size)
        if p.profile == "overlap":
            case = under_load(ctx, case, cover=bes if load == "cover" else None)
        got = measure_size(ctx, case, bes, self.args, rounds or self.args.rounds)
        timed = [b for b in bes if isinstance(got.get(b), Timing)]
        if not timed:   # every backend declined this size: no rule can come from it
            self.tick(1)
            return []
        rows = [dict(make_row(bench, ctx, size, be, got[be], got[timed[0]], self.args),
                     profile=p.profile, load=load, load_gemms=case.load_gemms,
                     **{"pass": kind})
                for be in timed]
        self.sink(rows)
        self.tick(1)
        return rows


def tune_pass(m: Measurer, p: Pass, grid: list[int], default: str, unit: int,
              ratio: float, max_steps: int, grow: Callable[[int], None]) -> list[dict[str, Any]]:
    """All rows of one pass: the grid, then suspects re-checked with twice the rounds, then
    boundaries bisected until neighbours with different winners are within `ratio`."""
    rows: list[dict[str, Any]] = []
    for size in grid:
        rows += m.point(p, size, "grid")
    checked: set[int] = set()

    def recheck() -> None:
        nonlocal rows
        todo = [s for s in suspects(winners(rows, default).get(p.op, [])) if s not in checked]
        grow(len(todo))
        for s in todo:
            checked.add(s)
            rows += m.point(p, s, "recheck", rounds=2 * m.args.rounds)

    recheck()
    for _ in range(max_steps):
        todo = gaps(winners(rows, default).get(p.op, []), ratio, unit)
        if not todo:
            break
        grow(len(todo))
        for size, a, b in todo:
            rows += m.point(p, size, "bisect", sorted({a, b, default} & set(m.backends)))
        recheck()
    return rows


def confirm_pass(m: Measurer, p: Pass, rows: list[dict[str, Any]], default: str,
                 grow: Callable[[int], None], unit: int, ratio: float,
                 max_steps: int) -> list[dict[str, Any]]:
    """Rows of pass p's narrow wins measured again, every backend of the point side by side,
    with the other way of calling (sync if the run's calls are async): a switch must hold
    whether the workload waits on each call or not. Run after every pass of the group, so a
    default met in a slow mode gets another chance too. Every backend, not the challenger
    alone: on 2x H100 symm's all-gathers confirmed in a slow spell (39 us, sync) lost to
    sdma's grid rows (34, async, a calm moment) that symm had beaten 22 to 34 side by side.
    A confirmed point can change its winner, so boundaries it opens are searched in turn
    (2x H100: reduce-scatter's 16 MiB went back to NCCL, leaving 4-16 MiB unsearched and
    8 MiB 34% slower than sdma)."""
    other = "sync" if m.ctx.calls == "async" else "async"
    out: list[dict[str, Any]] = []
    for step in range(max_steps + 1):
        todo = to_confirm(rows + out, default).get(p.op, [])
        grow(len(todo))
        for size, _be in todo:
            bes = {r["backend"] for r in rows + out
                   if r["op"] == p.op and int(r["bytes"]) == size}
            out += m.point(p, size, "confirm", sorted(bes | {default}), calls=other)
        more = gaps(winners(rows + out, default).get(p.op, []), ratio, unit)
        if not more or step == max_steps:
            break
        grow(len(more))
        for size, a, b in more:
            out += m.point(p, size, "bisect", sorted({a, b, default} & set(m.backends)))
    return out
