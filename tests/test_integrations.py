"""Real DeepSpeed ZeRO-3 and real FSDP2 on CPU, plain vs through mcr: equal losses, bit for bit."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, run_deepspeed, run_mpi, run_torchrun

MIXED = str(ROOT / "tests" / "data" / "mixed_cpu_np2.yaml")
BOTH = "all_gather:mpi,all_gather:gloo,reduce_scatter:mpi,reduce_scatter:gloo"


def _ok(out: str, word: str, n: int = 2) -> None:
    ranks = re.findall(rf"rank (\d+): {word}", out)
    assert sorted(int(r) for r in ranks) == list(range(n)), out[-6000:]


def _summary_at_exit(out: str, word: str) -> None:
    """MCR_SUMMARY=1: rank 0 printed the summary after its script's last line, at teardown."""
    last = out.rfind("mcr summary:")
    assert last > out.find(f"rank 0: {word}") >= 0, out[-6000:]
    assert "served by mcr:" in out[last:], out[last:]


deepspeed = pytest.importorskip("deepspeed", reason="pip install deepspeed (DS_BUILD_OPS=0)")


def test_deepspeed_zero3_torchrun_gloo():
    _ok(run_torchrun(2, "deepspeed_worker.py", "--expect", "all_gather:gloo"),
        "DEEPSPEED OK 20")


def test_deepspeed_zero3_compiled():
    """engine.compile() (torch.compile with inductor) around ZeRO-3: losses equal to plain."""
    _ok(run_torchrun(2, "deepspeed_worker.py", "--compile", "inductor", "--steps", "5"),
        "DEEPSPEED OK 5")


def test_deepspeed_zero3_install_before_init():
    _ok(run_torchrun(2, "deepspeed_worker.py", "--install-first", "--steps", "5"),
        "DEEPSPEED OK 5")


def test_deepspeed_env_var_routes_without_code_change():
    """MCR_DEEPSPEED=1: mcr's .pth hook installs the integration when DeepSpeed is imported."""
    out = run_torchrun(2, "deepspeed_worker.py", "--autoload", "--steps", "5",
                       env={"MCR_DEEPSPEED": "1", "MCR_SUMMARY": "1"})
    _ok(out, "DEEPSPEED OK 5")
    _summary_at_exit(out, "DEEPSPEED OK 5")


def test_hf_trainer_deepspeed_under_deepspeeds_launcher(tmp_path):
    """A Hugging Face Trainer with ZeRO-3, started by DeepSpeed's own launcher, with no line
    of mcr: MCR_DEEPSPEED=1 routes it, losses equal to the plain run's."""
    pytest.importorskip("accelerate", reason="pip install accelerate (Trainer with DeepSpeed)")
    files = {v: tmp_path / f"losses_{v}.json" for v in ("0", "1")}
    outs = {v: run_deepspeed(2, "hf_deepspeed_worker.py", str(f),
                             env={"MCR_DEEPSPEED": v, "DS_ACCELERATOR": "cpu"})
            for v, f in files.items()}
    for out in outs.values():
        _ok(out, "HF OK")
    losses = [json.loads(f.read_text()) for f in files.values()]
    assert len(losses[0]) == 4 and losses[0] == losses[1], losses
    assert len(re.findall(r"rank \d: SERVED", outs["1"])) == 2, outs["1"][-4000:]


def test_deepspeed_pipeline_parallel():
    """Two pipeline stages: activations and gradients by send/recv, through mcr (gloo)."""
    _ok(run_torchrun(2, "pipeline_worker.py"), "PIPELINE OK 4")


def test_deepspeed_pipeline_four_stages_on_two_nodes_mpi():
    """Four stages on 4 ranks as 2 nodes x 2: stage pairs within and across nodes over MPI."""
    out = run_mpi(4, "pipeline_worker.py", "--stages", "4", "--expect", "mpi",
                  env={"MCR_BACKEND": "mpi", "MCR_LOCAL_SIZE": "2"},
                  mpiexec_args=("--map-by", "slot"))
    _ok(out, "PIPELINE OK 4", 4)


def test_deepspeed_pipeline_parallel_mpi():
    _ok(run_mpi(2, "pipeline_worker.py", "--expect", "mpi", env={"MCR_BACKEND": "mpi"}),
        "PIPELINE OK 4")


def test_deepspeed_zero3_mpi_forced():
    out = run_mpi(2, "deepspeed_worker.py", "--expect", "all_gather:mpi,reduce_scatter:mpi",
                  env={"MCR_BACKEND": "mpi"})
    _ok(out, "DEEPSPEED OK 20")


