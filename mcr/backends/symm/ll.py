"""symm's low-latency collectives: each rank pushes its data to its peers with the call's number
in every line (ll.cu), so a small all-reduce, all-gather, reduce-scatter, broadcast or
all-to-all (equal splits, or with split sizes) needs no barrier.

torch's one-shot kernel takes ~10 us on 2 H200s at any small size: a barrier before it reads its
peers' buffers, one after. Here the data
carries its own signal: one one-way trip over NVLink. Lines are twice the data's size, so this
form serves small calls only (MCR_SYMM_LL_BYTES). The kernel is CUDA C++ compiled once per
process with CuPy's NVRTC; without CuPy symm keeps torch's kernels for every size.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any

import torch

from ...streams import raw_stream
from ..cuda.driver import Driver

THREADS = 512
MAX_BLOCKS = 64        # co-resident on any GPU this serves, so no block waits on an unstarted one
LINE = 16              # bytes a line takes in a receive region: 8 of data, two 4-byte numbers
# MCR_SYMM_LL_BYTES=auto: the kernel serves while each rank pushes at most this much (2 x its
# data to each peer). Measured on H100s: faster than torch's one-shot kernel at 1 MiB on 2
# ranks (2 MiB pushed) and 256 KiB on 4 (1.5 MiB); slower at 1 MiB on 4 (6 MiB).
AUTO_PUSH = 2 * 2**20
CALL_LIMIT = 2**31     # a group's calls before a block's number could come round to a stale line's
_KERNELS: dict[torch.dtype, str] = {torch.float32: "mcr_ll_f32", torch.bfloat16: "mcr_ll_bf16"}
UNEVEN = "mcr_ll_a2av"     # the all-to-all with split sizes
MAX_WORLD = 8              # ll.cu's Splits holds this many peers
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, ALL_TO_ALL = 0, 1, 2, 3, 4  # op codes
MOVES_BYTES = (ALL_GATHER, BROADCAST, ALL_TO_ALL)   # ops that sum nothing: the fp32 form serves


class Splits(ctypes.Structure):
    """ll.cu's Splits, passed by value: bytes and byte offsets to and from each rank."""
    _fields_ = [(f, ctypes.c_uint64 * MAX_WORLD)
                for f in ("send_off", "send_n", "recv_off", "recv_n")]


@functools.cache
def _build() -> tuple[dict[Any, Any] | None, str | None]:
    """(the compiled kernels by dtype, and UNEVEN's, None), or (None, why they cannot be built
    here): once per process."""
    try:
        import cupy
        src = Path(__file__).with_name("ll.cu").read_text()
        mod = cupy.RawModule(code=src, options=("--std=c++17",))
        return {k: mod.get_function(name) for k, name in (*_KERNELS.items(),
                                                            (UNEVEN, UNEVEN))}, None
    except Exception as e:  # noqa: BLE001 - any failure means: keep torch's kernels
        return None, f"the low-latency kernel is unavailable ({type(e).__name__}: {e})"


def unavailable() -> str | None:
    """Why this process cannot run the kernel (no CuPy, a compile error), or None."""
    return _build()[1]


def auto_bytes(world: int) -> int:
    """The largest call the kernel serves on `world` ranks under MCR_SYMM_LL_BYTES=auto."""
    return AUTO_PUSH // (2 * (world - 1)) if world > 1 else AUTO_PUSH // 2


def region_bytes(ll_bytes: int, world: int) -> int:
    """Receive-region bytes per rank for calls up to ll_bytes on `world` ranks."""
    return 2 * world * _cap(ll_bytes) * LINE


