"""The tuner's picking rules: the tie margin to the default, merging equal neighbours."""

from __future__ import annotations

import math

from tuner.decide import TIE, ranges, winners


def _rows(op: str, table: dict[int, dict[str, float]]) -> list[dict]:
    return [{"op": op, "bytes": size, "backend": be, "median_us": t}
            for size, times in table.items() for be, t in times.items()]


def test_fastest_wins_but_near_ties_keep_the_default():
    rows = _rows("all_reduce", {
        8: {"gloo": 100.0, "mpi": 50.0},                        # mpi clearly faster
        64: {"gloo": 100.0, "mpi": 100.0 / (1 + TIE / 2)},     # within the margin: default
        512: {"gloo": 100.0, "mpi": 100.0 / (1 + 2 * TIE)},    # past it: mpi
    })
    assert winners(rows, "gloo")["all_reduce"] == [(8, "mpi"), (64, "gloo"), (512, "mpi")]


def test_missing_default_measurement_takes_the_fastest():
    rows = _rows("all_gather", {8: {"mpi": 5.0, "sdma": 4.0}})
    assert winners(rows, "gloo")["all_gather"] == [(8, "sdma")]


def test_ranges_merge_equal_neighbours_and_span_zero_to_inf():
    seq = [(8, "mpi"), (64, "mpi"), (512, "gloo"), (4096, "gloo"), (32768, "mpi")]
    assert ranges(seq) == [(0, 512, "mpi"), (512, 32768, "gloo"), (32768, math.inf, "mpi")]
    assert ranges([(8, "nccl")]) == [(0, math.inf, "nccl")]
