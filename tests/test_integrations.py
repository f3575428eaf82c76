"""Real DeepSpeed ZeRO-3 and real FSDP2 on CPU, plain vs through mcr: equal losses, bit for bit."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, run_mpi, run_torchrun

MIXED = str(ROOT / "tests" / "data" / "mixed_cpu_np2.yaml")
BOTH = "all_gather:mpi,all_gather:gloo,reduce_scatter:mpi,reduce_scatter:gloo"


def _ok(out: str, word: str, n: int = 2) -> None:
    ranks = re.findall(rf"rank (\d+): {word}", out)
    assert sorted(int(r) for r in ranks) == list(range(n)), out[-6000:]


deepspeed = pytest.importorskip("deepspeed", reason="pip install deepspeed (DS_BUILD_OPS=0)")


def test_deepspeed_zero3_torchrun_gloo():
    _ok(run_torchrun(2, "deepspeed_worker.py", "--expect", "all_gather:gloo"),
        "DEEPSPEED OK 20")


def test_deepspeed_zero3_install_before_init():
    _ok(run_torchrun(2, "deepspeed_worker.py", "--install-first", "--steps", "5"),
        "DEEPSPEED OK 5")


def test_deepspeed_zero3_mpi_forced():
    out = run_mpi(2, "deepspeed_worker.py", "--expect", "all_gather:mpi,reduce_scatter:mpi",
                  env={"MCR_BACKEND": "mpi"})
    _ok(out, "DEEPSPEED OK 20")


@pytest.mark.parametrize("overlap", [False, True])
def test_deepspeed_zero3_mixed_gloo_mpi_table(overlap):
    args = ["--expect", BOTH] + (["--overlap-comm"] if overlap else [])
    out = run_mpi(2, "deepspeed_worker.py", *args, env={"MCR_TUNING_TABLE": MIXED})
    _ok(out, "DEEPSPEED OK 20")


@pytest.mark.parametrize("extra", [[], ["--async"], ["--divide", "4"]])
def test_fsdp2_torchrun_gloo(extra):
    _ok(run_torchrun(2, "fsdp_worker.py", *extra), "FSDP OK 20")


def test_fsdp2_mixed_gloo_mpi_table_async_premul():
    out = run_mpi(2, "fsdp_worker.py", "--async", "--divide", "4", "--expect", BOTH,
                  env={"MCR_TUNING_TABLE": MIXED})
    _ok(out, "FSDP OK 20")


def test_fsdp2_mpi_forced():
    out = run_mpi(2, "fsdp_worker.py", "--async", "--expect", "all_gather:mpi,reduce_scatter:mpi",
                  env={"MCR_BACKEND": "mpi"})
    _ok(out, "FSDP OK 20")
