"""Comms logger: per op, backend and size bucket, count, bytes, time, algbw and busbw."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .ops import bus_factor
from .units import format_bytes
from .work import ON_COMPLETE, Work


def _bucket(nbytes: int) -> int:
    return 0 if nbytes <= 0 else 1 << (nbytes - 1).bit_length()


class CommsLogger:
    """Collects completed Works when enabled (MCR_LOG=1 or configure(enabled=True))."""

    def __init__(self) -> None:
        self.enabled = False
        self.verbose = False
        self.prof_ops: set[str] | None = None
        self.stats: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])

    def configure(self, enabled: bool | None = None, verbose: bool | None = None,
                  prof_ops: list[str] | None = None, prof_all: bool | None = None) -> None:
        """Turn logging on or off; prof_ops limits it to some ops (prof_all=True: all)."""
        if enabled is not None:
            self.enabled = enabled
        if verbose is not None:
            self.verbose = verbose
        if prof_all:
            self.prof_ops = None
        elif prof_ops is not None:
            self.prof_ops = set(prof_ops)
        if self.enabled and self.record not in ON_COMPLETE:
            ON_COMPLETE.append(self.record)
        elif not self.enabled and self.record in ON_COMPLETE:
            ON_COMPLETE.remove(self.record)

    def record(self, work: Work, seconds: float) -> None:
        """Add one completed op."""
        if self.prof_ops is not None and work.op not in self.prof_ops:
            return
        s = self.stats[(work.op, work.backend, _bucket(work.nbytes))]
        s[0] += 1
        s[1] += work.nbytes
        s[2] += seconds
        s[3] = work.group_size
        if self.verbose:
            print(f"mcr: {work.op} {work.backend} {work.nbytes} B {seconds * 1e6:.1f} us",
                  flush=True)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per (op, backend, size bucket), sorted."""
        out = []
        for (op, backend, bucket), (count, nbytes, secs, n) in sorted(self.stats.items()):
            algbw = nbytes / secs / 1e9 if secs > 0 else 0.0
            out.append({"op": op, "backend": backend, "size_bucket": bucket, "count": int(count),
                        "bytes": int(nbytes), "total_ms": secs * 1e3,
                        "avg_us": secs / count * 1e6 if count else 0.0, "algbw_gbs": algbw,
                        "busbw_gbs": algbw * bus_factor(op, int(n))})
        return out

    def summary(self) -> str:
        """The rows as an aligned text table."""
        head = f"{'op':<16}{'backend':<9}{'size <=':>10}{'count':>8}{'total MB':>11}" \
               f"{'avg us':>11}{'algbw GB/s':>12}{'busbw GB/s':>12}"
        lines = [head, "-" * len(head)]
        for r in self.rows():
            lines.append(f"{r['op']:<16}{r['backend']:<9}{format_bytes(r['size_bucket']):>10}"
                         f"{r['count']:>8}{r['bytes'] / 1e6:>11.3f}{r['avg_us']:>11.1f}"
                         f"{r['algbw_gbs']:>12.3f}{r['busbw_gbs']:>12.3f}")
        return "\n".join(lines)
