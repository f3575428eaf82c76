"""symm's low-latency kernels (ll.cu) run for real on one GPU, a group's ranks as concurrent
streams of one process: each rank has its own receive regions and call numbers in device
memory, and its peers' regions are plain pointers on the same GPU. Random sequences of every op
(all-reduce of bf16/fp32 by sum and avg, all-gather, reduce-scatter, broadcast from changing
roots, equal-split all-to-all and all-to-all with split sizes, empty blocks included), ranks
drifting apart by random GPU sleeps, every result compared with torch's. What it cannot show:
the ordering of NVLink writes between GPUs (one GPU's memory is coherent); the 2+ GPU workers
cover that."""

from __future__ import annotations

import random

import pytest
import torch

from mcr.backends.symm import ll as LL

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]

LL_BYTES = 64 * 1024      # a grid of 16 blocks a rank: every rank's kernel fits on the GPU at once
SUMS = (torch.bfloat16, torch.float32)


def _ranks(world: int, pdl: bool) -> list[LL.LLGroup]:
    why = LL.unavailable()
    if why:
        pytest.skip(why)
    bufs = [torch.zeros(LL.region_bytes(LL_BYTES, world), dtype=torch.uint8, device="cuda")
            for _ in range(world)]
    ptrs = [b.data_ptr() for b in bufs]
    groups = [LL.LLGroup(bufs[r], 0, ptrs, r, LL_BYTES, timeout_s=20.0, pdl=pdl)
              for r in range(world)]
    for g in groups:
        g.keep = bufs       # the regions live as long as the ranks
    return groups


def _data(n: int, dtype: torch.dtype) -> torch.Tensor:
    """n random values (any bits for the byte movers)."""
    if dtype in SUMS:
        return torch.randn(n, device="cuda").to(dtype)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")


def _sum(xs: list[torch.Tensor], avg: bool, dtype: torch.dtype) -> torch.Tensor:
    """The kernel's arithmetic: fp32 in rank order, a true division for avg (torch divides by
    a Python number as a multiplication by its inverse: one bit off at 3 ranks), one rounding
    at the end."""
    acc = xs[0].float()
    for x in xs[1:]:
        acc = acc + x.float()
    return (acc / torch.full_like(acc, len(xs)) if avg else acc).to(dtype)