@pytest.mark.parametrize("zero", ["1", "2", "offload", "accum", "init"])
def test_deepspeed_other_zero_configs(zero):
    """ZeRO-1, ZeRO-2, ZeRO-3 with CPU offload, with gradient accumulation, with the model
    made under deepspeed.zero.Init (parameters partitioned as they are made)."""
    _ok(run_torchrun(2, "deepspeed_worker.py", "--zero", zero, "--steps", "6"), "DEEPSPEED OK 6")


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_deepspeed_zero3_checkpoint_save_and_load(launcher, tmp_path):
    """engine.save_checkpoint / load_checkpoint through mcr: training resumes where it was."""
    args = ("deepspeed_worker.py", "--steps", "3", "--checkpoint", str(tmp_path / "ckpt"))
    out = run_torchrun(2, *args) if launcher == "torchrun" else \
        run_mpi(2, *args, "--expect", "all_gather:mpi", env={"MCR_BACKEND": "mpi"})
    _ok(out, "CHECKPOINT OK")


def test_deepspeed_zeropp_hpz_subgroups():
    """ZeRO++'s secondary partition: all-gathers on the 2-rank groups DeepSpeed makes."""
    _ok(run_torchrun(4, "deepspeed_worker.py", "--zero", "hpz", "--steps", "6"),
        "DEEPSPEED OK 6", 4)


def test_deepspeed_zeropp_hpz_subgroups_mpi():
    """The same over MPI's communicators. MPI sums four ranks' gradients in another order than
    gloo does, so losses agree to rounding, not bit for bit. DeepSpeed checks LOCAL_RANK against
    Open MPI's local rank, which follows the mapping: map by slot keeps them in rank order."""
    out = run_mpi(4, "deepspeed_worker.py", "--zero", "hpz", "--steps", "6", "--rtol", "1e-5",
                  "--expect", "all_gather:mpi", env={"MCR_BACKEND": "mpi"},
                  mpiexec_args=("--map-by", "slot"))
    _ok(out, "DEEPSPEED OK 6", 4)


def test_deepspeed_moe_expert_parallel():
    """DeepSpeed MoE, 4 experts over expert-parallel groups of 2, top-2 gating without dropped
    tokens: the routed tokens' all-to-alls and the capacity's all-reduce MAX through mcr."""
    _ok(run_torchrun(2, "ds_parallel_worker.py", "--model", "moe", "--k", "2", "--no-drop",
                     "--expect", "all_to_all:gloo"), "PARALLEL OK 6")


def test_deepspeed_moe_expert_parallel_mpi_4_ranks():
    """On 4 ranks DeepSpeed also makes expert-data-parallel groups: MPI communicators for them."""
    out = run_mpi(4, "ds_parallel_worker.py", "--model", "moe", "--k", "2", "--no-drop",
                  "--rtol", "1e-5", "--expect", "all_to_all:mpi", env={"MCR_BACKEND": "mpi"},
                  mpiexec_args=("--map-by", "slot"))
    _ok(out, "PARALLEL OK 6", 4)


@pytest.mark.parametrize("launcher, n, extra", [
    ("torchrun", 4, ("--sp", "2")),      # two sequence-parallel groups from DeepSpeed's mesh
    ("mpi", 2, ("--heads", "3")),        # heads split 2 + 1: all-to-alls with split sizes
])
def test_deepspeed_ulysses_sequence_parallel(launcher, n, extra):
    """DeepSpeed-Ulysses' DistributedAttention: q, k, v and the context by all-to-all."""
    args = ("ds_parallel_worker.py", "--model", "ulysses", *extra)
    out = run_torchrun(n, *args, "--expect", "all_to_all:gloo") if launcher == "torchrun" \
        else run_mpi(n, *args, "--expect", "all_to_all:mpi", env={"MCR_BACKEND": "mpi"})
    _ok(out, "PARALLEL OK 6", n)


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_deepspeed_sparse_embedding_gradients(launcher):
    """An nn.Embedding(sparse=True): DeepSpeed all-gathers its gradients' indices and 2-D
    values with the list form of all_gather (2-D tensors crashed Gloo through mcr before)."""
    args = ("ds_parallel_worker.py", "--model", "sparse")
    out = run_torchrun(2, *args, "--expect", "all_gather:gloo") if launcher == "torchrun" \
        else run_mpi(2, *args, "--expect", "all_gather:mpi", env={"MCR_BACKEND": "mpi"})
    _ok(out, "PARALLEL OK 6")


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
@pytest.mark.parametrize("model", ["autotp", "tp-inference"])
def test_deepspeed_autotp_training_and_inference(model, launcher):
    """DeepSpeed's AutoTP on a tiny Hugging Face Llama: training (losses equal to plain) and
    init_inference (tokens equal to the unsharded model's), the row-parallel all-reduces
    through mcr."""
    pytest.importorskip("transformers", reason="pip install transformers (a Llama to shard)")
    args = ("ds_parallel_worker.py", "--model", model)
    out = run_torchrun(2, *args, "--expect", "all_reduce:gloo") if launcher == "torchrun" \
        else run_mpi(2, *args, "--expect", "all_reduce:mpi", env={"MCR_BACKEND": "mpi"})
    _ok(out, "PARALLEL OK")


