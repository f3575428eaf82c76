"""Uneven all-to-alls whose split sizes go through a one-node group's signature board."""

from __future__ import annotations

import re

import pytest
from conftest import run_mpi, run_torchrun


@pytest.mark.parametrize("launcher,n", [("torchrun", 2), ("mpi", 3)])
def test_uneven_splits_through_the_board_give_the_reference_and_catch_disagreement(launcher, n):
    out = (run_torchrun(n, "uneven_board_worker.py", timeout=120) if launcher == "torchrun"
           else run_mpi(n, "uneven_board_worker.py", timeout=120))
    assert sorted(re.findall(r"rank (\d+): UNEVEN OK 51", out)) == [str(r) for r in range(n)], \
        out[-3000:]
