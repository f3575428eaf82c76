"""The main job's verdict: from the OSU-style sweeps' CSV, per collective, which library mcr
chose over which sizes, where its choice was the fastest library forced beside it (or tied with
it within the rounds' spread: a tie is not a win), where it lost and by how much; and one
picture.

    python -m benchmarks.verdict results/main_job/osu.csv --png results/main_job/verdict.png
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from mcr.units import format_bytes


def _size(n: int) -> str:
    """Bytes as a person reads them (8 B, 64 KiB)."""
    return f"{n} B" if n < 1024 else format_bytes(n).replace("KiB", " KiB").replace(
        "MiB", " MiB").replace("GiB", " GiB")


def _rounds(row: dict[str, str]) -> list[float]:
    """The round medians of a row (us), or its median alone."""
    vals = [float(v) for v in row["round_medians_us"].split(";") if v]
    return vals or [float(row["median_us"])]


def read(path: Path) -> dict[str, dict[int, dict[str, dict[str, str]]]]:
    """op -> bytes -> backend -> row (the last row of each, if a sweep was run twice)."""
    out: dict[str, dict[int, dict[str, dict[str, str]]]] = defaultdict(lambda: defaultdict(dict))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            out[row["op"]][int(row["bytes"])][row["backend"]] = row
    return out


def judge(by_size: dict[int, dict[str, dict[str, str]]]) -> dict[str, object]:
    """Per size: what auto chose, the fastest forced library; auto's choice was right where it
    is that library or as fast within the noise, else lost (x slower). Where auto chose the
    fastest library and still took longer than it forced, beyond the noise, that is mcr's own
    time (or the machine's drift), listed apart."""
    sizes, lost, right, slower, chose = sorted(by_size), [], 0, [], []
    for size in sizes:
        rows = by_size[size]
        auto = rows.get("auto")
        forced = {b: r for b, r in rows.items() if b != "auto"}
        if auto is None or not forced:
            continue
        chose.append((size, auto["served_by"]))
        best = min(forced, key=lambda b: float(forced[b]["median_us"]))
        a, f = float(auto["median_us"]), float(forced[best]["median_us"])
        # Within the noise when the rounds' medians of auto and of the fastest overlap.
        tie = a <= f or min(_rounds(auto)) <= max(_rounds(forced[best]))
        if tie or auto["served_by"] == best:
            right += 1
            if not tie:
                slower.append((size, a / f))
        else:
            lost.append((size, best, a / f))
    return {"sizes": len(chose), "right": right, "lost": lost, "slower": slower,
            "chose": _ranges(chose)}


def _ranges(chose: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """Consecutive sizes with the same choice as (first, last, library)."""
    out: list[tuple[int, int, str]] = []
    for size, lib in chose:
        if out and out[-1][2] == lib:
            out[-1] = (out[-1][0], size, lib)
        else:
            out.append((size, size, lib))
    return out


def verdict(data: dict[str, dict[int, dict[str, dict[str, str]]]]) -> list[str]:
    """The lines a person reads: one per collective, and the overall one first."""
    lines, worst = [], []
    for op, by_size in data.items():
        j = judge(by_size)
        if not j["sizes"]:
            continue
        chose = ", ".join(f"{lib} from {_size(a)} to {_size(b)}" if a != b
                          else f"{lib} at {_size(a)}" for a, b, lib in j["chose"])
        lost = "; lost at " + ", ".join(f"{_size(s)} ({b} {x:.2f}x faster)"
                                        for s, b, x in j["lost"]) if j["lost"] else ""
        slower = "; through mcr slower than the same library forced at " + ", ".join(
            f"{_size(s)} ({x:.2f}x)" for s, x in j["slower"]) if j["slower"] else ""
        lines.append(f"  {op:<15} chose {chose}; the fastest library (or tied with it within "
                     f"the rounds' spread) at {j['right']} of {j['sizes']} sizes{lost}{slower}")
        worst += [x for _, _, x in j["lost"]]
    head = ("verdict: mcr's choice matched the fastest library at every size" if not worst else
            f"verdict: mcr's choice lost at {len(worst)} sizes, by up to {max(worst):.2f}x")
    return [head, *lines]


def picture(data: dict[str, dict[int, dict[str, dict[str, str]]]], path: Path) -> None:
    """Per collective, each library's median time over size, auto's choice shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ops = list(data)
    fig, axes = plt.subplots(1, len(ops), figsize=(3.6 * len(ops), 3.6), squeeze=False)
    colors: dict[str, str] = {}
    for ax, op in zip(axes[0], ops):
        by_size = data[op]
        sizes = sorted(by_size)
        libs = sorted({b for rows in by_size.values() for b in rows if b != "auto"})
        for lib in libs:
            xs = [s for s in sizes if lib in by_size[s]]
            line, = ax.plot(xs, [float(by_size[s][lib]["median_us"]) for s in xs], "o-", ms=3,
                            label=lib, color=colors.get(lib))
            colors[lib] = line.get_color()
        xs = [s for s in sizes if "auto" in by_size[s]]
        ax.plot(xs, [float(by_size[s]["auto"]["median_us"]) for s in xs], "k--", lw=1,
                label="mcr (auto)")
        for a, b, lib in judge(by_size)["chose"]:
            ax.axvspan(a / 1.4, b * 1.4, color=colors.get(lib, "gray"), alpha=0.12, lw=0)
        ax.set(xscale="log", yscale="log", title=op, xlabel="bytes")
        ax.set_xlim(min(sizes) / 1.5, max(sizes) * 1.5)
    axes[0][0].set_ylabel("median us per call (lower is better)")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.suptitle("each library forced, and mcr's choice (shaded: the library it chose)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Read the CSV, print the verdict, draw the picture."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--png", default="", help="where to draw the picture (none if empty)")
    args = ap.parse_args()
    data = read(Path(args.csv))
    for line in verdict(data):
        print(line)
    if args.png:
        picture(data, Path(args.png))
        print(f"picture: {args.png}")


if __name__ == "__main__":
    main()