def test_deepspeed_inference_all_reduce_keeps_deepspeeds_shared_memory_kernel():
    """Where DeepSpeed runs its own CPU kernel for inference_all_reduce (LOCAL_SIZE states the
    world is one host), mcr leaves those calls to it (Gloo through mcr took 5x its time) and
    serves what the kernel cannot: an int64 tensor, a sub-group, MAX; sums against the
    reference and DeepSpeed's own bits."""
    out = run_torchrun(2, "ds_shm_worker.py")
    _ok(out, "SHM OK")


@pytest.mark.parametrize("overlap", [False, True])
def test_deepspeed_zero3_mixed_gloo_mpi_table(overlap):
    args = ["--expect", BOTH] + (["--overlap-comm"] if overlap else [])
    out = run_mpi(2, "deepspeed_worker.py", *args, env={"MCR_TUNING_TABLE": MIXED})
    _ok(out, "DEEPSPEED OK 20")


def test_fsdp2_env_var_routes_without_code_change():
    """MCR_FSDP=1: mcr's .pth hook makes fully_shard install mcr on each module it shards."""
    out = run_torchrun(2, "fsdp_worker.py", "--autoload", "--steps", "5",
                       env={"MCR_FSDP": "1", "MCR_SUMMARY": "1"})
    _ok(out, "FSDP OK 5")
    _summary_at_exit(out, "FSDP OK 5")


@pytest.mark.parametrize("extra", [[], ["--async"], ["--divide", "4"], ["--async", "--ring"]])
def test_fsdp2_torchrun_gloo(extra):
    _ok(run_torchrun(2, "fsdp_worker.py", *extra), "FSDP OK 20")


@pytest.mark.parametrize("variant, extra", [("mp", ()), ("keep", ()), ("accum", ()),
                                            ("prefetch", ("--async",)), ("shard1", ())])
def test_fsdp2_other_configs(variant, extra):
    """bf16 parameters with fp32 reduction; reshard_after_forward=False; gradient accumulation
    with set_requires_gradient_sync; torchtitan's explicit prefetching with async all-gathers;
    parameters sharded along dim 1."""
    _ok(run_torchrun(2, "fsdp_worker.py", "--variant", variant, "--steps", "6", *extra),
        "FSDP OK 6")


def test_fsdp2_compiled_layers():
    """Each sharded layer under torch.compile (inductor), as torchtitan compiles blocks."""
    _ok(run_torchrun(2, "fsdp_worker.py", "--compile", "--steps", "4"), "FSDP OK 4")


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_fsdp2_checkpoint_save_and_load_with_dcp(launcher, tmp_path):
    """torch.distributed.checkpoint around FSDP2 through mcr: training resumes where it was."""
    args = ("fsdp_checkpoint_worker.py", str(tmp_path / "dcp"))
    out = run_torchrun(2, *args) if launcher == "torchrun" else \
        run_mpi(2, *args, env={"MCR_BACKEND": "mpi"})
    _ok(out, "CHECKPOINT OK")


def test_fsdp2_reshard_to_a_smaller_group_after_forward():
    """reshard_after_forward=2 on 4 ranks: backward all-gathers run on 2-rank groups."""
    _ok(run_torchrun(4, "fsdp_worker.py", "--variant", "reshard2", "--steps", "6"),
        "FSDP OK 6", 4)


