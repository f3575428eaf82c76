"""Tuning tables in memory: the rule model (selectors, ranges, one Table per file) and TableSet,
the O(log n) lookup the dispatcher asks, with its fingerprint.

A table names the system it was measured on, its provenance, the tensor device its rules are
for, and per group size, per op, an ordered list of half-open byte ranges `[min, max)` each
naming a backend, optionally restricted to some dtypes, to one profile, to calls whose output
lies in symmetric memory (`buffer: symmetric`) and to all-to-alls with split sizes
(`splits: uneven`). Files are read and written by mcr.table_file. See docs/tables.md.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TableError
from .layout import label, parse_label
from .ops import CallKey, dtype_name

SCHEMA_VERSION = 1
PROFILES = ("standalone", "overlap")
DEVICES = ("cpu", "cuda")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32",
          "int64", "bool", "complex64", "complex128")
BUFFERS = ("symmetric",)   # a rule's `buffer:`; rules without one serve every call
SPLITS = ("uneven",)       # a rule's `splits:` (all_to_all only): calls with split sizes


@dataclass(frozen=True)
class Selector:
    """An optional field of a rule that restricts it to some calls (`dtype: bfloat16`).

    SELECTORS is the one list of them: validation, lookup precedence (earlier = more specific,
    tried first) and the writer's field order all follow it. Adding a field is a row here
    (and, if the call key lacks what it selects on, a CallKey field)."""

    name: str
    allowed: tuple[str, ...]
    of_key: Callable[[CallKey], str | None]   # the call's value for it
    many: bool = False                          # a rule may list several values


SELECTORS = (
    Selector("buffer", BUFFERS, lambda k: k.buffer),
    Selector("splits", SPLITS, lambda k: None if k.even else "uneven"),
    Selector("dtype", DTYPES, lambda k: dtype_name(k.dtype), many=True),
    Selector("profile", PROFILES, lambda k: k.profile),
)
ENTRY_FIELDS = ("min", "max", "backend", *(sel.name for sel in SELECTORS))
ENTRY_KEYS = set(ENTRY_FIELDS)


@dataclass
class Ranges:
    """Sorted, non-overlapping ranges of one op and one value (or none) per selector."""

    mins: list[float] = field(default_factory=list)
    maxs: list[float] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)

    def find(self, nbytes: int) -> int | None:
        """Index of the range holding nbytes, or None (a gap)."""
        i = bisect.bisect_right(self.mins, nbytes) - 1
        if i >= 0 and nbytes < self.maxs[i]:
            return i
        return None


@dataclass
class Table:
    """One loaded file."""

    path: str
    system: dict[str, Any]
    provenance: dict[str, Any]
    device: str
    # (group, op) -> {(a value or None per SELECTORS entry): Ranges}; group is the table's key
    # for it: its size on one node (4), or nodes x ranks per node ("2x2", mcr.layout.label)
    rules: dict[tuple[int | str, str], dict[tuple[str | None, ...], Ranges]]
    raw: dict[str, Any]

    @property
    def ranks(self) -> int:
        """How many ranks the job that measured it had (system.ranks; else its largest group)."""
        r = self.system.get("ranks")
        return r if isinstance(r, int) else max((parse_label(g)[0] for g, _ in self.rules),
                                                default=0)

    @property
    def nodes(self) -> int:
        """How many nodes the job that measured it spanned (system.nodes; else 1)."""
        n = self.system.get("nodes")
        return n if isinstance(n, int) and n >= 1 else 1


class TableSet:
    """All tables in force, indexed by (device, group, op); the dispatcher asks it. A group is
    its size on one node or nodes x ranks per node (Table.rules).

    Tables come in layers, first wins: MCR_TUNING_TABLE alone, else the user's folder (what
    mcr-tune writes) before the tables shipped with mcr. Within a layer, where several files
    define the same device, group and op (the 2-rank table and the 4-rank table's 2-rank
    sub-group rules), the file measured in a job of the size nearest `world` wins, then one
    measured over as many nodes as this job's; two files of the same job size and nodes
    defining it are an error."""

    def __init__(self, tables: list[Table] | list[list[Table]], world: int | None = None,
                 nodes: int = 1) -> None:
        layers = tables if tables and isinstance(tables[0], list) else [tables]
        self.layers, self.world, self.nodes = layers, world, nodes
        self._index: dict[tuple[str, int | str, str], tuple[Table, dict]] = {}
        self.shadowed: list[tuple[Table, int | str, str]] = []   # (table, group, op) not in force
        for layer in layers:
            mine: set[tuple[str, int | str, str]] = set()
            near = sorted(layer, key=lambda t: (abs(t.ranks - (world or t.ranks)),
                                                t.nodes != nodes, t.ranks))
            for t in near:
                for (gsize, op), sel in t.rules.items():
                    k = (t.device, gsize, op)
                    prev = self._index.get(k)
                    if prev is not None and k in mine and prev[0].ranks == t.ranks \
                            and prev[0].nodes == t.nodes:
                        raise TableError(f"{t.path}: device {t.device}, group {gsize}, op "
                                         f"{op} is also defined in {prev[0].path} (both "
                                         f"measured with {t.ranks} ranks on {t.nodes} "
                                         "node(s); keep one)")
                    if prev is not None:
                        self.shadowed.append((t, gsize, op))
                        continue
                    self._index[k] = (t, sel)
                    mine.add(k)
        used = {id(t) for t, _ in self._index.values()}
        self.tables = [t for layer in layers for t in layer if id(t) in used]
        # Ops with a profile-specific rule somewhere: only their calls need the caller's stream
        # looked at under MCR_PROFILE=auto (0.2-0.3 us a call on the dispatch path).
        at = [s_.name for s_ in SELECTORS].index("profile")
        self.profiled_ops = frozenset(op for (_, _, op), (_, sel) in self._index.items()
                                      if any(k[at] is not None for k in sel))

    def before(self, table: Table) -> TableSet:
        """This set with `table` as a first layer (its rules win wherever it has some)."""
        return TableSet([[table], *self.layers], self.world, self.nodes)

    def lookup(self, key: CallKey) -> tuple[str, str] | None:
        """(backend, 'file:line') of the rule for this call, or None where no rule covers it.
        The most specific rule wins, in SELECTORS order: a rule naming the call's value of the
        first selector beats one that does not, and so on."""
        hit = self._index.get((key.device, label(key.group_size, key.nodes), key.op))
        if hit is None:
            return None
        sel = hit[1]
        tries = []
        for s_ in SELECTORS:
            v = s_.of_key(key)
            tries.append((v, None) if v in s_.allowed else (None,))
        for sel_key in itertools.product(*tries):
            rng = sel.get(sel_key)
            if rng is not None:
                i = rng.find(key.nbytes)
                if i is not None:
                    return rng.backends[i], rng.where[i]
        return None

    def names(self) -> str:
        """The files in force by name only (the start-up line); describe() gives paths."""
        return ", ".join(Path(t.path).name for t in self.tables) or "none"

    def backends_named(self, device: str) -> set[str]:
        """Every library the rules in force name for tensors on `device`."""
        return {b for (d, _, _), (_, sel) in self._index.items() if d == device
                for rng in sel.values() for b in rng.backends}

    def covers(self, device: str, group: int | str | None) -> bool:
        """Whether any table has rules for this device and group (Table.rules' key)."""
        return any(d == device and g == group for d, g, _ in self._index)

    def fingerprint(self) -> str:
        """Short hash of every rule in force; equal on all ranks or init refuses to start."""
        body = json.dumps(sorted(json.dumps([d, g, op, t.raw["groups"][str(g)][op]], sort_keys=True,
                                            default=str)
                                 for (d, g, op), (t, _) in self._index.items()))
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def describe(self, machine_class: str | None = None) -> str:
        """One line naming the files in force, the device and group sizes each covers, and the
        machine class each was measured on where it is not `machine_class`."""
        parts = []
        for t in self.tables:
            sizes = sorted({g for g, _ in t.rules}, key=parse_label)
            other = t.system.get("class")
            note = f", measured on {other}" if machine_class and other != machine_class else ""
            parts.append(f"{t.path} ({t.device}, groups {', '.join(map(str, sizes))}{note})")
        return "; ".join(parts) or "(no tuning table)"

    def foreign(self, machine_class: str) -> list[Table]:
        """Tables measured on another class of machine than this one."""
        return [t for t in self.tables if t.system.get("class") != machine_class]
