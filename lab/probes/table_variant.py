"""A copy of a tuning table with some of its overlap-profile rules taken out, to find which of
them a training step pays for (ZeRO-3 large at 4 GPUs ran slower under the overlap rules than
under the standalone ones; NOTES.md). Calls the rules no longer cover fall back to the
standalone rules, as the dispatcher's lookup does for any size an overlap rule leaves open.

    python3 lab/probes/table_variant.py IN.yaml OUT.yaml --group 4 --drop all_gather
    python3 lab/probes/table_variant.py IN.yaml OUT.yaml --group 4 --overlap-from 16MiB
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from mcr.units import format_bytes, parse_bytes


def variant(table: dict[str, Any], group: str, drop: set[str], start: float) -> dict[str, Any]:
    """table with group's overlap rules of the ops in drop removed, and the rest cut to start
    at `start` bytes."""
    ops = table["groups"][group]
    for op, rules in ops.items():
        kept = []
        for r in rules:
            if r.get("profile") != "overlap":
                kept.append(r)
                continue
            if op in drop or parse_bytes(r["max"]) <= start:
                continue
            if parse_bytes(r["min"]) < start:
                r = dict(r, min=format_bytes(start).replace(" ", ""))
            kept.append(r)
        ops[op] = kept
    return table


def main() -> None:
    """Write the variant table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--group", required=True, help="group size whose rules change, e.g. 4")
    ap.add_argument("--drop", default="", help="ops whose overlap rules go, comma-separated")
    ap.add_argument("--overlap-from", default="0", help="overlap rules start at this size")
    a = ap.parse_args()
    with open(a.src) as f:
        table = yaml.safe_load(f)
    key = next((k for k in table["groups"] if str(k) == str(a.group)), None)
    if key is None:
        raise SystemExit(f"{a.src}: no group {a.group} (has {list(table['groups'])})")
    out = variant(table, key, {x for x in a.drop.split(",") if x}, parse_bytes(a.overlap_from))
    out.setdefault("provenance", {})["variant"] = \
        f"probes/table_variant.py --group {a.group} --drop {a.drop} --overlap-from {a.overlap_from}"
    with open(a.dst, "w") as f:
        yaml.safe_dump(out, f, sort_keys=False)


if __name__ == "__main__":
    main()
