"""The whole mcr.comm API against numpy references, on real Gloo and real Open MPI."""

from __future__ import annotations

import re

import pytest
from conftest import gpus, run_mpi, run_torchrun


def _ok(out: str, n: int, word: str) -> None:
    lines = re.findall(rf"rank (\d+): {word}", out)
    assert sorted(int(x) for x in lines) == list(range(n)), out[-4000:]


def test_api_2_ranks_all_dtypes_to_16mib():
    _ok(run_mpi(2, "api_worker.py", "--big", "16MiB"), 2, "API OK")


def test_api_4_ranks_all_dtypes_to_1mib():
    _ok(run_mpi(4, "api_worker.py", "--big", "1MiB"), 4, "API OK")


@pytest.mark.parametrize("n", [2, 4])
def test_random_mixed_gloo_mpi_2000_ops(n):
    _ok(run_mpi(n, "random_worker.py", "--ops", "2000", "--seed", str(100 + n)), n,
        "RANDOM OK 2000 ops")


@pytest.mark.parametrize("launcher, n, backends, env", [
    ("mpi", 4, "auto,gloo,mpi,hier,gloo_lanes2,mpi_lanes2", {"MCR_LOCAL_SIZE": "2"}),
    ("mpi", 3, "auto,gloo,mpi", {"MCR_CHECK": "1"}),
    ("torchrun", 4, "auto,gloo,hier,gloo_lanes2", {"MCR_LOCAL_SIZE": "2"})])
def test_chaos_groups_libraries_dtypes_reduce_ops(launcher, n, backends, env):
    """Random calls on random groups (the world, mcr's new_group, torch's own new_group) with
    random libraries, dtypes and reduce ops, async waits shuffled: results bit-exact, declines
    alike on every rank. On 2 nodes x 2, groups whose members belong to different other
    groups make hier's node groups: torch's own names for them differed between members,
    which hung until the timeout."""
    env = dict(env, MCR_TIMEOUT_S="120")
    args = ("chaos_worker.py", "--ops", "400", "--seed", str(n * 10 + len(backends)),
            "--backends", backends)
    out = run_mpi(n, *args, env=env) if launcher == "mpi" else run_torchrun(n, *args, env=env)
    _ok(out, n, "CHAOS OK")


def test_random_mpi_blocking_and_nonblocking_forms():
    """MPI's blocking form (chunked; asynchronous calls on mcr's worker) from 1 KiB, the
    non-blocking below it, issued by the worker while it is busy: 4 ranks, async waits in
    shuffled order, no hang."""
    env = {"MCR_MPI_BLOCKING_BYTES": "1KiB", "MCR_MPI_CHUNK_BYTES": "4KiB"}
    _ok(run_mpi(4, "random_worker.py", "--ops", "1000", "--seed", "77", "--backends",
                "mpi,mpi,gloo", env=env), 4, "RANDOM OK 1000 ops")


@pytest.mark.parametrize("n", [2, 3])
def test_mpi_calls_synchronous_on_some_ranks_and_asynchronous_on_others(n):
    """A synchronous MPI call may run MPI's blocking form only where every rank does (MPI
    never matches it with the non-blocking one an asynchronous call takes): right sums, no
    wait past a few seconds."""
    _ok(run_mpi(n, "sync_async_worker.py", env={"MCR_TIMEOUT_S": "30"}, timeout=120), n,
        "SYNC-ASYNC OK")


@pytest.mark.parametrize("n", [2, 3])
def test_random_mpi_calls_synchronous_on_some_ranks_asynchronous_on_others(n):
    """Every op, the same calls made synchronously by some ranks and asynchronously by others:
    a rank waiting in the store's first-kind check keeps its MPI requests moving for a peer
    inside the synchronous form of an earlier call (it hung until MCR_TIMEOUT_S)."""
    _ok(run_mpi(n, "random_worker.py", "--ops", "400", "--seed", "91", "--backends",
                "mpi,mpi,gloo", "--own-async", env={"MCR_TIMEOUT_S": "60"}), n,
        "RANDOM OK 400 ops")


@pytest.mark.parametrize("launcher, n, extra, check", [
    ("mpi", 2, (), "0"), ("mpi", 2, ("--async",), "0"), ("mpi", 3, (), "0"),
    ("mpi", 3, (), "1"), ("torchrun", 2, ("--async",), "0")])
