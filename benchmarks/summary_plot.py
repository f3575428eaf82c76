"""One picture of where mcr pays: its tokens/s over plain NCCL, from the JSONs that decode.py and
train_step.py write, each bar with its pairs' interval.

    python -m benchmarks.summary_plot OUT.png RESULT.json [RESULT.json ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

KIND_COLOR = {"decode, CUDA graph": "tab:blue", "decode, eager": "tab:cyan",
              "DeepSpeed AutoTP, eager": "tab:purple", "training step": "tab:gray"}


def bars(path: Path) -> list[dict[str, Any]]:
    """(label, kind, ratio, low, high) for each measured point of one result file."""
    res = json.loads(path.read_text())
    gpus = f"{res['world_size']}x {res['device'].replace('NVIDIA ', '').split(' ')[0]}"
    out = []
    for r in res.get("rows", []):                      # decode.py
        if "ratio" not in r:
            continue
        kind = ("DeepSpeed AutoTP, eager" if r["impl"] == "deepspeed" else
                f"decode, {'CUDA graph' if r['mode'] == 'graph' else 'eager'}")
        shape = {"8b": "8B", "70b": "70B slice"}.get(r["shape"], r["shape"])
        out.append(dict(label=f"{shape}, batch {r['batch']} ({gpus})", kind=kind,
                        ratio=r["ratio"], low=r["interval"][0], high=r["interval"][1]))
    for name, c in res.get("configs", {}).items():     # train_step.py
        if name != "mcr":
            continue
        ratios = c.get("ratios") or [c["ratio_median"]]
        low, high = c.get("ratio_median_interval") or [min(ratios), max(ratios)]
        frame = {"fsdp": "FSDP2", "deepspeed": "ZeRO-3"}[res["framework"]]
        out.append(dict(label=f"{frame} {res['shape']} ({gpus})", kind="training step",
                        ratio=statistics.median(ratios), low=low, high=high))
    return out


def main() -> None:
    """Read the results, draw the bars, write the PNG."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [b for p in args.results for b in bars(Path(p))]
    rows.sort(key=lambda b: (list(KIND_COLOR).index(b["kind"]), -b["ratio"]))
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(rows) + 1.4))
    y = range(len(rows))[::-1]
    ax.barh(list(y), [b["ratio"] - 1 for b in rows], left=1,
            color=[KIND_COLOR[b["kind"]] for b in rows])
    ax.errorbar([b["ratio"] for b in rows], list(y), fmt="none", ecolor="black", lw=0.8,
                xerr=[[b["ratio"] - b["low"] for b in rows],
                      [b["high"] - b["ratio"] for b in rows]])
    ax.set_yticks(list(y), [b["label"] for b in rows], fontsize=8)
    for yi, b in zip(y, rows):
        ax.text(max(b["high"], b["ratio"]) + 0.01, yi, f"{b['ratio']:.2f}x", va="center",
                fontsize=7)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("tokens/s of mcr over plain NCCL (bar: median of alternated pairs; "
                  "line: their interval)", fontsize=8)
    ax.legend(handles=[matplotlib.patches.Patch(color=c, label=k) for k, c in KIND_COLOR.items()
                       if any(b["kind"] == k for b in rows)], fontsize=7, loc="lower right")
    ax.set_xlim(0.9, max(b["high"] for b in rows) + 0.12)
    ax.set_title("Where mcr pays: communication on the critical path", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
