"""The measurement engine (mcr.measure.engine) that the tuner and the OSU benchmarks share."""

from __future__ import annotations

import numpy as np
from conftest import run_torchrun

from mcr.measure.engine import Timing


def test_backends_take_turns_sample_by_sample_on_gloo():
    out = run_torchrun(2, "measure_worker.py", timeout=180)
    assert out.count(": ok, auto/gloo") == 2, out[-2000:]


def test_speedup_pairs_samples_taken_together_else_rounds():
    rng = np.random.default_rng(7)
    a, b = rng.uniform(1, 3, 40), rng.uniform(1, 3, 40)
    first = Timing(list(a), [float(np.median(a[:20])), float(np.median(a[20:]))], paired=True)
    this = Timing(list(b), [float(np.median(b[:20])), float(np.median(b[20:]))], paired=True)
    assert np.isclose(this.speedup_over(first), np.median(a / b))
    this.paired = False    # samples not taken side by side: only rounds pair up
    want = np.median([np.median(a[:20]) / np.median(b[:20]), np.median(a[20:]) / np.median(b[20:])])
    assert np.isclose(this.speedup_over(first), want)
