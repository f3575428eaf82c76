"""Address ranges of buffers mcr allocated, and which of them holds a given tensor."""

from __future__ import annotations

from typing import Generic, TypeVar

import torch

T = TypeVar("T")


class Spans(Generic[T]):
    """Byte ranges [base, base + nbytes), each with an item; few per process, scanned in order."""

    def __init__(self) -> None:
        self._spans: list[tuple[int, int, T]] = []

    def add(self, base: int, nbytes: int, item: T) -> None:
        """Remember [base, base + nbytes) with item."""
        self._spans.append((base, base + nbytes, item))

    def find(self, t: torch.Tensor) -> tuple[T, int] | None:
        """(item, t's byte offset from its range's base) of the range holding all of t."""
        lo = t.data_ptr()
        hi = lo + t.numel() * t.element_size()
        for base, end, item in self._spans:
            if base <= lo and hi <= end:
                return item, lo - base
        return None

    def __bool__(self) -> bool:
        return bool(self._spans)
