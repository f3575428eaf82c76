"""HF tp_plan="auto" decode through the mcr torch.distributed backend, one process: the decode
step (static KV cache) captured in a CUDA graph three times, each with the backend's calls
going elsewhere: mcr's tables ("mcr"), NCCL through the same backend ("nccl":
force_backend("nccl"); the replays run NCCL's kernels, as plain torch NCCL's graph would), and
no communication ("floor": the backend's all-reduce and all-gather return at once; timing
only). Replays alternated A/B/C/C/B/A; eager steps the same way; a profiler pass per mode
for the collectives' share of a step. On CPU (--cpu): eager only, a smoke test of the path.

    torchrun --nproc_per_node=N lab/probes/hf_tp_graph.py CKPT [--batches 1,16] [--rounds 7]
    torchrun --nproc_per_node=N lab/probes/hf_tp_graph.py make CKPT LAYERS
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import statistics
import sys
import time

import torch
from pairstats import ci95

if sys.argv[1] == "make":
    from transformers import LlamaConfig, LlamaForCausalLM
    layers = int(sys.argv[3])
    big = layers > 2
    cfg = LlamaConfig(hidden_size=4096 if big else 64, intermediate_size=14336 if big else 128,
                      num_hidden_layers=layers, num_attention_heads=32 if big else 4,
                      num_key_value_heads=8 if big else 2, vocab_size=32000 if big else 128,
                      max_position_embeddings=2048, torch_dtype="bfloat16")
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16 if big else torch.float32)
    m.save_pretrained(sys.argv[2])
    sys.exit(0)

ap = argparse.ArgumentParser()
ap.add_argument("ckpt")
ap.add_argument("--batches", default="1,16")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--reps", type=int, default=30)
ap.add_argument("--prompt", type=int, default=32)
ap.add_argument("--eager-rounds", type=int, default=0, help="eager: rounds (default --rounds)")
ap.add_argument("--eager-reps", type=int, default=0, help="eager: steps a block (--reps)")
ap.add_argument("--cpu", action="store_true")
args = ap.parse_args()

from mcr.integrations import torch_backend, torch_works  # noqa: E402

torch_backend.install()
import torch.distributed as tdist  # noqa: E402
from transformers import AutoModelForCausalLM, StaticCache  # noqa: E402

import mcr.comm as dist  # noqa: E402

cuda = not args.cpu
# NCCL's kernels, mcr's low-latency kernel, torch's symmetric-memory ones.
COLL = re.compile(r"nccl|mcr_ll|one_shot|two_shot|multimem|all_reduce|allreduce", re.I)
model = AutoModelForCausalLM.from_pretrained(
    args.ckpt, tp_plan="auto", dtype=torch.bfloat16 if cuda else torch.float32)
dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
rank = tdist.get_rank()
PG = torch_backend.McrProcessGroup
_real = {"allreduce": PG.allreduce, "_allgather_base": PG._allgather_base}


def set_mode(mode: str) -> None:
    """Where the backend's calls go from now on (every rank at the same point)."""
    for name, fn in _real.items():
        setattr(PG, name, fn)
    dist.force_backend("nccl" if mode == "nccl" and cuda else None)
    if mode == "floor":
        PG.allreduce = lambda self, tensors, opts=None: torch_works.Done(tensors)
        PG._allgather_base = lambda self, out, inp, opts=None: torch_works.Done([out])


def rewind(cache: StaticCache) -> None:
    """Back to just after the prompt: transformers' static layers count their own write
    position on the GPU (cumulative_length, advanced by every step and every replay) and
    would write past the cache's end after max_cache_len - prompt steps."""
    for layer in cache.layers:
        cl = getattr(layer, "cumulative_length", None)
        if isinstance(cl, torch.Tensor):
            cl.fill_(args.prompt)
        elif isinstance(cl, int):
            layer.cumulative_length = args.prompt


def sync() -> None:
    """Wait for the GPU (nothing on CPU)."""
    if cuda:
        torch.cuda.synchronize()


