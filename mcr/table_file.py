"""Tuning table files: YAML schema v1 read with file:line errors (load_table), found in folders
(find_table_files) and written (dump, the one writer). The rules they hold live in mcr.tables."""

from __future__ import annotations

import itertools
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import TableError
from .layout import parse_label
from .ops import ALL_TO_ALL, OPS
from .tables import (
    DEVICES,
    ENTRY_FIELDS,
    ENTRY_KEYS,
    SCHEMA_VERSION,
    SELECTORS,
    Ranges,
    Selector,
    Table,
)
from .units import format_bytes, parse_bytes

# Backend names, or name -> the devices whose tensors it serves (mcr.backends.SERVES).
Known = Mapping[str, frozenset[str]] | frozenset[str] | set[str]

_TOP_KEYS = {"schema_version", "system", "provenance", "device", "groups"}
_SYSTEM_REQUIRED = {"class"}
_PROVENANCE_REQUIRED = {"tool", "date", "statistic"}


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings remember the line of every key (1-based)."""


class _LineDict(dict):
    """A mapping from YAML that knows its own line and each key's line."""

    line: int = 0
    key_lines: dict[Any, int]


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _LineDict:
    loader.flatten_mapping(node)
    out = _LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise TableError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Errors:
    """Collects schema errors so one load reports all of them, each with file and line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, line: int, where: str, msg: str) -> None:
        self.items.append(f"{self.path}:{line}: {where}: {msg}")

    def raise_if_any(self) -> None:
        if self.items:
            raise TableError("invalid tuning table:\n  " + "\n  ".join(self.items))


def _line(d: Any, key: Any = None) -> int:
    if isinstance(d, _LineDict):
        return d.key_lines.get(key, d.line) if key is not None else d.line
    return 0


MAX_TABLE_BYTES = 1 << 20


def _refuse_aliases(path: str, text: str) -> None:
    """YAML anchors and aliases have no use in a table and can expand without bound (an alias
    bomb): refused from the token stream, before anything is built."""
    try:
        for tok in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(tok, (yaml.AliasToken, yaml.AnchorToken)):
                raise TableError(f"{path}:{tok.start_mark.line + 1}: YAML anchors and aliases "
                                 "(&name, *name) are not allowed in a tuning table")
    except yaml.YAMLError:
        return   # the parser reports it below, with its line


def read_table_text(path: str) -> str:
    """A table file's text, through the guards every table file passes however it was found
    (named, in MCR_TUNING_TABLE's folder, in the user folder): a regular file (after links),
    at most MAX_TABLE_BYTES (read no further, should it grow meanwhile), UTF-8, no YAML
    anchors. A FIFO, a device or a link to one is refused before it is opened."""
    try:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise TableError(f"{path}: not a regular file: there is no such file") from None
        if not stat.S_ISREG(st.st_mode):
            raise TableError(f"{path}: not a regular file (a tuning table is a YAML file)")
        if st.st_size > MAX_TABLE_BYTES:
            raise TableError(f"{path}: {st.st_size} bytes is larger than a tuning table can be "
                             f"({MAX_TABLE_BYTES} bytes; tables are a few KiB); not parsed")
        with open(path, "rb") as f:
            raw = f.read(MAX_TABLE_BYTES + 1)
    except OSError as e:
        raise TableError(f"{path}: cannot read tuning table: {e}") from e
    if len(raw) > MAX_TABLE_BYTES:
        raise TableError(f"{path}: grew past {MAX_TABLE_BYTES} bytes while read; not parsed")
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:
        raise TableError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    _refuse_aliases(path, text)
    return text


def load_table(path: str | Path, known_backends: Known) -> Table:
    """Load and validate one YAML table; raise TableError naming file, line and field
    (known_backends: the names, or name -> the devices it serves, checked against the
    table's device)."""
    path = str(path)
    text = read_table_text(path)
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except TableError as e:
        raise TableError(f"{path}:{str(e).removeprefix('line ')}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise TableError(f"{path}:{line}: not valid YAML: {getattr(e, 'problem', e)}") from None
    err = _Errors(path)
    if not isinstance(doc, dict):
        err.add(1, "top level", "must be a mapping with schema_version, system, provenance, "
                "device, groups")
        err.raise_if_any()
    for k in doc:
        if k not in _TOP_KEYS:
            err.add(_line(doc, k), str(k), f"unknown top-level key; expected {sorted(_TOP_KEYS)}")
    for k in sorted(_TOP_KEYS - set(doc)):
        err.add(_line(doc), k, "missing")
    if "schema_version" in doc and doc["schema_version"] != SCHEMA_VERSION:
        err.add(_line(doc, "schema_version"), "schema_version",
                f"{doc['schema_version']!r} is not supported (this mcr reads {SCHEMA_VERSION})")
    for name, required in (("system", _SYSTEM_REQUIRED), ("provenance", _PROVENANCE_REQUIRED)):
        sec = doc.get(name)
        if name in doc and not isinstance(sec, dict):
            err.add(_line(doc, name), name, "must be a mapping")
        elif isinstance(sec, dict):
            for k in sorted(required - set(sec)):
                err.add(_line(sec), f"{name}.{k}", "missing")
    device = doc.get("device")
    if "device" in doc and device not in DEVICES:
        err.add(_line(doc, "device"), "device", f"{device!r} is not one of {list(DEVICES)}")
    rules: dict[tuple[int | str, str], dict[tuple[str | None, ...], Ranges]] = {}
    groups = doc.get("groups")
    if "groups" in doc and not isinstance(groups, dict):
        err.add(_line(doc, "groups"), "groups", "must map group size -> ops")
    elif isinstance(groups, dict):
        for gsize, ops in groups.items():
            gline = _line(groups, gsize)
            if parse_label(gsize) is None:
                err.add(gline, f"groups.{gsize}", "a group is its size on one node (a positive "
                        "integer, 4) or nodes x ranks per node (2x2, at least 2 nodes)")
                continue
            if not isinstance(ops, dict):
                err.add(gline, f"groups.{gsize}", "must map op name -> list of ranges")
                continue
            for op, entries in ops.items():
                rules[(gsize, op)] = _parse_op(err, ops, gsize, op, entries, known_backends,
                                               device)
    err.raise_if_any()
    return Table(path=path, system=dict(doc["system"]), provenance=dict(doc["provenance"]),
                 device=device, rules=rules, raw=_plain(doc))


def _parse_op(err: _Errors, ops: dict, gsize: int | str, op: Any, entries: Any,
              known_backends: Known, device: Any) -> dict:
    where = f"groups.{gsize}.{op}"
    oline = _line(ops, op)
    if op not in OPS:
        err.add(oline, where, f"unknown op {op!r}; expected one of {list(OPS)}")
        return {}
    if not isinstance(entries, list) or not entries:
        err.add(oline, where, "must be a non-empty list of ranges")
        return {}
    by_sel: dict[tuple[str | None, ...], Ranges] = {}
    for i, e in enumerate(entries):
        ew = f"{where}[{i}]"
        eline = _line(e) or oline
        if not isinstance(e, dict):
            err.add(eline, ew, "must be a mapping like {max: 64KiB, backend: mpi}")
            continue
        for k in e:
            if k not in ENTRY_KEYS:
                err.add(_line(e, k), f"{ew}.{k}", f"unknown key; expected {sorted(ENTRY_KEYS)}")
        backend = e.get("backend")
        if backend is None:
            err.add(eline, f"{ew}.backend", "missing")
        elif backend not in known_backends:
            err.add(_line(e, "backend"), f"{ew}.backend",
                    f"unknown backend {backend!r}; expected one of {sorted(known_backends)}")
        elif isinstance(known_backends, Mapping) and device in DEVICES and \
                device not in known_backends[backend]:
            err.add(_line(e, "backend"), f"{ew}.backend",
                    f"backend {backend!r} serves {', '.join(sorted(known_backends[backend]))} "
                    f"tensors only; this table is for device {device}")
        choices = [_selector_values(err, e, ew, sel) for sel in SELECTORS]
        if e.get("splits") is not None and op != ALL_TO_ALL:
            err.add(_line(e, "splits"), f"{ew}.splits", f"only all_to_all calls have split "
                    f"sizes; a {op} rule cannot select on them")
        try:
            hi = parse_bytes(e["max"]) if "max" in e else None
        except ValueError as x:
            err.add(_line(e, "max"), f"{ew}.max", str(x))
            continue
        if hi is None:
            err.add(eline, f"{ew}.max", "missing (use a size like 64KiB, or inf)")
            continue
        for sel_key in itertools.product(*choices):
            rng = by_sel.setdefault(sel_key, Ranges())
            try:
                lo = parse_bytes(e["min"]) if "min" in e else (rng.maxs[-1] if rng.maxs else 0)
            except ValueError as x:
                err.add(_line(e, "min"), f"{ew}.min", str(x))
                continue
            if lo == math.inf or lo >= hi:
                err.add(eline, ew, f"empty range [{format_bytes(lo)}, {format_bytes(hi)})")
                continue
            if rng.maxs and lo < rng.maxs[-1]:
                kind = "unsorted" if lo < rng.mins[-1] else "overlapping"
                err.add(eline, ew, f"{kind} range: [{format_bytes(lo)}, {format_bytes(hi)}) "
                        f"starts before the previous range ends ({format_bytes(rng.maxs[-1])}, "
                        f"{rng.where[-1]})")
                continue
            rng.mins.append(lo)
            rng.maxs.append(hi)
            rng.backends.append(str(backend))
            rng.where.append(f"{err.path}:{eline}")
    return by_sel


def _selector_values(err: _Errors, e: dict, ew: str, sel: Selector) -> list[str | None]:
    """The values a rule lists for one selector ([None]: it does not restrict by it)."""
    v = e.get(sel.name)
    vals = [None] if v is None else [v] if not isinstance(v, list) or not sel.many else v
    if not vals:
        err.add(_line(e, sel.name), f"{ew}.{sel.name}", "must not be an empty list")
    for x in vals:
        if x is not None and x not in sel.allowed:
            err.add(_line(e, sel.name), f"{ew}.{sel.name}", f"unknown {sel.name} {x!r}; "
                    f"expected one of {list(sel.allowed)}")
    return vals


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def find_table_files(location: str | Path, system_class: str | None,
                     explicit: bool = False) -> list[Path]:
    """Table files at a path: the file itself, or a folder's .yaml/.yml files of system_class
    (all of them if None). `explicit` (the user named the folder): a folder with no table, or
    none of this class, is an error naming what it holds."""
    p = Path(location)
    if p.is_file():
        return [p]
    if p.exists() and not p.is_dir():
        raise TableError(f"{p}: not a regular file or folder (a tuning table is a YAML file)")
    if not p.is_dir():
        raise TableError(f"{p}: no such tuning table file or folder")
    files = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
    if explicit and not files:
        raise TableError(f"{p}: no tuning tables (*.yaml, *.yml) in this folder")
    out, classes = [], set()
    for f in files:
        cls = _class_of(f)
        classes.add(str(cls))
        if system_class is None or cls in (system_class, None):
            out.append(f)   # None: unreadable; load_table reports the error with its line
    if explicit and files and not out:
        raise TableError(f"{p}: no table for this machine's class {system_class!r}; the folder "
                         f"has tables of {sorted(classes)} (set MCR_SYSTEM_CLASS to use one)")
    return out


def _class_of(f: Path) -> str | None:
    try:
        head = yaml.safe_load(read_table_text(str(f))) or {}
    except (yaml.YAMLError, TableError):
        return None
    return (head.get("system") or {}).get("class") if isinstance(head, dict) else None


def _flow(v: Any) -> str:
    """A value as one line of YAML (flow style), safely quoted."""
    text = yaml.safe_dump(v, default_flow_style=True, width=1 << 30, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def dump(doc: dict[str, Any], comments: dict[tuple[int, str], list[str]] | None = None,
         header: tuple[str, ...] = ()) -> str:
    """A table document as YAML text: the one writer (the tuner writes through it).

    doc holds system, provenance, device and groups {size: {op: [entry, ...]}} as load_table
    reads them (Table.raw); entries are written as flow mappings with their fields in
    ENTRY_FIELDS order; comments[(size, op)] go above an op's entries, header at the top.
    dump(load_table(dump(doc)).raw) == dump(doc).
    """
    lines = [f"# {h}" for h in header]
    lines.append(f"schema_version: {SCHEMA_VERSION}")
    for sec in ("system", "provenance"):
        lines.append(f"{sec}:")
        lines += [f"  {k}: {_flow(v)}" for k, v in doc[sec].items()]
    lines.append(f"device: {_flow(doc['device'])}")
    lines.append("groups:")
    for raw in sorted(doc["groups"], key=lambda k: parse_label(_group_key(k))):
        size = _group_key(raw)
        lines.append(f"  {size}:")
        for op, entries in doc["groups"][raw].items():
            lines.append(f"    {op}:")
            lines += [f"      # {c}" for c in (comments or {}).get((size, op), [])]
            for e in entries:
                unknown = set(e) - ENTRY_KEYS
                if unknown:
                    raise TableError(f"dump: groups.{size}.{op}: unknown fields {sorted(unknown)}")
                lines.append("      - " + _flow({k: e[k] for k in ENTRY_FIELDS if k in e}))
    return "\n".join(lines) + "\n"


def _group_key(k: Any) -> int | str:
    """A group key as tables hold it: "4" (from a plain dict's str keys) -> 4; "2x2" kept."""
    return int(k) if isinstance(k, int) or str(k).isdigit() else str(k)


def load_tables(paths: list[Path], known_backends: Known) -> list[Table]:
    """Load several files (one layer of a TableSet)."""
    return [load_table(p, known_backends) for p in paths]
