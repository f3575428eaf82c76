"""Byte sizes with units: parse `64KiB`, `4096`, `inf`; format for humans.

One rule everywhere (tables, MCR_* variables, benchmark options): a whole number of bytes,
optionally with a binary unit (KiB, MiB, GiB, TiB, case-insensitive), or `inf`. Decimal units
(`64K`, `64KB`, `1MB`) and fractions (`1.5KiB`) are refused: readers disagree on what they mean.
"""

from __future__ import annotations

import math
import re

_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_RE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")
_HELP = "use a whole number of bytes, optionally in KiB, MiB, GiB or TiB, or inf: 4096, 64KiB"


def parse_bytes(value: int | float | str) -> float:
    """Parse a byte count (`4096`, `64KiB`, `inf`): an int, or math.inf for `inf`."""
    if isinstance(value, bool):
        raise ValueError(f"not a byte size: {value!r} ({_HELP})")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative byte size: {value!r}")
        return value
    if isinstance(value, float):
        if value == math.inf:
            return math.inf
        raise ValueError(f"not a byte size: {value!r} (a number with a fraction, or NaN; "
                         f"{_HELP})")
    if not isinstance(value, str):
        raise ValueError(f"not a byte size: {value!r} ({_HELP})")
    if value.strip().lower() in ("inf", "infinity", "max"):
        return math.inf
    m = _RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a byte size: {value!r} ({_HELP})")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def format_bytes(n: float) -> str:
    """Render a byte count in binary units where exact (`64KiB`), else plain bytes."""
    if n == math.inf:
        return "inf"
    n = int(n)
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
