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
# wheel maps them into this package (pyproject's package-dir). In a checkout, mcr.tuner is
# found at the top too, so `python -m mcr.tuner` and `mcr-tune` work either way.
_CHECKOUT = {f"{__name__}.{name}": _HERE.parent / name for name in ("tuner",)
             if not (_HERE / name).is_dir() and (_HERE.parent / name / "__init__.py").is_file()}


def tables_dir() -> Path:
    """Where the tables shipped with mcr are: inside the package once installed, else the
    checkout's tuning_tables/."""
    inside = _HERE / "tuning_tables"
    return inside if inside.is_dir() else _HERE.parent / "tuning_tables"


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds mcr.tuner at the top of a checkout (nothing else)."""

    def find_spec(self, name: str, path: object, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        """The spec of a checkout's top-level package that a wheel ships inside mcr."""
        where = _CHECKOUT.get(name)
        if where is None:
            return None
        return importlib.util.spec_from_file_location(
            name, where / "__init__.py", submodule_search_locations=[str(where)])


if _CHECKOUT and not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
    sys.meta_path.append(_CheckoutFinder())
