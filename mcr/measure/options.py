"""The measurement options every benchmark and the tuner share (OSU's -m/-i/-x/-c/-d plus mcr's),
and the sizes they name."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mcr.config import int_from
from mcr.units import parse_bytes


def _at_least(lo: int, option: str) -> Callable[[str], int]:
    """An argparse type: an integer of at least lo (the knobs' check, config.int_from)."""
    check = int_from(lo)

    def parse(text: str) -> int:
        try:
            return check(option, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def parser(title: str) -> argparse.ArgumentParser:
    """The common options (OSU's -m/-i/-x/-c/-d plus mcr's --backend and -t)."""
    ap = argparse.ArgumentParser(description=title)
    ap.add_argument("-m", "--message-size", default="4:16MiB",
                    help="MIN:MAX full-buffer bytes, units allowed (default 4:16MiB)")
    ap.add_argument("-f", "--factor", type=_at_least(2, "--factor"), default=2,
                    help="size step factor (default 2)")
    ap.add_argument("-i", "--iterations", type=_at_least(1, "--iterations"), default=100)
    ap.add_argument("-x", "--warmup", type=_at_least(0, "--warmup"), default=10)
    ap.add_argument("-d", "--device", choices=["cpu", "cuda"], default=None,
                    help="cpu or cuda (default: cuda if available)")
    ap.add_argument("-c", "--validate", action="store_true", help="check results")
    ap.add_argument("-t", "--dtype", default="float32")
    ap.add_argument("--backend", default="auto",
                    help="comma list of auto and/or backend names, measured side by side")
    ap.add_argument("--csv", default=None, help="append rows to this CSV (rank 0)")
    ap.add_argument("--max-seconds", type=float, default=2.0,
                    help="cap on timed seconds per size and backend (iterations shrink)")
    ap.add_argument("--batch", type=_at_least(1, "--batch"), default=1,
                    help="calls per timed sample, back to back (1: OSU latency, each call "
                         "synchronized; >1: nccl-tests style throughput per call)")
    ap.add_argument("--graph", action="store_true",
                    help="capture each sample's --batch calls in one CUDA graph and time its "
                         "replays (the cost per call inside a graph-captured training step)")
    ap.add_argument("--symm", default=None, metavar="BACKEND",
                    help="allocate outputs with mcr.comm.symmetric_empty(backend=BACKEND)")
    ap.add_argument("--calls", choices=["sync", "async"], default="sync",
                    help="how each call is made: sync, or async_op=True then wait()")
    ap.add_argument("--interleave", choices=["sample", "round"], default="sample",
                    help="sample: within a round the backends take turns sample by sample, "
                         "each after each other equally often, so a slow spell of the machine "
                         "hits them alike and 'x first' is the median of the per-sample "
                         "ratios; round: each backend runs its samples in one block per round")
    ap.add_argument("--lead-in", type=_at_least(0, "--lead-in"), default=1, metavar="N",
                    help="with --interleave sample: N untimed calls (each synchronized) of a "
                         "backend right before each of its samples, so that what the previous "
                         "backend's call left running is not timed (Gloo's threads added 20-40 "
                         "us to the next call on a 2-core VM); 0: none")
    ap.add_argument("--rounds", type=_at_least(1, "--rounds"), default=1,
                    help="measure the backends of a size in this many rounds in rotated order "
                         "(A B, B A, ...), each with up to -i samples and a share of "
                         "--max-seconds; 'x first' is the first backend's time over this one's, "
                         "the median of per-sample ratios (--interleave sample) or of per-round "
                         "ones (> 1: faster than the first)")
    return ap


def sizes(spec: str, factor: int, unit: int) -> list[int]:
    """Byte sizes from MIN:MAX, multiplied by factor, each rounded up to a multiple of unit."""
    lo, _, hi = spec.partition(":")
    lo_b, hi_b = int(parse_bytes(lo)), int(parse_bytes(hi or lo))
    out, s = [], max(lo_b, 1)
    while s <= hi_b:
        out.append(-(-s // unit) * unit)
        s *= factor
    return sorted(set(out))
