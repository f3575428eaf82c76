"""Which call of tests/test_symm_ll_gpu.py's sequence hangs, and with which ops: one mode per
process (a trapped kernel ends the CUDA context). Modes: sync-each (the test's world-2
sequence, a device sync after every call, its index printed first), old-only / av-only (random
sequences of those ops, no sync), nosleep (the test's sequence without the GPU sleeps).
Run: python lab/probes/ll_streams_debug.py MODE"""

import random
import sys

import torch

sys.path.insert(0, "tests")
import test_symm_ll_gpu as T  # noqa: E402

from mcr.backends.symm import ll as LL  # noqa: E402

mode = sys.argv[1]
world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
bufs = [torch.zeros(LL.region_bytes(T.LL_BYTES, world), dtype=torch.uint8, device="cuda")
        for _ in range(world)]
ranks = [LL.LLGroup(bufs[r], 0, [b.data_ptr() for b in bufs], r, T.LL_BYTES, timeout_s=4.0)
         for r in range(world)]
print("grid", ranks[0].uneven_grid, "cap", ranks[0].cap, flush=True)
rng = random.Random(world * 10)
calls = [T._call(rng, world) for _ in range(80)]
if mode in ("old-only", "av-only"):
    keep = [c for c in calls if (c[0] == "uneven") == (mode == "av-only")]
    calls = keep
streams = [torch.cuda.Stream() for _ in range(world)]
if "warm" in sys.argv:
    torch.cuda._sleep(1)     # loaded before any kernel spins (lazy loading waits for them)
torch.cuda.synchronize()
for k, (op, args, _, _) in enumerate(calls):
    if mode == "sync-each":
        print("call", k, op, [a[3] if op != "uneven" else (a[2], a[3]) for a in args][:2],
              flush=True)
    for r in range(world):
        with torch.cuda.stream(streams[r]):
            if mode == "sync-each" and rng.random() < 0.2:
                torch.cuda._sleep(rng.randint(10_000, 2_000_000))
            if op == "uneven":
                ranks[r].issue_uneven(*args[r])
            else:
                ranks[r].issue(*args[r])
    if mode == "sync-each":
        torch.cuda.synchronize()
torch.cuda.synchronize()
bad = [(k, op, r) for k, (op, _, outs, want) in enumerate(calls) for r in range(world)
       if not torch.equal(outs[r].view(torch.uint8), want[r].view(torch.uint8))]
print(mode, "calls", len(calls), "wrong", bad[:10], flush=True)
