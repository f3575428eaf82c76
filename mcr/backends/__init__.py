"""Backend registry: names, aliases, and construction of the backends this process can use."""

from __future__ import annotations

from ..config import Config
from ..groups import Group
from ..ops import CallKey
from .base import HOST, STREAM, Backend

# Every name a table or a call may use; aliases map to the implementing backend.
ALIASES = {"rccl": "nccl"}
NAMES = frozenset({"gloo", "nccl", "mpi"})
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
    return out


__all__ = ["ALIASES", "HOST", "KNOWN", "NAMES", "STREAM", "Backend", "Unavailable", "build",
           "canonical"]
