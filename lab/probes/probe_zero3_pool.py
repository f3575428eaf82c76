"""ZeRO-3's all-gather buffers: do their addresses repeat, and could they live in symmetric memory?

DeepSpeed 0.19.8 allocates each all-gather's output (`flat_tensor`, partition_parameters.py
`_all_gather_dtype`) with a plain `torch.empty` on its all-gather stream, inside
`PartitionedParameterCoordinator.__all_gather_params_`. This probe trains one ZeRO-3 engine in
alternated blocks of steps: the plain allocator, then that method under
`torch.cuda.use_mem_pool(symm_mem.get_mem_pool(device))`, and so on. Per block: ms per step,
memory, the pool's segments, all-gathers whose output sits in a pool segment not met before
(each would need one rendezvous, a collective: every rank must meet the same ones; with
--rendezvous the probe does it and times it). Per step, for all-gathers and reduce-scatters: calls,
distinct keys (output and input address, bytes: what sdma's CUDA-graph cache keys on), and what
a cache like sdma's (capture on the second sighting, --graphs graphs, least recently used out)
would replay. Answers for lab/notes/ ("A local copy waits"; "FSDP2 large": graph
thrash in ZeRO-3?).

DeepSpeed skips all-gathers in a world of one, so this needs two ranks. On one GPU both ranks
share it: DeepSpeed starts torch with Gloo and mcr serves every call by host-staged MPI (NCCL
refuses two ranks on one GPU; fp32, as MPI has no bf16 sum):

    MCR_BACKEND=mpi MCR_MPI_CUDA_AWARE=0 mpirun -np 2 python -m lab.probes.probe_zero3_pool \\
        --backend gloo --mcr --dtype float32
    torchrun --nproc_per_node=2 -m lab.probes.probe_zero3_pool --rendezvous      # two GPUs
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch
import torch.distributed as tdist

from mcr.config import from_env


class CacheSim:
    """sdma's GraphCache policy without the GPU: capture on the second sighting, LRU out."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.graphs: OrderedDict[Hashable, None] = OrderedDict()
        self.seen: OrderedDict[Hashable, None] = OrderedDict()
        self.direct = self.replays = self.captures = 0

    def run(self, key: Hashable) -> None:
        """Account one call."""
        if key in self.graphs:
            self.graphs.move_to_end(key)
            self.replays += 1
            return
        if key not in self.seen:
            self.seen[key] = None
            if len(self.seen) > 4 * self.capacity:
                self.seen.popitem(last=False)
            self.direct += 1
            return
        del self.seen[key]
        self.captures += 1
        self.graphs[key] = None
        if len(self.graphs) > self.capacity:
            self.graphs.popitem(last=False)


