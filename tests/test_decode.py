"""benchmarks/decode.py --shape tiny on CPU ranks: mcr's decode equals plain torch.distributed's,
bit for bit, on Gloo, on MPI and on a table that mixes them by size."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, run_mpi, run_torchrun

MIXED = str(ROOT / "tests" / "data" / "mixed_cpu_np2.yaml")
ARGS = ("--shape", "tiny", "--batch", "1,8", "--pairs", "2", "--steps", "4", "--check-steps", "6")


def _rows(out_dir):
    res = json.loads((out_dir / "decode_torch_tiny_np2.json").read_text())
    return res["rows"], {(r["op"], r["backend"]) for r in res["mcr_served"]
                         if r["kind"] == "served"}



@pytest.mark.parametrize("table", ["mixed", "shipped"])
def test_decode_tiny_under_mpiexec_equals_plain(table, tmp_path):
    """Plain is Gloo (torch's group); mcr takes MPI and Gloo as the table says: every greedy
    token and every logit bit equal."""
    env = {"MCR_TUNING_TABLE": MIXED} if table == "mixed" else {}
    run_mpi(2, "benchmarks/decode.py", *ARGS, "--out", str(tmp_path), env=env)
    rows, served = _rows(tmp_path)
    assert [r["batch"] for r in rows] == [1, 8]
    for r in rows:
        assert r["tokens_equal"] and r["logits_equal"], r
        assert r["mcr_ms"] > 0 and r["floor_ms"] > 0 and len(r["ratios"]) == 2
    if table == "mixed":
        # batch 1 (256 B) all-reduces below the table's 1 KiB go to MPI, batch 8's to Gloo
        assert {("all_reduce", "mpi"), ("all_reduce", "gloo")} <= served, served


def test_decode_tiny_under_torchrun_equals_plain(tmp_path):
    run_torchrun(2, "benchmarks/decode.py", *ARGS, "--out", str(tmp_path))
    rows, served = _rows(tmp_path)
    assert all(r["tokens_equal"] and r["logits_equal"] for r in rows), rows
    assert ("all_reduce", "gloo") in served
