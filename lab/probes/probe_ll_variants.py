"""symm's low-latency all-reduce kernel, variants side by side, against NCCL; then mcr.comm's
eager paths (replayed graph, fixed buffer) against NCCL's eager call; PARTS=pdl: the shipped
kernel launched plainly and early (programmatic dependent launch), bare and between GEMMs.

Variants: v0 (mcr's kernel: the block's call number read by one thread, then a block barrier,
then the data) as it ships (512 threads, at most 64 blocks) and with smaller blocks and as many
more of them (v0-TxB: T threads, at most B blocks), v1 (every thread reads the number beside its
data; the barrier moved to the end, VARIANTS=v1), alt (the kernel source at LL_ALT);
"empty": a kernel that does nothing, the floor of one kernel node in the chain. Per size: GPU
us per call inside a CUDA graph of 50 back-to-back calls (events around replays; slowest
rank; median of rounds in rotated order), each variant's result against NCCL's (bf16
rounding), ranks' bits equal.

    [PARTS="kernels pdl eager"] torchrun --standalone --nproc_per_node=N \
        -m lab.probes.probe_ll_variants
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as tdist

from mcr.backends.cuda.symm_mem import rendezvous, symm_empty
from mcr.backends.symm import ll as LL

HERE = Path(__file__).resolve().parent
SIZES = [2 << 10, 8 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
CALLS, ROUNDS = 50, 7


def slowest(x: float) -> float:
    """The largest value over the ranks."""
    t = torch.tensor([x], dtype=torch.float64, device="cuda")
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return float(t[0])


class Variant:
    """One compiled kernel with its own receive regions and call numbers."""

    def __init__(self, name: str, src: str, threads: int, rank: int, world: int,
                 blocks: int = 64) -> None:
        import cupy
        self.cp, self.name, self.threads, self.blocks = cupy, name, threads, blocks
        src = src.replace("__launch_bounds__(512)", f"__launch_bounds__({threads})").replace(
            "(i / 512) % 64", f"(i / {threads}) % 64")
        mod = cupy.RawModule(code=src, options=("--std=c++17",))
        self.kernel = mod.get_function("mcr_ll_bf16")
        cap = (1 << 20) // 8
        buf = symm_empty(LL.region_bytes(1 << 20, world), torch.device("cuda"))
        buf.zero_()
        torch.cuda.synchronize()
        hdl = rendezvous(buf, tdist.group.WORLD)
        self.buf, self.cap, self.rank, self.world = buf, cap, rank, world
        self.regions = torch.tensor(list(hdl.buffer_ptrs), dtype=torch.int64, device="cuda")
        self.seqs = torch.zeros(blocks, dtype=torch.int32, device="cuda")

    def __call__(self, t: torch.Tensor) -> None:
        cp, n = self.cp, t.nbytes
        words = -(-n // 8)
        grid = max(1, min(self.blocks, -(-words // self.threads)))
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.kernel((grid,), (self.threads,),
                        (cp.int32(0), cp.int32(0), cp.uint64(t.data_ptr()),
                         cp.uint64(t.data_ptr()), cp.uint64(n),
                         cp.uint64(self.regions.data_ptr()), cp.int32(self.rank),
                         cp.int32(self.world), cp.uint64(self.seqs.data_ptr()),
                         cp.uint64(self.cap), cp.int32(0), cp.uint64(60 * 10**9)))


class Empty:
    """A kernel that does nothing: what one kernel node costs in the chain."""

    name = "empty"

    def __init__(self) -> None:
        import cupy
        self.cp = cupy
        self.kernel = cupy.RawKernel('extern "C" __global__ void nop() {}', "nop")

    def __call__(self, t: torch.Tensor) -> None:
        with self.cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.kernel((1,), (32,), ())


def v1(src: str) -> str:
    """mcr's kernel with every thread reading its block's call number beside its data (no
    block barrier before the first push; the barrier moved before the number's update)."""
    reads = ("  __shared__ u32 s_seq;\n  if (threadIdx.x == 0) s_seq = seqs[blockIdx.x] + 1;\n"
             "  __syncthreads();\n  const u32 seq = s_seq;\n")
    assert reads in src, "ll.cu changed: update the v1 variant"
    src = src.replace(reads, "  const u32 seq = *reinterpret_cast<volatile u32*>(seqs + "
                             "blockIdx.x) + 1;\n")
    return src.replace("if (threadIdx.x == 0) seqs[blockIdx.x] = seq;",
                       "__syncthreads(); if (threadIdx.x == 0) seqs[blockIdx.x] = seq;")


def graph_us(fn: object, x: torch.Tensor) -> torch.cuda.CUDAGraph:
    """A graph of CALLS calls of fn on x."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CALLS):
            fn(x)
    return g


def time_graph(g: torch.cuda.CUDAGraph) -> float:
    """GPU us per call of one replay, slowest rank."""
    torch.cuda.synchronize()
    tdist.barrier()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    s.record()
    g.replay()
    e.record()
    torch.cuda.synchronize()
    return slowest(s.elapsed_time(e) * 1e3 / CALLS)


def check_vs_nccl(name: str, fn: object, x: torch.Tensor, world: int) -> None:
    """fn's all-reduce of x equals NCCL's within bf16 rounding and every rank holds the same
    bits; AssertionError naming fn and the size if not."""
    ref, y = x.clone(), x.clone()
    tdist.all_reduce(ref)
    fn(y)
    torch.cuda.synchronize()
    err = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    every = [torch.empty_like(y) for _ in range(world)]
    tdist.all_gather(every, y)
    agree = all(torch.equal(e.view(torch.int16), y.view(torch.int16)) for e in every)
    if err > 1e-2 or not agree:
        raise AssertionError(f"{name} n={x.nbytes}: error {err:.2e}, ranks agree {agree}")


def graphed_rounds(fns: dict[str, object], x: torch.Tensor) -> str:
    """Each fn captured CALLS times in a graph, ROUNDS replays each in rotated order: 'name
    median [min-max]' of GPU us per call, slowest rank."""
    graphs = {k: graph_us(f, x.clone()) for k, f in fns.items()}
    us: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for r in range(ROUNDS):
        for k in range(len(keys)):
            name = keys[(k + r) % len(keys)]
            us[name].append(time_graph(graphs[name]))
    return "  ".join(f"{k} {statistics.median(u):6.2f} [{min(u):.2f}-{max(u):.2f}]"
                     for k, u in us.items())


def host_us(fn: object, reps: int = 200) -> float:
    """us per eager call, back to back (host-bound), slowest rank, after 50 untimed."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    tdist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return slowest((time.perf_counter() - t0) * 1e6 / reps)


def kernels(rank: int, world: int) -> None:
    """Graph-replayed GPU time per call of each variant and NCCL, and their results."""
    old = (HERE.parent.parent / "mcr" / "backends" / "symm" / "ll.cu").read_text()
    vs: list = [Variant("v0-512x64", old, 512, rank, world)] + \
        [Variant(f"v0-{t}x{b}", old, t, rank, world, b) for t, b in ((256, 128), (128, 256))]
    if os.environ.get("LL_ALT"):                      # another kernel's source, to compare
        vs.append(Variant("alt-512x64", Path(os.environ["LL_ALT"]).read_text(), 512, rank,
                          world))
    if "v1" in os.environ.get("VARIANTS", ""):
        vs += [Variant(f"v1-{t}", v1(old), t, rank, world) for t in (512, 128)]
    vs.append(Empty())
    names = ["nccl"] + [v.name for v in vs]
    fns = [lambda t: tdist.all_reduce(t)] + vs
    if rank == 0:
        print("GPU us per all-reduce in a graph of 50 (bf16), slowest rank, median of "
              f"{ROUNDS} rounds [min-max]", flush=True)
    for n in SIZES:
        x = torch.randn(n // 2, device="cuda").bfloat16()
        for name, fn in zip(names[:-1], fns[:-1]):    # results first: each against NCCL
            check_vs_nccl(name, fn, x, world)
        line = graphed_rounds(dict(zip(names, fns)), x)
        if rank == 0:
            print(f"{n:>8} B  {line}", flush=True)


class Shipped:
    """mcr's LLGroup as symm runs it (driver launch), plainly or with programmatic dependent
    launch (MCR_SYMM_PDL)."""

    def __init__(self, rank: int, world: int, pdl: bool) -> None:
        self.name = "ll-pdl" if pdl else "ll"
        buf = symm_empty(LL.region_bytes(1 << 20, world), torch.device("cuda"))
        buf.zero_()
        torch.cuda.synchronize()
        hdl = rendezvous(buf, tdist.group.WORLD)
        self.buf = buf
        self.g = LL.LLGroup(buf, 0, list(hdl.buffer_ptrs), rank, 1 << 20, 60.0, pdl)
        assert self.g.pdl == pdl, "PDL asked for but unavailable (driver or GPU)"

    def __call__(self, t: torch.Tensor) -> None:
        self.g.issue(LL.ALL_REDUCE, t, t, t.nbytes, False)


def pdl(rank: int, world: int) -> None:
    """The shipped kernel launched plainly and early (PDL): a chain of 50 all-reduces, and 50
    decode-like pairs of a row-parallel GEMM (ffn 14336 / world x hidden 4096, bf16) and its
    all-reduce (batch 1 and 16); 'gemm' is the GEMMs alone, the floor."""
    plain, early = Shipped(rank, world, False), Shipped(rank, world, True)
    if rank == 0:
        print("GPU us per call (graph of 50), slowest rank, median of "
              f"{ROUNDS} rounds [min-max]", flush=True)
    w = torch.randn(14336 // world, 4096, device="cuda").bfloat16() / 64
    for batch in (1, 16, 64):
        n = batch * 4096 * 2
        x = torch.randn(batch, 14336 // world, device="cuda").bfloat16()
        y = torch.randn(n // 2, device="cuda").bfloat16()
        for fn in (plain, early):            # results first: equal to NCCL's, ranks agree
            check_vs_nccl(fn.name, fn, y, world)
        out = torch.empty(batch, 4096, device="cuda").bfloat16()

        def step(ar: object) -> object:
            def f(_: torch.Tensor) -> None:
                torch.matmul(x, w, out=out)
                if ar is not None:
                    ar(out)
            return f
        rows = {"nccl": lambda t: tdist.all_reduce(t), "ll": plain, "ll-pdl": early}
        fns = dict(rows)
        fns.update({f"gemm+{k}": step(v) for k, v in rows.items()})
        fns["gemm"] = step(None)
        if rank == 0:
            print(f"{n:>8} B  " + graphed_rounds(fns, y), flush=True)


def eager(rank: int) -> None:
    """mcr.comm's eager all-reduce (replayed graph; moving addresses through the fixed
    buffer) against NCCL's eager call, us per call on the host."""
    import mcr.comm as dist
    dist.init_distributed(verbose=False)
    if rank == 0:
        print("eager us per call (host-bound, 200 back to back), slowest rank", flush=True)
    for n in (8 << 10, 64 << 10):
        x = torch.randn(n // 2, device="cuda").bfloat16()
        pool = [x.clone() for _ in range(16)]
        it = iter(range(10**9))
        rows = {
            "nccl": host_us(lambda: tdist.all_reduce(x)),
            "mcr same address": host_us(lambda: dist.all_reduce(x)),
            "mcr moving addresses": host_us(lambda: dist.all_reduce(pool[next(it) % 16])),
        }
        from mcr import runtime
        symm = runtime.get().backends["symm"]
        saved = {g: st.graphs.capacity for g, st in symm._groups.items()}
        for st in symm._groups.values():
            st.graphs.capacity = 0          # every call launched directly
        rows["mcr direct launch"] = host_us(lambda: dist.all_reduce(pool[next(it) % 16]))
        for g, st in symm._groups.items():
            st.graphs.capacity = saved[g]
        if rank == 0:
            print(f"{n:>8} B  " + "  ".join(f"{k} {v:.1f}" for k, v in rows.items()),
                  flush=True)
    if rank == 0:
        for r in dist.log_summary(return_dict=True):
            if r["kind"] == "note":
                print(r["text"], flush=True)
    dist.destroy_process_group()


def main() -> None:
    """Both parts."""
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    tdist.init_process_group("cpu:gloo,cuda:nccl")
    rank, world = tdist.get_rank(), tdist.get_world_size()
    parts = os.environ.get("PARTS", "kernels eager").split()
    if "kernels" in parts:
        kernels(rank, world)
    if "pdl" in parts:
        pdl(rank, world)
    if "eager" in parts:
        eager(rank)


if __name__ == "__main__":
    main()
