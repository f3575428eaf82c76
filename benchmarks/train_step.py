"""Training steps with DeepSpeed ZeRO-3 or FSDP2: the plain framework against mcr, alternated.

A Llama-style decoder from transformers (random init, bf16 on GPUs), AdamW, random tokens. Every
configuration trains its own copy of the model, built from the same seed, on the same batches,
in one process per rank: blocks of `--steps` steps run in turn, configuration after
configuration, `--pairs` times, in orders that put each configuration right after each
other one about equally often (mcr.measure.turns), so drift on a shared machine and the cost of
switching copies hit all of them alike. Per block: tokens/s, step time, host time inside the
step (and the garbage collector's share of it), peak memory; against plain, the pair ratios,
their median, the pairs led and the median's distribution-free interval; per step: the loss of
every configuration (equal step by step is the correctness check on CPU; on GPUs compare with
plain2's difference). Then `--profile-steps`
steps of each configuration under torch.profiler give a breakdown of the step: GPU compute,
communication, communication not hidden under compute, GPU idle (host-bound) time, and where the
host's time went (the frameworks' collective ranges, CUDA runtime calls, the costliest ops).

Configurations (`--configs`):
  plain      the framework's own collectives (NCCL on GPUs, Gloo on CPU)
  plain2     a second plain copy: how far two runs of the same thing differ (GPU kernels such
             as attention backward are not bit-reproducible), the yardstick for loss equality
  mcr        mcr installed through its public one-liner; the tables decide
  mcr-nccl   mcr installed, every call forced to the default library (mcr.comm.force_backend):
             what mcr's own dispatch costs (on CPU: forced to Gloo)
  mcr-standalone  mcr installed, every call under the standalone profile (as before
             MCR_PROFILE=auto; FSDP2's all-gathers keep their overlap profile): what the
             overlap rules bring to calls on side streams
  mcr-plainbuf  FSDP2 only: mcr with all-gather outputs in plain memory (no symmetric ring)
  mcr-ring   FSDP2 only: mcr with all-gather outputs from a ring of plain buffers (the ring's
             reuse and waits without symmetric memory: what the ring costs, on any GPU count)
  torch-symm FSDP2 with torch's symmetric-memory comm (FSDPModule.set_symm_mem_for_comm), where
             the installed torch has it
Shapes: small (16 layers, hidden 2048, seq 1024, micro-batch 1), large (8 layers, hidden 4096,
seq 2048, micro-batch 2), tiny (CPU, Gloo: for the README and CI).

    torchrun --nproc_per_node=2 -m benchmarks.train_step --framework fsdp --shape small \\
        --out results/DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from benchmarks.common import GC, median_interval, profile_breakdown, sync
from mcr.backends import default_backend
from mcr.measure.turns import turn_orders

SHAPES = {
    "tiny": dict(layers=2, hidden=64, heads=4, inter=176, seq=32, mb=2, vocab=512),
    "small": dict(layers=16, hidden=2048, heads=16, inter=5632, seq=1024, mb=1, vocab=32000),
    "large": dict(layers=8, hidden=4096, heads=32, inter=11008, seq=2048, mb=2, vocab=32000),
}


@dataclass
class Trainer:
    """One configuration: its model copy, how to take a step, how to switch its comm on/off."""

    name: str
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    enter: Callable[[], None] = lambda: None
    leave: Callable[[], None] = lambda: None
    losses: list[float] = field(default_factory=list)
    blocks: list[dict[str, float]] = field(default_factory=list)


def build_model(shape: dict[str, int], dtype: torch.dtype, device: torch.device) -> Any:
    """A Llama-style decoder, random init from a fixed seed (same weights for every copy)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                      intermediate_size=shape["inter"], num_hidden_layers=shape["layers"],
                      num_attention_heads=shape["heads"], num_key_value_heads=shape["heads"],
                      max_position_embeddings=shape["seq"], attn_implementation="sdpa",
                      use_cache=False, tie_word_embeddings=False)
    torch.manual_seed(1234)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    model.train()
    return model


