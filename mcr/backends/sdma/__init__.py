"""`sdma` (`ce`) and `sdma_pipe`: collectives moved by the GPU's copy engines (CUDA peer copies;
mori's SDMA on ROCm, untested on hardware here)."""

from __future__ import annotations

from ..base import Backend, Context, Unavailable

NAMES = ("sdma", "sdma_pipe")
GPU_ONLY = NAMES           # tables for CPU tensors may not name it


def build(ctx: Context) -> dict[str, Backend]:
    """sdma where the CUDA driver (or mori on ROCm) is there; sdma_pipe on CUDA only."""
    if not ctx.cuda:
        return {n: Unavailable(n, "CUDA is not available") for n in NAMES}
    import torch

    from .backend import SdmaBackend
    out: dict[str, Backend] = {}
    if torch.version.hip is not None:
        try:
            import mori.ccl  # noqa: F401
            out["sdma"] = SdmaBackend(ctx.cfg, "mori")
        except ImportError as e:
            out["sdma"] = Unavailable("sdma", f"on ROCm sdma needs mori ({e})")
    else:
        try:
            from ..cuda.driver import Driver
            Driver()
            out["sdma"] = SdmaBackend(ctx.cfg, "cuda")
        except (OSError, RuntimeError) as e:
            out["sdma"] = Unavailable("sdma", str(e))
    sdma = out["sdma"]
    if isinstance(sdma, SdmaBackend) and sdma.engine == "cuda":
        out["sdma_pipe"] = SdmaBackend(ctx.cfg, "cuda", "sdma_pipe", ctx.cfg.sdma_pipeline_bytes,
                                       sdma)
    else:
        out["sdma_pipe"] = Unavailable("sdma_pipe", getattr(sdma, "reason", None) or
                                       "the pipelined schedule exists for CUDA copy engines only")
    return out
