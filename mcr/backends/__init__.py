"""Backend registry: names, aliases, and construction of the backends this process can use."""

from __future__ import annotations

import os

from ..config import Config
from ..groups import Group
from ..ops import CallKey
from .base import HOST, STREAM, Backend

# Every name a table or a call may use; aliases map to the implementing backend.
ALIASES = {"rccl": "nccl", "ce": "sdma"}
NAMES = frozenset({"gloo", "nccl", "mpi", "sdma", "nccl_ce", "symm"})
KNOWN = NAMES | frozenset(ALIASES)


def canonical(name: str) -> str:
    """Resolve an alias (`rccl` -> `nccl`); ValueError naming the known backends otherwise."""
    real = ALIASES.get(name, name)
    if real not in NAMES:
        raise ValueError(f"unknown backend {name!r}; known: {sorted(KNOWN)}")
    return real


class Unavailable(Backend):
    """A backend this process cannot run; it declines every call with the reason."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def decline(self, key: CallKey, group: Group) -> str | None:
        """Always: the reason it is unavailable."""
        return self.reason

    def decline_key(self, key: CallKey) -> str | None:
        """Always: the reason it is unavailable."""
        return self.reason

    def _never(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"backend {self.name} is unavailable: {self.reason}")

    all_reduce = all_gather = reduce_scatter = all_to_all = broadcast = reduce = _never
    gather = scatter = send = recv = barrier = _never
    broadcast_object_list = all_gather_object = _never


def build(cfg: Config, launched_by_mpi: bool, cuda: bool) -> dict[str, Backend]:
    """Instantiate every backend; those that cannot run here are Unavailable with a reason."""
    from .gloo import GlooBackend
    from .nccl import NcclBackend

    out: dict[str, Backend] = {"gloo": GlooBackend()}
    out["nccl"] = NcclBackend() if cuda else Unavailable("nccl", "CUDA is not available")
    if not launched_by_mpi:
        out["mpi"] = Unavailable("mpi", "not launched by an MPI launcher (mpirun/mpiexec)")
    else:
        try:
            from .mpi import MpiBackend
            out["mpi"] = MpiBackend(cfg)
        except ImportError as e:
            out["mpi"] = Unavailable("mpi", f"mpi4py cannot be imported ({e}); "
                                     "pip install 'mcr[mpi]'")
    out.update(_gpu_backends(cfg) if cuda else
               {n: Unavailable(n, "CUDA is not available") for n in ("sdma", "nccl_ce", "symm")})
    return out


def _gpu_backends(cfg: Config) -> dict[str, Backend]:
    """sdma, nccl_ce and symm where this process's torch, driver and NCCL allow them."""
    import torch

    from .nccl_ce import NcclCeBackend, zero_cta_options
    from .sdma import SdmaBackend
    from .symm import SymmBackend

    out: dict[str, Backend] = {}
    rocm = torch.version.hip is not None
    if rocm:
        try:
            import mori.ccl  # noqa: F401
            out["sdma"] = SdmaBackend(cfg, "mori")
        except ImportError as e:
            out["sdma"] = Unavailable("sdma", f"on ROCm sdma needs mori ({e})")
    else:
        try:
            from .cudadrv import Driver
            Driver()
            out["sdma"] = SdmaBackend(cfg, "cuda")
        except (OSError, RuntimeError) as e:
            out["sdma"] = Unavailable("sdma", str(e))
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
        if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
            raise ImportError("torch has no symm_mem all-reduce kernels")
        out["symm"] = SymmBackend(cfg)
    except (ImportError, AttributeError, RuntimeError) as e:
        out["symm"] = Unavailable("symm", f"torch symmetric memory unavailable ({e})")
    if os.environ.get("MCR_NCCL_CE", "0") != "1":
        out["nccl_ce"] = Unavailable("nccl_ce", "off unless MCR_NCCL_CE=1: registering its "
                                     "symmetric windows failed on the H200 test machine "
                                     "(torch 2.11, NCCL 2.28.9)")
    elif rocm or zero_cta_options() is None:
        out["nccl_ce"] = Unavailable("nccl_ce", "needs NCCL >= 2.28 with the zero-CTA policy "
                                     "(and torch exposing it)")
    else:
        out["nccl_ce"] = NcclCeBackend(cfg)
    return out


__all__ = ["ALIASES", "HOST", "KNOWN", "NAMES", "STREAM", "Backend", "Unavailable", "build",
           "canonical"]
