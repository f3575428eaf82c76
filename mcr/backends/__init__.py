"""Backend registry: one folder per library, bound in the order listed; names and aliases.

Adding a backend: a folder here whose `__init__.py` names what it provides (`NAMES`) and builds
it (`build(ctx)`, an `Unavailable` with the reason where it cannot run), and one line in
REGISTRY. Backends made of mcr's own calls (`hier`) live above the collectives they call and
register themselves here when imported (mcr.comm imports them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..config import Config
from ..groups import Group, Spec
from ..tables import DEVICES
from .base import HOST, STREAM, Backend, Context, Unavailable

# Bind order: gloo first (the others' checks run over it); the one-node GPU backends after
# nccl, whose group they share; mpi's lanes after mpi, whose communicator they duplicate.
REGISTRY = (
    "torch_pg",   # gloo, nccl
    "mpi",        # mpi
    "lanes",      # mpi_lanes2/4/8, gloo_lanes2/4/8
    "nccl_ce",    # nccl_ce
    "sdma",       # sdma, sdma_pipe
    "symm",       # symm
)
# Composed of other backends' calls, bound last (they bind every other one to the groups they
# build); named here so that tables may name them before they are imported.
COMPOSED = ("hier",)
_COMPOSERS: dict[str, Callable[[Context], Backend]] = {}

ORDER = tuple(n for folder in REGISTRY
              for n in importlib.import_module(f"{__name__}.{folder}").NAMES) + COMPOSED
ALIASES = {"rccl": "nccl", "ce": "sdma"}
NAMES = frozenset(ORDER)
KNOWN = NAMES | frozenset(ALIASES)
_GPU_ONLY = frozenset(n for folder in REGISTRY
                      for n in getattr(importlib.import_module(f"{__name__}.{folder}"),
                                       "GPU_ONLY", ()))
# Name (and alias) -> the devices whose tensors it serves: a table for another device may not
# name it (a CPU table's `backend: nccl` is an error at load, not a fallback at every call).
SERVES = {n: frozenset({"cuda"}) if ALIASES.get(n, n) in _GPU_ONLY else frozenset(DEVICES)
          for n in KNOWN}


def register_composed(name: str, factory: Callable[[Context], Backend]) -> None:
    """Make `name` (one of COMPOSED) buildable: the module that defines it calls this."""
    if name not in COMPOSED:
        raise ValueError(f"register_composed: {name!r} is not one of {COMPOSED}")
    _COMPOSERS[name] = factory


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


def build(cfg: Config, launched_by_mpi: bool, cuda: bool) -> dict[str, Backend]:
    """Every backend, in bind order; those that cannot run here are Unavailable with a reason."""
    ctx = Context(cfg, launched_by_mpi, cuda)
    for folder in REGISTRY:
        ctx.built.update(importlib.import_module(f"{__name__}.{folder}").build(ctx))
    for name in COMPOSED:
        make = _COMPOSERS.get(name)
        ctx.built[name] = make(ctx) if make else Unavailable(
            name, f"{name} is registered when mcr.comm is imported")
    ctx.registry.update((n, ctx.built[n]) for n in ORDER)
    return ctx.registry


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


__all__ = ["ALIASES", "COMPOSED", "HOST", "KNOWN", "NAMES", "ORDER", "REGISTRY", "STREAM",
           "Backend", "Context", "Unavailable", "bind_group", "build", "canonical",
           "default_backend", "register_composed", "release_group"]
