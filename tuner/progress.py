"""One tuning run's bookkeeping on rank 0: progress with time left, the partial CSV that makes a
run resumable, and the final files (table, CSV, one PNG per op)."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import mcr
import mcr.comm as dist
from mcr.config import from_env, user_tables_dir
from mcr.measure.engine import Ctx
from mcr.measure.sweep import append_csv
from mcr.runtime import TABLES_DIR

from .plot import plot_op
from .search import Measurer, Pass
from .write import table_text, versions, write_csv


class TuneRun:
    """Progress, partial rows and outputs of one mcr-tune run."""

    def __init__(self, args: argparse.Namespace, stem: Path, partial: Path, backends: list[str],
                 passes: list[Pass], groups: list[int | str], done: list[dict[str, Any]],
                 command: str, cls: str, total: int) -> None:
        """total: the sizes of the grid, every group and pass (re-checks and bisection grow
        it as they come)."""
        self.args, self.stem, self.partial = args, stem, partial
        self.backends, self.passes, self.groups = backends, passes, groups
        self.done, self.command, self.cls = done, command, cls
        self.rank = dist.get_rank()
        self._measurers: list[Measurer] = []
        self.bar = None
        if self.rank == 0:
            from tqdm import tqdm
            stem.parent.mkdir(parents=True, exist_ok=True)
            if done:
                print(f"mcr-tune: resuming: {len(done)} rows measured before are in {partial}"
                      f" (--fresh to measure again)", flush=True)
            print(f"mcr-tune: {len(groups)} group(s) {groups}, {len(passes)} curve(s), "
                  f"backends {backends}; writing {stem}.yaml", flush=True)
            self.bar = tqdm(total=total, desc="mcr-tune", unit="size", file=sys.stderr,
                            dynamic_ncols=True)

    def measurer(self, ctx: Ctx, beat: Callable[[], None] | None = None) -> Measurer:
        """A Measurer for one group that replays this run's earlier rows (beat: called once a
        size, for the ranks that wait outside the group)."""
        def tick(n: int) -> None:
            self.tick(n)
            if beat is not None:
                beat()
        m = Measurer(ctx, self.args, self.backends, self.done, self.sink, tick)
        self._measurers.append(m)
        return m

    @property
    def replayed(self) -> int:
        """Sizes taken from the partial CSV instead of measured."""
        return sum(m.replayed for m in self._measurers)

    def sink(self, rows: list[dict[str, Any]]) -> None:
        """Keep newly measured rows in the partial CSV at once (what a resumed run replays)."""
        if self.rank == 0 and rows:
            append_csv(str(self.partial), rows)

    def tick(self, n: int) -> None:
        """One more size measured (or replayed)."""
        if self.bar is not None:
            self.bar.update(n)

    def grow(self, n: int) -> None:
        """n more sizes to measure than the grid (re-checks, bisection)."""
        if self.bar is not None and n:
            self.bar.total += n
            self.bar.refresh()

    def finish(self, rows: list[dict[str, Any]], default: str, device: str, n: int,
               nodes: int = 1) -> None:
        """Write STEM.yaml, STEM.csv and STEM_OP.png; drop the partial CSV."""
        if self.bar is not None:
            self.bar.close()
        a = self.args
        system = {"class": self.cls,
                  "gpu": torch.cuda.get_device_name() if device == "cuda" else "none",
                  "cpu": platform.processor() or platform.machine(),
                  "interconnect": a.interconnect, "nodes": nodes,
                  "gpus_per_node": n // nodes if device == "cuda" else 0, "ranks": n,
                  "libraries": versions(self.backends)}
        provenance = {"tool": f"mcr-tune {mcr.__version__}", "iterations": a.iterations,
                      "statistic": "median over interleaved rounds, slowest rank",
                      "rounds": a.rounds, "interleave": a.interleave, "lead_in": a.lead_in,
                      "calls": a.calls, "command": self.command,
                      "dtype": a.dtype}
        yaml_path = self.stem.with_suffix(".yaml")
        yaml_path.write_text(table_text(rows, self.passes, self.groups, default, system,
                                        provenance, device))
        write_csv(self.stem.with_suffix(".csv"), rows)
        title = f"{self.cls}, {device} {a.dtype}, {a.calls} calls"
        pngs = []
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("mcr-tune: no plots (pip install matplotlib)", flush=True)
            self.passes = []
        for op in dict.fromkeys(p.op for p in self.passes):
            png = self.stem.with_name(f"{self.stem.name}_{op}.png")
            plot_op(png, rows, op, self.passes, self.groups, default, title)
            pngs.append(png.name)
        self.partial.unlink(missing_ok=True)
        where = self.stem.resolve().parent
        use = "mcr uses it from the next start" if where in (
            user_tables_dir(from_env()).resolve(), TABLES_DIR.resolve()) else \
            f"use it with MCR_TUNING_TABLE={yaml_path}"
        extra = {k: len({(r["op"], r["ranks"], r["bytes"]) for r in rows if r["pass"] == k})
                 for k in ("recheck", "bisect", "confirm")}
        print(f"mcr-tune: {self.replayed} size(s) replayed from an interrupted run, "
              f"{self.bar.n - self.replayed if self.bar else 0} measured, of which "
              f"{extra['recheck']} re-checked single-size flips, {extra['bisect']} "
              f"searched boundaries and {extra['confirm']} narrow wins confirmed\n"
              f"mcr-tune: wrote {', '.join([str(yaml_path), f'{self.stem.name}.csv', *pngs])}\n"
              f"mcr-tune: read it with `mcr-tune show {yaml_path}`; {use}", flush=True)
