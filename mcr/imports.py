"""Run a function when a module has been imported: at once if it has, else right after the
import executes it (an import hook that stays armed until then). Standard library only: the
start-up hook (mcr.integrations.autoload) imports this before torch."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class _After(importlib.abc.MetaPathFinder):
    """Finds module `name` the usual way, then runs each of `thens` on the module once it has
    been executed.

    It stays armed until the module has run: transformers and accelerate ask
    importlib.util.find_spec("deepspeed") before they import it, and a finder that left after
    the first question let the real import pass without mcr."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.thens: list[Callable[[ModuleType], None]] = []
        self._asking = threading.local()   # our own find_spec call for the real spec

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """The real spec of the module, its loader wrapped; None for every other module."""
        if name != self.name or getattr(self._asking, "on", False):
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
            for then in self.thens:
                then(module)
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Run then(module) once module `name` has been imported: now if it has been, else when it
    is (once per function and module)."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _After) and f.name == name), None)
    if finder is None:
        finder = _After(name)
        sys.meta_path.insert(0, finder)
    if then not in finder.thens:
        finder.thens.append(then)
