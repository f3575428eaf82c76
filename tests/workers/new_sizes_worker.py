"""A job whose all-reduce sizes change every call, across a table boundary, both ways: each new
size decides as the table says (a kind's new size may reuse the decision its last size took
only where the dispatcher would take it again), and every result is the sum.

Run with MCR_TUNING_TABLE=tests/data/ar_boundary_cpu.yaml (Gloo below 1 KiB, two Gloo lanes
from it); prints `NEW SIZES OK <calls>` on every rank.
"""

from __future__ import annotations

import torch

import mcr.comm as dist
from mcr import runtime

dist.init_distributed(verbose=False)
ws, rank = dist.get_world_size(), dist.get_rank()
served = runtime.get().dispatcher.served
# Up across 1 KiB on even element counts, then down across it on odd ones: every size new.
sizes = list(range(180, 330, 2)) + list(range(329, 179, -2))
want = {"gloo": 0, "gloo_lanes2": 0}
for n in sizes:
    before = {b: served().get(("all_reduce", b), [0, 0])[0] for b in want}
    x = torch.arange(n, dtype=torch.float32) + rank
    dist.all_reduce(x)
    ref = sum(torch.arange(n, dtype=torch.float32) + r for r in range(ws))
    assert torch.equal(x, ref), f"{n} elements: wrong sum"
    lib = "gloo" if 4 * n < 1024 else "gloo_lanes2"
    after = {b: served().get(("all_reduce", b), [0, 0])[0] for b in want}
    got = [b for b in want if after[b] != before[b]]
    assert got == [lib], f"{n} elements ({4 * n} B): served by {got}, the table says {lib}"
    want[lib] += 1
assert all(want.values()), want
print(f"rank {rank}: NEW SIZES OK {len(sizes)}", flush=True)
dist.destroy_process_group()
