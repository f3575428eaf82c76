"""Pair-ratio statistics shared by the probes."""

from __future__ import annotations


def ci95(sorted_ratios: list[float]) -> list[float]:
    """The median's 95% interval from order statistics (distribution-free)."""
    n = len(sorted_ratios)
    lo = max(0, int(n / 2 - 0.98 * n ** 0.5))
    hi = min(n - 1, int(n / 2 + 0.98 * n ** 0.5 + 0.999))
    return [sorted_ratios[lo], sorted_ratios[hi]]
