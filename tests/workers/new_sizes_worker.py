"""A job whose all-reduce sizes change every call, across a table boundary, both ways: each new
size decides as the table says (a kind's new size may reuse the decision its last size took
only where the dispatcher would take it again), and every result is the sum.

Then all-to-alls whose sizes change every call, with and without split sizes: each served by
the rule for its kind (`splits: uneven` rules for calls with split sizes only), every output
what its peers sent.

Run with MCR_TUNING_TABLE=tests/data/ar_boundary_cpu.yaml (all-reduce on Gloo below 1 KiB, two
Gloo lanes from it; all-to-all on Gloo, with split sizes on MPI); prints `NEW SIZES OK <calls>`
on every rank.
"""

from __future__ import annotations

import os

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


def data(q: int, n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32) + 1000 * q


uneven_lib = "mpi" if "OMPI_COMM_WORLD_SIZE" in os.environ else "gloo"   # MPI runs or not
assert dist.which_backend("all_to_all", 4096, torch.float32, even=False) == uneven_lib
assert dist.which_backend("all_to_all", 4096, torch.float32) == "gloo"
calls = 0
for m in range(3, 60):
    # counts[s][r]: what rank s sends rank r; uneven, and new sizes as m grows.
    counts = [[m if s == r else m // 2 + s for r in range(ws)] for s in range(ws)]
    sends, recvs = counts[rank], [counts[q][rank] for q in range(ws)]
    for uneven in (True, False):
        lib = uneven_lib if uneven else "gloo"
        before = served().get(("all_to_all", lib), [0, 0])[0]
        if uneven:
            out = torch.empty(sum(recvs))
            dist.all_to_all_single(out, data(rank, sum(sends)), recvs, sends)
            ref = torch.cat([data(q, sum(counts[q]))[sum(counts[q][:rank]):][:recvs[q]]
                             for q in range(ws)])
        else:
            out = torch.empty(m * ws)
            dist.all_to_all_single(out, data(rank, m * ws))
            ref = torch.cat([data(q, m * ws)[rank * m:(rank + 1) * m] for q in range(ws)])
        assert torch.equal(out, ref), f"all_to_all, {m}, uneven={uneven}: wrong output"
        after = served().get(("all_to_all", lib), [0, 0])[0]
        assert after == before + 1, f"all_to_all {m}, uneven={uneven}: not served by {lib}"
        calls += 1
print(f"rank {rank}: NEW SIZES OK {len(sizes) + calls}", flush=True)
dist.destroy_process_group()
