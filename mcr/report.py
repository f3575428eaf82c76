"""What mcr did, for log_summary: calls and bytes per op and library, fallbacks, calls that
bypassed mcr, and per-call times where timing is on."""

from __future__ import annotations

from typing import Any

from . import bypass
from .runtime import Runtime, system_class


def _human(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def rows(rt: Runtime) -> list[dict[str, Any]]:
    """One dict per (op, library) served (kind "served"; kind "part", with "of", for the calls
    a backend made to serve them: hier's intra- and inter-node parts), per table profile the
    calls were looked up under (kind "profile", with "profile"), per call that bypassed
    mcr (kind "bypass"), per (op, library, size bucket) timed (kind "timed", with timing on),
    and per line a backend has to say about how it ran (kind "note", op None: sdma's graph
    replays). Every row has kind, op and backend."""
    d = rt.dispatcher
    out: list[dict[str, Any]] = [
        {"kind": "served", "op": op, "backend": b, "count": calls, "bytes": nbytes}
        for (op, b), (calls, nbytes) in sorted(d.served().items())]
    out += [{"kind": "part", "op": op, "backend": b, "count": calls, "bytes": nbytes, "of": v}
            for v in d.vias() for (op, b), (calls, nbytes) in sorted(d.served(v).items())]
    out += [{"kind": "profile", "op": None, "backend": None, "profile": p, "count": calls,
             "bytes": nbytes} for p, (calls, nbytes) in sorted(d.profiles().items())]
    out += [{"kind": "bypass", "op": op, "backend": api, "count": calls, "bytes": nbytes}
            for (api, op), (calls, nbytes) in sorted(bypass.COUNTS.items())]
    out += [dict(r, kind="timed") for r in rt.logger.rows()]
    out += [{"kind": "note", "op": None, "backend": b.name, "text": line}
            for b in rt.backends.values() for line in b.summary_lines()]
    return out


def summary(rt: Runtime) -> str:
    """The rows as text for a person (rank 0's view; every rank makes the same calls)."""
    served = rt.dispatcher.served()
    lines = [f"mcr summary: {rt.world.size} ranks on {system_class(rt.cfg, rt.cuda)}; tables: "
             f"{rt.tables.describe(system_class(rt.cfg, rt.cuda))}",
             f"{'op':<16}{'library':<10}{'calls':>10}{'bytes':>12}"]
    total = 0
    for (op, b), (calls, nbytes) in sorted(served.items()):
        lines.append(f"{op:<16}{b:<10}{calls:>10}{_human(nbytes):>12}")
        total += calls
    for v in rt.dispatcher.vias():
        lines.append(f"  {v}'s parts (calls it made to serve the calls above):")
        for (op, b), (calls, nbytes) in sorted(rt.dispatcher.served(v).items()):
            lines.append(f"  {op:<16}{b:<8}{calls:>10}{_human(nbytes):>12}")
    profiles = rt.dispatcher.profiles()
    if set(profiles) - {"standalone"}:
        each = [f"{p} {calls} calls ({_human(nbytes)})"
                for p, (calls, nbytes) in sorted(profiles.items())]
        lines.append(f"table profile: {', '.join(each)} (MCR_PROFILE={rt.cfg.profile})")
    missed = sum(c for c, _ in bypass.COUNTS.values())
    if total + missed:
        lines.append(f"served by mcr: {total} of {total + missed} calls "
                     f"({100 * total / (total + missed):.1f}%)")
    for (api, op), (calls, nbytes) in sorted(bypass.COUNTS.items()):
        lines.append(f"bypassed mcr: {api}.{op}: {calls} calls, {_human(nbytes)} "
                     "(largest tensor per call)")
    for (source, name, reason), n in sorted(rt.dispatcher.fallbacks.items()):
        lines.append(f"fallback x{n}: {source} chose {name}: {reason}")
    for b in rt.backends.values():
        lines += b.summary_lines()
    if rt.logger.stats:
        lines.append("per-call times (MCR_LOG / configure(enabled=True)):")
        lines.append(rt.logger.summary())
    return "\n".join(lines)


def show(rt: Runtime) -> None:
    """Print the summary on rank 0 (every rank makes the same calls)."""
    if rt.launch.rank == 0:
        print(summary(rt), flush=True)


__all__ = ["rows", "show", "summary"]
