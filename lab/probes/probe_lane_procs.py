"""Issue 13 feasibility: do MPI lanes scale when each lane is its own process?

Open MPI serializes one process's collectives (threads on duplicated communicators ran no faster
than one), and Gloo's lanes pay ~300 us per call over TCP, so neither reaches 2x the staged MPI
path at 1 MiB. This probe spawns L helper processes per rank (MPI_Comm_spawn_multiple, placed on
the rank's own host), shares a host buffer with them through POSIX shared memory, and times an
all-reduce in which each helper reduces 1/L of the buffer on its own lane communicator (the
helpers of lane i on every rank), handed off through flags in the same shared memory.

  mpirun -np 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,tcp \
      python3 lab/probes/probe_lane_procs.py [--cuda] [--lanes 2,4,8] [--sizes 65536,...]

Prints, per size, the median time of the whole-buffer MPI_Allreduce on the ranks' communicator
(staged through pinned memory for --cuda) and of the process lanes, each over interleaved rounds.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from multiprocessing import resource_tracker, shared_memory

import numpy as np
from mpi4py import MPI

CTL = 4096          # bytes of control words before the data
SEQ, NBYTES, QUIT, DONE = 0, 1, 2, 8


def spin(pred: callable, parent_pid: int | None = None) -> None:  # noqa: ANN001
    """Busy-wait for pred, backing off to short sleeps after 5 ms idle."""
    t0 = time.perf_counter()
    while not pred():
        if time.perf_counter() - t0 > 5e-3:
            time.sleep(50e-6)
            if parent_pid is not None and not os.path.exists(f"/proc/{parent_pid}"):
                sys.exit(1)


def child() -> None:
    """A lane: all-reduce this lane's slice of the owner's shared buffer when told."""
    parent = MPI.Comm.Get_parent()
    world = MPI.COMM_WORLD
    lanes, name, ppid = parent.bcast(None, root=0)
    me = world.Get_rank()
    owner, lane = divmod(me, lanes)
    lane_comm = world.Split(color=lane, key=owner)
    names = parent.bcast(None, root=0)
    shm = shared_memory.SharedMemory(name=names[owner])
    # Python < 3.13 registers an attached segment too and unlinks it when this helper exits
    resource_tracker.unregister(shm._name, "shared_memory")
    ctl = np.ndarray((CTL // 8,), np.int64, shm.buf)
    data = np.ndarray(((shm.size - CTL) // 4,), np.float32, shm.buf, offset=CTL)
    last = 0
    while True:
        spin(lambda: ctl[SEQ] != last or ctl[QUIT], ppid[owner])
        if ctl[QUIT]:
            break
        last = int(ctl[SEQ])
        n = int(ctl[NBYTES]) // 4
        lo, hi = n * lane // lanes, n * (lane + 1) // lanes
        lane_comm.Allreduce(MPI.IN_PLACE, data[lo:hi], MPI.SUM)
        ctl[DONE + lane] = last
    # views of shm stay alive until exit: closing it here would raise BufferError
    lane_comm.Free()
    parent.Disconnect()


def main() -> None:
    """Time the one-core MPI all-reduce against process lanes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--lanes", default="2,4,8")
    ap.add_argument("--sizes", default="65536,262144,1048576,4194304,16777216")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.child:
        return child()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    sizes = [int(s) for s in a.sizes.split(",")]
    big = max(sizes)
    torch = None
    if a.cuda:
        import torch
        torch.cuda.set_device(rank % torch.cuda.device_count())
    host = socket.gethostname()
    hosts = comm.allgather(host)
    pids = comm.allgather(os.getpid())
    shm = shared_memory.SharedMemory(create=True, size=CTL + big)
    ctl = np.ndarray((CTL // 8,), np.int64, shm.buf)
    ctl[:] = 0
    data = np.ndarray((big // 4,), np.float32, shm.buf, offset=CTL)
    names = comm.allgather(shm.name)
    dev = pinned = None
    if torch is not None:
        hdata = torch.frombuffer(shm.buf, dtype=torch.uint8, offset=CTL, count=big)
        rc = torch.cuda.cudart().cudaHostRegister(hdata.data_ptr(), big, 0)
        assert int(rc) == 0, rc
        dev = torch.ones(big // 4, device="cuda")
        pinned = hdata.view(torch.float32)
    results: dict[tuple[int, str], list[float]] = {}
    for lanes in [int(x) for x in a.lanes.split(",")]:
        t0 = time.perf_counter()
        info = [MPI.Info.Create() for _ in hosts]
        for i, h in zip(info, hosts):
            i.Set("host", h)
        inter = comm.Spawn_multiple([sys.executable] * len(hosts),
                                    [[os.path.abspath(__file__), "--child"]] * len(hosts),
                                    [lanes] * len(hosts), info, root=0)
        inter.bcast((lanes, shm.name, pids), root=MPI.ROOT if rank == 0 else MPI.PROC_NULL)
        inter.bcast(names, root=MPI.ROOT if rank == 0 else MPI.PROC_NULL)
        if rank == 0:
            print(f"# spawned {lanes} lanes per rank in {time.perf_counter() - t0:.2f} s",
                  flush=True)
        seq = 0

        def lane_call(nbytes: int) -> None:
            nonlocal seq
            if dev is not None:
                pinned[:nbytes // 4].copy_(dev[:nbytes // 4])
            seq += 1
            ctl[NBYTES] = nbytes
            ctl[SEQ] = seq
            spin(lambda: all(ctl[DONE + i] == seq for i in range(lanes)))
            if dev is not None:
                dev[:nbytes // 4].copy_(pinned[:nbytes // 4])

        def one_core(nbytes: int) -> None:
            if dev is not None:
                pinned[:nbytes // 4].copy_(dev[:nbytes // 4])
            comm.Allreduce(MPI.IN_PLACE, data[:nbytes // 4], MPI.SUM)
            if dev is not None:
                dev[:nbytes // 4].copy_(pinned[:nbytes // 4])

        for nbytes in sizes:
            for _ in range(a.rounds):
                for label, fn in (("mpi", one_core), (f"procs{lanes}", lane_call)):
                    data[:nbytes // 4] = 1.0
                    for _ in range(3):
                        fn(nbytes)
                    comm.Barrier()
                    ts = []
                    for _ in range(a.iters):
                        t = time.perf_counter()
                        fn(nbytes)
                        ts.append(time.perf_counter() - t)
                    results.setdefault((nbytes, label), []).append(
                        comm.allreduce(statistics.median(ts), op=MPI.MAX))
            # check: ones all-reduced (3 + iters) * rounds * 2 times grow; just check equality
            ok = comm.allreduce(float(data[0]) == float(data[nbytes // 4 - 1]), op=MPI.LAND)
            assert ok, "lanes disagree"
        ctl[QUIT] = 1
        inter.Disconnect()
        ctl[:] = 0
    if rank == 0:
        print(f"# {comm.Get_size()} ranks, {'cuda' if dev is not None else 'cpu'}, "
              f"{os.cpu_count()} cores, median of per-round medians (us)")
        for nbytes in sizes:
            base = statistics.median(results[(nbytes, "mpi")])
            row = [f"{nbytes:>10}", f"mpi {base * 1e6:8.1f}"]
            for (n, label), v in sorted(results.items()):
                if n == nbytes and label != "mpi":
                    m = statistics.median(v)
                    row.append(f"{label} {m * 1e6:8.1f} ({base / m:4.2f}x)")
            print("  ".join(row), flush=True)
    if torch is not None:
        torch.cuda.cudart().cudaHostUnregister(hdata.data_ptr())
    # views of shm stay alive until exit: closing it here would raise BufferError
    shm.unlink()


if __name__ == "__main__":
    main()
