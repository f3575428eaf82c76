"""A lane helper process, and the shared-memory block it and its rank work through.

mcr's MPI lanes (backends/lanes) are processes, not threads: Open MPI runs one process's
collectives one at a time whatever thread issues them. Each rank spawns N
helpers on its own host (MPI_Comm_spawn_multiple); helper i of every rank share a communicator,
lane i. The rank copies a buffer into host memory both see, rings each lane's doorbell with its
slice, and the helpers all-reduce their slices at once, each on its own core and connections.

This file runs as a script in the helpers (`python helper.py`): it imports neither torch
nor mcr, so that a helper starts in a fraction of a second and holds little memory.

The control block (one per rank and lane set, a file in /dev/shm) holds global words, a record
per lane and a futex doorbell per lane. An idle helper spins for a while after its last call
(calls come in bursts), then sleeps on its doorbell.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
import time
from typing import Any

import numpy as np

CTL_BYTES = 4096
MAX_LANES = 16
# global int64 words
QUIT, GEN = 0, 1
NAME_AT, NAME_LEN = 64, 192          # bytes: the data segment's path, NUL-padded
REC_WORD, REC_WORDS = 32, 16         # lane i's record: int64 words REC_WORD + 16 i ...
SEQ, OFFSET, COUNT, DTYPE, OP, DONE, ERROR, PID, SPINNING = range(9)
BELL_AT = 3072                       # int32 doorbells, one per lane (records end at 2304)
SLEEP_S = 0.2                        # a sleeping helper looks at its owner this often
GRACE_S = 50e-6                      # a helper that stops spinning looks again this long

# Codes the rank writes into a record: positions in these tuples.
DTYPES = ("float32", "float64", "int8", "uint8", "int16", "int32", "int64", "complex64",
          "complex128")
OPS = ("SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR")
_MPI_TYPES = ("FLOAT", "DOUBLE", "INT8_T", "UINT8_T", "INT16_T", "INT32_T", "INT64_T",
              "C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX")

_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine()) if sys.platform == "linux" \
    else None
_libc = ctypes.CDLL(None, use_errno=True) if _FUTEX else None


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def futex_wait(addr: int, expected: int, timeout_s: float) -> None:
    """Sleep while the int32 at addr holds expected (at most timeout_s); where there is no
    futex, a short sleep."""
    if _libc is None:
        time.sleep(min(timeout_s, 50e-6))
        return
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    _libc.syscall(_FUTEX, ctypes.c_void_p(addr), 0, ctypes.c_int(expected), ctypes.byref(ts),
                  None, 0)


def futex_wake(addr: int) -> None:
    """Wake every process sleeping on the int32 at addr."""
    if _libc is not None:
        _libc.syscall(_FUTEX, ctypes.c_void_p(addr), 1, ctypes.c_int(2**31 - 1), None, None, 0)


def map_file(path: str, size: int = 0) -> mmap.mmap:
    """Map a /dev/shm file: create it with size bytes (size > 0), or open it as it is."""
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if size else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size or os.fstat(fd).st_size)
    finally:
        os.close(fd)


class Block:
    """The control block: numpy views of its words, records and doorbells."""

    def __init__(self, mem: mmap.mmap) -> None:
        self.mem = mem
        self.words = np.frombuffer(mem, np.int64, CTL_BYTES // 8)
        self.bells = np.frombuffer(mem, np.int32, MAX_LANES, BELL_AT)
        self._bell0 = ctypes.addressof(ctypes.c_char.from_buffer(mem, BELL_AT))

    def rec(self, lane: int) -> np.ndarray:
        """Lane's record (SEQ, OFFSET, ... PID)."""
        at = REC_WORD + REC_WORDS * lane
        return self.words[at:at + REC_WORDS]

    def bell_addr(self, lane: int) -> int:
        """Address of lane's doorbell (a futex word)."""
        return self._bell0 + 4 * lane

    def ring(self, lane: int) -> None:
        """After the record is written: count the doorbell, and wake the lane unless it is
        spinning (a syscall saved: 4-9 us on the H100 host). A lane that stops spinning as
        this reads SPINNING keeps looking for GRACE_S, far longer than a store takes to show."""
        self.bells[lane] += 1
        if not self.words[REC_WORD + REC_WORDS * lane + SPINNING]:
            futex_wake(self.bell_addr(lane))

    def data_path(self) -> str:
        """Path of the data segment now in use."""
        return bytes(self.mem[NAME_AT:NAME_AT + NAME_LEN]).rstrip(b"\0").decode()

    def set_data_path(self, path: str) -> None:
        """Name a new data segment (GEN counts the changes)."""
        raw = path.encode()
        if len(raw) >= NAME_LEN:
            raise ValueError(f"shared-memory path too long: {path}")
        self.mem[NAME_AT:NAME_AT + NAME_LEN] = raw.ljust(NAME_LEN, b"\0")
        self.words[GEN] += 1

    def release(self) -> None:
        """Drop the views so that the mapping can close."""
        self.words = self.bells = None   # type: ignore[assignment]


def _wait_call(block: Block, lane: int, last: int, spin_s: float, owner: int) -> bool:
    """Until lane's record holds a call after `last` (True) or QUIT is set (False)."""
    rec, words = block.rec(lane), block.words
    t0 = time.perf_counter()
    rec[SPINNING] = 1
    while time.perf_counter() - t0 < spin_s:
        if rec[SEQ] != last:
            return True
        if words[QUIT]:
            return False
    rec[SPINNING] = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < GRACE_S:
        if rec[SEQ] != last:
            return True
    while True:
        bell = int(block.bells[lane])
        if rec[SEQ] != last:
            return True
        if words[QUIT]:
            return False
        futex_wait(block.bell_addr(lane), bell, SLEEP_S)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(3)   # the rank is gone: nothing to serve, and no one to finalize with


def main() -> None:
    """Serve one lane of one rank until told to quit."""
    from mpi4py import MPI

    parent = MPI.Comm.Get_parent()
    lanes, paths, pids, spin_s = parent.bcast(None, root=0)
    me = MPI.COMM_WORLD.Get_rank()
    owner, lane = divmod(me, lanes)
    comm = MPI.COMM_WORLD.Split(color=lane, key=owner)
    block = Block(map_file(paths[owner]))
    rec = block.rec(lane)
    types = [getattr(MPI, n) for n in _MPI_TYPES]
    ops = [getattr(MPI, n) for n in OPS]
    data: Any = None
    gen = -1
    rec[PID] = os.getpid()
    last = 0
    while _wait_call(block, lane, last, spin_s, pids[owner]):
        last = int(rec[SEQ])
        try:
            if block.words[GEN] != gen:
                gen = int(block.words[GEN])
                data = map_file(block.data_path())
            dt = np.dtype(DTYPES[rec[DTYPE]])
            part = np.frombuffer(data, dt, int(rec[COUNT]), int(rec[OFFSET]))
            comm.Allreduce(MPI.IN_PLACE, [part, types[rec[DTYPE]]], ops[rec[OP]])
            del part
        except Exception as e:  # noqa: BLE001 - told to the rank, which raises it
            print(f"mcr lane helper {lane} of rank {owner}: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            rec[ERROR] = last
        rec[DONE] = last
    block.release()
    comm.Free()
    parent.Disconnect()


if __name__ == "__main__":
    main()
