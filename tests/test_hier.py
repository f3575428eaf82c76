"""Past one node on one host: the node layout, tables keyed on it, and the hierarchical and
lane-parallel backends on 4 ranks split into 2 nodes of 2 (MCR_LOCAL_SIZE=2), under mpiexec
(Gloo and MPI parts) and torchrun (Gloo alone), checked against references in the worker."""

from __future__ import annotations

import pytest
import torch

from mcr.backends import KNOWN
from mcr.errors import TableError
from mcr.layout import Layout, label, parse_label
from mcr.ops import make_key
from mcr.table_file import dump, load_table
from mcr.tables import TableSet

HEAD = """\
schema_version: 1
system: {class: cpu}
provenance: {tool: test, date: 2026-11-23, statistic: none}
device: cpu
groups:
"""
# What a tuned 2 x 2 table might say: hier across nodes; inside a node (a group of 2 on one
# node) and between nodes (2x1) the libraries named here.
PARTS = """\
  2x2:
    all_gather: [{max: inf, backend: hier}]
    reduce_scatter: [{max: inf, backend: hier}]
    all_reduce: [{max: inf, backend: hier}]
  2:
    all_gather: [{max: inf, backend: INTRA}]
    reduce_scatter: [{max: inf, backend: INTRA}]
    all_reduce: [{max: inf, backend: INTRA}]
  2x1:
    all_gather: [{max: inf, backend: INTER}]
    reduce_scatter: [{max: 4KiB, backend: gloo}, {max: inf, backend: INTER}]
    all_reduce: [{max: 4KiB, backend: INTER}, {max: inf, backend: LANES}]
"""


def test_layout_shape():
    """Groups of whole nodes in node-major order have a shape; others are uneven (0)."""
    lay = Layout((0, 0, 1, 1, 2, 2), "test")
    assert lay.shape([0, 1]) == (1, 2)
    assert lay.shape([0, 1, 2, 3]) == (2, 2)
    assert lay.shape([0, 2, 4]) == (3, 1)
    assert lay.shape([0, 1, 2]) == (2, 0)            # 2 ranks on one node, 1 on the other
    assert lay.shape([0, 2, 1, 3]) == (2, 0)         # not node-major
    assert [label(4, 1), label(4, 2), label(3, 0)] == [4, "2x2", None]
    assert [parse_label(k) for k in (4, "2x2", "3x1", "1x4", "2x", 0, True)] == \
        [(4, 1), (4, 2), (3, 3), None, None, None, None]


def test_table_keys_on_layout(tmp_path):
    """A `2x2` rule serves 4 ranks across 2 nodes and not 4 ranks on one; dump keeps the key."""
    p = tmp_path / "t.yaml"
    p.write_text(HEAD + PARTS.replace("INTRA", "mpi").replace("INTER", "gloo")
                 .replace("LANES", "mpi_lanes4"))
    t = load_table(p, KNOWN)
    ts = TableSet([t])

    def pick(size: int, nodes: int, nbytes: int = 8 << 10) -> str | None:
        hit = ts.lookup(make_key("all_reduce", size, nbytes, torch.float32, "cpu", nodes=nodes))
        return hit and hit[0]
    assert [pick(4, 2), pick(4, 1), pick(2, 1), pick(2, 2), pick(2, 2, 64), pick(4, 0)] == \
        ["hier", None, "mpi", "mpi_lanes4", "gloo", None]
    assert dump(load_table(p, KNOWN).raw) == dump(t.raw)
    assert "2x2:" in dump(t.raw)
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "  1x4:\n    all_reduce: [{max: inf, backend: mpi}]\n")
    with pytest.raises(TableError, match=r"bad.yaml:6: groups.1x4: .*nodes x ranks per node"):
        load_table(bad, KNOWN)


def _table(tmp_path, intra: str, inter: str, lanes: str) -> str:
    p = tmp_path / "parts.yaml"
    p.write_text(HEAD + PARTS.replace("INTRA", intra).replace("INTER", inter)
                 .replace("LANES", lanes))
    return str(p)


SPLIT = {"MCR_LOCAL_SIZE": "2", "MCR_HIER_CHUNK_BYTES": "64KiB", "MCR_HIER_MAX_CHUNKS": "64"}


@pytest.mark.parametrize("n,esize,chunk,most", [
    (1000, 4, 1024, 4), (1000, 4, 1024, 1000), (1000, 2, float("inf"), 4), (7, 4, 4, 3),
    (1, 8, 1024, 4), (64 << 20, 2, 4 << 20, 4), (64 << 20, 2, 4 << 20, 64)])