def _call(rng: random.Random, world: int) -> tuple:
    """One call: (op, per-rank (issue args), per-rank output, per-rank expected)."""
    op = rng.choice((LL.ALL_REDUCE, LL.ALL_GATHER, LL.REDUCE_SCATTER, LL.BROADCAST,
                     LL.ALL_TO_ALL, "uneven"))
    dtype = rng.choice(SUMS) if op in (LL.ALL_REDUCE, LL.REDUCE_SCATTER) else \
        rng.choice((torch.uint8, torch.bfloat16, torch.float32))
    es = torch.tensor([], dtype=dtype).element_size()
    most = LL_BYTES // es
    n = rng.choice((1, 3, 4, 64, 1000, rng.randint(1, most), most))
    avg, root = rng.random() < 0.5, rng.randrange(world)
    if op == "uneven":
        m = [[rng.choice((0, rng.randint(1, n))) for _ in range(world)] for _ in range(world)]
        ins = [_data(sum(m[r]), dtype) for r in range(world)]
        outs = [torch.full((sum(m[s][r] for s in range(world)),), 7, dtype=dtype,
                           device="cuda") for r in range(world)]
        blocks = [list(ins[s].split(m[s])) for s in range(world)]
        want = [torch.cat([blocks[s][r] for s in range(world)]) for r in range(world)]
        args = [(ins[r], outs[r], m[r], [m[s][r] for s in range(world)]) for r in range(world)]
        return op, args, outs, want
    nb = n * es
    if op in (LL.ALL_REDUCE, LL.BROADCAST):
        ins = [_data(n, dtype) for _ in range(world)]
        keep = [x.clone() for x in ins]
        want = [_sum(keep, avg, dtype)] * world if op == LL.ALL_REDUCE else [keep[root]] * world
        return op, [(op, x, x, nb, avg, root) for x in ins], ins, want
    whole = op in (LL.REDUCE_SCATTER, LL.ALL_TO_ALL)      # world blocks in
    ins = [_data(world * n if whole else n, dtype) for _ in range(world)]
    outs = [torch.zeros(n if op == LL.REDUCE_SCATTER else world * n, dtype=dtype,
                        device="cuda") for _ in range(world)]
    if op == LL.ALL_GATHER:
        want = [torch.cat(ins)] * world
    elif op == LL.REDUCE_SCATTER:
        want = [_sum([x[r * n:(r + 1) * n] for x in ins], avg, dtype) for r in range(world)]
    else:
        want = [torch.cat([x[r * n:(r + 1) * n] for x in ins]) for r in range(world)]
    return op, [(op, ins[r], outs[r], nb, avg, root) for r in range(world)], outs, want


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_low_latency_kernels_give_torch_s_results_on_ranks_that_drift(world: int,
                                                                      pdl: bool) -> None:
    """80 random calls a rank, every op, each rank on its own stream, some ranks held back by
    GPU sleeps before their calls (so others race a call or more ahead, the case the two
    regions exist for): every result equals torch's bit for bit."""
    rng = random.Random(world * 10 + pdl)
    torch.manual_seed(world * 10 + pdl)
    ranks = _ranks(world, pdl)
    streams = [torch.cuda.Stream() for _ in range(world)]
    calls = [_call(rng, world) for _ in range(80)]
    # CUDA loads a kernel at its first launch (lazy loading), and the load waits for the
    # kernels running: a first sleep queued behind a rank that spins would never start.
    torch.cuda._sleep(1)
    torch.cuda.synchronize()
    for op, args, _, _ in calls:
        for r in range(world):
            with torch.cuda.stream(streams[r]):
                if rng.random() < 0.2:
                    torch.cuda._sleep(rng.randint(10_000, 2_000_000))
                if op == "uneven":
                    ranks[r].issue_uneven(*args[r])
                else:
                    ranks[r].issue(*args[r])
    torch.cuda.synchronize()
    for k, (op, _, outs, want) in enumerate(calls):
        for r in range(world):
            assert torch.equal(outs[r].view(torch.uint8), want[r].view(torch.uint8)), \
                (k, op, r, outs[r].numel())


@pytest.mark.parametrize("world", [2, 4])
def test_low_latency_sums_give_torch_s_special_values(world: int) -> None:
    """NaN, +Inf, -Inf and -0.0 among small integers (exact in any order), at places of one
    rank's own and at places every rank fills (+Inf meets -Inf there), through the kernel's
    all-reduce and reduce-scatter, sum and avg, bf16 and fp32: torch's sum of every rank's
    tensor, NaN where torch's is NaN."""
    ranks = _ranks(world, False)
    streams = [torch.cuda.Stream() for _ in range(world)]
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0], device="cuda")
    torch.cuda._sleep(1)
    torch.cuda.synchronize()
    n = 7 * 64
    for dtype in SUMS:
        for avg in (False, True):
            for op in (LL.ALL_REDUCE, LL.REDUCE_SCATTER):
                whole = world * n if op == LL.REDUCE_SCATTER else n
                ins = []
                for r in range(world):
                    x = torch.randint(-8, 9, (whole,), device="cuda").float()
                    # this rank's own places, then places every rank fills (+Inf meets -Inf)
                    for at in (torch.arange(r + 1, whole, 7, device="cuda"),
                               torch.arange(0, whole, 7, device="cuda")):
                        x[at] = special[(at // 7 + r) % len(special)]
                    ins.append(x.to(dtype))
                keep = [x.clone() for x in ins]
                outs = ins if op == LL.ALL_REDUCE else \
                    [torch.empty(n, dtype=dtype, device="cuda") for _ in range(world)]
                es = keep[0].element_size()
                for r in range(world):
                    with torch.cuda.stream(streams[r]):
                        ranks[r].issue(op, ins[r], outs[r], n * es, avg)
                torch.cuda.synchronize()
                for r in range(world):
                    part = keep if op == LL.ALL_REDUCE else [x[r * n:(r + 1) * n] for x in keep]
                    want = _sum(part, avg, dtype)
                    assert bool(want.isnan().any()) and bool(want.isinf().any())
                    name = f"op {op} {dtype} avg={avg} rank {r}"
                    torch.testing.assert_close(outs[r], want, rtol=0, atol=0, equal_nan=True,
                                               msg=lambda m, name=name: f"{name}: {m}")
