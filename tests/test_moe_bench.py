"""benchmarks/moe.py --shape tiny on CPU ranks: DeepSpeed-MoE (capacity-padded and drop-less)
and an uneven-split drop-less layer, trained and run forward through mcr, give plain
DeepSpeed's losses, outputs and gradients bit for bit, on Gloo, on MPI and on a table that
mixes them by size."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, run_mpi, run_torchrun

MIXED = str(ROOT / "tests" / "data" / "moe_mixed_cpu_np2.yaml")
ARGS = ("--shape", "tiny", "--tokens", "16,64", "--k", "2", "--capacity", "1.0,dropless,uneven",
        "--step", "train,decode", "--pairs", "2", "--steps", "2", "--check-steps", "3")


def _check(out_dir) -> set[tuple[str, str]]:
    res = json.loads((out_dir / "moe_tiny_np2.json").read_text())
    rows = res["rows"]
    assert len(rows) == 12 and (out_dir / "moe_tiny_np2.png").stat().st_size > 0
    for r in rows:
        assert r["losses_equal"] and r["outputs_equal"], r
        assert r["mcr_ms"] > 0 and r["floor_ms"] > 0 and len(r["ratios"]) == 2, r
    return {(r["op"], r["backend"]) for r in res["mcr_served"] if r["kind"] == "served"}


@pytest.mark.parametrize("table", ["mixed", "shipped"])
def test_moe_tiny_under_mpiexec_equals_plain_deepspeed(table, tmp_path):
    """Plain is DeepSpeed on Gloo; mcr takes MPI and Gloo as the table says."""
    env = {"MCR_TUNING_TABLE": MIXED} if table == "mixed" else {}
    run_mpi(2, "benchmarks/moe.py", *ARGS, "--out", str(tmp_path), env=env, timeout=300)
    served = _check(tmp_path)
    if table == "mixed":
        assert {("all_to_all", "mpi"), ("all_to_all", "gloo")} <= served, served


def test_moe_tiny_under_torchrun_equals_plain_deepspeed(tmp_path):
    run_torchrun(2, "benchmarks/moe.py", *ARGS, "--out", str(tmp_path), timeout=300)
    assert ("all_to_all", "gloo") in _check(tmp_path)
