"""torch's own process groups: `gloo` (CPU tensors) and `nccl` (`rccl`; CUDA tensors)."""

from __future__ import annotations

from ..base import Backend, Context, Unavailable

NAMES = ("gloo", "nccl")
GPU_ONLY = ("nccl",)      # tables for CPU tensors may not name it


def build(ctx: Context) -> dict[str, Backend]:
    """Gloo always; NCCL where CUDA is."""
    from .gloo import GlooBackend
    from .nccl import NcclBackend
    return {"gloo": GlooBackend(),
            "nccl": NcclBackend() if ctx.cuda else Unavailable("nccl", "CUDA is not available")}
