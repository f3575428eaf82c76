"""The ctypes structures mcr hands to libcuda match cuda.h's layout (CPU CI never calls the
driver, so a field moved here would first show as a crash or a wrong launch on a GPU)."""

from __future__ import annotations

import ctypes

from mcr.backends.cuda.driver import ATTR_PDL, _Attr, _Config


def test_launch_config_matches_cuda_h() -> None:
    """CUlaunchAttribute: int id, 4 bytes of padding, a 64-byte value union; CUlaunchConfig:
    six grid/block uints and sharedMemBytes, then the stream, attrs and numAttrs on 8-byte
    boundaries (x86_64). The attribute's id is 6, programmatic stream serialization."""
    assert (ctypes.sizeof(_Attr), _Attr.value.offset) == (8 + 64, 8)
    assert (_Config.shared.offset, _Config.stream.offset) == (24, 32)
    assert (_Config.attrs.offset, _Config.nattrs.offset, ctypes.sizeof(_Config)) == (40, 48, 56)
    attr = _Attr(id=ATTR_PDL, value=1)
    raw = bytes(attr)
    assert int.from_bytes(raw[:4], "little") == 6 and int.from_bytes(raw[8:12], "little") == 1
