"""mcr.comm's collectives inside torch.compile'd code (tests/workers/compile_worker.py): the
synchronous in-place forms enter the compiled graph as mcr's custom ops (no graph break), the
others break the graph and run as uncompiled, and every output equals the uncompiled code's bit
for bit; mcr serves every call."""

from __future__ import annotations

import re

import pytest
from conftest import run_mpi, run_torchrun


@pytest.mark.parametrize("launcher,n", [("torchrun", 2), ("mpi", 4)])
def test_collectives_in_compiled_code_enter_the_graph_and_give_eager_s_results(launcher, n):
    run = run_torchrun if launcher == "torchrun" else run_mpi
    out = run(n, "compile_worker.py", timeout=300)
    rows = re.findall(r"rank (\d+): COMPILE OK (\d+) checks, in graph: graphs (\d+) breaks "
                      r"(\d+); async and uneven: breaks (\d+)", out)
    assert sorted(int(r[0]) for r in rows) == list(range(n)), out[-3000:]
    for _, checks, graphs, in_graph, breaks in rows:
        assert int(checks) == 12 and int(graphs) >= 1 and int(in_graph) == 0, out[-3000:]
        assert int(breaks) > 0, out[-3000:]     # asynchronous and uneven calls: breaks
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2), out[-3000:]
