"""Uneven all_to_all_single on a one-node group once its signature board is open: the split
sizes go through the board's shared memory (checks.uneven_splits). Fifty calls whose splits
change every call give the reference output; a late rank's peers wait in the split exchange
(their stall watch says so); splits that disagree are a MismatchError on every rank. Prints
`rank R: UNEVEN OK <exchanges through the board>`."""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import torch_env_from_mpi  # noqa: E402

torch_env_from_mpi()
import mcr.comm as dist  # noqa: E402
from mcr import runtime  # noqa: E402
from mcr.errors import MismatchError  # noqa: E402

dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
# A group whose first call is an uneven all-to-all (as on GPUs, whose calls have no guard to
# open a board): the split exchange opens the board itself rather than going through Gloo.
sub = dist.new_group(list(range(n)))
assert sub.board is None, sub.board
inp = torch.cat([torch.full((p + 1,), float(100 * r + p)) for p in range(n)])
out = torch.empty(n * (r + 1))
dist.all_to_all_single(out, inp, [r + 1] * n, [p + 1 for p in range(n)], group=sub)
assert torch.equal(out, torch.cat([torch.full((r + 1,), float(100 * p + r)) for p in range(n)]))
assert sub.board and sub.board.exchanges == 1, sub.board
dist.all_reduce(torch.ones(4))              # the group's first guarded call opens its board
for it in range(50):
    send = [(r + p + it) % 3 + 1 for p in range(n)]     # rank r sends peer p (r + p + it) % 3 + 1
    recv = [(p + r + it) % 3 + 1 for p in range(n)]
    inp = torch.cat([torch.full((send[p],), float(100 * r + p)) for p in range(n)])
    out = torch.empty(sum(recv))
    dist.all_to_all_single(out, inp, recv, send)
    want = torch.cat([torch.full((recv[p],), float(100 * p + r)) for p in range(n)])
    assert torch.equal(out, want), (it, out, want)
board = runtime.get().world.board
assert board and board.exchanges == 50, board and board.exchanges
# Rank 0 comes late to an uneven call: the others' stall watch (MCR_STALL_S) names the split
# exchange they wait in, not the call before it.
if r == 0:
    time.sleep(float(os.environ.get("MCR_STALL_S", "0")) * 2.5)
dist.all_to_all_single(torch.empty(n), torch.ones(n), [1] * n, [1] * n)
bad = [1] * n
if r == 0:
    bad[1] = 2
try:
    dist.all_to_all_single(torch.empty(n), torch.ones(sum(bad)), [1] * n, bad)
    raise AssertionError("no MismatchError")
except MismatchError as e:
    assert "rank 0 sends 2 elements to rank 1, which expects 1" in str(e), e
print(f"rank {r}: UNEVEN OK {board.exchanges}", flush=True)
dist.destroy_process_group()
