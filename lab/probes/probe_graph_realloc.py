"""Does a CUDA graph whose copy named a freed allocation replay once the same address is mapped
again (a candidate cause of the FSDP2 'invalid argument' on 2x H100, NOTES.md)? And does the
driver tell allocations apart (CU_POINTER_ATTRIBUTE_BUFFER_ID) for torch's default allocator,
its expandable segments and torch's symmetric memory? One GPU; run it twice, the second time
with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. On 1x H100 (2026-11-26) the stale replay
ran and copied the new data under both allocators, so this was not the cause."""

from __future__ import annotations

import ctypes
import os

import torch

from mcr.backends.cuda.driver import Driver


def buffer_id(ptr: int) -> int | None:
    """The driver's process-wide id of the allocation holding ptr (never reused), or None."""
    out = ctypes.c_ulonglong()
    rc = ctypes.CDLL("libcuda.so.1").cuPointerGetAttribute(
        ctypes.byref(out), 7, ctypes.c_uint64(ptr))   # 7: CU_POINTER_ATTRIBUTE_BUFFER_ID
    return None if rc else out.value


def main() -> None:
    """Print the stale replay's outcome and the buffer ids of each kind of memory."""
    drv, n = Driver(), 64 << 20
    print("# PYTORCH_CUDA_ALLOC_CONF =", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(unset)"))
    dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
    src = torch.full((n,), 1, dtype=torch.uint8, device="cuda")
    ptr, first = src.data_ptr(), buffer_id(src.data_ptr())
    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(s):
        g.capture_begin()
        drv.memcpy(dst.data_ptr(), ptr, n, s.cuda_stream)
        g.capture_end()
    g.replay()
    torch.cuda.synchronize()
    print("replay before the free: dst == src", torch.equal(dst, src), "buffer id", first)
    del src
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    src = torch.full((n,), 2, dtype=torch.uint8, device="cuda")
    print("same address again:", src.data_ptr() == ptr, "buffer id now", buffer_id(src.data_ptr()))
    try:
        g.replay()
        torch.cuda.synchronize()
        print("stale replay ran; dst == new src", torch.equal(dst, src))
    except Exception as e:   # the probe reports whatever the driver says
        print("stale replay failed:", type(e).__name__, str(e).splitlines()[0])
    try:
        import torch.distributed._symmetric_memory as symm_mem
        t = symm_mem.empty(1 << 20, dtype=torch.uint8, device="cuda")
        print("symmetric memory buffer id", buffer_id(t.data_ptr()), buffer_id(t.data_ptr() + 4096))
    except Exception as e:
        print("symmetric memory:", type(e).__name__, str(e).splitlines()[0])


if __name__ == "__main__":
    main()
