"""A/B of sdma's pipelined schedule inside one process: the sdma_pipe backend (pipelining from
MCR_SDMA_PIPELINE_BYTES per rank block) and sdma (whole blocks) on the world group, beside
NCCL, timed in interleaved rounds on the same inputs; every variant's output is compared with
NCCL's bit for bit first (integer-valued data, so sums are exact).

  mpirun -np N python -m lab.probes.probe_sdma_pipeline [--sizes 8MiB:1GiB] [--rounds 5]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from lab.probes.probe_util import mpi_rounds, say
from mcr import runtime
from mcr.backends.sdma.backend import SdmaBackend
from mcr.measure.engine import Case, Ctx
from mcr.measure.load import under_load
from mcr.measure.options import sizes
from mcr.units import format_bytes

OPS = ("all_gather", "all_gather_symm", "reduce_scatter", "all_to_all")


def calls(op: str, nbytes: int, n: int, me: int, sd: dict[str, SdmaBackend], g: Any
          ) -> dict[str, tuple[Callable[[], None], torch.Tensor]]:
    """name -> (one call, its output) for NCCL and each sdma variant; nbytes: full buffer."""
    dev = torch.device("cuda", torch.cuda.current_device())
    numel = nbytes // 2 // n * n
    gen = torch.Generator().manual_seed(1 + me)
    full = torch.randint(-8, 9, (numel,), generator=gen).to(torch.bfloat16).to(dev)
    block = full[:numel // n].clone()
    out: dict[str, tuple[Callable[[], None], torch.Tensor]] = {}
    world = tdist.group.WORLD
    if op.startswith("all_gather"):
        o = torch.empty(numel, dtype=torch.bfloat16, device=dev)
        out["nccl"] = (lambda: tdist.all_gather_into_tensor(o, block, group=world), o)
        for name, b in sd.items():
            ob = b.alloc_symmetric(numel * 2, g).view(torch.bfloat16) if op.endswith("symm") \
                else torch.empty(numel, dtype=torch.bfloat16, device=dev)
            out[name] = (lambda b=b, ob=ob: b.all_gather(ob, block, g, sync=True), ob)
    elif op == "reduce_scatter":
        o = torch.empty(numel // n, dtype=torch.bfloat16, device=dev)
        out["nccl"] = (lambda: tdist.reduce_scatter_tensor(o, full, group=world), o)
        for name, b in sd.items():
            ob = torch.empty_like(o)
            out[name] = (lambda b=b, ob=ob: b.reduce_scatter(ob, full, tdist.ReduceOp.SUM, g,
                                                             sync=True), ob)
    else:
        o = torch.empty_like(full)
        counts = [numel // n] * n
        out["nccl"] = (lambda: tdist.all_to_all_single(o, full, group=world), o)
        for name, b in sd.items():
            ob = torch.empty_like(full)
            out[name] = (lambda b=b, ob=ob: b.all_to_all(ob, full, counts, counts, g,
                                                         sync=True), ob)
    return out


def main() -> None:
    """Check, then time every op and size; print medians and write --csv on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="8MiB:1GiB", help="MIN:MAX full-buffer bytes (x4 steps)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="run each call on a side stream beside an N x N bf16 GEMM and time the "
                         "whole window (the tuner's overlap profile: N=4096); 0: standalone")
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    dist.init_distributed(verbose=False)
    n, me = dist.get_world_size(), dist.get_rank()
    rt = runtime.get()
    g = rt.world
    sd = {"pipe": rt.backends["sdma_pipe"], "whole": rt.backends["sdma"]}
    rows = []
    say(f"# sdma pipelined ({format_bytes(rt.cfg.sdma_pipeline_bytes)} per rank block) vs whole "
        f"blocks vs NCCL, {n} GPUs, bf16, {a.rounds} interleaved rounds; us per call (batch of "
        f"calls back to back)"
        + (f"; each beside a {a.load}^2 bf16 GEMM, whole window timed" if a.load else ""))
    for op in a.ops.split(","):
        for nbytes in sizes(a.sizes, 4, 2 * n):
            variants = calls(op, nbytes, n, me, sd, g)
            for fn, o in variants.values():
                o.zero_()
                fn()
            torch.cuda.synchronize()
            want = variants["nccl"][1]
            for name, (_, o) in variants.items():
                if not torch.equal(o, want):
                    raise AssertionError(f"{op} {nbytes} B: {name} differs from NCCL")
            iters = max(3, min(20, (256 << 20) // nbytes))
            fns = {k: v[0] for k, v in variants.items()}
            if a.load:
                # The tuner's overlap profile: the call on a side stream beside the GEMM.
                ctx = Ctx(me, n, torch.bfloat16, "cuda")
                fns = {k: partial(under_load(ctx, Case(lambda _be, fn=fn: fn()), a.load).call, None)
                       for k, fn in fns.items()}
            t = mpi_rounds(fns, iters, a.rounds, True)
            med = {k: statistics.median(v) for k, v in t.items()}
            say(f"{op:<16} {format_bytes(nbytes):>7}  nccl {med['nccl']:8.1f}  "
                f"whole {med['whole']:8.1f}  pipe {med['pipe']:8.1f}  "
                f"pipe/whole {med['whole'] / med['pipe']:.3f}x "
                f"[{min(w / p for w, p in zip(t['whole'], t['pipe'])):.3f}-"
                f"{max(w / p for w, p in zip(t['whole'], t['pipe'])):.3f}]  "
                f"pipe/nccl {med['nccl'] / med['pipe']:.3f}x  whole/nccl "
                f"{med['nccl'] / med['whole']:.3f}x")
            rows += [{"op": op, "bytes": nbytes, "variant": k, "round": i, "us": x}
                     for k, v in t.items() for i, x in enumerate(v)]
            del variants
    if a.csv and me == 0:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
