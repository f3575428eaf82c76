"""Could ZeRO-3's all-gather buffers live in symmetric memory? One process per GPU, DeepSpeed.

DeepSpeed 0.19.8 allocates each all-gather's output (`flat_tensor`, partition_parameters.py
`_all_gather_dtype`) with a plain `torch.empty` on its all-gather stream, inside
`PartitionedParameterCoordinator.__all_gather_params_`. This probe runs that method under
`torch.cuda.use_mem_pool(symm_mem.get_mem_pool(device))` in alternated blocks of steps (plain
allocator, pool, plain, pool, ...) of one ZeRO-3 engine, and reports per block: ms per step,
memory reserved, the pool's segments, how many all-gather outputs were in a pool segment not seen
before (each would need one rendezvous: a collective, so every rank must meet the same ones),
and the time those rendezvous took. Questions (benchmarks/NOTES.md, "A local copy waits"): does
the set of segments stop growing after the first pool block (rendezvous only at the start), what
does the pool cost in memory and step time, does DeepSpeed's loss stay the same.

    torchrun --nproc_per_node=1 -m probes.probe_zero3_pool --shape large --blocks 3 --steps 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

import torch
import torch.distributed as tdist


def main() -> None:
    """Alternate plain and pool blocks of ZeRO-3 steps; print one line per block."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="large")
    ap.add_argument("--blocks", type=int, default=3, help="pairs of plain/pool blocks")
    ap.add_argument("--steps", type=int, default=3, help="steps per block")
    args = ap.parse_args()
    import deepspeed
    import deepspeed.comm.comm as dscc
    import torch.distributed._symmetric_memory as symm_mem
    from deepspeed.runtime.zero import partitioned_param_coordinator as ppc

    from benchmarks.train_step import SHAPES, batch, build_model, lm_loss

    deepspeed.init_distributed(dist_backend="nccl")
    rank = tdist.get_rank()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    shape = SHAPES[args.shape]
    pool = symm_mem.get_mem_pool(dev)
    state: dict[str, Any] = {"on": False, "segs": set(), "new": 0, "rdv_s": 0.0, "calls": 0,
                             "in_pool": 0}

    cls = ppc.PartitionedParameterCoordinator
    orig = cls._PartitionedParameterCoordinator__all_gather_params_

    def under_pool(self: Any, *a: Any, **k: Any) -> Any:
        ctx = torch.cuda.use_mem_pool(pool) if state["on"] else contextlib.nullcontext()
        with ctx:
            return orig(self, *a, **k)
    cls._PartitionedParameterCoordinator__all_gather_params_ = under_pool

    orig_ag = dscc.all_gather_into_tensor
    pool_bases: set[int] = set()

    def ag(output_tensor: torch.Tensor, tensor: torch.Tensor, *a: Any, **k: Any) -> Any:
        state["calls"] += 1
        base = output_tensor.untyped_storage().data_ptr()
        if state["on"]:
            if base not in pool_bases:
                pool_bases.update(s["address"] for s in pool.snapshot(include_traces=False))
            if base in pool_bases:
                state["in_pool"] += 1
                if base not in state["segs"]:
                    state["segs"].add(base)
                    state["new"] += 1
                    t0 = time.perf_counter()
                    symm_mem.rendezvous(output_tensor, tdist.group.WORLD.group_name)
                    state["rdv_s"] += time.perf_counter() - t0
        return orig_ag(output_tensor, tensor, *a, **k)
    dscc.all_gather_into_tensor = ag

    ds_config = {
        "train_micro_batch_size_per_gpu": shape["mb"], "gradient_clipping": 1.0,
        "steps_per_print": 1 << 30, "bf16": {"enabled": True},
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_param_persistence_threshold": 1e5},
    }
    model = build_model(shape, torch.bfloat16, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
    tokens = shape["mb"] * shape["seq"] * tdist.get_world_size()
    step_no = 0

    def block(on: bool, n: int) -> tuple[float, list[float]]:
        nonlocal step_no
        state.update(on=on, new=0, rdv_s=0.0, calls=0, in_pool=0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses = []
        for _ in range(n):
            x, y = batch(step_no, rank, shape, dev)
            loss = lm_loss(engine, x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
            step_no += 1
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n, [float(v) for v in losses]

    block(False, 2)   # warm-up: DeepSpeed traces the module order on its first steps
    if rank == 0:
        print(f"# probe_zero3_pool: shape {args.shape}, {tdist.get_world_size()} rank(s), "
              f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, deepspeed "
              f"{deepspeed.__version__}; {tokens} tokens per step", flush=True)
    for i in range(2 * args.blocks):
        on = bool(i % 2)
        dt, losses = block(on, args.steps)
        snap = pool.snapshot(include_traces=False)
        gib = 2.0**30
        if rank == 0:
            print(f"block {i} {'pool ' if on else 'plain'} {1e3 * dt:8.1f} ms/step "
                  f"{tokens / dt:9.0f} tok/s  reserved {torch.cuda.memory_reserved(dev) / gib:5.1f}"
                  f" GiB peak {torch.cuda.max_memory_allocated(dev) / gib:5.1f} GiB  "
                  f"all-gathers {state['calls']:4d} in pool {state['in_pool']:4d}  pool segments "
                  f"{len(snap):3d} ({sum(s['total_size'] for s in snap) / gib:5.2f} GiB)  "
                  f"new segments met {state['new']:3d} (rendezvous {1e3 * state['rdv_s']:6.1f} ms)"
                  f"  losses {' '.join(f'{v:.4f}' for v in losses)}", flush=True)
        torch.cuda.reset_peak_memory_stats(dev)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
