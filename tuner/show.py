"""`mcr-tune show TABLE`: a table as size ranges a person can read."""

from __future__ import annotations

from pathlib import Path

from mcr.backends import SERVES
from mcr.table_file import load_table
from mcr.tables import SELECTORS
from mcr.units import format_bytes, parse_bytes


def _span(lo: object, hi: object) -> str:
    return f"{format_bytes(parse_bytes(lo)):>8} .. {format_bytes(parse_bytes(hi)):<8}"


def show(path: str | Path) -> str:
    """The table's rules per group size and op, sizes past the measured ones marked."""
    t = load_table(path, SERVES)
    prov = t.provenance
    measured = prov.get("measured_bytes")
    top = parse_bytes(measured[1]) if isinstance(measured, list) and len(measured) == 2 else None
    lines = [f"{path}: {t.system.get('class')}, {t.ranks} ranks, {t.device} tensors",
             f"  measured {prov.get('date')}"
             + (f", {measured[0]} to {measured[1]}" if top is not None else "")
             + f" by {prov.get('tool')}; command: {prov.get('command', '?')}"]
    for gsize, ops in t.raw["groups"].items():
        lines.append(f"group of {gsize}:")
        for op, entries in ops.items():
            lines.append(f"  {op}")
            for e in entries:
                sel = ", ".join(f"{s.name}={e[s.name]}" for s in SELECTORS if s.name in e)
                hi = parse_bytes(e.get("max", "inf"))
                note = "  (extrapolated past the largest size measured)" \
                    if top is not None and hi > top else ""
                lines.append(f"    {_span(e.get('min', 0), e.get('max', 'inf'))} "
                             f"{e['backend']:<8}{' [' + sel + ']' if sel else ''}{note}")
    return "\n".join(line.rstrip() for line in lines)
