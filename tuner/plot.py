"""One PNG per op: median time per backend against size (dashed: the fastest round, which the
rules compare); beneath each panel a strip of the table's choice per range; one legend for the
figure, outside the data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcr.layout import parse_label

from .decide import curves, ranges, settled
from .search import Pass
from .write import of_pass

COLORS = {"gloo": "tab:green", "mpi": "tab:blue", "nccl": "tab:orange", "sdma": "tab:red",
          "sdma_pipe": "teal",
          "symm": "tab:purple", "nccl_ce": "tab:brown", "auto": "black", "hier": "tab:olive",
          "mpi_lanes2": "tab:cyan", "mpi_lanes4": "tab:pink", "mpi_lanes8": "tab:gray",
          "gloo_lanes2": "yellowgreen", "gloo_lanes4": "darkgreen", "gloo_lanes8": "lime"}
# A range's name is written in the strip only where it spans this many times its start: the
# names of narrower ranges would run into each other; their colour and the legend say them.
NAMED_SPAN = 40


def plot_op(path: Path, rows: list[dict[str, Any]], op: str, passes: list[Pass],
            groups: list[int | str], default: str, title: str) -> None:
    """A grid of panels (group sizes down, the op's passes across: plain / symmetric buffers,
    standalone / overlap); in each, lines per backend over a strip of the table's choice, sizes
    past the largest measured hatched as extrapolated."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    mine = [p for p in passes if p.op == op]
    fig = plt.figure(figsize=(max(5.4 * len(mine), 7.5), 3.9 * len(groups) + 1.1))
    outer = fig.add_gridspec(len(groups), len(mine), hspace=0.38, wspace=0.28)
    seen: set[str] = set()
    for gi, k in enumerate(groups):
        for pi, p in enumerate(mine):
            inner = outer[gi, pi].subgridspec(2, 1, height_ratios=[6, 1], hspace=0.06)
            ax, strip = fig.add_subplot(inner[0]), fig.add_subplot(inner[1])
            seen |= _panel(ax, strip, of_pass(rows, k, p), p, default)
            ax.set_title(f"{k} ranks{' (nodes x ranks)' if isinstance(k, str) else ''}, "
                         f"{p.label()}", fontsize=9)
    names = sorted(seen)
    handles = [Line2D([], [], color=COLORS.get(b, "grey"), marker="o", ms=3, label=b)
               for b in names]
    handles += [Line2D([], [], ls="--", lw=0.8, color="grey", label="fastest round (compared)"),
                Patch(facecolor="lightgrey", label="strip: the table's choice"),
                Patch(facecolor="none", edgecolor="grey", hatch="//",
                      label="past the largest size measured")]
    fig.legend(handles=handles, loc="lower center", ncol=3 if len(mine) == 1 else 3 * len(mine),
               fontsize=8, frameon=False)
    fig.suptitle(f"{title}: {op}")
    w, h = fig.get_size_inches()
    fig.subplots_adjust(top=1 - 0.8 / h, bottom=1.2 / h, left=1.0 / w, right=1 - 0.2 / w)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_csv(stem: Path) -> list[Path]:
    """Redraw STEM_OP.png from STEM.csv (rows of mcr-tune), without measuring."""
    from mcr.backends import default_backend

    from .search import read_rows
    rows = read_rows(stem.with_suffix(".csv"))
    if not rows:
        raise SystemExit(f"mcr-tune plot: {stem.with_suffix('.csv')}: no rows")
    passes = list(dict.fromkeys(Pass(r["op"], r["symm"] or None, r.get("profile") or "standalone",
                                     r.get("splits") or "even") for r in rows))
    groups = sorted({r["group"] for r in rows}, key=parse_label)
    default = default_backend(rows[0]["device"])
    out = []
    for op in dict.fromkeys(p.op for p in passes):
        out.append(stem.with_name(f"{stem.name}_{op}.png"))
        r = rows[0]
        plot_op(out[-1], rows, op, passes, groups, default,
                f"{stem.name}: {r['device']} {r['dtype']}, {r.get('calls', 'sync')} calls")
    return out


def _panel(ax: Any, strip: Any, rows: list[dict[str, Any]], p: Pass, default: str) -> set[str]:
    """Draw one panel and its strip; return the backends it shows."""
    if not rows:
        ax.set_axis_off()
        strip.set_axis_off()
        return set()
    seen = curves(rows).get(p.op, {})
    shown = {b for _, b in seen}
    for be in sorted(shown):
        pts = sorted((s, t) for (s, b), t in seen.items() if b == be)
        ax.loglog([s for s, _ in pts], [med for _, (med, _) in pts], marker="o", ms=3,
                  color=COLORS.get(be))
        ax.loglog([s for s, _ in pts], [low for _, (_, low) in pts], ls="--", lw=0.8,
                  color=COLORS.get(be))
    seq = settled(rows, default).get(p.op, [])
    top = max(s for s, _ in seq)
    lo_x = min(s for s, _ in seq)
    for lo, hi, be in ranges(seq):
        a, b = max(lo, lo_x / 1.5), min(hi, top * 4)
        strip.axvspan(a, b, color=COLORS.get(be, "grey"), alpha=0.85, lw=0)
        shown.add(be)
        if b >= a * NAMED_SPAN:
            strip.text((a * b) ** 0.5, 0.5, be, ha="center", va="center", fontsize=7,
                       color="white", fontweight="bold")
    for axis in (ax, strip):
        axis.axvspan(top, top * 4, facecolor="none", edgecolor="grey", hatch="//", lw=0)
        axis.set_xscale("log")
        axis.set_xlim(lo_x / 1.5, top * 4)
    ax.tick_params(labelbottom=False)
    ax.set_ylabel("median us\n(slowest rank)", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    strip.set_yticks([])
    strip.set_ylabel("chosen", fontsize=7, rotation=0, ha="right", va="center")
    strip.set_xlabel("bytes (full buffer)", fontsize=8)
    return shown
