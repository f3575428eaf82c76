"""mcr.comm has every public function of deepspeed.comm, with DeepSpeed's parameters in
DeepSpeed's order (checked against the installed DeepSpeed)."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import mcr.comm as dist
from mcr.errors import CallError

os.environ.setdefault("DS_ACCELERATOR", "cpu")
ds = pytest.importorskip("deepspeed.comm.comm")

# The comms logger's helpers inside deepspeed.comm, which its timed_op decorator uses: mcr
# times its own calls, so they have no use on mcr.comm.
LOGGER_HELPERS = {"get_debug_log_name", "get_default_args", "get_msg_size_from_args",
                  "get_tensor_kwarg", "get_tensor_position"}


def _public_functions():
    return sorted(n for n, v in vars(ds).items() if inspect.isfunction(v) and
                  not n.startswith("_") and v.__module__ == ds.__name__)


def test_every_deepspeed_comm_function_is_there_with_its_parameters_in_order():
    missing, differ = [], []
    for name in _public_functions():
        if name in LOGGER_HELPERS:
            continue
        mine = getattr(dist, name, None)
        if mine is None:
            missing.append(name)
            continue
        theirs = [p.name for p in inspect.signature(getattr(ds, name)).parameters.values()
                  if p.kind is not p.VAR_KEYWORD and p.kind is not p.VAR_POSITIONAL]
        ours = [p.name for p in inspect.signature(mine).parameters.values()]
        if theirs and not inspect.signature(mine).parameters.keys() >= {"args"} and \
                ours[:len(theirs)] != theirs:
            differ.append(f"{name}: deepspeed {theirs}, mcr {ours}")
    assert not missing, f"missing from mcr.comm: {missing}"
    assert not differ, "\n".join(differ)


def test_launcher_helpers_read_the_launcher_as_deepspeed_does(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
              "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    for env in ({}, {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"},
                {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                 "OMPI_COMM_WORLD_LOCAL_RANK": "2"}):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            for f in ("get_world_rank_from_launcher", "get_world_size_from_launcher",
                      "get_local_rank_from_launcher"):
                assert getattr(dist, f)() == getattr(ds, f)(), (f, env)
    for f, var in (("in_aml", "AZUREML_EXPERIMENT_ID"), ("in_aws_sm", "SM_TRAINING_ENV"),
                   ("in_dlts", "DLTS_JOB_ID")):
        assert getattr(dist, f)() is False
        monkeypatch.setenv(var, "x")
        assert getattr(dist, f)() is True and getattr(ds, f)() is True


def test_logger_queries_follow_what_was_timed():
    dist.init_distributed(verbose=False)
    try:
        assert dist.is_available()
        dist.configure(enabled=True)
        dist.reset_log()
        assert not dist.has_comm_data() and dist.get_comm_operation_count() == 0
        for _ in range(3):
            dist.all_reduce(torch.ones(4))
        dist.broadcast(torch.ones(2), src=0)
        assert dist.has_comm_data()
        assert dist.get_comm_operation_count() == 4
        assert dist.get_logged_comm_ops() == ["all_reduce", "broadcast"]
        dist.reset_log()
        assert not dist.has_comm_data() and dist.get_logged_comm_ops() == []
        assert dist.timed_op(len) is len
    finally:
        dist.configure(enabled=False)
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["mpi_discovery", "set_backend", "init_deepspeed_backend",
                                  "patch_aml_env_for_torch_nccl_backend",
                                  "patch_aws_sm_env_for_torch_nccl_backend"])
def test_deepspeed_start_up_internals_are_refused_naming_init_distributed(name):
    with pytest.raises(CallError, match=rf"mcr.comm.{name}: .*init_distributed"):
        getattr(dist, name)()
