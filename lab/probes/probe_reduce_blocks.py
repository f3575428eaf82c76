"""How fast sdma's reduce-scatter reduces the blocks that arrived (2 x N, fp32 and bf16), the way
it did before 2026-11-26 (torch.sum over dim 0, then div_ for AVG) and the way it does now
(torch.add for two blocks, torch.mean for AVG): GPU time per call by CUDA events, interleaved
rounds, one GPU, FSDP2's reduce-scatter sizes (224 MB small shape, 836 MB large shape, fp32).

    python3 -m lab.probes.probe_reduce_blocks
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from torch.distributed import ReduceOp

from mcr.backends.sdma.backend import _reduce_blocks


def _old(blocks: torch.Tensor, op: ReduceOp, out: torch.Tensor) -> None:
    torch.sum(blocks, dim=0, out=out)
    if op == ReduceOp.AVG:
        out.div_(blocks.shape[0])


def _time(fn: Callable[[], None], reps: int = 10) -> float:
    """ms per call, GPU time of `reps` calls back to back."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def main() -> None:
    """Print ms per call and the bandwidth over the one-pass floor (read 2N, write N)."""
    for dtype in (torch.float32, torch.bfloat16):
        for nbytes in (224 << 20, 836 << 20):
            n = nbytes // dtype.itemsize // 2
            blocks = torch.randn(2, n, device="cuda").to(dtype)
            out = torch.empty(n, device="cuda", dtype=dtype)
            floor = 3 * n * dtype.itemsize
            for op in (ReduceOp.SUM, ReduceOp.AVG):
                times: dict[str, list[float]] = {"old": [], "new": []}
                for _ in range(5):
                    times["old"].append(_time(lambda: _old(blocks, op, out)))
                    times["new"].append(_time(lambda: _reduce_blocks(blocks, op, out)))
                row = ", ".join(f"{k} {statistics.median(v):.3f} ms "
                                f"({floor / statistics.median(v) / 1e9:.2f} TB/s)"
                                for k, v in times.items())
                print(f"REDUCE {str(dtype)[6:]} {nbytes >> 20} MB {op}: {row}", flush=True)


if __name__ == "__main__":
    main()
