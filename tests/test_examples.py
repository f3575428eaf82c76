"""Every script in examples/ runs on 2 CPU ranks under torchrun and under mpirun, as the README
shows it, and ends as it says it does."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, run_mpi, run_torchrun

EXAMPLES = ROOT / "examples"


def _run(launcher: str, name: str) -> str:
    env = {"DS_ACCELERATOR": "cpu"}
    if launcher == "torchrun":
        return run_torchrun(2, f"examples/{name}.py", env=env)
    return run_mpi(2, str(EXAMPLES / f"{name}.py"), env=env)


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_tensor_parallel_example_matches_the_unsharded_mlp(launcher):
    out = _run(launcher, "tensor_parallel")
    lib = "gloo" if launcher == "torchrun" else "mpi"
    for batch in (1, 16, 64):
        assert f"all-reduce on {lib}, matches the unsharded MLP" in out.split(f"batch {batch}:")[1]
    # The CPU tables want MPI, which torchrun cannot give: said once, at start, with the fix.
    notice = "the tables send some cpu calls to mpi, which cannot run here"
    assert out.count(notice) == (1 if launcher == "torchrun" else 0), out[-2000:]
    assert ("Launch with mpirun" in out) == (launcher == "torchrun")


def test_a_forced_library_that_cannot_run_is_said_at_start():
    """MCR_BACKEND=mpi under torchrun (no MPI there): said once, with the fix; the calls go
    where the tables send them, and the example still matches."""
    out = run_torchrun(2, "examples/tensor_parallel.py", env={"MCR_BACKEND": "mpi"})
    notice = "MCR_BACKEND=mpi names a library that cannot run here"
    assert out.count(notice) == 1, out[-2000:]
    assert out.count("all-reduce on gloo, matches the unsharded MLP") == 3, out[-2000:]


@pytest.mark.parametrize("name,op", [("fsdp2", "all_gather"), ("deepspeed_zero3", "all_gather"),
                                     ("ddp", "all_reduce")])
@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_training_examples_train_through_mcr(launcher, name, op):
    out = _run(launcher, name)
    losses = [float(v) for v in re.findall(r"step \d: loss ([0-9.]+)", out)]
    assert len(losses) == 5 and losses[-1] < losses[0], out[-2000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2), out[-2000:]
    lib = "gloo" if launcher == "torchrun" else "mpi"
    assert re.search(rf"{op}\s+{lib}\s", out), out[-2000:]
    if name == "ddp":        # the script's own init_process_group() started mcr's backend
        assert out.count("(backend mcr)") == 5, out[-2000:]


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_moe_example_matches_the_one_rank_layer_through_the_table(launcher):
    out = _run(launcher, "moe")
    for tokens in (8, 64, 512):
        assert f"{tokens} tokens a rank:" in out and "matches the one-rank layer" in \
            out.split(f"{tokens} tokens a rank:")[1].splitlines()[0], out[-2000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2), out[-2000:]
    # Uneven all-to-alls follow the table too: MPI where mpirun gives it, else Gloo.
    lib = "gloo" if launcher == "torchrun" else "mpi"
    assert re.search(rf"all_to_all\s+{lib}\s+12\s", out), out[-2000:]
