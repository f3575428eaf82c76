"""Counts collectives that reach torch.distributed without going through mcr: DTensor's
functional collectives (e.g. in clip_grad_norm_ on FSDP2 parameters) and direct
torch.distributed calls, so that the summary can say what mcr did not serve.

install() wraps the collectives of torch.distributed and torch.distributed._functional_collectives
with a counter (a dict update per call; calls made from inside mcr are not counted). The
integrations install it; mcr's own torch calls use the unwrapped functions (`__mcr_wrapped__`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

TORCH_OPS = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
             "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
             "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "send", "recv",
             "isend", "irecv", "batch_isend_irecv", "barrier", "all_gather_object",
             "broadcast_object_list")
FUNCOL_OPS = ("all_reduce", "all_reduce_coalesced", "all_gather_tensor",
              "all_gather_tensor_autograd", "all_gather_into_tensor_coalesced",
              "reduce_scatter_tensor", "reduce_scatter_tensor_autograd",
              "reduce_scatter_tensor_coalesced", "all_to_all_single",
              "all_to_all_single_autograd", "broadcast")
COUNTS: dict[tuple[str, str], list[int]] = {}   # (api, op) -> [calls, bytes of largest tensor]
_INSTALLED: list[bool] = []


def _size(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_size(y) for y in x if isinstance(y, torch.Tensor))
    return 0


def count(api: str, name: str, args: tuple, kwargs: dict) -> None:
    """Count one call that bypassed mcr (for code of mcr's that hands a call on to torch)."""
    row = COUNTS.setdefault((api, name), [0, 0])
    row[0] += 1
    row[1] += max([_size(a) for a in args] + [_size(v) for v in kwargs.values()] + [0])


def _wrap(f: Callable[..., Any], api: str, name: str) -> Callable[..., Any]:
    @functools.wraps(f)
    def counted(*args: Any, **kwargs: Any) -> Any:
        if not sys._getframe(1).f_globals.get("__name__", "").startswith("mcr."):
            count(api, name, args, kwargs)
        return f(*args, **kwargs)
    counted.__mcr_wrapped__ = f  # type: ignore[attr-defined]
    return counted


def install() -> None:
    """Start counting (idempotent)."""
    if _INSTALLED:
        return
    import torch.distributed as tdist
    import torch.distributed._functional_collectives as funcol
    for mod, api, names in ((tdist, "torch.distributed", TORCH_OPS),
                            (funcol, "functional collectives", FUNCOL_OPS)):
        for name in names:
            f = getattr(mod, name, None)
            if f is not None and not hasattr(f, "__mcr_wrapped__"):
                setattr(mod, name, _wrap(f, api, name))
    _INSTALLED.append(True)


def uninstall() -> None:
    """Put torch's functions back."""
    import torch.distributed as tdist
    import torch.distributed._functional_collectives as funcol
    for mod, names in ((tdist, TORCH_OPS), (funcol, FUNCOL_OPS)):
        for name in names:
            f = getattr(mod, name, None)
            if f is not None and hasattr(f, "__mcr_wrapped__"):
                setattr(mod, name, f.__mcr_wrapped__)
    _INSTALLED.clear()
