"""Host cost of the Python pieces on symm's replay path, one at a time (one process, one GPU).

    python3 lab/probes/probe_host_pieces.py
"""

from __future__ import annotations

import statistics
import time
from collections import OrderedDict
from collections.abc import Callable

import torch

from mcr.streams import capturing, current_stream_id


def per_call_ns(fn: Callable[[], object], n: int = 20000, rounds: int = 7) -> float:
    """Median over rounds of ns per call of fn in a loop (the loop's own cost subtracted)."""
    def loop(f: Callable[[], object]) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f()
        return (time.perf_counter_ns() - t0) / n
    empty = statistics.median(loop(lambda: None) for _ in range(rounds))
    return statistics.median(loop(fn) for _ in range(rounds)) - empty


def main() -> None:
    """Print ns per call of each piece."""
    t = torch.ones(8, dtype=torch.bfloat16, device="cuda")
    key = (t.data_ptr(), t.shape, t.dtype, False)
    od: OrderedDict = OrderedDict({key: 1})
    d = {3: 1}
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g.capture_begin()
        t.add_(0)
        g.capture_end()
    torch.cuda.synchronize()
    pieces = {
        "current_stream_id(0)": lambda: current_stream_id(0),
        "capturing()": capturing,
        "t.data_ptr()": t.data_ptr,
        "t.shape": lambda: t.shape,
        "t.storage_offset()": t.storage_offset,
        "key tuple (ptr, shape, dtype, avg)": lambda: (t.data_ptr(), t.shape, t.dtype, False),
        "OrderedDict.get(key)": lambda: od.get(key),
        "OrderedDict.move_to_end(key)": lambda: od.move_to_end(key),
        "dict.get(int)": lambda: d.get(3),
        "CUDAGraph.replay() (enqueue)": g.replay,
    }
    for name, fn in pieces.items():
        n = 2000 if "replay" in name else 20000
        print(f"{name:<40} {per_call_ns(fn, n):8.0f} ns", flush=True)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
