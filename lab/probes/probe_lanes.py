"""Probe: where does a lane's time go? (issue 13: lanes >= 2x MPI's staged all-reduce from 1 MiB)

The lanes backend lost to MPI's single-core all-reduce below 4 MiB, by a fixed ~130 us per lane on
CPU tensors (NOTES.md, issue 13). This probe takes mcr out and times, on raw mpi4py and torch,
interleaved in rounds, for each size:
  single   one Allreduce on the world communicator (the baseline);
  handoff  L persistent threads woken through a SimpleQueue that do nothing (the hand-off alone);
  pool     L ThreadPoolExecutor workers, each Allreduce of its slice on a duplicate communicator
           (what mpi_lanes does today);
  thr      the same on persistent SimpleQueue threads;
  nb       one thread, L Iallreduce on the duplicates, then Waitall (no added core);
  p2p      L persistent threads, each exchanging its slice with the peer by Sendrecv and adding
           with torch (the reduction leaves MPI; 2 ranks only);
  gloo     L Gloo process groups, each all-reducing its slice asynchronously (Gloo's own threads
           and TCP pairs per group, no Python hand-off).
With --cuda the buffer lives on the GPU: single stages it through pinned memory around the
Allreduce; gloo hands the GPU slices to Gloo, which stages them itself; the rest are skipped.
Run under mpirun -np 2 (add `--mca btl self,tcp` for the TCP transport). CPU tensors, float32.
"""

from __future__ import annotations

import argparse
import queue
import threading
from collections.abc import Callable

import torch
import torch.distributed as tdist
from mpi4py import MPI

from lab.probes.probe_util import mpi_rounds, ratio_row

W = MPI.COMM_WORLD


class Lanes:
    """L persistent threads, each running the function it is handed, one call at a time."""

    def __init__(self, n: int) -> None:
        self.inbox = [queue.SimpleQueue() for _ in range(n)]
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        for q in self.inbox:
            threading.Thread(target=self._loop, args=(q,), daemon=True).start()

    def _loop(self, q: queue.SimpleQueue) -> None:
        while True:
            fn = q.get()
            if fn is None:
                return
            fn()
            self.done.put(1)

    def run(self, fns: list[Callable[[], None]]) -> None:
        """Run fns[i] on lane i and wait for all."""
        for q, fn in zip(self.inbox, fns):
            q.put(fn)
        for _ in fns:
            self.done.get()


def main() -> None:
    """Time every variant at every size, rounds interleaved; print medians (slowest rank)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", default="2,4,8")
    ap.add_argument("--sizes", default="65536,262144,1048576,4194304,16777216")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    ap.add_argument("--cuda", action="store_true")
    a = ap.parse_args()
    import os
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29611")
    tdist.init_process_group("gloo", rank=W.rank, world_size=W.size)
    if a.threads:
        torch.set_num_threads(a.threads)
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    peer = 1 - W.rank
    counts = [int(x) for x in a.lanes.split(",")]
    dups = [W.Dup() for _ in range(max(counts))]
    lanes = {n: Lanes(n) for n in counts}
    import concurrent.futures as cf
    pools = {n: [cf.ThreadPoolExecutor(1) for _ in range(n)] for n in counts}
    groups = [tdist.new_group(backend="gloo") for _ in range(max(counts))]

    def gloo(parts: list[torch.Tensor]) -> Callable[[], None]:
        return lambda: [w.wait() for w in [tdist.all_reduce(p, group=groups[i], async_op=True)
                                           for i, p in enumerate(parts)]]

    def variants(buf: torch.Tensor, tmp: torch.Tensor) -> dict[str, Callable[[], None]]:
        n_el = buf.numel()
        if buf.is_cuda:
            host = torch.empty(n_el, pin_memory=True)

            def staged() -> None:
                host.copy_(buf)
                W.Allreduce(MPI.IN_PLACE, host.numpy())
                buf.copy_(host)
            v = {"single": staged}
            for n in [1] + counts:
                b = [n_el * i // n for i in range(n + 1)]
                v[f"gloo{n}"] = gloo([buf[b[i]:b[i + 1]] for i in range(n)])
            return v
        v = {"single": lambda: W.Allreduce(MPI.IN_PLACE, buf.numpy())}
        v["gloo1"] = gloo([buf])
        for n in counts:
            b = [n_el * i // n for i in range(n + 1)]
            parts = [buf[b[i]:b[i + 1]].numpy() for i in range(n)]
            tparts = [(buf[b[i]:b[i + 1]], tmp[b[i]:b[i + 1]]) for i in range(n)]

            def ar(i: int, parts: list = parts) -> Callable[[], None]:
                return lambda: dups[i].Allreduce(MPI.IN_PLACE, parts[i])

            def p2p(i: int, tparts: list = tparts) -> Callable[[], None]:
                x, y = tparts[i]

                def go() -> None:
                    dups[i].Sendrecv(x.numpy(), peer, 7, y.numpy(), peer, 7)
                    x.add_(y)
                return go
            L, P = lanes[n], pools[n]
            v[f"handoff{n}"] = lambda L=L, n=n: L.run([lambda: None] * n)
            v[f"pool{n}"] = lambda P=P, n=n, ar=ar: [f.result() for f in
                                                    [P[i].submit(ar(i)) for i in range(n)]]
            fs = [ar(i) for i in range(n)]
            v[f"thr{n}"] = lambda L=L, fs=fs: L.run(fs)
            v[f"nb{n}"] = lambda n=n, parts=parts: MPI.Request.Waitall(
                [dups[i].Iallreduce(MPI.IN_PLACE, parts[i]) for i in range(n)])
            if W.size == 2:
                ps = [p2p(i) for i in range(n)]
                v[f"p2p{n}"] = lambda L=L, ps=ps: L.run(ps)
            v[f"gloo{n}"] = gloo([buf[b[i]:b[i + 1]] for i in range(n)])
        return v

    if W.rank == 0:
        print(f"# {W.size} ranks, {MPI.Get_library_version().splitlines()[0]}, torch threads "
              f"{torch.get_num_threads()}", flush=True)
    for size in [int(s) for s in a.sizes.split(",")]:
        buf = torch.ones(size // 4, device="cuda" if a.cuda else "cpu")
        tmp = torch.empty_like(buf)
        times = mpi_rounds(variants(buf, tmp), a.iters, a.rounds, a.cuda)
        if W.rank == 0:
            print(ratio_row(size, times, "single"), flush=True)


if __name__ == "__main__":
    main()