res: dict = {}
for batch in [int(b) for b in args.batches.split(",")]:
    g0 = torch.Generator(dev).manual_seed(0)
    prompt = torch.randint(1, model.config.vocab_size, (batch, args.prompt), device=dev,
                           generator=g0)
    ids = torch.zeros(batch, 1, dtype=torch.long, device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    graphs, logits, caches, steps = {}, {}, {}, {}
    for mode in ("mcr", "nccl", "floor"):
        set_mode(mode)
        cache = caches[mode] = StaticCache(config=model.config,
                                           max_cache_len=args.prompt + args.reps + 32)
        with torch.no_grad():
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True,
                        cache_position=torch.arange(args.prompt, device=dev))
        ids.copy_(out.logits[:, -1:].argmax(-1))
        pos.fill_(args.prompt)

        def step(c: StaticCache = cache) -> torch.Tensor:
            """One decode step on this mode's cache: the logits."""
            with torch.no_grad():
                return model(input_ids=ids, past_key_values=c, use_cache=True,
                             cache_position=pos).logits
        steps[mode] = step
        for _ in range(3):      # warm-up: libraries set up before any capture
            step()
        sync()
        if cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream().wait_stream(side)
            rewind(cache)
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g):
                    logits[mode] = step()
            except Exception as e:   # noqa: BLE001 - say why, time eager only
                print(f"rank {rank}: CAPTURE FAILED {mode}: {type(e).__name__}: {e}",
                      flush=True)
                raise
            graphs[mode] = g
        else:
            logits[mode] = step()
    # Same inputs through each graph: the step's logits and greedy tokens, mcr against NCCL.
    ids.fill_(7)
    for mode in ("mcr", "nccl"):
        set_mode(mode)
        rewind(caches[mode])
        if cuda:
            graphs[mode].replay()
        else:
            logits[mode] = steps[mode]()
    sync()
    diff = (logits["mcr"].float() - logits["nccl"].float()).abs().max().item()
    same_tok = bool(torch.equal(logits["mcr"].argmax(-1), logits["nccl"].argmax(-1)))

    def block(mode: str, graph: bool) -> float:
        """ms per decode step over a block's steps."""
        set_mode(mode)
        c = caches[mode]
        rewind(c)
        sync()
        tdist.barrier()
        t0 = time.perf_counter()
        reps = args.reps if graph else args.eager_reps or args.reps
        for _ in range(reps):
            if graph:
                graphs[mode].replay()
            else:
                with torch.no_grad():
                    model(input_ids=ids, past_key_values=c, use_cache=True, cache_position=pos)
        sync()
        return (time.perf_counter() - t0) / reps * 1e3

    out_b: dict = {"logit_maxdiff_mcr_vs_nccl": diff, "same_greedy_tokens": same_tok}
    for graph in ([True, False] if cuda else [False]):
        t: dict[str, list[float]] = {m: [] for m in ("mcr", "nccl", "floor")}
        order = ["mcr", "nccl", "floor"]
        block("mcr", graph)
        for r in range(args.rounds if graph else args.eager_rounds or args.rounds):
            for m in (order if r % 2 == 0 else order[::-1]):
                t[m].append(block(m, graph))
        ratios = sorted(n / m for n, m in zip(t["nccl"], t["mcr"]))
        med = {m: statistics.median(v) for m, v in t.items()}
        gap = med["nccl"] - med["floor"]
        out_b["graph" if graph else "eager"] = {
            "ms": med, "ratio_median": statistics.median(ratios),
            "ratio_range": [ratios[0], ratios[-1]], "ratio_ci95": ci95(ratios),
            "captured": (med["nccl"] - med["mcr"]) / gap if gap > 0 else None,
            "blocks": t}
    if cuda:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        share = {}
        for mode in ("mcr", "nccl"):
            set_mode(mode)
            rewind(caches[mode])
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    graphs[mode].replay()
                sync()
            kernels: dict[str, float] = {}
            for e in prof.events():
                if e.device_type == DeviceType.CUDA:
                    kernels[e.name] = kernels.get(e.name, 0.0) + e.time_range.elapsed_us()
            coll = sum(us for k, us in kernels.items() if COLL.search(k))
            step_us = statistics.median(out_b["graph"]["blocks"][mode]) * 1e3
            share[mode] = {"collective_kernels_us_per_step": coll / 10,
                           "share_of_step": coll / 10 / step_us,
                           "top": sorted(((round(us / 10, 1), k[:60]) for k, us in
                                          kernels.items()), reverse=True)[:8]}
        out_b["profiler"] = share
    res[batch] = out_b
    graphs.clear()
    caches.clear()
    if cuda:
        torch.cuda.empty_cache()
set_mode("mcr")
if rank == 0:
    print("RESULT " + json.dumps(res), flush=True)
    dist.log_summary()
faulthandler.dump_traceback_later(60, exit=True)   # where a hung teardown waits
tdist.destroy_process_group()
print(f"rank {rank}: destroyed", flush=True)
os._exit(0)