def test_hier_chunks_tile_the_block_within_the_bounds(n, esize, chunk, most):
    """Chunks tile a rank's block in order, no more of them than MCR_HIER_MAX_CHUNKS, none
    smaller than MCR_HIER_CHUNK_BYTES but the last (each chunk costs a call of each part)."""
    from mcr.config import Config
    from mcr.hier import HierBackend
    hb = HierBackend(Config(hier_chunk_bytes=chunk, hier_max_chunks=most), {})
    got = hb._chunks(n, esize)
    assert [s for s, _ in got] == [sum(m for _, m in got[:i]) for i in range(len(got))]
    assert sum(m for _, m in got) == n and len(got) <= most
    assert all(m * esize >= min(chunk, n * esize) for _, m in got[:-1])
    by_bytes = 1 if chunk == float("inf") else -(-n * esize // int(chunk))
    if by_bytes <= most:     # below the bound, chunks by bytes alone
        assert len(got) == by_bytes


def test_hier_mpi_parts(tmp_path):
    """MPI inside and between the nodes, lanes for large inter-node all-reduces; forced hier,
    flat MPI, Gloo and lanes between; bit-exact against the reference."""
    from conftest import run_mpi
    env = dict(SPLIT, MCR_TUNING_TABLE=_table(tmp_path, "mpi", "mpi", "mpi_lanes4"))
    out = run_mpi(4, "hier_worker.py", "--flat", "gloo,mpi,mpi_lanes2",
                  "--expect", "all_gather=hier,all_reduce=hier", env=env, timeout=300)
    assert out.count("HIER OK 300 ops") == 4, out[-3000:]
    assert "'mpi_lanes4'" in out and "'hier'" in out


def test_hier_gives_torchs_special_values(tmp_path):
    """The special-value matrix (NaN, +-Inf, -0.0 under MAX, MIN, SUM and AVG; wrapping int32
    sums) through hier forced and through the table's choice: MPI inside the nodes, Gloo
    between them, MPI lanes for large inter-node all-reduces."""
    from conftest import run_mpi
    env = dict(SPLIT, MCR_TUNING_TABLE=_table(tmp_path, "mpi", "gloo", "mpi_lanes4"))
    out = run_mpi(4, "special_worker.py", "--backends", "hier,auto", env=env, timeout=300)
    assert out.count("SPECIAL OK") == 4, out[-3000:]


def test_hier_gloo_parts_mpiexec(tmp_path):
    """Gloo inside and between the nodes under mpiexec (MPI in the process, unused by hier);
    hier in one chunk, and the flat MPI calls on the worker (blocking) in one piece."""
    from conftest import run_mpi
    env = dict(SPLIT, MCR_TUNING_TABLE=_table(tmp_path, "gloo", "gloo", "gloo"),
               MCR_HIER_CHUNK_BYTES="inf", MCR_MPI_BLOCKING_BYTES="0", MCR_MPI_CHUNK_BYTES="inf")
    out = run_mpi(4, "hier_worker.py", "--flat", "mpi", "--seed", "11", "--ops", "150",
                  "--expect", "reduce_scatter=hier", env=env, timeout=300)
    assert out.count("HIER OK 150 ops") == 4, out[-3000:]


def test_hier_torchrun(tmp_path):
    """torchrun, no MPI at all: hier over Gloo groups, Gloo lanes for large inter-node
    all-reduces and flat between."""
    from conftest import run_torchrun
    env = dict(SPLIT, MCR_TUNING_TABLE=_table(tmp_path, "gloo", "gloo", "gloo_lanes4"))
    out = run_torchrun(4, "hier_worker.py", "--flat", "gloo,gloo_lanes2", "--seed", "5",
                       "--ops", "150", "--expect", "all_gather=hier", env=env, timeout=300)
    assert out.count("HIER OK 150 ops") == 4, out[-3000:]
    assert "'gloo_lanes4'" in out and "'gloo_lanes2'" in out


def test_local_size_errors():
    """A node size that does not divide the world is refused at init, by every rank."""
    from conftest import run_mpi
    out = run_mpi(4, "hier_worker.py", env={"MCR_LOCAL_SIZE": "3"}, check=False, timeout=120)
    assert out.count("MCR_LOCAL_SIZE=3 does not divide the world of 4 ranks") == 4, out[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_host_staged_cuda():
    """GPU tensors through every host-staged path (MPI, its lanes, Gloo lanes, hier over them):
    4 ranks sharing the GPUs there are, as 2 nodes of 2, against torch's results. The table
    names no GPU library: NCCL refuses two ranks on one GPU."""
    from conftest import ROOT, run_mpi
    env = dict(SPLIT, MCR_TUNING_TABLE=str(ROOT / "tests/data/hier_parts_cuda.yaml"),
               MCR_MPI_CUDA_AWARE="0")
    out = run_mpi(4, "hier_worker.py", "--device", "cuda", "--ops", "200", "--flat",
                  "mpi,mpi_lanes2,gloo_lanes2,gloo_lanes8", "--expect",
                  "all_gather=hier,reduce_scatter=hier", env=env, timeout=600)
    assert out.count("HIER OK 200 ops") == 4, out[-3000:]
