"""Uneven all-to-alls whose split sizes go through a one-node group's signature board."""

from __future__ import annotations

import re

import pytest
from conftest import run_mpi, run_torchrun


@pytest.mark.parametrize("launcher,n", [("torchrun", 2), ("mpi", 3)])
def test_uneven_splits_through_the_board_give_the_reference_and_catch_disagreement(launcher, n):
    env = {"MCR_STALL_S": "1"}
    out = (run_torchrun(n, "uneven_board_worker.py", env=env, timeout=120)
           if launcher == "torchrun" else run_mpi(n, "uneven_board_worker.py", env=env,
                                                  timeout=120))
    assert sorted(re.findall(r"rank (\d+): UNEVEN OK 52", out)) == [str(r) for r in range(n)], \
        out[-3000:]
    # The late rank's peers: waiting in the exchange of the call they are at, not the one before.
    waits = re.findall(r"rank (\d+) has waited \d+ s in all_to_all_single: the exchange of "
                       r"split sizes, call \d+", out)
    assert sorted(set(waits)) == [str(r) for r in range(1, n)], out[-3000:]
