"""`symm`: symmetric-memory kernels for small calls (mcr's low-latency one, torch's above)."""

from __future__ import annotations

from ..base import Backend, Context, Unavailable

NAMES = ("symm",)
GPU_ONLY = NAMES           # tables for CPU tensors may not name it


def build(ctx: Context) -> dict[str, Backend]:
    """symm where torch has symmetric memory and its all-reduce kernels."""
    if not ctx.cuda:
        return {"symm": Unavailable("symm", "CUDA is not available")}
    try:
        import torch
        import torch.distributed._symmetric_memory  # noqa: F401
        if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
            raise ImportError("torch has no symm_mem all-reduce kernels")
        from .backend import SymmBackend
        return {"symm": SymmBackend(ctx.cfg)}
    except (ImportError, AttributeError, RuntimeError) as e:
        return {"symm": Unavailable("symm", f"torch symmetric memory unavailable ({e})")}
