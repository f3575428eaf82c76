"""The few CUDA driver calls mcr issues per call (the copy engine's copies and memory operations,
the low-latency kernel's launches), through ctypes on libcuda.

Why not cuda-bindings here: its batch-memop parameters are Python union objects rebuilt on every
call (microseconds each); a prebuilt ctypes array is reused as is, and the fixed cost per call is
what this backend is judged on. Everything else (allocation, peer mapping) stays in torch.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence

# Values from cuda.h (stable ABI since CUDA 11.7, the _v2 entry points).
WAIT_EQ = 0x1                 # CU_STREAM_WAIT_VALUE_EQ
OP_WAIT32 = 1                 # CU_STREAM_MEM_OP_WAIT_VALUE_32
OP_WRITE32 = 2                # CU_STREAM_MEM_OP_WRITE_VALUE_32
_PARAM_BYTES = 48             # sizeof(CUstreamBatchMemOpParams): union padded to 6 x 64 bit
_MAX_BATCH = 256              # the driver's limit per cuStreamBatchMemOp
ATTR_PDL = 6                  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class _Attr(ctypes.Structure):
    """CUlaunchAttribute: an id, then a 64-byte union at offset 8 holding the value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int),
                ("rest", ctypes.c_char * 60)]


class _Config(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class Driver:
    """ctypes bindings to libcuda for stream memory operations and async copies."""

    def __init__(self, copy: str = "dtod") -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CudaDriverError(f"libcuda.so.1 cannot be loaded: {e}") from None
        u32, u64, vp = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
        self._batch = self._fn(["cuStreamBatchMemOp_v2", "cuStreamBatchMemOp"],
                               [vp, u32, vp, u32])
        # Explicit device-to-device: the unified cuMemcpyAsync sees a peer-mapped destination as
        # a peer copy and may route it differently (MCR_SDMA_COPY=unified selects it anyway).
        names = ["cuMemcpyAsync"] if copy == "unified" else \
            ["cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync"]
        self._memcpy = self._fn(names, [u64, u64, ctypes.c_size_t, vp])
        self._launch = self._fn(["cuLaunchKernel"], [vp, u32, u32, u32, u32, u32, u32, u32, vp,
                                                     vp, vp])
        # cuLaunchKernelEx (CUDA 12+) for programmatic dependent launch; None on older drivers.
        try:
            self._launch_ex = self._fn(["cuLaunchKernelEx"], [vp, vp, vp, vp])
        except CudaDriverError:
            self._launch_ex = None
        self._pdl_attr = _Attr(id=ATTR_PDL, value=1)
        self._pdl_config = _Config(block=(0, 1, 1), grid=(0, 1, 1),
                                   attrs=ctypes.addressof(self._pdl_attr), nattrs=1)
        self._pdl_config_ptr = ctypes.addressof(self._pdl_config)
        self._errname = self.lib.cuGetErrorName
        self._errname.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def _fn(self, names: list[str], argtypes: list) -> ctypes._CFuncPtr:
        for n in names:
            f = getattr(self.lib, n, None)
            if f is not None:
                f.argtypes = argtypes
                f.restype = ctypes.c_int
                return f
        raise CudaDriverError(f"libcuda has none of {names}; the driver is too old")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self._errname(rc, ctypes.byref(name))
            raise CudaDriverError(f"{what} failed: {name.value.decode() if name.value else rc}")

    def memcpy(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Async copy of nbytes between device addresses (peer-mapped ones go over NVLink)."""
        if nbytes:
            self._check(self._memcpy(dst, src, nbytes, stream), "cuMemcpyAsync")

    def launch(self, func: int, grid: int, block: int, stream: int, params: int) -> None:
        """Launch kernel `func` (a CUfunction) on stream with a prebuilt array of argument
        pointers (the driver copies the values at the launch: the array may change after)."""
        self._check(self._launch(func, grid, 1, 1, block, 1, 1, 0, stream, params, None),
                    "cuLaunchKernel")

    @property
    def has_pdl(self) -> bool:
        """Whether this driver can launch a kernel early behind the one before it."""
        return self._launch_ex is not None

    def launch_pdl(self, func: int, grid: int, block: int, stream: int, params: int) -> None:
        """launch(), with the kernel allowed to start while the stream's previous kernel drains
        (the kernel must wait for it with griddepcontrol.wait before touching its data)."""
        c = self._pdl_config
        c.grid[0], c.block[0], c.stream = grid, block, stream
        self._check(self._launch_ex(self._pdl_config_ptr, func, params, None),
                    "cuLaunchKernelEx")

    def batch(self, stream: int, ops: MemOps) -> None:
        """Enqueue a prebuilt list of waits and writes, executed in order."""
        if ops.count:
            self._check(self._batch(stream, ops.count, ops.ptr, 0), "cuStreamBatchMemOp")


class MemOps:
    """A reusable array of stream memory operations (waits and writes of 32-bit words)."""

    def __init__(self, ops: Sequence[tuple[int, int, int]]) -> None:
        """ops: (OP_WAIT32 | OP_WRITE32, address, value), executed in this order."""
        if len(ops) > _MAX_BATCH:
            raise ValueError(f"{len(ops)} memory operations exceed the driver's {_MAX_BATCH}")
        self.count = len(ops)
        self.buf = ctypes.create_string_buffer(max(1, self.count) * _PARAM_BYTES)
        for i, (kind, addr, value) in enumerate(ops):
            # operation (u32, padded), address (u64), value (u32 in a u64 union), flags (u32)
            flags = WAIT_EQ if kind == OP_WAIT32 else 0
            struct.pack_into("<IxxxxQQI", self.buf, i * _PARAM_BYTES, kind, addr, value, flags)
        self.ptr = ctypes.cast(self.buf, ctypes.c_void_p)
