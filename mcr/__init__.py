"""mcr: a message-size-tuned, multi-library communication dispatcher for distributed training."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
# The autotuner and the shipped tables sit at the top of a checkout (tuner/, tuning_tables/); a
# wheel maps them into this package (setup.py's package_dir). A checkout is told by its
# pyproject.toml beside this package: there the top-level folders win, also over folders of the
# old layout that a pull left behind inside mcr/ (untracked files keep them alive).
_CHECKOUT = (_HERE.parent / "pyproject.toml").is_file() and \
    (_HERE.parent / "tuner" / "__init__.py").is_file()


def tables_dir() -> Path:
    """Where the tables shipped with mcr are: the checkout's tuning_tables/, or inside the
    package once installed."""
    return _HERE.parent / "tuning_tables" if _CHECKOUT else _HERE / "tuning_tables"


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds mcr.tuner at the top of a checkout (nothing else)."""

    def find_spec(self, name: str, path: object, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        """The spec of mcr.tuner from the checkout's tuner/."""
        if name != f"{__name__}.tuner":
            return None
        where = _HERE.parent / "tuner"
        return importlib.util.spec_from_file_location(
            name, where / "__init__.py", submodule_search_locations=[str(where)])


if _CHECKOUT and not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _CheckoutFinder())   # before the path finder: a stale mcr/tuner/
