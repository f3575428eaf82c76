"""Every rank holds the same bits after every all-reduce path mcr may take on GPUs, and a CUDA
graph that captured an mcr all-reduce gives, replayed on fresh inputs, the bits an eager call
gives on the same inputs. One process per GPU, under torchrun or mpirun.

Paths: symm's low-latency kernel (its sizes, its limit), symm's torch kernels (one-shot with the
copy inside, staged two-shot, padded sizes, offsets), symm launched without capture (addresses
that keep changing), NCCL, and whatever the tables pick (auto). Random data (not exactly
summable: the sum's order shows), bf16 and fp32, sum and avg. Prints `rank R: AGREE OK <n>`.
"""

from __future__ import annotations

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr.backends.symm.backend import MOVING

dist.init_distributed(verbose=False)
R = dist.ReduceOp
N, ME = dist.get_world_size(), dist.get_rank()
DEV = torch.device("cuda", torch.cuda.current_device())
CHECKS = [0]
GEN = torch.Generator(device=DEV)


def fresh(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """Random data, different on every rank and every call."""
    GEN.manual_seed(1_000_003 * CHECKS[0] + ME)
    return torch.randn(numel, generator=GEN, device=DEV).to(dtype)


def agree(what: str, t: torch.Tensor) -> None:
    """Every rank's t has the same bits (gathered over NCCL, compared as integers)."""
    bits = t.reshape(-1).view(torch.uint8)     # NCCL gathers bytes of any dtype
    every = torch.empty(N * bits.numel(), dtype=bits.dtype, device=DEV)
    tdist.all_gather_into_tensor(every, bits.contiguous())
    rows = every.view(N, -1)
    bad = [r for r in range(N) if not torch.equal(rows[r], rows[0])]
    if bad:
        raise AssertionError(f"{what}: ranks {bad} hold other bits than rank 0")
    if not torch.isfinite(t.float()).all():
        raise AssertionError(f"{what}: non-finite result")
    CHECKS[0] += 1


def same(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit for bit on this rank."""
    if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
        diff = (got.float() - want.float()).abs().max().item()
        raise AssertionError(f"{what}: differs (largest {diff:g})")
    CHECKS[0] += 1


def paths() -> None:
    """Each path, each dtype and reduce op, sizes across its range, views at odd offsets."""
    sizes = (1, 3, 8, 1000, 4096, 65537, 131072, 262147, 524288)
    for be in ("symm", "nccl", None):
        for dt in (torch.bfloat16, torch.float32):
            for n in sizes:
                if be == "symm" and n * dt.itemsize > 1 << 20:
                    continue
                for op in (R.SUM, R.AVG):
                    for off in (0, 3):
                        base = fresh(n + off, dt)
                        x = base[off:]
                        dist.all_reduce(x, op=op, backend=be)
                        agree(f"{be or 'auto'} {dt} n={n} off={off} {op}", x)


def graphs() -> None:
    """An mcr all-reduce captured in the caller's graph, replayed on fresh inputs, against an
    eager call on the same inputs (both on symm, and as the tables pick)."""
    for be in ("symm", None):
        for dt, n in ((torch.bfloat16, 4096), (torch.bfloat16, 8192 * 16),
                      (torch.float32, 1000), (torch.bfloat16, 262144)):
            x = torch.empty(n, dtype=dt, device=DEV)
            y = torch.empty_like(x)
            x.copy_(fresh(n, dt))
            dist.all_reduce(x, backend=be)        # eager first: buffers set up outside capture
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                dist.all_reduce(x, backend=be)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                dist.all_reduce(x, backend=be)
            for trial in range(5):
                data = fresh(n, dt)
                x.copy_(data)
                y.copy_(data)
                g.replay()
                dist.all_reduce(y, backend=be)
                same(f"graph replay {trial} {be or 'auto'} {dt} n={n}", x, y)
                agree(f"graph replay {trial} {be or 'auto'} {dt} n={n}", x)


def moving() -> None:
    """Tensors of one size at ever other addresses (captures stop after MOVING; the rest are
    launched directly): each result agrees across ranks and equals the same call on a tensor
    whose address stays put."""
    n = 4096
    pool = [torch.empty(n, dtype=torch.bfloat16, device=DEV) for _ in range(12)]
    still = torch.empty_like(pool[0])
    for i in range(6 * len(pool)):
        x = pool[(i * 5) % len(pool)]
        data = fresh(n, torch.bfloat16)
        x.copy_(data)
        still.copy_(data)
        dist.all_reduce(x, backend="symm")
        dist.all_reduce(still, backend="symm")
        same(f"moving address call {i}", x, still)
        agree(f"moving address call {i}", x)
    note = " ".join(r["text"] for r in dist.log_summary(return_dict=True)
                    if r["kind"] == "note" and r["backend"] == "symm")
    if "launched without capture" not in note:
        raise AssertionError(f"no call was launched without capture after {MOVING} captures: "
                             f"{note}")


paths()
graphs()
moving()
torch.cuda.synchronize()
print(f"rank {ME}: AGREE OK {CHECKS[0]}", flush=True)
dist.destroy_process_group()
