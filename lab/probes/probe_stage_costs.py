"""What staging a buffer into a /dev/shm segment costs on one process (issue 13, mpi_lanesN).

Times, per size: the host copy into a mapped /dev/shm file (torch copy_, numpy, memmove), and
for GPU tensors the device-to-host copy into that file once cudaHostRegister'ed, whole and in
4 slices with an event each, on the current stream and on a side stream, and 4 slices through
the driver's cuMemcpyAsync with events made once; and whether torch sees the registered memory
as pinned.

  python3 lab/probes/probe_stage_costs.py
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time

import numpy as np
import torch

from mcr.backends.cuda.driver import Driver
from mcr.backends.lanes.helper import map_file


def timed(fn: object, reps: int = 50) -> float:
    """Median microseconds of fn()."""
    ts = []
    for _ in range(reps + 5):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[5:]) * 1e6


def main() -> None:
    """Print the costs."""
    size = 64 << 20
    path = f"/dev/shm/mcr-probe-{os.getpid()}"  # noqa: S108 - made O_EXCL, unlinked at once
    mem = map_file(path, size)
    os.unlink(path)
    host = torch.frombuffer(mem, dtype=torch.uint8)
    host.fill_(0)
    npv = np.frombuffer(mem, np.uint8)
    for nbytes in (262144, 1 << 20, 4 << 20):
        src = torch.ones(nbytes, dtype=torch.uint8)
        nsrc = src.numpy()
        t_torch = timed(lambda: host[:nbytes].copy_(src))
        t_np = timed(lambda: np.copyto(npv[:nbytes], nsrc))
        print(f"{nbytes:>9} B host copy into shm: torch {t_torch:7.1f} us  numpy {t_np:7.1f} us"
              "  memmove "
              f"{timed(lambda: ctypes.memmove(host.data_ptr(), src.data_ptr(), nbytes)):7.1f} us",
              flush=True)
    if not torch.cuda.is_available():
        return
    print("pinned before register:", host.is_pinned())
    rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), size, 0)
    print("register rc", rc, "pinned after:", host.is_pinned(), host[4096:].is_pinned())
    side = torch.cuda.Stream()
    drv = Driver(copy="unified")
    for nbytes in (262144, 1 << 20, 4 << 20):
        dev = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
        q = nbytes // 4

        def whole() -> None:
            host[:nbytes].copy_(dev, non_blocking=True)
            torch.cuda.current_stream().synchronize()

        def sliced(stream: object) -> None:
            evs = []
            with torch.cuda.stream(stream):
                for i in range(4):
                    host[i * q:(i + 1) * q].copy_(dev[i * q:(i + 1) * q], non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record()
                    evs.append(ev)
            for ev in evs:
                while not ev.query():
                    pass

        def back() -> None:
            dev.copy_(host[:nbytes], non_blocking=True)
            torch.cuda.current_stream().synchronize()

        evs4 = [torch.cuda.Event() for _ in range(4)]

        def sliced_driver() -> None:
            # the driver's copy per slice and events made once: what a piecewise GPU staging
            # would pay, without torch's copy_ and Event() per slice
            sid = torch.cuda.current_stream().cuda_stream
            for i in range(4):
                drv.memcpy(host.data_ptr() + i * q, dev.data_ptr() + i * q, q, sid)
                evs4[i].record()
            for ev in evs4:
                while not ev.query():
                    pass

        def back_driver() -> None:
            sid = torch.cuda.current_stream().cuda_stream
            for i in range(4):
                drv.memcpy(dev.data_ptr() + i * q, host.data_ptr() + i * q, q, sid)
            torch.cuda.current_stream().synchronize()

        cur = torch.cuda.current_stream()
        print(f"{nbytes:>9} B D2H whole {timed(whole):7.1f} us  4 slices current "
              f"{timed(lambda: sliced(cur)):7.1f} us  side {timed(lambda: sliced(side)):7.1f} us"
              f"  driver {timed(sliced_driver):7.1f} us  H2D whole {timed(back):7.1f} us"
              f"  driver 4 slices {timed(back_driver):7.1f} us  event create "
              f"{timed(lambda: torch.cuda.Event()):5.1f} us", flush=True)
    torch.cuda.cudart().cudaHostUnregister(host.data_ptr())


if __name__ == "__main__":
    main()
