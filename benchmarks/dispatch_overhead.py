"""What mcr adds per call over calling the library directly (target: <= 1 us on CPU
with Gloo, <= 2 us on GPU with NCCL, synchronous and async+wait).

Interleaves, round by round, each torch.distributed call and the same call through mcr.comm on
the same group, and reports medians and spread of each and of the paired difference against
its torch reference (sync against sync, async+wait against async+wait).

CPU (default): a 1-element float32 all_reduce on Gloo, forced (backend="gloo") and auto. Gloo's
own time on a loaded 2-core host swings by tens of microseconds, which buries a microsecond, so
a second block times the same calls with a no-op ProcessGroup standing in for Gloo (a stand-in:
it isolates the host cost of the Python on each side of the library call, and is named so;
mcr's cross-rank guard, mcr.guard, runs as it would on Gloo: a board in shared memory).

`--changing CALLS`: a job whose message size changes every call, each size a new kind of call
to mcr, against Gloo (and, under mpirun, MPI) called directly; `--step ELEMENTS` sets the sizes
(step, 2 x step, ... floats; 1 by default, the smallest messages, where mcr's host time weighs
most; 1024 for sizes as a dynamic sequence length x a hidden size of 1024 makes them).

`--deepspeed`: the calls ZeRO-3 makes most, through deepspeed.comm's own functions against the
same functions once mcr.integrations.deepspeed.install() has replaced them, side by side
(DeepSpeed's originals kept from before the install), on Gloo (CPU) or NCCL (`-d cuda`); no
stand-in (torch's all-gather looks its group up in torch's own maps). On one rank it shows host
cost: the library's call on a group of one is a local copy.

`--fsdp`: FSDP2's hot calls as FSDP2 makes them (output allocated by the comm object, the call
on a side stream, the output dropped after): FSDP2's own comm objects against mcr's
(mcr.integrations.fsdp; all-gather with plain outputs and with its ring of buffers, the ring in
plain memory so one rank can run it; reduce-scatter with AVG and with PREMUL_SUM), on Gloo (CPU)
or NCCL (`-d cuda`). On one rank it shows host cost.

`--op all_to_all`: all_to_all_single with equal splits instead of all_reduce (MoE's dispatch
and combine); on GPU mcr's symm is then compared with torch's NCCL call.

`-d cuda` (GPU, 2+ ranks): a small bf16 GPU all-reduce against torch's NCCL call, and mcr's symm
against the bare symmetric-memory kernel it launches. A sample is `--reps` calls then a device
sync, so each figure is per call, host or device, whichever is slower. `--profile` adds rank 0's
cProfile of each mcr variant.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

import mcr.comm as dist
from mcr import runtime

Variants = dict[str, tuple[Callable[[], Any], str | None]]   # name -> (call, reference name)


def _time(fn: Callable[[], Any], reps: int, sync: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def _ops(op: str, t: torch.Tensor) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(torch's call, mcr's call) of op on t: torch's takes (group, async_op), mcr's
    (backend, async_op). all_to_all: equal splits, into a second tensor like t."""
    if op == "all_reduce":
        return (lambda pg, a: tdist.all_reduce(t, group=pg, async_op=a),
                lambda be, a: dist.all_reduce(t, backend=be, async_op=a))
    out = torch.empty_like(t)
    return (lambda pg, a: tdist.all_to_all_single(out, t, group=pg, async_op=a),
            lambda be, a: dist.all_to_all_single(out, t, backend=be, async_op=a))


def _pairs(calls: tuple[Callable[..., Any], Callable[..., Any]], pg: Any, lib: str) -> Variants:
    """torch's call on pg and mcr's (forced to lib, and auto), sync and async+wait."""
    sync_ref, async_ref = f"torch.distributed ({lib})", f"torch.distributed ({lib}) async+wait"
    tc, mc = calls
    return {
        sync_ref: (lambda: tc(pg, False), None),
        async_ref: (lambda: tc(pg, True).wait(), None),
        f"mcr backend={lib}": (lambda: mc(lib, False), sync_ref),
        f"mcr backend={lib} async+wait": (lambda: mc(lib, True).wait(), async_ref),
        "mcr auto": (lambda: mc(None, False), sync_ref),
    }


