"""What the MPI library in this process can do, found once at start: CUDA awareness, integer
reductions it saturates where torch wraps, and aborting the job when one rank's program dies."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist


def cuda_aware_mpi(setting: str) -> bool:
    """MCR_MPI_CUDA_AWARE=1/0 decides; auto asks Open MPI's MPIX_Query_cuda_support."""
    if setting in ("0", "1"):
        return setting == "1"
    try:
        fn = ctypes.CDLL(None).MPIX_Query_cuda_support
    except (AttributeError, OSError):
        return False
    fn.restype = ctypes.c_int
    return bool(fn())


def abort_job_on_uncaught_exception(MPI: Any) -> None:
    """An exception that ends this rank's program aborts the whole MPI job, as `python -m
    mpi4py` does (once per process).

    Without it the failed rank's MPI_Finalize waits for its peers (Open MPI fences there) while
    they wait in their next collective for MCR_TIMEOUT_S: minutes of a stuck job instead of an
    error. torchrun needs none of this: its agent stops every rank when one fails."""
    if getattr(sys.excepthook, "_mcr_aborts", False):
        return
    before = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        before(kind, exc, tb)
        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            sys.stderr.write(f"mcr: rank {MPI.COMM_WORLD.Get_rank()} ended with an uncaught "
                             f"{kind.__name__}; aborting the MPI job so that the other ranks "
                             "do not wait for it\n")
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)
    hook._mcr_aborts = True   # type: ignore[attr-defined]
    sys.excepthook = hook


def overflowing_reductions(MPI: Any, types: dict[torch.dtype, Any], ops: dict[Any, Any]
                           ) -> set[tuple[torch.dtype, Any]]:
    """(integer dtype, torch ReduceOp) pairs this MPI gets wrong when the result overflows:
    Open MPI's AVX reductions saturate (uint8 200 + 100 gives 255, not 44) from 64 elements on,
    where torch, NCCL and Gloo wrap. Found by reducing locally (MPI_Reduce_local, no peers)."""
    R = tdist.ReduceOp
    bad = set()
    for dt, mtype in types.items():
        if dt.is_floating_point or dt.is_complex:
            continue
        nt = torch.empty(0, dtype=dt).numpy().dtype
        top = np.iinfo(nt).max
        for redop in (R.SUM, R.PRODUCT):
            a = np.full(1024, top, dtype=nt)
            inout = np.full(1024, 2, dtype=nt)
            want = (a.astype(np.uint64) + 2 if redop == R.SUM else a.astype(np.uint64) * 2)
            ops[redop].Reduce_local([a, mtype], [inout, mtype])
            if not np.array_equal(inout, want.astype(nt)):
                bad.add((dt, redop))
    return bad