def main() -> None:
    """Alternate plain and pool blocks of ZeRO-3 steps; print one line per block and per step."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="large")
    ap.add_argument("--blocks", type=int, default=3, help="pairs of plain/pool blocks")
    ap.add_argument("--steps", type=int, default=3, help="steps per block")
    ap.add_argument("--backend", default="nccl", help="torch.distributed backend for DeepSpeed")
    ap.add_argument("--mcr", action="store_true", help="route deepspeed.comm through mcr")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--rendezvous", action="store_true",
                    help="rendezvous each new pool segment (needs one GPU per rank)")
    ap.add_argument("--graphs", type=int, default=from_env().sdma_graphs,
                    help="simulated graph cache capacity (default: MCR_SDMA_GRAPHS, as sdma's)")
    ap.add_argument("--dump", default="", help="write every step's call keys here (JSON, rank 0)")
    args = ap.parse_args()
    import deepspeed
    import deepspeed.comm.comm as dscc
    import torch.distributed._symmetric_memory as symm_mem
    from deepspeed.runtime.zero import partitioned_param_coordinator as ppc

    from benchmarks.train_step import SHAPES, batch, build_model, lm_loss

    if args.mcr:
        import mcr.integrations.deepspeed as mcr_ds
        mcr_ds.install()
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    if "OMPI_COMM_WORLD_RANK" in os.environ and "RANK" not in os.environ:
        # DeepSpeed's MPI discovery would bind cuda:LOCAL_RANK, absent where ranks share a GPU.
        os.environ.update(RANK=os.environ["OMPI_COMM_WORLD_RANK"],
                          WORLD_SIZE=os.environ["OMPI_COMM_WORLD_SIZE"],
                          LOCAL_RANK=str(dev.index), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29517"))
    if args.backend == "gloo":
        # Without DeepSpeed's device_id: bound to a device, a Gloo world makes torch 2.11 split
        # every later NCCL group from it, which fails (mcr binds NCCL for the world at start).
        tdist.init_process_group("gloo")
    deepspeed.init_distributed(dist_backend=args.backend)
    rank, world = tdist.get_rank(), tdist.get_world_size()
    if os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK")) \
            != os.environ.get("LOCAL_RANK"):
        # DeepSpeed's engine asserts the two agree and takes its device from them.
        os.environ.pop("OMPI_COMM_WORLD_LOCAL_RANK")
    torch.cuda.set_device(dev)
    shape = SHAPES[args.shape]
    dtype = getattr(torch, args.dtype)
    pool = symm_mem.get_mem_pool(dev)
    state: dict[str, Any] = {"on": False, "segs": set(), "new": 0, "rdv_s": 0.0, "calls": 0,
                             "in_pool": 0}
    keys: dict[str, list[Hashable]] = {"ag": [], "rs": []}
    sims = {k: CacheSim(args.graphs) for k in keys}
    history: list[dict[str, Any]] = []

    cls = ppc.PartitionedParameterCoordinator
    orig = cls._PartitionedParameterCoordinator__all_gather_params_

    def under_pool(self: Any, *a: Any, **k: Any) -> Any:
        ctx = torch.cuda.use_mem_pool(pool) if state["on"] else contextlib.nullcontext()
        with ctx:
            return orig(self, *a, **k)
    cls._PartitionedParameterCoordinator__all_gather_params_ = under_pool

    pool_bases: set[int] = set()

    def ag_seen(output_tensor: torch.Tensor, tensor: torch.Tensor) -> None:
        state["calls"] += 1
        keys["ag"].append((output_tensor.data_ptr(), tensor.data_ptr(),
                           output_tensor.numel() * output_tensor.element_size()))
        base = output_tensor.untyped_storage().data_ptr()
        if state["on"]:
            if base not in pool_bases:
                pool_bases.update(s["address"] for s in pool.snapshot(include_traces=False))
            if base in pool_bases:
                state["in_pool"] += 1
                if base not in state["segs"]:
                    state["segs"].add(base)
                    state["new"] += 1
                    if args.rendezvous:
                        t0 = time.perf_counter()
                        symm_mem.rendezvous(output_tensor, tdist.group.WORLD.group_name)
                        state["rdv_s"] += time.perf_counter() - t0

    def rs_seen(output_tensor: torch.Tensor, tensor: torch.Tensor) -> None:
        keys["rs"].append((output_tensor.data_ptr(), tensor.data_ptr(),
                           tensor.numel() * tensor.element_size()))

    # ZeRO-3 calls deepspeed.comm's allgather_fn / reduce_scatter_fn (mcr's, once installed).
    import deepspeed.comm as dsc
    def watched(f: Any, seen: Any) -> Any:
        def wrapped(output_tensor: torch.Tensor, tensor: torch.Tensor, *a: Any, **k: Any) -> Any:
            seen(output_tensor, tensor)
            return f(output_tensor, tensor, *a, **k)
        return wrapped
    for mod in (dsc, dscc):
        for name, seen in (("allgather_fn", ag_seen), ("reduce_scatter_fn", rs_seen)):
            setattr(mod, name, watched(getattr(mod, name), seen))

    ds_config = {
        "train_micro_batch_size_per_gpu": shape["mb"], "gradient_clipping": 1.0,
        "steps_per_print": 1 << 30, "bf16": {"enabled": dtype == torch.bfloat16},
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_param_persistence_threshold": 1e5},
    }
    model = build_model(shape, dtype, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
    tokens = shape["mb"] * shape["seq"] * world
    step_no = 0
    gib = 2.0**30

    def step_line(on: bool) -> str:
        parts = []
        history.append({"step": step_no, "pool": on, **{k: list(v) for k, v in keys.items()}})
        for k, ks in keys.items():
            sim = sims[k]
            before = (sim.direct, sim.replays, sim.captures)
            for key in ks:
                sim.run(key)
            d, r, c = (a - b for a, b in zip((sim.direct, sim.replays, sim.captures), before))
            parts.append(f"{k} {len(ks):4d} calls {len(set(ks)):4d} keys: {d:4d} direct "
                         f"{r:4d} replayed {c:3d} captured")
            ks.clear()
        return f"  step {step_no:3d} {'pool ' if on else 'plain'} " + " | ".join(parts)

    def block(on: bool, n: int) -> tuple[float, list[str], list[float]]:
        nonlocal step_no
        state.update(on=on, new=0, rdv_s=0.0, calls=0, in_pool=0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses, lines = [], []
        for _ in range(n):
            x, y = batch(step_no, rank, shape, dev)
            loss = lm_loss(engine, x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
            step_no += 1
            lines.append(step_line(on))
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n, lines, [float(v) for v in losses]

    _, lines, _ = block(False, 2)   # warm-up: DeepSpeed traces the module order first
    if rank == 0:
        print(f"# probe_zero3_pool: shape {args.shape} {args.dtype}, {world} ranks on "
              f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(dev)}, torch "
              f"{torch.__version__}, deepspeed {deepspeed.__version__}, backend {args.backend}"
              f"{' through mcr' if args.mcr else ''}; {tokens} tokens per step", flush=True)
        print("\n".join(lines), flush=True)
    for i in range(2 * args.blocks):
        on = bool(i % 2)
        dt, lines, losses = block(on, args.steps)
        snap = pool.snapshot(include_traces=False)
        if rank == 0:
            print(f"block {i} {'pool ' if on else 'plain'} {1e3 * dt:8.1f} ms/step "
                  f"{tokens / dt:9.0f} tok/s  reserved {torch.cuda.memory_reserved(dev) / gib:5.1f}"
                  f" GiB peak {torch.cuda.max_memory_allocated(dev) / gib:5.1f} GiB  "
                  f"all-gathers {state['calls']:4d} in pool {state['in_pool']:4d}  pool segments "
                  f"{len(snap):3d} ({sum(s['total_size'] for s in snap) / gib:5.2f} GiB)  "
                  f"new segments met {state['new']:3d} (rendezvous {1e3 * state['rdv_s']:6.1f} ms)"
                  f"  losses {' '.join(f'{v:.4f}' for v in losses)}", flush=True)
            print("\n".join(lines), flush=True)
        torch.cuda.reset_peak_memory_stats(dev)
    if args.dump and rank == 0:
        import json
        with open(args.dump, "w") as f:
            json.dump(history, f)
    tdist.barrier()
    if args.mcr:
        import mcr.comm
        mcr.comm.log_summary()
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
