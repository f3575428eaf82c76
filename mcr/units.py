"""Byte sizes with units: parse `64KiB`, `1 MB`, `inf`; format for humans."""

from __future__ import annotations

import math
import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str) -> float:
    """Parse a byte count (`4096`, `64KiB`, `1.5MB`, `inf`) into a number; math.inf for `inf`."""
    if isinstance(value, bool):
        raise ValueError(f"not a byte size: {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"negative byte size: {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"not a byte size: {value!r}")
    if value.strip().lower() in ("inf", "infinity", "max"):
        return math.inf
    m = _RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a byte size: {value!r} (use e.g. 4096, 64KiB, 1MB, inf)")
    n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if n != int(n):
        raise ValueError(f"byte size is not a whole number of bytes: {value!r}")
    return int(n)


def format_bytes(n: float) -> str:
    """Render a byte count in binary units where exact (`64KiB`), else plain bytes."""
    if n == math.inf:
        return "inf"
    n = int(n)
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