def batch(step: int, rank: int, shape: dict[str, int], device: torch.device
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random tokens for every configuration at a given step (per rank)."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    ids = torch.randint(0, shape["vocab"], (shape["mb"], shape["seq"] + 1), generator=g)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def lm_loss(model: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                             y.reshape(-1))


# -- DeepSpeed ZeRO-3 --------------------------------------------------------------------------

def deepspeed_trainers(configs: list[str], shape: dict[str, int], device: torch.device,
                       dtype: torch.dtype) -> list[Trainer]:
    """One ZeRO-3 engine per configuration; deepspeed.comm is routed through mcr only while an
    mcr configuration's block runs (install/uninstall)."""
    import deepspeed

    import mcr.integrations.deepspeed as mcr_ds
    bf16 = dtype == torch.bfloat16
    ds_config = {
        "train_micro_batch_size_per_gpu": shape["mb"],
        "gradient_clipping": 1.0,
        "steps_per_print": 1 << 30,
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_param_persistence_threshold": 1e5},
    }
    default = default_backend(device.type)
    out = []
    for name in configs:
        if name not in ("plain", "plain2", "mcr", "mcr-nccl", "mcr-standalone"):
            raise SystemExit(f"--configs: {name} is not a DeepSpeed configuration")
        mcr_ds.uninstall() if name.startswith("plain") else mcr_ds.install()
        model = build_model(shape, dtype, device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)

        def step(x: torch.Tensor, y: torch.Tensor, engine: Any = engine) -> torch.Tensor:
            loss = lm_loss(engine, x, y)
            engine.backward(loss)
            engine.step()
            return loss.detach()
        forced = default if name == "mcr-nccl" else None
        out.append(_in_profile(name, Trainer(
            name, step, enter=_deepspeed_enter(name, forced, mcr_ds),
            leave=lambda f=forced: dist.force_backend(None) if f else None)))
    return out


def _in_profile(name: str, t: Trainer) -> Trainer:
    """mcr-standalone: t's blocks run inside mcr.comm.profile("standalone")."""
    if name != "mcr-standalone":
        return t
    held: list[Any] = []
    enter, leave = t.enter, t.leave

    def enter_standalone() -> None:
        enter()
        held.append(dist.profile("standalone"))
        held[-1].__enter__()

    def leave_standalone() -> None:
        held.pop().__exit__(None, None, None)
        leave()
    t.enter, t.leave = enter_standalone, leave_standalone
    return t


def _deepspeed_enter(name: str, forced: str | None, mcr_ds: Any) -> Callable[[], None]:
    def enter() -> None:
        if name.startswith("plain"):
            mcr_ds.uninstall()
        else:
            mcr_ds.install()
            if forced:
                dist.force_backend(forced)
    return enter


# -- FSDP2 -------------------------------------------------------------------------------------

def fsdp_trainers(configs: list[str], shape: dict[str, int], device: torch.device,
                  dtype: torch.dtype) -> list[Trainer]:
    """One fully_shard-ed copy per configuration (per decoder layer, then the root; bf16
    params, fp32 reduce on GPUs)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    import mcr.integrations.fsdp as mcr_fsdp
    mesh = init_device_mesh(device.type, (tdist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    default = default_backend(device.type)
    out = []
    for name in configs:
        if name == "torch-symm" and not hasattr(FSDPModule, "set_symm_mem_for_comm"):
            if tdist.get_rank() == 0:
                print(f"train_step: torch {torch.__version__} has no "
                      "FSDPModule.set_symm_mem_for_comm; torch-symm skipped", flush=True)
            continue
        if name not in ("plain", "plain2", "mcr", "mcr-nccl", "mcr-plainbuf", "mcr-ring",
                        "mcr-standalone", "torch-symm"):
            raise SystemExit(f"--configs: {name} is not an FSDP2 configuration")
        model = build_model(shape, torch.float32, device)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        if name.startswith("mcr"):
            mcr_fsdp.install(model, buffers={"mcr-plainbuf": "plain",
                                             "mcr-ring": "ring"}.get(name, "auto"))
        elif name == "torch-symm":
            model.set_symm_mem_for_comm()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(x: torch.Tensor, y: torch.Tensor, model: Any = model,
                 opt: Any = opt) -> torch.Tensor:
            loss = lm_loss(model, x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        forced = default if name == "mcr-nccl" else None
        out.append(_in_profile(name, Trainer(
            name, step, enter=lambda f=forced: dist.force_backend(f) if f else None,
            leave=lambda f=forced: dist.force_backend(None) if f else None)))
    return out


# -- running -----------------------------------------------------------------------------------

def run_block(t: Trainer, first_step: int, steps: int, shape: dict[str, int],
              device: torch.device, tokens_per_step: int, record: bool) -> None:
    """`steps` steps of one configuration, timed as a whole; losses read after the block."""
    rank = tdist.get_rank()
    t.enter()
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0, gc0 = time.perf_counter(), GC.seconds
    losses, host = [], 0.0
    for i in range(steps):
        x, y = batch(first_step + i, rank, shape, device)
        h0 = time.perf_counter()
        losses.append(t.step(x, y))
        host += time.perf_counter() - h0
    sync(device)
    dt = time.perf_counter() - t0
    t.leave()
    if record:
        t.losses += [float(v) for v in losses]
        peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
        t.blocks.append({"first_step": first_step, "steps": steps, "seconds": dt,
                         "ms_per_step": 1e3 * dt / steps,
                         "tokens_per_s": tokens_per_step * steps / dt, "peak_gib": peak,
                         "host_ms_per_step": 1e3 * host / steps,
                         "gc_ms_per_step": 1e3 * (GC.seconds - gc0) / steps})


def breakdown(t: Trainer, first_step: int, steps: int, shape: dict[str, int],
              device: torch.device) -> dict[str, Any]:
    """Per step, ms: wall, GPU compute, communication (incl. device copies), the part of it not
    under compute, and GPU idle (host-bound) time; plus the ten GPU activities that took most."""
    from torch.profiler import ProfilerActivity, profile
    rank = tdist.get_rank()
    t.enter()
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for i in range(steps):
            t.step(*batch(first_step + i, rank, shape, device))
        sync(device)
        wall_us = (time.perf_counter() - t0) * 1e6
    t.leave()
    return profile_breakdown(prof, wall_us, steps)


def summarize(trainers: list[Trainer], args: argparse.Namespace) -> dict[str, Any]:
    """Medians and spreads per configuration; ratios of alternated pairs against plain."""
    res: dict[str, Any] = {"framework": args.framework, "shape": args.shape,
                           "world_size": tdist.get_world_size(), "torch": torch.__version__,
                           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available()
                           else "cpu", "steps_per_block": args.steps, "pairs": args.pairs,
                           "configs": {}}
    base = next((t for t in trainers if t.name == "plain"), None)
    for t in trainers:
        tps = [b["tokens_per_s"] for b in t.blocks]
        ms = [b["ms_per_step"] for b in t.blocks]
        row: dict[str, Any] = {
            "tokens_per_s_median": statistics.median(tps), "tokens_per_s": tps,
            "ms_per_step_median": statistics.median(ms),
            "ms_per_step_min": min(ms), "ms_per_step_max": max(ms),
            # Host time inside step() (the batch's copy in, which waits for the GPU, excluded):
            # near ms_per_step, the step is host-bound.
            "host_ms_per_step_median": statistics.median(b["host_ms_per_step"]
                                                         for b in t.blocks),
            "gc_ms_per_step_median": statistics.median(b["gc_ms_per_step"] for b in t.blocks),
            "peak_gib": max(b["peak_gib"] for b in t.blocks), "losses": t.losses,
        }
        if base is not None and t is not base:
            ratios = [x / y for x, y in zip(tps, (b["tokens_per_s"] for b in base.blocks))]
            diffs = [abs(a - b) for a, b in zip(t.losses, base.losses)]
            lo, hi, cover = median_interval(ratios)
            row.update(ratio_median=statistics.median(ratios), ratio_min=min(ratios),
                       ratio_max=max(ratios), ratios=ratios,
                       ratio_median_interval=[lo, hi], ratio_interval_coverage=cover,
                       pairs_ahead=sum(r > 1 for r in ratios),
                       loss_max_abs_diff=max(diffs) if diffs else 0.0,
                       loss_equal_steps=sum(d == 0 for d in diffs))
        res["configs"][t.name] = row
    return res


def plot(res: dict[str, Any], path: Path) -> None:
    """tokens/s per block and loss per step, one line per configuration."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, row in res["configs"].items():
        a.plot(range(1, len(row["tokens_per_s"]) + 1), row["tokens_per_s"], "o-", label=name)
        b.plot(row["losses"], label=name, alpha=0.8)
    a.xaxis.get_major_locator().set_params(integer=True)
    a.set(xlabel="alternated block", ylabel="tokens/s (all ranks)",
          title=f"{res['framework']} {res['shape']}, {res['world_size']} x {res['device']}")
    b.set(xlabel="step", ylabel="loss", title="loss per step")
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Parse, build, alternate, profile, report."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=["deepspeed", "fsdp"], required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--configs", default="plain,mcr,mcr-nccl")
    ap.add_argument("--pairs", type=int, default=5, help="rounds of alternated blocks")
    ap.add_argument("--steps", type=int, default=6, help="steps per block")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per configuration")
    ap.add_argument("--profile-steps", type=int, default=2, help="0: no breakdown")
    ap.add_argument("--out", default="", help="folder for JSON, CSV and the plot (rank 0)")
    args = ap.parse_args()
    dist.init_distributed(verbose=False)
    rank, world = tdist.get_rank(), tdist.get_world_size()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    shape = SHAPES[args.shape]
    build = deepspeed_trainers if args.framework == "deepspeed" else fsdp_trainers
    trainers = build(args.configs.split(","), shape, device, dtype)
    tokens = shape["mb"] * shape["seq"] * world
    step = 0
    for t in trainers:                  # warm-up: every copy takes the same first steps
        run_block(t, step, args.warmup, shape, device, tokens, record=False)
    step += args.warmup
    for p, order in enumerate(turn_orders(len(trainers), args.pairs)):
        # Whichever copy runs first after a switch, or right after a given other one, pays for
        # it: each round's order puts every copy after every other one alike over the rounds.
        for i in order:
            run_block(trainers[i], step, args.steps, shape, device, tokens, record=True)
        step += args.steps
        if rank == 0:
            print(f"pair {p + 1}/{args.pairs}: " + ", ".join(
                f"{t.name} {t.blocks[-1]['ms_per_step']:.1f} ms/step" for t in trainers),
                flush=True)
    res = summarize(trainers, args)
    if args.profile_steps:
        for t in trainers:
            res["configs"][t.name]["breakdown"] = breakdown(t, step, args.profile_steps, shape,
                                                            device)
    rows = dist.log_summary(return_dict=True)
    res["mcr_served"] = [r for r in rows if r["kind"] in ("served", "profile", "bypass", "note")]
    if rank == 0:
        print(json.dumps({k: {kk: vv for kk, vv in v.items()
                              if kk not in ("losses", "tokens_per_s", "ratios")}
                          for k, v in res["configs"].items()}, indent=1), flush=True)
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            stem = f"train_{args.framework}_{args.shape}_np{world}"
            res["command"] = " ".join(["torchrun", f"--nproc_per_node={world}",
                                       "-m", "benchmarks.train_step"] + os.sys.argv[1:])
            (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
            plot(res, out / f"{stem}.png")
    tdist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
