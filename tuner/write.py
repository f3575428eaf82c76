"""The tuner's outputs: the table (through mcr.table_file.dump, medians as comments) and the CSV."""

from __future__ import annotations

import csv
import datetime
import platform
from pathlib import Path
from typing import Any

import torch

from mcr.runtime import library_versions
from mcr.table_file import dump
from mcr.units import format_bytes

from .decide import TIE, ranges, settled
from .search import Pass


def versions(backends: list[str]) -> dict[str, str]:
    """The library versions a table was measured with (the MPI library's name and version only,
    and only where MPI was measured), plus CUDA's and Python's."""
    cuda = torch.cuda.is_available()
    v = library_versions(cuda)
    mpi = v.pop("mpi", None)
    v["python"] = platform.python_version()
    if "mpi" in backends and mpi is not None:
        v["mpi"] = mpi.split(",")[0].strip()
    if cuda:
        v["cuda"] = str(torch.version.cuda)
    return v


def yaml_size(n: float) -> int | str:
    """A size as the table writes it: a plain integer, or with a unit (64KiB, inf)."""
    text = format_bytes(n)
    return int(text) if text.isdigit() else text


def of_pass(rows: list[dict[str, Any]], k: int | str, p: Pass) -> list[dict[str, Any]]:
    """The rows of group k (a table's group key: 4, 2x2) and pass p."""
    return [r for r in rows if r["group"] == k and p.matches(r)]


def entries(rows: list[dict[str, Any]], p: Pass, default: str) -> list[dict[str, Any]]:
    """One pass's table entries: its winners as ranges, with the pass's selectors."""
    sel = {**({"buffer": "symmetric"} if p.symm else {}),
           **({"profile": p.profile} if p.profile != "standalone" else {}),
           **({"splits": "uneven"} if p.splits == "uneven" else {})}
    seq = settled(rows, default).get(p.op, [])
    return [{"min": yaml_size(lo), "max": yaml_size(hi), "backend": be, **sel}
            for lo, hi, be in ranges(seq)]


def medians(rows: list[dict[str, Any]], p: Pass, default: str) -> list[str]:
    """Comment lines: each size's medians (us) per backend, the chosen one marked *."""
    seq = settled(rows, default).get(p.op, [])
    med = {(int(r["bytes"]), r["backend"]): r["median_us"] for r in rows}
    bes = sorted({r["backend"] for r in rows})
    out = [f"{p.label()}, median us per backend (* chosen):"] if p != Pass(p.op) else []
    for size, won in seq:
        out.append(f"{format_bytes(size)}: " + ", ".join(
            f"{b}{'*' if b == won else ''} {med[(size, b)]:.1f}" for b in bes
            if (size, b) in med))
    if seq:
        out.append(f"above {format_bytes(seq[-1][0])}: extrapolated (largest size measured)")
    return out


def table_text(rows: list[dict[str, Any]], passes: list[Pass], groups: list[int | str],
               default: str, system: dict[str, Any], provenance: dict[str, Any],
               device: str) -> str:
    """The whole table document: for each group size and pass, ranges of winners."""
    ops: dict[int, dict[str, list[dict[str, Any]]]] = {}
    comments: dict[tuple[int, str], list[str]] = {}
    for k in groups:
        for p in passes:
            mine = of_pass(rows, k, p)
            if not mine:
                continue
            ops.setdefault(k, {}).setdefault(p.op, []).extend(entries(mine, p, default))
            comments.setdefault((k, p.op), []).extend(medians(mine, p, default))
    sizes = [int(r["bytes"]) for r in rows]
    provenance = {**provenance, "date": datetime.date.today().isoformat(),
                  "margin": f"faster than the default by {TIE:.0%} in every interleaved round",
                  "measured_bytes": [yaml_size(min(sizes)), yaml_size(max(sizes))]}
    doc = {"system": system, "provenance": provenance, "device": device, "groups": ops}
    header = (f"mcr tuning table: {system['class']}, {system['ranks']} ranks, {device} tensors.",
              "Written by mcr-tune; re-run it rather than editing by hand. Comments list the",
              "medians it measured; sizes above measured_bytes are extrapolated.")
    return dump(doc, comments, header)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """All rows, one file (the union of every row's fields as columns)."""
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