class _NoopWork:
    """Stand-in for a library's Work that is already done."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class _DoneWork(tdist.Work):
    """Stand-in for a library's Work that is already done, as a torch Work (torch's
    all_to_all_single hands its group's work to C++)."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class NoopProcessGroup(tdist.ProcessGroup):
    """Stand-in for Gloo whose all_reduce and all_to_all return at once: what remains is host
    Python."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self._done = _NoopWork()
        self._done_torch = _DoneWork()

    def allreduce(self, tensors: Any, opts: Any = None) -> Any:
        return self._done

    def alltoall_base(self, *args: Any) -> Any:
        return self._done_torch

    all_to_all_single = alltoall_base     # torch >= 2.13's name


# ZeRO-3's hot calls: parameter all-gathers and gradient reduce-scatters, async, waited later.
_DS_CALLS = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")


def _deepspeed_functions(lib: str) -> tuple[dict[str, Callable[..., Any]],
                                            dict[str, Callable[..., Any]]]:
    """(DeepSpeed's own deepspeed.comm functions, the ones mcr's install() puts there)."""
    import deepspeed.comm as ds

    import mcr.integrations.deepspeed as mcr_ds
    ds.init_distributed(lib)     # on the torch.distributed mcr started: DeepSpeed's backend
    plain = {n: getattr(ds, n) for n in _DS_CALLS}
    mcr_ds.install()
    return plain, {n: getattr(ds, n) for n in _DS_CALLS}


def _deepspeed_pairs(fns: tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]],
                     n: int, pg: Any, device: str) -> Variants:
    """Each hot call through DeepSpeed's function (on pg) and through mcr's (its world)."""
    plain, ours = fns
    inp, big, small = (torch.ones(k, device=device) for k in (4, 4 * n, 4))
    calls = {
        "all_gather_into_tensor": lambda f, g: f(big, inp, group=g, async_op=True).wait(),
        "reduce_scatter_tensor": lambda f, g: f(small, big, group=g, async_op=True).wait(),
        "all_reduce": lambda f, g: f(inp, group=g),
    }
    v: Variants = {}
    for name, call in calls.items():
        ref = f"deepspeed.comm {name}"
        v[ref] = (lambda c=call, f=plain[name]: c(f, pg), None)
        v[f"{ref} via mcr"] = (lambda c=call, f=ours[name]: c(f, None), ref)
    return v


def _fsdp_pairs(n: int, pg: Any, device: str) -> Variants:
    """FSDP2's all-gather and reduce-scatter through its own comm objects and through mcr's."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    from mcr.integrations import fsdp
    dev = torch.device(device)
    side = torch.cuda.Stream() if dev.type == "cuda" else None
    inp, rs_in, rs_out = (torch.ones(k, device=dev) for k in (256, 256 * n, 256))

    def on_side(fn: Callable[[], Any]) -> None:
        """fn on the side stream, ordered after and before the caller's, as FSDP2 does."""
        if side is None:
            fn()
            return
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)

    def gather(comm: Any) -> Callable[[], Any]:
        def call() -> None:
            out = comm.allocate((256 * n,), dtype=inp.dtype, device=dev)
            on_side(lambda: comm(output_tensor=out, input_tensor=inp, group=pg, async_op=False))
        return call

    def scatter(comm: Any, op: Any) -> Callable[[], Any]:
        return lambda: on_side(lambda: comm(output_tensor=rs_out, input_tensor=rs_in, group=pg,
                                            op=op))

    ag_ref, avg_ref = "FSDP2 all-gather", "FSDP2 reduce-scatter AVG"
    pre_ref = "FSDP2 reduce-scatter PREMUL_SUM"
    premul = tdist._make_nccl_premul_sum(0.5) if device == "cuda" else None
    v: Variants = {
        ag_ref: (gather(DefaultAllGather()), None),
        f"{ag_ref} via mcr (plain outputs)": (gather(fsdp.AllGather(pg, buffers="plain")),
                                              ag_ref),
        f"{ag_ref} via mcr (ring of outputs)": (gather(fsdp.AllGather(pg, buffers="ring")),
                                                ag_ref),
        avg_ref: (scatter(DefaultReduceScatter(), tdist.ReduceOp.AVG), None),
        f"{avg_ref} via mcr": (scatter(fsdp.ReduceScatter(), tdist.ReduceOp.AVG), avg_ref),
    }
    if premul is not None:   # Gloo has no PREMUL_SUM (FSDP2 divides before the call there)
        v[pre_ref] = (scatter(DefaultReduceScatter(), premul), None)
        v[f"{pre_ref} via mcr"] = (scatter(fsdp.ReduceScatter(), premul), pre_ref)
    return v


