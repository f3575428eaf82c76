"""The floor under any push-based small all-reduce on these GPUs, to set against issue 51's
graph target (1.20x at 8B batch 1 on 4x H200 needs ~1.5 us a call in the step).

- one-way trip: ranks 0 and 1 bounce a 4-byte flag through each other's memory 2,000 times
  inside one kernel (st.volatile to the peer, ld.volatile polling its own); half a round trip.
- flags: every rank writes one 4-byte flag into each peer's memory and waits for each peer's
  (a barrier with no data: the least a barrier-free one-shot kernel does), 50 calls in a CUDA
  graph, GPU us per call, slowest rank; beside it an empty kernel (a node's cost) and mcr's
  low-latency all-reduce of 8 KiB (LLGroup as symm launches it).

    torchrun --standalone --nproc_per_node=N -m lab.probes.probe_nvlink_floor
"""

from __future__ import annotations

import os
import statistics

import torch
import torch.distributed as tdist

from lab.probes.probe_ll_variants import CALLS, Empty, Shipped, graphed_rounds
from mcr.backends.cuda.symm_mem import rendezvous, symm_empty

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
__device__ __forceinline__ u64 now_ns() {
  u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
extern "C" __global__ void pingpong(u64 mine, u64 peer, int rank, u32 base, int iters,
                                    u64* out) {
  volatile u32* me = (volatile u32*)mine;
  volatile u32* other = (volatile u32*)peer;
  u64 t0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    u32 v = base + i + 1;
    if (rank == 0) { other[0] = v; while (me[0] != v) {} }
    else { while (me[0] != v) {} other[0] = v; }
  }
  out[0] = now_ns() - t0;
}
extern "C" __global__ void flags(const u64* bases, int rank, int world, u32* seq) {
  __shared__ u32 s;
  if (threadIdx.x == 0) s = seq[0] + 1;
  __syncthreads();
  const u32 v = s;
  const int q = threadIdx.x;
  if (q < world && q != rank) {
    ((volatile u32*)bases[q])[16 + rank] = v;
    volatile u32* me = (volatile u32*)bases[rank];
    while ((int)(me[16 + q] - v) < 0) {}
  }
  __syncthreads();
  if (threadIdx.x == 0) seq[0] = v;
}
"""
ITERS, ROUNDS = 2000, 7


def main() -> None:
    """Both measurements, printed by rank 0."""
    import cupy
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    tdist.init_process_group("cpu:gloo,cuda:nccl")
    rank, world = tdist.get_rank(), tdist.get_world_size()
    mod = cupy.RawModule(code=SRC, options=("--std=c++17",))
    pingpong, flags = mod.get_function("pingpong"), mod.get_function("flags")
    buf = symm_empty(4096, torch.device("cuda"))
    buf.zero_()
    torch.cuda.synchronize()
    ptrs = list(rendezvous(buf, tdist.group.WORLD).buffer_ptrs)
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    trips = []
    for r in range(ROUNDS):
        tdist.barrier()
        if rank < 2:
            with stream:
                pingpong((1,), (1,), (cupy.uint64(ptrs[rank]), cupy.uint64(ptrs[1 - rank]),
                                      cupy.int32(rank), cupy.uint32(r * ITERS),
                                      cupy.int32(ITERS), cupy.uint64(out.data_ptr())))
            torch.cuda.synchronize()
            trips.append(out.item() / (2 * ITERS))
    if rank == 0:
        print(f"one-way trip rank 0 <-> 1: {statistics.median(trips):.0f} ns "
              f"[{min(trips):.0f}-{max(trips):.0f}] (median of {ROUNDS} runs of {ITERS} round "
              "trips)", flush=True)

    bases = torch.tensor(ptrs, dtype=torch.int64, device="cuda")
    seq = torch.zeros(1, dtype=torch.int32, device="cuda")

    def flag_call(_: torch.Tensor) -> None:
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            flags((1,), (32,), (cupy.uint64(bases.data_ptr()), cupy.int32(rank),
                                cupy.int32(world), cupy.uint64(seq.data_ptr())))
    fns = {"empty": Empty(), "flags": flag_call, "ll 8KiB": Shipped(rank, world, False)}
    line = graphed_rounds(fns, torch.randn(4096, device="cuda").bfloat16())
    if rank == 0:
        print(f"GPU us per call in a graph of {CALLS}, {world} ranks, slowest rank: {line}",
              flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
