"""The measurement engine (mcr.measure.engine) that the tuner and the OSU benchmarks share."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpus, run_torchrun

from mcr.measure.engine import Timing
from mcr.measure.turns import turn_orders


def test_backends_take_turns_sample_by_sample_on_gloo():
    out = run_torchrun(2, "measure_worker.py", timeout=180)
    assert out.count(": ok, auto/gloo") == 2, out[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ CUDA GPUs")
def test_overlap_load_covers_the_call():
    """The overlap profile's GEMMs cover the first serving backend's call alone, the slowest
    rank's count on every rank; one GEMM without `cover`. A GPU each: on one shared GPU the
    ranks' GEMMs and sleeps interleave, and the counts timed alone no longer hold (27 GEMMs
    against 14 expected, 1x H200)."""
    out = run_torchrun(2, "load_worker.py", timeout=180)
    assert out.count("load ok") == 2, out[-3000:]


def test_speedup_pairs_samples_taken_together_else_rounds():
    rng = np.random.default_rng(7)
    a, b = rng.uniform(1, 3, 40), rng.uniform(1, 3, 40)
    first = Timing(list(a), [float(np.median(a[:20])), float(np.median(a[20:]))], paired=True)
    this = Timing(list(b), [float(np.median(b[:20])), float(np.median(b[20:]))], paired=True)
    assert np.isclose(this.speedup_over(first), np.median(a / b))
    this.paired = False    # samples not taken side by side: only rounds pair up
    want = np.median([np.median(a[:20]) / np.median(b[:20]), np.median(a[20:]) / np.median(b[20:])])
    assert np.isclose(this.speedup_over(first), want)


def _after_counts(orders, k):
    seq = [b for o in orders for b in o]
    after = np.zeros((k, k), dtype=int)
    for a, b in zip(seq, seq[1:]):
        after[a, b] += 1
    return after


def _balanced(orders, k):
    off = _after_counts(orders, k)[~np.eye(k, dtype=bool)]
    return off.min() >= 0.7 * off.mean() and off.max() <= 1.3 * off.mean()


@pytest.mark.parametrize("k", range(2, 9))
def test_turns_put_each_backend_after_each_other_alike(k):
    n = 12 * k
    orders = turn_orders(k, n)
    assert len(orders) == n and all(sorted(o) == list(range(k)) for o in orders)
    assert _balanced(orders, k), _after_counts(orders, k)
    # A plain rotation (A B C, B C A, ...) fails this: B runs right after A in every sample.
    rot = [tuple((i + j) % k for j in range(k)) for i in range(n)]
    assert _balanced(rot, k) == (k == 2)
    if k == 2:   # two backends: A B, B A, ... (each boundary a backend after itself)
        assert orders == ((0, 1), (1, 0)) * k * 6


def test_rows_appended_to_a_csv_of_another_layout_read_back_as_written(tmp_path):
    """A resumed tuning run appends to the partial CSV it found, which an older mcr may have
    written with fewer columns or in another order: every row reads back with its own values."""
    import csv

    from mcr.measure.sweep import append_csv
    path = tmp_path / "t.partial.csv"
    old = [{"op": "all_to_all", "bytes": 8, "profile": "standalone", "load": "", "pass": "grid"}]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(old[0]))
        w.writeheader()
        w.writerows(old)
    new = [{"op": "all_to_all", "bytes": 16, "profile": "overlap", "splits": "uneven",
            "load": "one", "pass": "bisect"}]
    append_csv(str(path), new)
    append_csv(str(path), [dict(new[0], bytes=32)])
    with open(path, newline="") as f:
        got = list(csv.DictReader(f))
    want = [dict(old[0], splits=""), *new, dict(new[0], bytes=32)]
    assert got == [{k: str(v) for k, v in r.items()} for r in want]


def test_dispatch_overhead_all_to_all_cpu():
    """dispatch_overhead --op all_to_all on 2 Gloo ranks: each mcr variant against torch's
    call, on Gloo and on the no-op stand-in, every call served by mcr."""
    out = run_torchrun(2, "benchmarks/dispatch_overhead.py", "--op", "all_to_all",
                       "--rounds", "3", "--reps", "2")
    assert "CPU all_to_all on Gloo" in out and "no-op ProcessGroup" in out, out[-3000:]
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(("mcr backend=", "mcr auto"))]
    assert len(lines) == 6, out[-3000:]
    assert all(ln.rstrip().endswith(("torch.distributed (gloo)",
                                     "torch.distributed (gloo) async+wait")) for ln in lines)
    assert "all_to_all      gloo" in out and "(100.0%)" in out, out[-3000:]


def test_osu_alltoallv_checks_uneven_splits_and_names_their_rule(tmp_path):
    """benchmarks.osu_alltoallv on 2 ranks under mpiexec: skewed split sizes (empty blocks
    included), every result checked against each rank's rebuilt data (-c), a row per size and
    backend; `auto` names the backend of the table's `splits: uneven` rule (gloo here), not of
    the equal-split rule (mpi)."""
    from conftest import run_mpi
    from test_tables import HEAD
    (tmp_path / "t.yaml").write_text(HEAD + "  2:\n    all_to_all:\n"
                                     "      - {max: inf, backend: mpi}\n"
                                     "      - {max: inf, backend: gloo, splits: uneven}\n")
    out = run_mpi(2, "benchmarks/osu_alltoallv.py", "-d", "cpu", "-c", "-m", "8:4KiB",
                  "-f", "8", "--backend", "auto,mpi", "-i", "3", "-x", "1",
                  env={"MCR_TUNING_TABLE": str(tmp_path / "t.yaml")}, timeout=180)
    assert "all_to_all with split sizes" in out, out[-3000:]
    rows = [ln.split() for ln in out.splitlines() if ln[:12].strip().isdigit()]
    assert [(r[0], r[1]) for r in rows] == [(s, b) for s in ("8", "64", "512", "4096")
                                            for b in ("auto=gloo", "mpi")], out[-3000:]
