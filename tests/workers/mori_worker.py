"""Interface test of the sdma ROCm engine against the mori STAND-IN (tests/standins/mori).

Real processes, real data through Gloo; checks mcr's calls into mori's API, not mori itself.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "standins"))
os.environ.pop("MORI_ENABLE_SDMA", None)

import torch  # noqa: E402
from common import gen, same  # noqa: E402
from mori import ccl, shmem  # noqa: E402

import mcr.comm as dist  # noqa: E402
from mcr import runtime  # noqa: E402
from mcr.backends.sdma.backend import SdmaBackend  # noqa: E402
from mcr.backends.sdma.mori_engine import MoriGroup  # noqa: E402
from mcr.ops import CallKey  # noqa: E402

dist.init_distributed(verbose=False)
rt = runtime.get()
n, me = dist.get_world_size(), dist.get_rank()
pg = rt.world.handles["gloo"]
eng = MoriGroup(pg, 1 << 20)
assert shmem.STATE["sdma_env_at_init"] == "1", "MORI_ENABLE_SDMA was not set before shmem init"
assert shmem.shmem_npes() == n and shmem.shmem_mype() == me
checks = 0
for dtype in (torch.bfloat16, torch.float32, torch.int32, torch.float16):
    for numel in (1, 3, 1000, 65537):
        x = gen(me, numel, dtype, numel)
        out = torch.zeros(numel * n, dtype=dtype)
        eng.all_gather(out, x)
        same(f"mori all_gather {dtype} {numel}", out,
             torch.cat([gen(r, numel, dtype, numel) for r in range(n)]))
        checks += 1
        per = numel * 2  # even element counts: 32-bit words for 16-bit types
        x = gen(me, per * n, dtype, per + 1)
        out = torch.zeros_like(x)
        eng.all_to_all(out, x)
        want = torch.cat([gen(r, per * n, dtype, per + 1)[me * per:(me + 1) * per]
                          for r in range(n)])
        same(f"mori all_to_all {dtype} {per}", out, want)
        checks += 1
assert all(isinstance(c[2], int) for c in ccl.CALLS), "stream handles must be ints"
# What the ROCm engine declines, by key only (so every rank declines alike).
be = SdmaBackend(rt.cfg, "mori")
key = CallKey("broadcast", n, 4096, torch.bfloat16, "cuda", None, "standalone")
assert "not broadcast" in be.decline_key(key)
key = CallKey("all_to_all", n, 6 * n, torch.bfloat16, "cuda", None, "standalone")
assert "32-bit" in be.decline_key(key)
key = CallKey("all_gather", n, 6 * n, torch.bfloat16, "cuda", None, "standalone")
assert be.decline_key(key) is None
print(f"rank {me}: OK {checks} checks against the mori stand-in", flush=True)
dist.destroy_process_group()