def _gpu_variants(rt: runtime.Runtime, nbytes: int, op: str) -> Variants:
    """NCCL through torch and through mcr; symm through mcr against the bare symmetric-memory
    kernel it launches (all_reduce), or against torch's NCCL call (all_to_all: mcr's own
    low-latency kernel has no torch form)."""
    from mcr.backends.cuda.symm_mem import rendezvous, symm_empty
    pg = rt.world.handles["nccl"]
    dev = torch.device("cuda", torch.cuda.current_device())
    t = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=dev)
    calls = _ops(op, t)
    v = _pairs(calls, pg, "nccl")
    ref = "torch.distributed (nccl)"
    if op == "all_reduce":
        stage = symm_empty(nbytes, dev).view(torch.bfloat16)
        rendezvous(stage, pg)
        kernel = torch.ops.symm_mem.one_shot_all_reduce_copy_out
        ref = "symm kernel alone (torch.ops)"
        v[ref] = (lambda: kernel(stage, t, "sum", pg.group_name, t), None)
    v["mcr backend=symm"] = (lambda: calls[1]("symm", False), ref)
    v["mcr backend=symm async+wait"] = (lambda: calls[1]("symm", True).wait(), ref)
    return v


def _changing_sizes(pg: Any, rounds: int, n_calls: int, step: int) -> None:
    """A job whose message size changes every call: n_calls all-reduces of step, 2 x step ..
    n_calls x step float32 elements, each size once, through mcr (Gloo, MPI where launched
    by mpirun) and through the library directly (torch's Gloo call; mpi4py's Allreduce);
    blocks alternated A/B/B/A over `rounds` pairs, the median per call of each and of the
    ratio. mcr's decision caches are emptied before each block: every call is a new kind of
    call to mcr (in the first round its size classes are new too, compared through the
    store)."""
    # Views of one buffer, as a dynamic length's slice of a preallocated one (memory stays
    # n_calls x step floats); zeros, which sums leave finite.
    whole = torch.zeros(n_calls * step)
    ts = [whole[:k * step] for k in range(1, n_calls + 1)]
    variants: dict[str, Callable[[], Any]] = {
        "gloo directly (torch.distributed)": lambda: [tdist.all_reduce(t, group=pg) for t in ts],
        "mcr backend=gloo": lambda: [dist.all_reduce(t, backend="gloo") for t in ts]}
    pairs = [("mcr backend=gloo", "gloo directly (torch.distributed)")]
    if "mpi" in runtime.get().world.handles:
        from mpi4py import MPI
        comm, bufs = MPI.COMM_WORLD, [t.numpy() for t in ts]
        variants["MPI directly (mpi4py)"] = lambda: [comm.Allreduce(MPI.IN_PLACE, b, MPI.SUM)
                                                    for b in bufs]
        variants["mcr backend=mpi"] = lambda: [dist.all_reduce(t, backend="mpi") for t in ts]
        pairs.append(("mcr backend=mpi", "MPI directly (mpi4py)"))
    rt = runtime.get()
    res: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            rt.fast.clear()                       # every size a new kind of call to mcr
            rt.dispatcher.set_tables(rt.tables)
            tdist.barrier(group=pg)
            res[k].append(_time(variants[k], 1, lambda: None) / n_calls * 1e6)
    if dist.get_rank() == 0:
        print(f"# a new size every call: {n_calls} all-reduces of {step}..{n_calls * step} "
              "float32, "
              f"{dist.get_world_size()} ranks, {rounds} rounds; every call a new kind to mcr "
              "(its caches emptied before each block; size classes new in the first round)")
        for k, v in res.items():
            print(f"  {k:<40} first round {v[0]:8.1f} us/call, later rounds median "
                  f"{statistics.median(v[1:]):8.1f}")
        for a, b in pairs:
            ratio = [x / y for x, y in zip(res[a], res[b])]
            print(f"  {a} / {b}: first round {ratio[0]:.2f}x, later median "
                  f"{statistics.median(ratio[1:]):.2f}x [{min(ratio[1:]):.2f}-"
                  f"{max(ratio[1:]):.2f}]", flush=True)


def _measure(title: str, variants: Variants, rounds: int, reps: int,
             sync: Callable[[], Any]) -> dict[str, list[float]]:
    for fn, _ in variants.values():
        _time(fn, reps, sync)
    res: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, (fn, _) in variants.items():
            res[k].append(_time(fn, reps, sync) * 1e6)
    if dist.get_rank() == 0:
        print(f"# {title}")
        w = max(40, *(len(k) for k in res))
        print(f"# {'variant':<{w}} {'median us':>10} {'p10':>8} {'p90':>8} {'minus ref':>10} "
              f"{'diff p10':>9} {'diff p90':>9}  reference")
        for k, v in res.items():
            q = statistics.quantiles(v, n=10)
            ref = variants[k][1]
            line = f"  {k:<{w}} {statistics.median(v):>10.2f} {q[0]:>8.2f} {q[-1]:>8.2f}"
            if ref is not None:
                d = [a - b for a, b in zip(v, res[ref])]
                dq = statistics.quantiles(d, n=10)
                line += f" {statistics.median(d):>10.2f} {dq[0]:>9.2f} {dq[-1]:>9.2f}  {ref}"
            print(line, flush=True)
    return res


