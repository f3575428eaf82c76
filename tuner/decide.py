"""From measured medians to ordered size ranges, one backend each."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

TIE = 0.03  # within 3% of the fastest, keep the default backend: a switch must pay for itself


def winners(rows: list[dict[str, Any]], default: str) -> dict[str, list[tuple[int, str]]]:
    """op -> [(bytes, fastest backend)] sorted by bytes; near-ties go to the default."""
    by: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        by[r["op"]][int(r["bytes"])][r["backend"]] = float(r["median_us"])
    out: dict[str, list[tuple[int, str]]] = {}
    for op, sizes in by.items():
        seq = []
        for size in sorted(sizes):
            t = sizes[size]
            best = min(t, key=t.get)
            if default in t and t[default] <= t[best] * (1 + TIE):
                best = default
            seq.append((size, best))
        out[op] = seq
    return out


def ranges(seq: list[tuple[int, str]]) -> list[tuple[int, float, str]]:
    """[(min, max, backend)]: size s_i's winner holds [s_i, s_i+1); first from 0, last to inf."""
    out: list[tuple[int, float, str]] = []
    for i, (_, be) in enumerate(seq):
        hi = seq[i + 1][0] if i + 1 < len(seq) else float("inf")
        if out and out[-1][2] == be:
            out[-1] = (out[-1][0], hi, be)
        else:
            out.append((0 if not out else int(out[-1][1]), hi, be))
    return out
