"""The main job's verdict (benchmarks/verdict.py) on rows whose answer is known."""

from __future__ import annotations

import csv

from benchmarks.verdict import read, verdict

FIELDS = ["op", "bytes", "backend", "served_by", "median_us", "round_medians_us"]


def _csv(tmp_path, rows):
    path = tmp_path / "osu.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for op, size, be, served, rounds in rows:
            w.writerow({"op": op, "bytes": size, "backend": be, "served_by": served,
                        "median_us": sorted(rounds)[1],
                        "round_medians_us": ";".join(map(str, rounds))})
    return path


def test_a_clear_loss_is_named_a_near_miss_is_a_tie_and_choices_are_ranges(tmp_path):
    rows = [
        # 8 B: auto (mpi) is the fastest
        ("all_reduce", 8, "auto", "mpi", [10, 11, 12]),
        ("all_reduce", 8, "mpi", "mpi", [10, 11, 12]),
        ("all_reduce", 8, "gloo", "gloo", [30, 31, 32]),
        # 64 B: auto slower by median, but its rounds overlap the fastest's: a tie
        ("all_reduce", 64, "auto", "mpi", [11, 13, 14]),
        ("all_reduce", 64, "mpi", "mpi", [10, 12, 13]),
        ("all_reduce", 64, "gloo", "gloo", [30, 31, 32]),
        # 1 MiB: auto chose gloo, and mpi was 2x faster in every round: a loss
        ("all_reduce", 1 << 20, "auto", "gloo", [200, 200, 210]),
        ("all_reduce", 1 << 20, "gloo", "gloo", [200, 205, 210]),
        ("all_reduce", 1 << 20, "mpi", "mpi", [95, 100, 105]),
    ]
    lines = verdict(read(_csv(tmp_path, rows)))
    assert lines[0].startswith("verdict: mcr's choice lost at 1 sizes, by up to 2.00x")
    assert "chose mpi from 8 B to 64 B, gloo at 1 MiB" in lines[1]
    assert "at 2 of 3 sizes" in lines[1] and "lost at 1 MiB (mpi 2.00x faster)" in lines[1]


def test_the_chosen_library_slower_through_mcr_is_not_a_lost_choice(tmp_path):
    """auto chose mpi, mpi was the fastest library forced, and auto still took longer in every
    round: the choice was right; the difference is mcr's own time, said apart."""
    rows = [("all_reduce", 4096, "auto", "mpi", [13, 13, 14]),
            ("all_reduce", 4096, "mpi", "mpi", [10, 10, 11]),
            ("all_reduce", 4096, "gloo", "gloo", [30, 31, 32])]
    lines = verdict(read(_csv(tmp_path, rows)))
    assert lines[0] == "verdict: mcr's choice matched the fastest library at every size"
    assert "at 1 of 1 sizes" in lines[1]
    assert "through mcr slower than the same library forced at 4 KiB (1.30x)" in lines[1]


def test_every_size_matched(tmp_path):
    rows = [("broadcast", s, be, "mpi", [5, 5, 5]) for s in (4, 4096) for be in ("auto", "mpi")]
    lines = verdict(read(_csv(tmp_path, rows)))
    assert lines[0] == "verdict: mcr's choice matched the fastest library at every size"
