"""mpi_lanesN: helper processes per rank all-reducing slices of a shared buffer."""

from __future__ import annotations

import glob
import os
import re
import time

import pytest
import torch
from conftest import run_mpi

SHM_FILES = "/dev/shm/mcr-lanes-*"  # noqa: S108 - what mcr's lanes name their files


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("n", [2, 3])
def test_lanes_match_reference_and_leave_nothing_behind(n):
    """Random sizes, dtypes, reduce ops and groups, calls in flight waited in shuffled order:
    bit-exact; after the job no helper lives on and no /dev/shm file of mcr's is left."""
    before = set(glob.glob(SHM_FILES))
    out = run_mpi(n, "lanes_worker.py", "--ops", "60", "--seed", str(n))
    assert out.count("LANES OK 60 ops") == n, out[-3000:]
    declined = re.findall(r"\((\d+) declined\)", out)
    assert len(declined) == n and all(int(d) < 20 for d in declined), declined   # most served
    pids = [int(p) for m in re.findall(r"helpers \[([\d, ]*)\]", out) for p in m.split(",") if p]
    assert len(pids) >= n * 2, out[-2000:]   # at least the world's two-lane set per rank
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids), "a lane helper outlived its job"
    assert set(glob.glob(SHM_FILES)) <= before, "a shared-memory file was left"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_lanes_on_gpu_tensors():
    """The same on GPU tensors (ranks may share one GPU): staged through the shared buffer."""
    out = run_mpi(2, "lanes_worker.py", "--ops", "60", "--device", "cuda",
                  env={"MCR_MPI_CUDA_AWARE": "0"})
    assert out.count("LANES OK 60 ops") == 2, out[-3000:]
