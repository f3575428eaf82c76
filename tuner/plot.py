"""One PNG per op: median time per backend against size (dashed: the fastest round, which the
rules compare), the chosen backend shaded per range."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcr.layout import parse_label

from .decide import curves, ranges, settled
from .search import Pass
from .write import of_pass

COLORS = {"gloo": "tab:green", "mpi": "tab:blue", "nccl": "tab:orange", "sdma": "tab:red",
          "sdma_pipe": "darkred",
          "symm": "tab:purple", "nccl_ce": "tab:brown", "auto": "black", "hier": "tab:olive",
          "mpi_lanes2": "tab:cyan", "mpi_lanes4": "tab:pink", "mpi_lanes8": "tab:gray",
          "gloo_lanes2": "yellowgreen", "gloo_lanes4": "darkgreen", "gloo_lanes8": "lime"}


def plot_op(path: Path, rows: list[dict[str, Any]], op: str, passes: list[Pass],
            groups: list[int | str], default: str, title: str) -> None:
    """A grid of panels (group sizes down, the op's passes across: plain / symmetric buffers,
    standalone / overlap); in each, lines per backend, the table's choice shaded beneath, sizes
    past the largest measured hatched as extrapolated."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mine = [p for p in passes if p.op == op]
    fig, axes = plt.subplots(len(groups), len(mine), figsize=(5.2 * len(mine), 3.4 * len(groups)),
                             squeeze=False)
    for gi, k in enumerate(groups):
        for pi, p in enumerate(mine):
            ax = axes[gi][pi]
            pts = of_pass(rows, k, p)
            _panel(ax, pts, p, default)
            ax.set_title(f"{k} ranks{' (nodes x ranks)' if isinstance(k, str) else ''}, "
                         f"{p.label()}", fontsize=9)
    fig.suptitle(f"{title}: {op}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_csv(stem: Path) -> list[Path]:
    """Redraw STEM_OP.png from STEM.csv (rows of mcr-tune), without measuring."""
    from mcr.backends import default_backend

    from .search import read_rows
    rows = read_rows(stem.with_suffix(".csv"))
    if not rows:
        raise SystemExit(f"mcr-tune plot: {stem.with_suffix('.csv')}: no rows")
    passes = list(dict.fromkeys(Pass(r["op"], r["symm"] or None, r.get("profile") or "standalone")
                                for r in rows))
    groups = sorted({r["group"] for r in rows}, key=parse_label)
    default = default_backend(rows[0]["device"])
    out = []
    for op in dict.fromkeys(p.op for p in passes):
        out.append(stem.with_name(f"{stem.name}_{op}.png"))
        r = rows[0]
        plot_op(out[-1], rows, op, passes, groups, default,
                f"{stem.name}: {r['device']} {r['dtype']}, {r.get('calls', 'sync')} calls")
    return out


def _panel(ax: Any, rows: list[dict[str, Any]], p: Pass, default: str) -> None:
    if not rows:
        ax.set_axis_off()
        return
    seen = curves(rows).get(p.op, {})
    for be in sorted({b for _, b in seen}):
        pts = sorted((s, t) for (s, b), t in seen.items() if b == be)
        ax.loglog([s for s, _ in pts], [med for _, (med, _) in pts], marker="o", ms=3,
                  color=COLORS.get(be), label=be)
        ax.loglog([s for s, _ in pts], [low for _, (_, low) in pts], ls="--", lw=0.8,
                  color=COLORS.get(be))
    seq = settled(rows, default).get(p.op, [])
    top = max(s for s, _ in seq)
    lo_x = min(s for s, _ in seq)
    for i, (lo, hi, be) in enumerate(ranges(seq)):
        a, b = max(lo, lo_x), min(hi, top * 4)
        ax.axvspan(a, b, color=COLORS.get(be, "grey"), alpha=0.12, lw=0)
        # Four heights in turn, and the bare name on a narrow range: the names of narrow
        # neighbouring ranges would overlap.
        ax.text((a * b) ** 0.5, 0.97 - 0.06 * (i % 4), be if b < a * 64 else f"chosen: {be}",
                transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=7,
                color=COLORS.get(be, "grey"))
    ax.axvspan(top, top * 4, facecolor="none", edgecolor="grey", hatch="//", lw=0,
               label="extrapolated")
    ax.plot([], [], ls="--", lw=0.8, color="grey", label="fastest round (compared)")
    ax.set_xlim(lo_x / 1.5, top * 4)
    ax.set_xlabel("bytes (full buffer)")
    ax.set_ylabel("median us (slowest rank)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
