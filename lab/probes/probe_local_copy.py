"""Does a device-local copy wait for SMs behind a GEMM? (sdma's copy-out of staged calls.)

One GPU, one process. A burst of bf16 GEMMs runs on one stream; a local copy of --size bytes
on another stream waits for the first GEMM's end (so it meets the second one running), made by:
  dtod      cuMemcpyDtoDAsync (what sdma's local_copy issues)
  torch     torch's Tensor.copy_ (a kernel)
  batch     cuMemcpyBatchAsync, default flags
  overlap   cuMemcpyBatchAsync with CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE
and each of them with "@hi" on a stream of the highest priority (the block scheduler then
gives its kernels' blocks the next free SM slots before the GEMM's remaining ones).
Per variant, interleaved over --reps: the copy alone, the copy beside the burst (from its
stream's start to its end), and the burst's time with and without the copy. A copy on a copy
engine finishes beside the burst in about its own time; one that needs SMs waits for the GEMM
it meets.

    python -m lab.probes.probe_local_copy --size 256MiB --reps 7
"""

from __future__ import annotations

import argparse
import ctypes
import statistics

import torch

from mcr.backends.cuda.driver import Driver
from mcr.units import parse_bytes


class _Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _Attrs(ctypes.Structure):
    """CUmemcpyAttributes (cuda.h, CUDA 12.8+)."""

    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", _Loc),
                ("dstLocHint", _Loc), ("flags", ctypes.c_uint)]


class BatchCopy:
    """cuMemcpyBatchAsync through ctypes (CUDA 13's form first, then 12.8's with failIdx)."""

    def __init__(self, flags: int) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        self.v2 = hasattr(lib, "cuMemcpyBatchAsync_v2")
        self.fn = lib.cuMemcpyBatchAsync_v2 if self.v2 else lib.cuMemcpyBatchAsync
        self.fn.restype = ctypes.c_int
        self.attrs = _Attrs(1, _Loc(0, 0), _Loc(0, 0), flags)   # 1: SRC_ACCESS_ORDER_STREAM
        self.idx = (ctypes.c_size_t * 1)(0)
        self.fail = ctypes.c_size_t(0)

    def __call__(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """One copy, stream-ordered."""
        d, s = (ctypes.c_uint64 * 1)(dst), (ctypes.c_uint64 * 1)(src)
        n = (ctypes.c_size_t * 1)(nbytes)
        args = [d, s, n, ctypes.c_size_t(1), ctypes.byref(self.attrs), self.idx,
                ctypes.c_size_t(1)]
        if not self.v2:
            args.append(ctypes.byref(self.fail))
        rc = self.fn(*args, ctypes.c_void_p(stream))
        if rc != 0:
            raise RuntimeError(f"cuMemcpyBatchAsync failed with CUresult {rc}")


def main() -> None:
    """Time each variant alone and beside the GEMM burst, interleaved."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="256MiB")
    ap.add_argument("--gemm", type=int, default=8192, help="GEMM side (bf16)")
    ap.add_argument("--burst", type=int, default=12, help="GEMMs per burst")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--variants", default="dtod,torch,batch,overlap,dtod@hi,torch@hi")
    args = ap.parse_args()
    n = int(parse_bytes(args.size))
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    drv, plain, hinted = Driver(), BatchCopy(0), BatchCopy(1)
    d, s0 = dst.data_ptr(), src.data_ptr()
    copies = {"dtod": lambda s: drv.memcpy(d, s0, n, s.cuda_stream),
              "torch": lambda s: dst.copy_(src),
              "batch": lambda s: plain(d, s0, n, s.cuda_stream),
              "overlap": lambda s: hinted(d, s0, n, s.cuda_stream)}
    names = args.variants.split(",")
    a = torch.randn(args.gemm, args.gemm, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    hi = torch.cuda.Stream.priority_range()[1]   # (lowest, highest): highest is most negative
    s_gemm, s_low, s_hi = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream(priority=hi)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(5)]

    def burst() -> None:
        with torch.cuda.stream(s_gemm):
            ev[0].record()
            torch.mm(a, a, out=c)
            ev[1].record()          # fires as the first GEMM ends: the copy starts there
            for _ in range(args.burst - 1):
                torch.mm(a, a, out=c)
            ev[2].record()

    def copy_on(name: str, after: torch.cuda.Event | None) -> None:
        how, _, prio = name.partition("@")
        s_copy = s_hi if prio == "hi" else s_low
        with torch.cuda.stream(s_copy):
            if after is not None:
                s_copy.wait_event(after)
            ev[3].record()
            copies[how](s_copy)
            ev[4].record()

    res: dict[str, dict[str, list[float]]] = {v: {} for v in names + ["none"]}
    for name in names:           # warm-up, and each variant's result checked
        dst.zero_()
        copy_on(name, None)
        torch.cuda.synchronize()
        assert torch.equal(dst, src), name
    for _ in range(args.reps):
        for name in names + ["none"]:
            r = res[name]
            if name != "none":
                torch.cuda.synchronize()
                copy_on(name, None)
                torch.cuda.synchronize()
                r.setdefault("alone_ms", []).append(ev[3].elapsed_time(ev[4]))
            torch.cuda.synchronize()
            burst()
            if name != "none":
                copy_on(name, ev[1])
            torch.cuda.synchronize()
            r.setdefault("burst_ms", []).append(ev[0].elapsed_time(ev[2]))
            if name != "none":
                r.setdefault("beside_ms", []).append(ev[3].elapsed_time(ev[4]))
                r.setdefault("done_after_start_ms", []).append(ev[0].elapsed_time(ev[4]))
    print(f"# local copy of {args.size} beside {args.burst} bf16 GEMMs of {args.gemm}^2, "
          f"{args.reps} interleaved reps, medians (min-max); {torch.cuda.get_device_name()}")
    for name, r in res.items():
        cells = [f"{k} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
                 for k, v in r.items()]
        print(f"{name:<8} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
