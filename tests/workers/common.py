"""Helpers shared by the multi-process test workers: seeded data, numpy references, checks."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def gen(rank: int, numel: int, dtype: torch.dtype, salt: int, exact: bool = False,
        device: str = "cpu") -> torch.Tensor:
    """Rank's input for case `salt`; any rank can regenerate any other rank's input.

    exact=True draws multiples of 1/4 in [-4, 4] (ints: [-50, 50]) so that sums over a few ranks
    are exact in every dtype and any order, and results can be compared bit for bit.
    """
    g = torch.Generator().manual_seed((salt * 1_000_003 + rank * 7919) & 0x7FFFFFFF)
    if dtype.is_floating_point:
        if exact:
            t = torch.randint(-16, 17, (numel,), generator=g).to(torch.float64) / 4
        else:
            t = torch.randn(numel, generator=g, dtype=torch.float64)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, (numel,), generator=g)
    else:
        t = torch.randint(-50, 51, (numel,), generator=g)
    return t.to(dtype).to(device)


def ref_reduce(parts: list[torch.Tensor], redop: object) -> torch.Tensor:
    """numpy reduction in float64 (int64 for integers), cast back to the parts' dtype."""
    dtype = parts[0].dtype
    wide = np.float64 if dtype.is_floating_point else np.int64
    arr = np.stack([p.cpu().to(torch.float64 if dtype.is_floating_point else torch.int64)
                    .numpy().astype(wide) for p in parts])
    R = tdist.ReduceOp
    fn = {R.SUM: np.sum, R.PRODUCT: np.prod, R.MIN: np.min, R.MAX: np.max,
          R.AVG: np.mean}[redop]
    return torch.from_numpy(np.asarray(fn(arr, axis=0))).to(dtype)


def same(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit-exact comparison (NaN never passes); AssertionError naming the case."""
    got, want = got.cpu(), want.cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype}{tuple(got.shape)}, "
                             f"want {want.dtype}{tuple(want.shape)}")
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {bad.shape[0]} of {want.numel()} elements differ; "
                             f"first at {i}: got {got[i].item()}, want {want[i].item()}")


class WaitAll:
    """One work standing for several (a send and a receive): wait() waits for each."""

    def __init__(self, works: list[Any]) -> None:
        self.works = works

    def wait(self) -> None:
        """Wait for every work, in order."""
        for w in self.works:
            w.wait()


def run_shuffled(ops: int, issue: Any, shared: random.Random, local: random.Random,
                 most: int, chance: float) -> int:
    """Issue ops 0..ops-1 (issue(i) -> (work or None, check)); pending works are waited in this
    rank's own shuffled order, when `most` are pending or by a shared coin (every rank issues
    the same calls), and each result checked after its wait. Returns the ops checked."""
    pending: list[tuple[Any, Any]] = []
    done = 0
    for i in range(ops):
        w, check = issue(i)
        if w is None:
            check()
            done += 1
        else:
            pending.append((w, check))
        coin = shared.random() < chance    # drawn every time: ranks' pending lists may differ
        if len(pending) >= most or (pending and coin) or i == ops - 1:
            local.shuffle(pending)
            for w_, check_ in pending:
                w_.wait()
                check_()
                done += 1
            pending.clear()
    return done


def served_summary(rows: list[dict[str, Any]], expect: str, not_ours: int = 0,
                   share: float = 0.9) -> tuple[int, int]:
    """(served, bypassed) calls in mcr's summary rows; asserts that mcr served at least `share`
    of the calls (`not_ours`: bypasses that were never mcr's to serve, e.g. a plain copy's) and
    that every `op:lib` of the comma-separated `expect` served some."""
    served = sum(r["count"] for r in rows if r["kind"] == "served")
    missed = sum(r["count"] for r in rows if r["kind"] == "bypass") - not_ours
    assert served >= share * (served + missed), f"mcr served {served} of {served + missed} calls"
    libs = {(r["op"], r["backend"]) for r in rows if r["kind"] == "served"}
    for want in filter(None, expect.split(",")):
        op, lib = want.split(":")
        assert (op, lib) in libs, f"no {op} served by {lib}: {sorted(libs)}"
    return served, missed


def same_losses(rank: int, plain: list[float], ours: list[float], rtol: float = 0.0) -> None:
    """Equal losses step by step (within rtol; 0: bit for bit), all finite."""
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(plain, ours)) if abs(a - b) > rtol * abs(a)]
    assert not diff, f"rank {rank}: losses differ (rtol {rtol}) at steps {diff[:5]}"
    assert len(plain) == len(ours) and all(np.isfinite(plain + ours)), (plain, ours)


def torch_env_from_mpi() -> None:
    """Under mpirun, set the variables torch's (and transformers') own init_process_group
    reads, as a script that does not start through mcr must (mcr.comm.init_distributed does it
    for the rest)."""
    import os
    if "OMPI_COMM_WORLD_RANK" not in os.environ or "RANK" in os.environ:
        return
    from mpi4py import MPI

    from mcr.launch import free_port
    os.environ.update(RANK=os.environ["OMPI_COMM_WORLD_RANK"],
                      WORLD_SIZE=os.environ["OMPI_COMM_WORLD_SIZE"],
                      LOCAL_RANK=os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                      MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(MPI.COMM_WORLD.bcast(free_port(), root=0)))
