"""Backend registry: names, aliases, and construction of the backends this process can use."""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..groups import Group, Spec
from ..ops import CallKey
from .base import HOST, STREAM, Backend

# Every backend, in the order groups bind them (gloo first: the others' checks run over it;
# the one-node GPU backends after nccl, whose group they share; mpi's lanes after mpi, whose
# communicator they duplicate, Gloo's lanes after them; hier last: it binds every other one
# to the groups it builds).
# Aliases map to the implementing backend.
ORDER = ("gloo", "nccl", "mpi", "mpi_lanes2", "mpi_lanes4", "mpi_lanes8", "gloo_lanes2",
         "gloo_lanes4", "gloo_lanes8", "nccl_ce", "sdma", "sdma_pipe", "symm", "hier")
ALIASES = {"rccl": "nccl", "ce": "sdma"}
NAMES = frozenset(ORDER)
KNOWN = NAMES | frozenset(ALIASES)


def default_backend(device: str, gpu_default: str = "nccl") -> str:
    """The library a call goes to when no table rule covers it: the group's GPU default
    (NCCL unless init_distributed(dist_backend=...) said otherwise) for CUDA tensors, Gloo
    for the rest."""
    return gpu_default if device == "cuda" else "gloo"


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

    def bind(self, spec: Spec) -> Any:
        """No handle; the note says why."""
        spec.notes[self.name] = self.reason
        return None

    def decline(self, key: CallKey, group: Group) -> str | None:
        """Always: the reason it is unavailable."""
        return self.reason


def build(cfg: Config, launched_by_mpi: bool, cuda: bool) -> dict[str, Backend]:
    """Instantiate every backend; those that cannot run here are Unavailable with a reason."""
    from .gloo import GlooBackend
    from .hier import HierBackend
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
    out.update(_lanes(out["mpi"], cfg))
    from .gloo_lanes import COUNTS, GlooLanesBackend
    out.update((f"gloo_lanes{n}", GlooLanesBackend(n)) for n in COUNTS)
    out.update(_gpu_backends(cfg) if cuda else
               {n: Unavailable(n, "CUDA is not available")
                for n in ("sdma", "sdma_pipe", "nccl_ce", "symm")})
    registry: dict[str, Backend] = {}
    out["hier"] = HierBackend(cfg, registry)
    registry.update((n, out[n]) for n in ORDER)
    return registry


def _lanes(mpi: Backend, cfg: Config) -> dict[str, Backend]:
    """mpi_lanesN for each lane count, where mpi itself is available."""
    from .lanes import COUNTS, LaneSet, MpiLanesBackend
    if isinstance(mpi, Unavailable):
        return {f"mpi_lanes{n}": Unavailable(f"mpi_lanes{n}", mpi.reason) for n in COUNTS}
    lane_set = LaneSet(mpi, cfg.lane_spin_us)
    return {f"mpi_lanes{n}": MpiLanesBackend(lane_set, n) for n in COUNTS}


def bind_group(backends: dict[str, Backend], spec: Spec, default_gpu: str) -> Group:
    """A Group with every backend's handle for spec's ranks (collective: see Spec)."""
    spec.default_gpu = default_gpu
    for name, b in backends.items():
        h = b.bind(spec)
        if h is not None:
            spec.handles[name] = h
    member = spec.member
    nodes, per_node = spec.shape()
    return Group(ranks=spec.ranks, rank=spec.ranks.index(spec.me) if member else -1,
                 handles=spec.handles if member else {}, default_gpu=default_gpu,
                 notes=spec.notes, nodes=nodes, per_node=per_node, tag=spec.tag)


def release_group(backends: dict[str, Backend], group: Group, world: bool) -> None:
    """Free what bind_group made for group, in the reverse of binding (what composes or
    duplicates a backend's handles goes before it); it serves nothing afterwards."""
    for name, h in reversed(list(group.handles.items())):
        backends[name].release(h, world)
    group.handles.clear()
    group.released = True


def _gpu_backends(cfg: Config) -> dict[str, Backend]:
    """sdma, sdma_pipe, nccl_ce and symm where this process's torch, driver and NCCL allow
    them."""
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
    sdma = out["sdma"]
    if isinstance(sdma, SdmaBackend) and sdma.engine == "cuda":
        out["sdma_pipe"] = SdmaBackend(cfg, "cuda", "sdma_pipe", cfg.sdma_pipeline_bytes, sdma)
    else:
        out["sdma_pipe"] = Unavailable("sdma_pipe", getattr(sdma, "reason", None) or
                                       "the pipelined schedule exists for CUDA copy engines only")
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
        if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
            raise ImportError("torch has no symm_mem all-reduce kernels")
        out["symm"] = SymmBackend(cfg)
    except (ImportError, AttributeError, RuntimeError) as e:
        out["symm"] = Unavailable("symm", f"torch symmetric memory unavailable ({e})")
    if not cfg.nccl_ce:
        out["nccl_ce"] = Unavailable("nccl_ce", "off unless MCR_NCCL_CE=1: registering its "
                                     "symmetric windows failed on the H200 test machine "
                                     "(torch 2.11, NCCL 2.28.9)")
    elif rocm or zero_cta_options() is None:
        out["nccl_ce"] = Unavailable("nccl_ce", "needs NCCL >= 2.28 with the zero-CTA policy "
                                     "(and torch exposing it)")
    else:
        out["nccl_ce"] = NcclCeBackend(cfg)
    return out


__all__ = ["ALIASES", "HOST", "KNOWN", "NAMES", "ORDER", "STREAM", "Backend", "Unavailable",
           "bind_group", "build", "canonical", "default_backend", "release_group"]
