"""Fast GPU backends: decline rules everywhere, the mori interface (stand-in), GPUs when present."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as tdist
from conftest import gpus, run_mpi

from mcr.backends.sdma import SdmaBackend
from mcr.backends.symm import SymmBackend
from mcr.config import from_env
from mcr.groups import Group
from mcr.ops import CallKey


def _key(op: str, nbytes: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda",
         redop: object = None) -> CallKey:
    return CallKey(op, 4, nbytes, dtype, device, redop, "standalone")


def test_sdma_declines_by_key() -> None:
    """sdma names what it cannot serve, from rank-invariant fields only."""
    be = SdmaBackend(from_env(), "cuda")
    assert "GPU tensors" in be.decline_key(_key("all_gather", 64, device="cpu"))
    served = Group(ranks=[0, 1], rank=0, handles={"sdma": object()})
    assert "does not implement all_reduce" in be.decline(_key("all_reduce", 64), served)
    assert "equal-split" in be.decline_key(_key("all_to_all", -1))
    assert "integer" in be.decline_key(_key("reduce_scatter", 64, torch.int32,
                                            redop=tdist.ReduceOp.AVG))
    assert be.decline_key(_key("reduce_scatter", 64, redop=tdist.ReduceOp.SUM)) is None
    g = Group(ranks=[0, 1], rank=0, notes={"sdma": "ranks span 2 hosts"})
    assert be.decline(_key("all_gather", 64), g) == "ranks span 2 hosts"


@pytest.mark.parametrize("raw,msg", [("-1", "0 or more"), ("many", "not an integer")])
def test_sdma_graphs_env_is_checked(monkeypatch: pytest.MonkeyPatch, raw: str, msg: str) -> None:
    """A bad MCR_SDMA_GRAPHS is refused by name at init, not silently replaced."""
    monkeypatch.setenv("MCR_SDMA_GRAPHS", raw)
    with pytest.raises(ValueError, match=f"MCR_SDMA_GRAPHS.*{msg}"):
        from_env()
    monkeypatch.setenv("MCR_SDMA_GRAPHS", "0")
    assert from_env().sdma_graphs == 0


def test_symm_declines_by_key() -> None:
    """symm serves small sum/avg all-reduces of bf16/fp32 only."""
    be = SymmBackend.__new__(SymmBackend)
    be.cfg = from_env()
    assert be.decline_key(_key("all_reduce", 1024, redop=tdist.ReduceOp.SUM)) is None
    assert "exceed" in be.decline_key(_key("all_reduce", 1 << 30, redop=tdist.ReduceOp.SUM))
    assert "sum" in be.decline_key(_key("all_reduce", 64, redop=tdist.ReduceOp.MAX))
    assert "bfloat16" in be.decline_key(_key("all_reduce", 64, torch.int32,
                                             redop=tdist.ReduceOp.SUM))


def test_mori_engine_against_standin() -> None:
    """The ROCm sdma engine's calls into mori's API, with a named Gloo stand-in for mori."""
    out = run_mpi(2, "mori_worker.py", timeout=300)
    assert out.count("OK 32 checks against the mori stand-in") == 2


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ GPUs")
def test_fast_paths_gpu() -> None:
    """sdma and symm against NCCL on every GPU of this node."""
    out = run_mpi(gpus(), "fast_worker.py", "--big", "64MiB", timeout=900)
    assert out.count(" checks") == gpus()