def test_same_results_as_torch_distributed_for_every_shape_and_dtype(launcher, n, extra, check):
    """Each collective through torch.distributed and through mcr on the same inputs (0-d,
    empty and 1- to 3-D tensors, bool to complex), sync or async: equal bits, or an error from
    both (a 0-d all_gather and 2-D gathers on Gloo raised through mcr only, before). With
    MCR_CHECK=1 on 3 ranks, a send from rank 0 to 1 hung: the check compared it across all 3."""
    # A case failing on one rank ends the run; the timeout backs that up.
    env = {"MCR_TIMEOUT_S": "60", "MCR_CHECK": check}
    out = run_mpi(n, "torch_diff_worker.py", "--backends", "gloo,mpi,auto", *extra, env=env) \
        if launcher == "mpi" else run_torchrun(n, "torch_diff_worker.py", *extra, env=env)
    _ok(out, n, "DIFF OK")


@pytest.mark.parametrize("backend", ["", "mpi"])
def test_same_results_as_deepspeed_comm_for_every_shape_and_dtype(backend):
    """The same through deepspeed.comm: DeepSpeed's own functions against the ones
    mcr.integrations.deepspeed.install() puts there (MCR_BACKEND=mpi: mcr's MPI where it
    serves, its fallback where MPI has no such reduction)."""
    pytest.importorskip("deepspeed", reason="pip install deepspeed (DS_BUILD_OPS=0)")
    out = run_mpi(2, "torch_diff_worker.py", "--api", "deepspeed", "--backends", "auto",
                  env={"MCR_TIMEOUT_S": "60", "MCR_BACKEND": backend})
    _ok(out, 2, "DIFF OK")


def test_torchrun_launch_gloo_only():
    """Under torchrun there is no MPI launcher: mpi declines, everything else works."""
    out = run_torchrun(2, "api_worker.py", "--backends", "gloo,auto", "--dtypes",
                       "float32,int64", "--big", "1MiB")
    _ok(out, 2, "API OK")


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ CUDA GPUs")
def test_api_gpu_nccl_mpi():
    n = gpus()
    out = run_mpi(n, "api_worker.py", "--device", "cuda", "--backends", "nccl,mpi,auto",
                  "--dtypes", "float32,float64,int32,int64,bfloat16", "--big", "16MiB")
    _ok(out, n, "API OK")


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ CUDA GPUs")
def test_same_results_as_torch_nccl_for_every_shape_and_dtype():
    """The same comparison on GPU tensors against torch's NCCL: NCCL, MPI, sdma and symm
    forced (each may decline what it does not serve, with BackendUnavailable) and auto."""
    n = gpus()
    for extra in ((), ("--async",)):
        out = run_mpi(n, "torch_diff_worker.py", "--device", "cuda", "--backends",
                      "nccl,mpi,sdma,symm,auto", *extra, env={"MCR_TIMEOUT_S": "60"})
        _ok(out, n, "DIFF OK")


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ CUDA GPUs")
def test_chaos_gpu_groups_libraries_dtypes():
    """The chaos run on GPU tensors: torch's NCCL groups adopted (their Gloo side made by
    their members alone), mcr's groups, every GPU library forced in turn and auto."""
    n = gpus()
    out = run_mpi(n, "chaos_worker.py", "--device", "cuda", "--ops", "600", "--backends",
                  "nccl,mpi,sdma,symm,auto", env={"MCR_TIMEOUT_S": "60"})
    _ok(out, n, "CHAOS OK")


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ CUDA GPUs")
def test_random_gpu_nccl_mpi():
    n = gpus()
    out = run_mpi(n, "random_worker.py", "--device", "cuda", "--backends", "nccl,mpi")
    _ok(out, n, "RANDOM OK 2000 ops")


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 1, reason="needs a CUDA GPU")
def test_special_values_give_torchs_answer_on_every_gpu_path():
    """The special-value matrix below on GPU tensors, one rank per GPU: NCCL, MPI, sdma, symm
    forced in turn and the table's choice (on one GPU each library's one-rank path)."""
    n = gpus()
    out = run_mpi(n, "special_worker.py", "--device", "cuda", "--backends",
                  "nccl,mpi,sdma,symm,auto", env={"MCR_TIMEOUT_S": "60"})
    _ok(out, n, "SPECIAL OK")


@pytest.mark.parametrize("launcher,n,guard", [("mpi", 2, "auto"), ("mpi", 4, "auto"),
                                              ("torchrun", 2, "auto"), ("mpi", 2, "data")])
def test_special_values_give_torchs_answer_on_every_path(launcher, n, guard):
    """NaN, +-Inf, -0.0 under MAX and MIN, int32 sums that wrap: every CPU path (Gloo, MPI,
    their lanes, the table's choice) gives torch's reduction of every rank's tensor; also
    with the cross-rank signature in the all-reduce's own message (MCR_GUARD=data)."""
    env = {"MCR_GUARD": guard}
    if launcher == "mpi":
        out = run_mpi(n, "special_worker.py", env=env)
    else:
        out = run_torchrun(n, "special_worker.py", "--backends", "gloo,gloo_lanes2,auto",
                           env=env)
    _ok(out, n, "SPECIAL OK")