@pytest.mark.parametrize("n, variant", [(2, "mp"), (4, "reshard2"), (2, "shard1")])
def test_fsdp2_other_configs_mpi(n, variant):
    """bf16 all-gathers through MPI (which has no bf16 type); MPI communicators for the 2-rank
    groups FSDP2 makes to reshard after forward; dim-1 shards. Bit for bit with 2 ranks; with
    4, MPI sums the gradients in another order than Gloo (the last bit of a loss moves)."""
    out = run_mpi(n, "fsdp_worker.py", "--variant", variant, "--steps", "6",
                  "--expect", "all_gather:mpi", "--rtol", "0" if n == 2 else "1e-5",
                  env={"MCR_BACKEND": "mpi"})
    _ok(out, "FSDP OK 6", n)


def test_fsdp2_mixed_gloo_mpi_table_async_premul():
    out = run_mpi(2, "fsdp_worker.py", "--async", "--divide", "4", "--expect", BOTH,
                  env={"MCR_TUNING_TABLE": MIXED})
    _ok(out, "FSDP OK 20")


def test_fsdp2_hsdp_replica_all_reduce_through_mcr():
    """HSDP (2 replicas x 2 shards): the all-reduce across replicas, which FSDP2 makes through
    torch.distributed itself, is served by mcr too, on groups mcr did not create."""
    out = run_mpi(4, "fsdp_worker.py", "--hsdp", "--async", "--divide", "4", "--steps", "10",
                  "--expect", BOTH + ",all_reduce:gloo", env={"MCR_TUNING_TABLE": MIXED})
    _ok(out, "FSDP OK 10", 4)


def test_fsdp2_with_tensor_parallel_on_a_2d_mesh():
    """torchtitan's layout (2 shards x 2 tensor-parallel ranks): FSDP2's collectives through
    mcr on the shard sub-mesh, TP's DTensor all-reduces left to torch and listed; losses equal."""
    out = run_torchrun(4, "fsdp_worker.py", "--tp", "--async", "--steps", "10")
    _ok(out, "FSDP OK 10", 4)


def test_fsdp2_mpi_forced():
    out = run_mpi(2, "fsdp_worker.py", "--async", "--expect", "all_gather:mpi,reduce_scatter:mpi",
                  env={"MCR_BACKEND": "mpi"})
    _ok(out, "FSDP OK 20")


def test_train_step_median_interval_covers_as_it_says():
    """The pair ratios' interval for the median: for 12 pairs the 3rd and 10th of them
    (coverage 96.1%); for 5 their range (93.75%, below 95%). Drawn 20,000 times from a
    skewed distribution, the interval holds the true median as often as its coverage says."""
    import numpy as np

    from benchmarks.common import median_interval
    xs = [float(x) for x in range(12, 0, -1)]
    lo, hi, cover = median_interval(xs)
    assert (lo, hi) == (3.0, 10.0) and abs(cover - 0.9614) < 1e-4
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0])[:2] == (1.0, 5.0)
    rng = np.random.default_rng(3)
    for n in (5, 12, 20):
        draws = rng.lognormal(0.0, 0.5, size=(20_000, n))    # true median exp(0) = 1
        held = [lo <= 1.0 <= hi for lo, hi, _ in map(median_interval, draws.tolist())]
        assert abs(np.mean(held) - median_interval([0.0] * n)[2]) < 0.006, n


@pytest.mark.parametrize("framework", ["deepspeed", "fsdp"])
def test_train_step_benchmark_tiny_cpu(framework, tmp_path):
    """benchmarks/train_step.py end to end on CPU: every configuration trains, losses equal."""
    import json
    run_torchrun(2, "benchmarks/train_step.py", "--framework", framework, "--shape", "tiny",
                 "--pairs", "2", "--steps", "2", "--profile-steps", "1", "--out", str(tmp_path))
    res = json.loads((tmp_path / f"train_{framework}_tiny_np2.json").read_text())
    assert set(res["configs"]) == {"plain", "mcr", "mcr-nccl"}
    for name in ("mcr", "mcr-nccl"):
        row = res["configs"][name]
        assert row["loss_max_abs_diff"] == 0.0 and row["loss_equal_steps"] == 4, row
        assert len(row["ratios"]) == 2 and row["breakdown"]["wall_ms"] > 0
        lo, hi = row["ratio_median_interval"]
        assert (lo, hi) == (min(row["ratios"]), max(row["ratios"])) and \
            row["ratio_interval_coverage"] == 0.5 and 0 <= row["pairs_ahead"] <= 2
    assert (tmp_path / f"train_{framework}_tiny_np2.png").stat().st_size > 10_000
