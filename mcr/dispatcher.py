"""The one place that decides which backend runs a call.

Order: per-call `backend=` (strict: an error if it cannot serve) > MCR_BACKEND > tuning table >
default (nccl for GPU tensors, gloo for CPU) > any other backend that can serve. A choice that
declines falls to the next; each (choice, reason) is counted and logged once. Decisions are cached
per key, so the hot path is one dict lookup.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from .backends import Backend, canonical, default_backend
from .errors import BackendUnavailable
from .groups import Group
from .layout import label
from .ops import CallKey, dtype_name, redop_name
from .tables import TableSet
from .units import format_bytes

log = logging.getLogger("mcr")
_CACHE_MAX = 1 << 16


def describe_key(key: CallKey) -> str:
    """`all_reduce of 4KiB float32 on cpu, group of 2` (`of 100 B` where not whole KiB)."""
    red = f" ({redop_name(key.redop)})" if key.redop is not None else ""
    buf = " into symmetric memory" if key.buffer != "plain" else ""
    cap = " inside CUDA graph capture" if key.graph else ""
    size = format_bytes(key.nbytes)
    size += " B" if size.isdigit() else ""
    size += " (uneven splits: group size x largest block)" if not key.even else ""
    return (f"{key.op}{red} of {size} {dtype_name(key.dtype)} on "
            f"{key.device}{buf}{cap}, group of {key.group_size}{_across(key)}")


def _across(key: CallKey) -> str:
    """` across 2 nodes of 2` (nothing on one node) for messages."""
    if key.nodes == 1:
        return ""
    return f" across {key.nodes} nodes of {key.group_size // key.nodes}" if key.nodes \
        else " spread unevenly over nodes"


class Dispatcher:
    """Chooses a backend per call from the rules above."""

    def __init__(self, backends: dict[str, Backend], tables: TableSet,
                 env_backend: str | None,
                 uncovered: Callable[[CallKey, str], None] | None = None) -> None:
        self.backends = backends
        self.tables = tables
        # Told once per (device, group) that no table covers, with the default in use.
        self._uncovered = uncovered
        self._told: set[tuple[str, int | str]] = set()
        self.env_backend = canonical(env_backend) if env_backend else None
        self.fallbacks: Counter[tuple[str, str, str]] = Counter()
        # (op, backend, via, profile) -> [calls, bytes] of the decisions dropped from the cache;
        # via is "" for the program's calls, else the backend whose own groups made them (hier's
        # parts); profile the table profile they were looked up under
        self._spilled: dict[tuple[str, str, str, str], list[int]] = {}
        self._via: dict[int, str] = {}   # group id -> via, for groups a backend built
        self._cache: dict[tuple, tuple[Backend, list[int]]] = {}

    def entry(self, key: CallKey, group: Group, forced: str | None = None
              ) -> tuple[Backend, list[int]]:
        """(backend, [calls, bytes]) for this call, cached per key, group and forced name; the
        caller counts the call in the list."""
        ck = (key, group.id, forced)
        hit = self._cache.get(ck)
        if hit is None:
            if len(self._cache) >= _CACHE_MAX:
                self._spill()
            hit = self._cache[ck] = (self._decide(key, group, forced), [0, 0])
            if group.tag:
                self._via[group.id] = group.tag.split(".")[0]
        return hit

    def keeps(self, key: CallKey, group: Group, forced: str | None, b: Backend) -> bool:
        """Whether this call would get b (which served its kind at another size): b heads
        its candidates (forced, MCR_BACKEND, the table's rule, the default) and serves it.
        The caller counts the call with that size's."""
        if forced is None and next(self._candidates(key, group))[0] != b.name:
            return False
        return b.decline(key, group) is None

    def choose(self, key: CallKey, group: Group, forced: str | None = None) -> Backend:
        """Backend for this call (cached); counts the call."""
        b, n = self.entry(key, group, forced)
        n[0] += 1
        n[1] += key.nbytes if key.nbytes > 0 else 0
        return b

    def set_tables(self, tables: TableSet) -> None:
        """Decide from these tables from now on (every rank at the same point)."""
        self._spill()
        self.tables = tables

    def set_env_backend(self, name: str | None) -> None:
        """Force every call to `name` from now on, as MCR_BACKEND does (None: no forcing)."""
        self._spill()
        self.env_backend = canonical(name) if name else None

    def served(self, via: str = "") -> dict[tuple[str, str], list[int]]:
        """(op, backend) -> [calls, bytes] served since init: the program's calls, or (via a
        backend's name) the calls that backend made to serve them (hier's parts)."""
        return self._sum(lambda op, b, v, p: (op, b) if v == via else None)

    def profiles(self) -> dict[str, list[int]]:
        """Table profile -> [calls, bytes] of the program's calls looked up under it."""
        return self._sum(lambda op, b, v, p: p if v == "" else None)

    def vias(self) -> list[str]:
        """The backends that made calls of their own (each call's parts)."""
        return sorted({v for (_, _, v, _) in self._counts()} - {""})

    def _sum(self, by: Callable[[str, str, str, str], Any]) -> dict[Any, list[int]]:
        out: dict[Any, list[int]] = {}
        for k, (calls, nbytes) in self._counts().items():
            g = by(*k)
            if g is not None:
                row = out.setdefault(g, [0, 0])
                row[0] += calls
                row[1] += nbytes
        return out

    def _counts(self) -> dict[tuple[str, str, str, str], list[int]]:
        out = {k: list(v) for k, v in self._spilled.items()}
        for (key, gid, _), (b, (calls, nbytes)) in self._cache.items():
            row = out.setdefault((key.op, b.name, self._via.get(gid, ""), key.profile), [0, 0])
            row[0] += calls
            row[1] += nbytes
        return out

    def _spill(self) -> None:
        self._spilled = self._counts()
        self._cache.clear()

    def _decide(self, key: CallKey, group: Group, forced: str | None) -> Backend:
        if forced is not None:
            b = self._get(forced, "backend=")
            reason = b.decline(key, group)
            if reason:
                raise BackendUnavailable(f"backend {forced!r} (forced for this call) cannot "
                                         f"serve {describe_key(key)}: {reason}")
            return b
        reasons = []
        for name, source in self._candidates(key, group):
            b = self._get(name, source)
            reason = b.decline(key, group)
            if reason is None:
                return b
            reasons.append(f"{name} ({source}): {reason}")
            if source != "fallback":
                self._count_fallback(source, name, reason)
        raise BackendUnavailable(f"no backend can serve {describe_key(key)}:\n  "
                                 + "\n  ".join(reasons))

    def _candidates(self, key: CallKey, group: Group) -> Iterator[tuple[str, str]]:
        """(backend, source) in the order an unforced call tries them: MCR_BACKEND, the
        table's rule, the default, then every backend."""
        if self.env_backend:
            yield self.env_backend, "MCR_BACKEND"
        hit = None
        if key.nbytes >= 0:  # negative: no size that every rank shares, so no table rule
            hit = self.tables.lookup(key)
        if hit is not None:
            yield canonical(hit[0]), f"table {hit[1]}"
        default = default_backend(key.device, group.default_gpu)
        shape = label(key.group_size, key.nodes)
        # A group of one has no peers, so nothing to tune: every library only copies.
        if hit is None and self._uncovered and key.nbytes >= 0 and shape is not None \
                and key.group_size > 1 and (key.device, shape) not in self._told \
                and not self.tables.covers(key.device, shape):
            self._told.add((key.device, shape))
            self._uncovered(key, default)
        yield default, "default"
        for n in self.backends:
            yield n, "fallback"

    def _get(self, name: str, source: str) -> Backend:
        try:
            return self.backends[canonical(name)]
        except ValueError as e:
            raise BackendUnavailable(f"{source}: {e}") from None

    def _count_fallback(self, source: str, name: str, reason: str) -> None:
        k = (source.split(" ")[0], name, reason)
        self.fallbacks[k] += 1
        if self.fallbacks[k] == 1:
            log.info("mcr: %s chose %s but it declined (%s); falling back", source, name, reason)