def _cap(ll_bytes: int) -> int:
    return -(-ll_bytes // 8)


def grid(nbytes: int) -> int:
    """Blocks for a call of nbytes: one 8-byte word per thread up to MAX_BLOCKS, then strided.
    Depends on the size alone: every rank launches the same grid, which the per-block call
    numbers need."""
    words = -(-nbytes // 8)
    return max(1, min(MAX_BLOCKS, -(-words // THREADS)))


def _pack(offs: Any, sizes: Any, counts: list[int], es: int) -> None:
    """Byte offsets and sizes of consecutive blocks of counts[p] elements of es bytes."""
    off = 0
    for p, c in enumerate(counts):
        offs[p], sizes[p] = off, c * es
        off += c * es


class LLGroup:
    """One group's receive regions (inside symm's staging buffer), its peers' addresses and the
    per-block call counters."""

    def __init__(self, buf: torch.Tensor, offset: int, ptrs: list[int], rank: int,
                 ll_bytes: int, timeout_s: float, pdl: bool = False) -> None:
        """buf[offset:] holds this rank's region (zeroed before the handles were exchanged);
        ptrs are the ranks' buffer base addresses; pdl: launch each call early, behind the
        kernel before it (MCR_SYMM_PDL; Hopper and later, else ignored)."""
        dev = buf.device
        self.regions = torch.tensor([p + offset for p in ptrs], dtype=torch.int64, device=dev)
        self.seqs = torch.zeros(MAX_BLOCKS, dtype=torch.int32, device=dev)
        self.rank, self.world = rank, len(ptrs)
        self.ll_bytes = ll_bytes
        self.cap = _cap(ll_bytes)
        self.timeout_ns = int(min(timeout_s, 2**63 / 1e9 - 1) * 1e9)
        self.device = dev.index
        # Launched through the driver with the arguments kept in ctypes objects: a call sets
        # the five that change. CuPy's own launch converts all twelve anew, ~45 us of host time
        # a call on the H200 hosts, as much as NCCL's whole call.
        # CuPy 13+ hands a RawKernel whose compiled Function (with the CUfunction) is .kernel.
        self.functions = {dt: getattr(f, "kernel", f).ptr for dt, f in _build()[0].items()}
        self.driver = Driver()
        self.pdl = pdl and self.driver.has_pdl and torch.cuda.get_device_capability(dev)[0] >= 9
        self._launch = self.driver.launch_pdl if self.pdl else self.driver.launch
        i32, u64 = ctypes.c_int32, ctypes.c_uint64
        self.args = (i32(), i32(), u64(), u64(), u64(), u64(self.regions.data_ptr()),
                     i32(self.rank), i32(self.world), u64(self.seqs.data_ptr()), u64(self.cap),
                     i32(), u64(self.timeout_ns))
        self.params = (ctypes.c_void_p * len(self.args))(
            *[ctypes.addressof(a) for a in self.args])
        self.params_ptr = ctypes.addressof(self.params)
        # The uneven kernel's: src, dst, regions, rank, world, seqs, cap, timeout, splits. Its
        # grid is the group's largest, whatever the call's splits: every rank launches the same.
        self.splits = Splits()
        self.uneven_grid = grid(ll_bytes)
        self.uargs = (u64(), u64(), u64(self.regions.data_ptr()), i32(self.rank),
                      i32(self.world), u64(self.seqs.data_ptr()), u64(self.cap),
                      u64(self.timeout_ns), self.splits)
        self.uparams = (ctypes.c_void_p * len(self.uargs))(
            *[ctypes.addressof(a) for a in self.uargs])
        self.uparams_ptr = ctypes.addressof(self.uparams)

    def issue(self, op: int, src: torch.Tensor, dst: torch.Tensor, n: int, avg: bool,
              root: int = 0) -> None:
        """Enqueue one call of `op` on the current stream: blocks of n bytes per rank (src and
        dst contiguous; dst's dtype picks the sum's; all-gathers, all-to-alls and broadcasts,
        from group rank `root`, move bytes only). One caller thread at a time (the arguments
        are shared)."""
        func = self.functions[torch.float32 if op in MOVES_BYTES else dst.dtype]
        a = self.args
        a[0].value, a[1].value, a[10].value = op, root, 1 if avg else 0
        a[2].value, a[3].value, a[4].value = src.data_ptr(), dst.data_ptr(), n
        self._launch(func, grid(n), THREADS, raw_stream(self.device), self.params_ptr)

    def issue_uneven(self, src: torch.Tensor, dst: torch.Tensor, in_counts: list[int],
                     out_counts: list[int]) -> None:
        """Enqueue an all-to-all with split sizes on the current stream: in_counts[p] elements
        of src (flat, contiguous, in rank order) to rank p, out_counts[s] from rank s into dst
        (the ranks agreed on the splits, each at most ll_bytes). One caller thread at a time."""
        es, sp = src.element_size(), self.splits
        _pack(sp.send_off, sp.send_n, in_counts, es)
        _pack(sp.recv_off, sp.recv_n, out_counts, es)
        self.uargs[0].value, self.uargs[1].value = src.data_ptr(), dst.data_ptr()
        self._launch(self.functions[UNEVEN], self.uneven_grid, THREADS,
                     raw_stream(self.device), self.uparams_ptr)
