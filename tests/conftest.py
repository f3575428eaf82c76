"""Launch helpers: run a worker script under mpiexec or torchrun and collect its output."""

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
    """Run tests/workers/<script> on n ranks under mpiexec; fail the test on a bad exit."""
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: pip install 'mcr[test]' installs Open MPI")
    cmd = [MPIEXEC, "-n", str(n), "--oversubscribe", *mpiexec_args, sys.executable,
           str(WORKERS / script), *args]
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


def gpus() -> int:
    """CUDA devices visible to this process."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
