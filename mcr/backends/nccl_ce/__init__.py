"""`nccl_ce`: NCCL's zero-CTA copy-engine mode over symmetric windows (off by default)."""

from __future__ import annotations

from ..base import Backend, Context, Unavailable

NAMES = ("nccl_ce",)
GPU_ONLY = NAMES           # tables for CPU tensors may not name it


def build(ctx: Context) -> dict[str, Backend]:
    """Only with MCR_NCCL_CE=1, on CUDA, where NCCL and torch expose the zero-CTA policy."""
    if not ctx.cuda:
        return {"nccl_ce": Unavailable("nccl_ce", "CUDA is not available")}
    if not ctx.cfg.nccl_ce:
        return {"nccl_ce": Unavailable("nccl_ce", "off unless MCR_NCCL_CE=1: registering its "
                                       "symmetric windows failed on the H200 test machine "
                                       "(torch 2.11, NCCL 2.28.9)")}
    import torch

    from .backend import NcclCeBackend, zero_cta_options
    if torch.version.hip is not None or zero_cta_options() is None:
        return {"nccl_ce": Unavailable("nccl_ce", "needs NCCL >= 2.28 with the zero-CTA policy "
                                       "(and torch exposing it)")}
    return {"nccl_ce": NcclCeBackend(ctx.cfg)}
