"""What the `mcr` torch.distributed backend adds per call over torch's own group on the same
library: the calls DDP, DTensor tensor parallelism and plain torch code make, through
torch.distributed on a group of the `mcr` backend against the same calls on torch's Gloo (CPU)
or NCCL (`-d cuda`) group.

- DDP's bucket: `allreduce` on the group, the Work's future, the future waited (the reducer's
  path; on GPU the future completes on the GPU, so this is host time).
- `torch.distributed.all_reduce`, synchronous; `all_gather_into_tensor` and
  `reduce_scatter_tensor`, asynchronous then waited.
- A functional all-reduce then its wait (DTensor's Partial -> Replicate, tensor parallelism's
  row-parallel output).

On one rank it shows host cost: the library's call on a group of one is a local copy. On CPU a
second block times the calls with a no-op ProcessGroup standing in for Gloo on both sides (a
stand-in: it isolates the host Python around the library call, and is named so). Blocks
alternate variant by variant within each round (benchmarks.dispatch_overhead's measure).

    torchrun --nproc-per-node 2 -m benchmarks.backend_overhead
    torchrun --nproc-per-node 1 -m benchmarks.backend_overhead -d cuda
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr import runtime
from mcr.integrations import torch_backend

from . import dispatch_overhead
from .dispatch_overhead import Variants, _measure


class _DoneWithFuture(dispatch_overhead._DoneWork):
    """The stand-in's done Work, its future set (DDP waits on the future)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self._fut: torch.futures.Future = torch.futures.Future()
        self._fut.set_result(tensors)

    def get_future(self) -> torch.futures.Future:
        return self._fut


class NoopProcessGroup(dispatch_overhead.NoopProcessGroup):
    """dispatch_overhead's stand-in for Gloo, its all-reduce's done Work with a future."""

    def __init__(self, rank: int, size: int, t: torch.Tensor) -> None:
        super().__init__(rank, size)
        self._done = _DoneWithFuture([t])


def _calls(pg: Any, t: torch.Tensor, n: int, direct: bool) -> dict[str, Callable[[], Any]]:
    """The timed calls on group pg (t: the all-reduce's tensor, also the gathered input);
    direct: the group's own methods only (a stand-in is in none of torch's maps)."""
    bucket = {"DDP bucket (allreduce, get_future, wait)":
              lambda: pg.allreduce([t]).get_future().wait()}
    if direct:
        return {**bucket, "allreduce, wait": lambda: pg.allreduce([t]).wait()}
    funcol = torch.ops._c10d_functional
    name = pg.group_name
    out, rs_in = t.new_empty(n * t.numel()), t.new_zeros(n * t.numel())
    return {
        **bucket,
        "all_reduce": lambda: tdist.all_reduce(t, group=pg),
        "all_gather_into_tensor async+wait":
            lambda: tdist.all_gather_into_tensor(out, t, group=pg, async_op=True).wait(),
        "reduce_scatter_tensor async+wait":
            lambda: tdist.reduce_scatter_tensor(t, rs_in, group=pg, async_op=True).wait(),
        "functional all_reduce + wait":
            lambda: funcol.wait_tensor(funcol.all_reduce(t, "sum", name)),
    }


def _pairs(torch_pg: Any, mcr_pg: Any, lib: str, t: torch.Tensor, n: int) -> Variants:
    """Each call on torch's group (the reference) and on the mcr group, side by side."""
    v: Variants = {}
    direct = isinstance(torch_pg, NoopProcessGroup)
    ours = _calls(mcr_pg, t, n, direct)
    for k, fn in _calls(torch_pg, t, n, direct).items():
        ref = f"{k} on {lib}"
        v[ref] = (fn, None)
        v[f"{k} on mcr"] = (ours[k], ref)
    return v


def main() -> None:
    """Measure and print."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100, help="rounds, each variant once a round")
    ap.add_argument("--reps", type=int, default=20, help="calls per round and variant")
    ap.add_argument("-d", "--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--elements", type=int, default=256,
                    help="elements of each rank's tensor (float32 on CPU, bfloat16 on GPU)")
    args = ap.parse_args()
    if args.rounds < 3 or args.reps < 1 or args.elements < 1:
        ap.error("--rounds >= 3, --reps >= 1, --elements >= 1")
    torch_backend.register()
    dist.init_distributed(verbose=False)
    rt = runtime.get()
    n = dist.get_world_size()
    lib = "nccl" if args.device == "cuda" else "gloo"
    if lib not in rt.world.handles:
        raise SystemExit(f"backend_overhead: no {lib} group in mcr's world "
                         f"({sorted(rt.world.handles)}); -d cuda needs a GPU a rank")
    mcr_pg = tdist.new_group(backend=torch_backend.NAME)
    dev = torch.device("cuda", torch.cuda.current_device()) if lib == "nccl" else None
    # zeros: repeated sums stay finite
    t = torch.zeros(args.elements, dtype=torch.bfloat16 if dev else torch.float32, device=dev)
    sync = torch.cuda.synchronize if dev else (lambda: None)
    head = (f"{n} rank(s), {args.rounds} rounds x {args.reps} calls, {t.nbytes} B {t.dtype} "
            f"a rank, torch {torch.__version__}")
    _measure(f"torch.distributed calls on an mcr group against {lib}'s own group, {head}",
             _pairs(rt.world.handles[lib], mcr_pg, lib, t, n), args.rounds, args.reps, sync)
    if dev is None:
        noop = NoopProcessGroup(dist.get_rank(), n, t)
        rt.world.handles["gloo"] = noop
        rt.fast.clear()
        _measure(f"the same calls, a no-op ProcessGroup standing in for Gloo on both sides "
                 f"(host cost only), {head}", _pairs(noop, mcr_pg, "stand-in", t, n),
                 args.rounds, args.reps, sync)
    if dist.get_rank() == 0:
        from mcr import report
        print(report.summary(rt), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
