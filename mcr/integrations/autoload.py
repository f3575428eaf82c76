"""`MCR_DEEPSPEED=1`: DeepSpeed through mcr with no change to the training script.

mcr's install puts `mcr_autoload.pth` into site-packages; at interpreter start it imports this
module only when MCR_DEEPSPEED is set (to anything but 0), and arm() then waits for DeepSpeed
to be imported and calls mcr.integrations.deepspeed.install() right after. Nothing else is
imported at start-up (no torch), so Python processes that never import DeepSpeed pay nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _AfterDeepSpeed(importlib.abc.MetaPathFinder):
    """Finds `deepspeed` the usual way, then runs install() once it has been executed.

    It stays armed until DeepSpeed has run: transformers and accelerate ask
    importlib.util.find_spec("deepspeed") before they import it, and a finder that left after
    the first question let the real import pass without mcr."""

    def __init__(self) -> None:
        self._asking = threading.local()   # our own find_spec call for the real spec

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """The real spec of `deepspeed`, its loader wrapped; None for every other module."""
        if name != "deepspeed" or getattr(self._asking, "on", False):
            return None
        self._asking.on = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._asking.on = False
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType, run: Any = run) -> None:
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            from . import deepspeed as mcr_ds
            mcr_ds.install()
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def wanted() -> bool:
    """Whether MCR_DEEPSPEED asks for it."""
    return os.environ.get("MCR_DEEPSPEED", "0").strip().lower() not in ("", "0", "false", "no",
                                                                         "off")


def arm() -> None:
    """Install the import hook (idempotent); if DeepSpeed is already imported, install now."""
    if "deepspeed" in sys.modules:
        from . import deepspeed as mcr_ds
        mcr_ds.install()
    elif not any(isinstance(f, _AfterDeepSpeed) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDeepSpeed())


if wanted():
    arm()