def main() -> None:
    """Measure and print."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--reps", type=int, default=20, help="calls per round and variant")
    ap.add_argument("-d", "--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--bytes", type=int, default=4096, help="GPU message size (-d cuda)")
    ap.add_argument("--op", choices=["all_reduce", "all_to_all"], default="all_reduce",
                    help="the call timed (all_to_all: all_to_all_single, equal splits)")
    ap.add_argument("--deepspeed", action="store_true",
                    help="ZeRO-3's calls through deepspeed.comm, DeepSpeed's own against mcr's")
    ap.add_argument("--fsdp", action="store_true",
                    help="FSDP2's calls through its own comm objects against mcr's")
    ap.add_argument("--changing", type=int, metavar="CALLS", default=0,
                    help="instead: a job whose size changes every call (CALLS all-reduces of "
                         "1..CALLS floats), mcr against the library called directly")
    ap.add_argument("--step", type=int, metavar="ELEMENTS", default=1,
                    help="with --changing: sizes of step, 2 x step, .. CALLS x step floats")
    ap.add_argument("--profile", action="store_true",
                    help="then print rank 0's cProfile of each variant, references included "
                         "(top 16 by own time)")
    args = ap.parse_args()
    if args.op != "all_reduce" and (args.deepspeed or args.fsdp or args.changing):
        ap.error(f"--op {args.op}: times the plain calls (not with --deepspeed, --fsdp, "
                 "--changing)")
    if args.step < 1 or (args.step != 1 and not args.changing):
        ap.error(f"--step {args.step}: a positive number of floats, with --changing")
    dist.init_distributed(verbose=False)
    rt = runtime.get()
    n = dist.get_world_size()
    head = f"{n} rank(s), {args.rounds} rounds x {args.reps} calls, torch {torch.__version__}"
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    lib = "nccl" if args.device == "cuda" else "gloo"
    if args.changing:
        _changing_sizes(rt.world.handles["gloo"], max(3, args.rounds), args.changing, args.step)
        dist.destroy_process_group()
        return
    if args.deepspeed:
        variants = _deepspeed_pairs(_deepspeed_functions(lib), n, rt.world.handles[lib],
                                    args.device)
        _measure(f"4-element float32 {args.device} calls through deepspeed.comm on {lib}, "
                 f"{head}", variants, args.rounds, args.reps, sync)
    elif args.fsdp:
        variants = _fsdp_pairs(n, rt.world.handles[lib], args.device)
        _measure(f"FSDP2's calls ({args.device}, float32, 256 elements a rank) on {lib}, {head}",
                 variants, args.rounds, args.reps, sync)
    elif args.device == "cuda":
        variants = _gpu_variants(rt, args.bytes, args.op)
        _measure(f"{args.bytes} B bfloat16 GPU {args.op}, {head}", variants, args.rounds,
                 args.reps, sync)
    else:
        # all_to_all: one element to each peer
        t = torch.ones(1 if args.op == "all_reduce" else n)
        variants = _pairs(_ops(args.op, t), rt.world.handles["gloo"], "gloo")
        _measure(f"{t.numel()}-element float32 CPU {args.op} on Gloo, {head}", variants,
                 args.rounds, args.reps, sync)
        noop = NoopProcessGroup(dist.get_rank(), n)
        rt.world.handles["gloo"] = noop
        rt.fast.clear()
        _measure(f"the same calls, a no-op ProcessGroup standing in for Gloo (host cost only), "
                 f"{head}", _pairs(_ops(args.op, t), noop, "gloo"), args.rounds, args.reps,
                 sync)
    if args.profile:
        _profile({k: fn for k, (fn, _) in variants.items()}, args.reps, sync)
    if dist.get_rank() == 0:
        from mcr import report
        print(report.summary(rt), flush=True)   # which library served mcr's variants
    dist.destroy_process_group()


def _profile(variants: dict[str, Callable[[], Any]], reps: int, sync: Callable[[], Any]) -> None:
    """Where each variant's host time goes (profiling inflates it; read the shares)."""
    for name, fn in variants.items():
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(10):
            _time(fn, reps, sync)
        pr.disable()
        if dist.get_rank() == 0:
            out = io.StringIO()
            pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(16)
            print(f"# profile: {name}, {10 * reps} calls")
            print("\n".join(ln for ln in out.getvalue().splitlines()[6:] if ln.strip()))


if __name__ == "__main__":
    main()
