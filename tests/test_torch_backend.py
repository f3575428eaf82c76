"""The `mcr` torch.distributed backend: torch code (DDP, FSDP2 with no mcr line, DTensor
tensor parallelism, a 2-D FSDP2 x TP mesh) trains with the losses of plain Gloo, bit for bit,
every call served by mcr; under mpirun with a table that mixes Gloo and MPI by size."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import ROOT, gpus, run_mpi, run_torchrun

MIXED = str(ROOT / "tests" / "data" / "mixed_cpu_np2.yaml")


def _losses(out: str, what: str, backend: str, n: int) -> list[str]:
    got = dict(re.findall(rf"rank (\d+): LOSSES {what} {backend} (\[[^]]*\])", out))
    assert sorted(int(r) for r in got) == list(range(n)), out[-3000:]
    assert len(set(got.values())) == 1, got      # every rank saw the same mean losses
    return got["0"]


def _run(launcher: str, n: int, what: str, backend: str, env: dict[str, str]) -> str:
    if launcher == "torchrun":
        return run_torchrun(n, "torch_backend_worker.py", what, backend, env=env, timeout=180)
    return run_mpi(n, "torch_backend_worker.py", what, backend, env=env, timeout=180)


@pytest.mark.parametrize("launcher,n,what", [
    ("torchrun", 2, "ddp"), ("torchrun", 2, "fsdp"), ("torchrun", 2, "tp"),
    ("mpi", 2, "ddp"), ("mpi", 2, "fsdp"), ("mpi", 2, "tp"), ("mpi", 4, "mesh"),
    ("torchrun", 4, "mesh"), ("torchrun", 2, "tpc"), ("mpi", 2, "tpc"), ("torchrun", 2, "ddpc")])
def test_torch_code_on_the_mcr_backend_trains_as_on_gloo(launcher, n, what):
    """tpc: the TP model under torch.compile (inductor), its all-reduces inside the compiled
    graph as functional collectives on the mcr group; ddpc: DDP under torch.compile (its bucket
    rebuild calls the group's broadcast from a graph break, which Dynamo must not trace)."""
    env = {"MCR_TUNING_TABLE": MIXED} if launcher == "mpi" and n == 2 else {}
    plain = _losses(_run(launcher, n, what, "gloo", {}), what, "gloo", n)
    out = _run(launcher, n, what, "mcr", env)
    assert _losses(out, what, "mcr", n) == plain, out[-3000:]
    if what == "tpc":   # one compiled graph a rank, no graph break
        # (ranks' lines may share a line of torchrun's output)
        assert sorted(re.findall(r"rank (\d+): COMPILED graphs [1-9]\d* breaks 0(?!\d)", out)) == \
            [str(r) for r in range(n)], out[-3000:]
    if what in ("fsdp", "mesh"):   # FSDP2 on mcr's groups calls mcr's comm objects directly
        comms = re.findall(r"rank \d+: COMMS ([\w.]+?AllGather) ([\w.]+?ReduceScatter)", out)
        assert comms == [("mcr.integrations.fsdp.AllGather",
                          "mcr.integrations.fsdp.ReduceScatter")] * n, out[-3000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and int(served.group(1)) >= 0.95 * int(served.group(2)), out[-3000:]
    if env:   # the table mixes the two libraries by size: both served calls
        assert re.search(r"\s+gloo\s+\d+", out) and re.search(r"\s+mpi\s+\d+", out), out[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 1, reason="needs a GPU")
@pytest.mark.parametrize("what", ["ddp", "fsdp", "tp"])
def test_torch_code_on_the_mcr_backend_trains_as_on_nccl_gpu(what):
    """The same on every GPU (up to 4), against plain NCCL: bit for bit up to 2 ranks (a sum
    of two is the same in any order), within float32 rounding above (symm sums in another
    order than NCCL's ring)."""
    n = min(gpus(), 4)
    plain = _losses(run_torchrun(n, "torch_backend_worker.py", what, "nccl", "cuda",
                                 timeout=300), what, "nccl", n)
    out = run_torchrun(n, "torch_backend_worker.py", what, "mcr", "cuda", timeout=300)
    got = _losses(out, what, "mcr", n)
    if n <= 2:
        assert got == plain, out[-3000:]
    else:
        a, b = ([float.fromhex(v) for v in ast.literal_eval(x)] for x in (got, plain))
        assert a == pytest.approx(b, rel=1e-5), out[-3000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and int(served.group(1)) >= 0.95 * int(served.group(2)), out[-3000:]


@pytest.mark.parametrize("what,how", [("fsdp", "reg"), ("ddp", "reg"), ("ddp", "regdev"),
                                      ("fsdp", "regmix")])
def test_register_alone_then_init_process_group_mcr(what, how):
    """register() and init_process_group("mcr") (regdev: "cpu:mcr,cuda:mcr", regmix:
    "cpu:gloo,cuda:mcr"), torch's own start: mcr starts at its first call, which for FSDP2 is
    its comm objects' (before any collective), for DDP a broadcast."""
    plain = _losses(_run("torchrun", 2, what, "gloo", {}), what, "gloo", 2)
    out = _run("torchrun", 2, what, how, {})
    assert _losses(out, what, "mcr", 2) == plain, out[-3000:]
    if what == "fsdp":   # the backend's hook gave FSDP2 mcr's comm objects
        assert out.count("COMMS mcr.integrations.fsdp.AllGather mcr.integrations.fsdp."
                         "ReduceScatter") == 2, out[-3000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2) != "0", out[-3000:]


def test_fsdp2_checkpoints_with_dcp_on_the_mcr_backend(tmp_path):
    """DCP's async_save (it asks the group for a CPU backend), dcp.load and a full state dict
    sent from rank 0 (set_model_state_dict picks its device from the group's): the losses
    after each repeat those after the save, and equal plain Gloo's."""
    runs = {}
    for backend in ("gloo", "mcr"):
        out = run_torchrun(2, "torch_backend_worker.py", "ckpt", backend, "cpu",
                           str(tmp_path / backend), timeout=180)
        runs[backend] = _losses(out, "ckpt", backend, 2)
    assert runs["mcr"] == runs["gloo"], runs
    losses = ast.literal_eval(runs["mcr"])
    assert losses[0:2] == losses[2:4] == losses[4:6], losses


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_mcr_torch_sends_a_script_s_own_init_to_mcr(launcher):
    """MCR_TORCH=1 and a script that never names mcr: its init_process_group("gloo") starts the
    mcr backend (the start-up hook of regular installs); under mpirun with no torch variables
    set by the script."""
    plain = _losses(_run(launcher, 2, "ddp", "gloo", {}), "ddp", "gloo", 2)
    out = _run(launcher, 2, "ddp", "env", {"MCR_TORCH": "1"})
    assert _losses(out, "ddp", "mcr", 2) == plain, out[-3000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2) != "0", out[-3000:]


@pytest.mark.parametrize("launcher,n", [("torchrun", 2), ("mpi", 4)])
def test_torch_s_other_calls_on_the_mcr_backend(launcher, n):
    """reduce, scatter, gather, all_to_all (list and uneven single), the object collectives,
    send and a receive from any source, barrier: each checked on every rank; monitored_barrier
    refused by torch itself (Gloo's alone), as the README says; an asynchronous all-reduce
    (DDP's buckets) under way when it returns where its library finishes it alone."""
    out = _run(launcher, n, "calls", "mcr", {})
    counts = dict(re.findall(r"rank (\d+): LOSSES calls mcr \['([^']*)'\]", out))
    assert sorted(int(r) for r in counts) == list(range(n)), out[-3000:]
    assert all(float.fromhex(c) >= 8 for c in counts.values()), counts
    if launcher == "torchrun":   # Gloo's: left under way, and checked to be
        assert sorted(re.findall(r"rank (\d+): UNDER WAY [1-9]", out)) == \
            [str(r) for r in range(n)], out[-3000:]
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2), out[-3000:]


def test_a_failed_async_all_reduce_raises_mcr_s_error_from_its_future():
    """DDP waits on an all-reduce's future, not its Work: a peer gone mid-job makes the
    future raise mcr's error naming the call and the library, not Gloo's alone."""
    out = run_torchrun(2, "torch_backend_worker.py", "gone", "mcr", timeout=120)
    assert re.search(r"rank 0: GONE \w+: .*all_reduce on backend 'gloo' \(16384 bytes\) "
                     r"failed in the library", out), out[-3000:]


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_hf_tp_plan_generates_the_tokens_of_plain_gloo(tmp_path, launcher):
    """A tiny random-init HF Llama with tp_plan="auto": transformers starts torch.distributed
    itself; with the backend installed that start is mcr's, and greedy decoding gives the
    tokens plain Gloo gives, every collective served by mcr."""
    import torch
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                   max_position_embeddings=64)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "llama")
    runner = run_torchrun if launcher == "torchrun" else run_mpi
    tokens = {}
    for mode in ("plain", "mcr"):
        out = runner(2, "hf_tp_worker.py", mode, str(tmp_path / "llama"), timeout=300)
        got = dict(re.findall(rf"rank (\d+): TOKENS {mode} (\[[^]]*\])", out))
        assert sorted(got) == ["0", "1"] and len(set(got.values())) == 1, out[-3000:]
        tokens[mode] = got["0"]
    assert tokens["mcr"] == tokens["plain"], tokens
    served = re.search(r"served by mcr: (\d+) of (\d+) calls", out)
    assert served and served.group(1) == served.group(2) != "0", out[-3000:]
