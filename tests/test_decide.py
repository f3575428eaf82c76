"""The tuner's picking rules: margin per interleaved round, merging, suspects, bisection, regret
(and check's second measurement of a point that seems to lose).

The search loop is driven here by a synthetic cost model standing in for measurements (the
end-to-end runs on real Gloo and MPI are in test_tuner.py): what is tested is which sizes it
decides to measure and what it concludes."""

from __future__ import annotations

import math
from types import SimpleNamespace

from mcr.tuner.check import confirmed
from mcr.tuner.decide import (
    CONFIRM,
    TAIL,
    TIE,
    gaps,
    pick,
    ranges,
    regret,
    settled,
    suspects,
    to_confirm,
    winners,
)
from mcr.tuner.search import Pass, confirm_pass, tune_pass


def _row(op, size, be, rounds):
    return {"op": op, "bytes": size, "backend": be, "median_us": sorted(rounds)[len(rounds) // 2],
            "round_medians_us": ";".join(map(str, rounds))}


def _rows(op: str, table: dict[int, dict[str, float]]) -> list[dict]:
    return [_row(op, size, be, [t]) for size, times in table.items() for be, t in times.items()]


def test_fastest_wins_but_near_ties_keep_the_default():
    rows = _rows("all_reduce", {
        8: {"gloo": 100.0, "mpi": 50.0},                        # mpi clearly faster
        64: {"gloo": 100.0, "mpi": 100.0 / (1 + TIE / 2)},     # within the margin: default
        512: {"gloo": 100.0, "mpi": 100.0 / (1 + 2 * TIE)},    # past it: mpi
    })
    assert winners(rows, "gloo")["all_reduce"] == [(8, "mpi"), (64, "gloo"), (512, "mpi")]


def test_challenger_must_win_every_round():
    """Faster by median but slower in one interleaved round: noise, the default stays."""
    noisy = {"gloo": _row("x", 8, "gloo", [100, 100, 60]), "mpi": _row("x", 8, "mpi", [50, 50, 70])}
    assert pick(noisy, "gloo") == "gloo"
    steady = {"gloo": _row("x", 8, "gloo", [100, 90, 95]), "mpi": _row("x", 8, "mpi", [50, 60, 55])}
    assert pick(steady, "gloo") == "mpi"


def test_at_a_tie_the_steadier_challenger_wins():
    """Medians within the margin: a challenger whose p90 is clearly lower (median no higher)
    replaces a default whose latency swings; a small tail gain or a higher median does not."""
    def point(nccl, sdma):
        return {be: dict(_row("x", 8, be, [med] * 3), p90_us=p90)
                for be, (med, p90) in (("nccl", nccl), ("sdma", sdma))}
    assert pick(point((31.1, 37.3), (30.5, 32.3)), "nccl") == "sdma"     # 2 MiB, 2x H200
    assert pick(point((31.1, 37.3), (31.1, 37.3 / (1 + TAIL / 2))), "nccl") == "nccl"
    assert pick(point((30.0, 37.3), (30.5, 31.0)), "nccl") == "nccl"     # median higher
    three = point((31.1, 40.0), (30.9, 33.0))
    three["mpi"] = dict(_row("x", 8, "mpi", [31.0] * 3), p90_us=31.5)
    assert pick(three, "nccl") == "mpi"                                   # the lowest tail
    assert winners(list(three.values()), "nccl") == {"x": [(8, "mpi")]}


def test_a_default_is_judged_by_its_fastest_round():
    """NCCL's two modes (2x H200, 2026-11-26): 64 KiB all-reduces at ~50 us for a while, then
    ~32 us, for every communicator at once. sdma at ~36 us wins every round of a slow spell;
    against the default's fast round in an earlier pass it does not. Each is taken at its best:
    a spell that slowed both does not hide the challenger's real win."""
    slow = [_row("x", 8, "nccl", [50, 49, 50]), _row("x", 8, "sdma", [36, 35, 37])]
    assert winners(slow, "nccl") == {"x": [(8, "sdma")]}              # one slow pass alone
    earlier = [_row("x", 8, "nccl", [32, 33, 31]), _row("x", 8, "sdma", [36, 35, 37])]
    assert winners(earlier + slow, "nccl") == {"x": [(8, "nccl")]}    # it met the fast mode
    both = [_row("x", 8, "nccl", [37, 38, 36]), _row("x", 8, "sdma", [22, 23, 22]),
            _row("x", 8, "nccl", [54, 56, 55]), _row("x", 8, "sdma", [37, 38, 38])]
    assert winners(both, "nccl") == {"x": [(8, "sdma")]}              # broadcast, 16 B
    symm = [_row("x", 8, "nccl", [32, 50, 31]), _row("x", 8, "symm", [12, 12, 13])]
    assert winners(symm, "nccl") == {"x": [(8, "symm")]}


def test_no_backend_is_slower_than_at_a_larger_size():
    """NCCL's broadcast on 2x H200 (2026-11-26): 63 us at 4 MiB in a slow spell, then 40 us at
    6 MiB; sdma's 39 us at 4 MiB is judged against 40, not 63 (OSU then timed NCCL at 33.5).
    The challenger is bounded alike: symmetric all-gathers on the next lease, 1 KiB in a spell
    that slowed both (NCCL 67 us, sdma 41), 512 KiB outside it (38 and 25). NCCL bounded and
    sdma not kept NCCL for 1-320 KiB, 1.6x slower there by check and OSU."""
    spell = _rows("all_gather", {1 << 10: {"nccl": 67.0, "sdma": 41.0},
                                 512 << 10: {"nccl": 38.0, "sdma": 25.0}})
    assert winners(spell, "nccl")["all_gather"] == [(1 << 10, "sdma"), (512 << 10, "sdma")]
    rows = _rows("broadcast", {4 << 20: {"nccl": 63.0, "sdma": 39.0},
                               6 << 20: {"nccl": 40.0, "sdma": 42.0},
                               8 << 20: {"nccl": 46.0, "sdma": 50.0}})
    assert winners(rows, "nccl")["broadcast"] == [(4 << 20, "nccl"), (6 << 20, "nccl"),
                                                  (8 << 20, "nccl")]
    rows = _rows("broadcast", {4 << 20: {"nccl": 63.0, "sdma": 30.0},     # beyond the bound
                               6 << 20: {"nccl": 40.0, "sdma": 60.0}})
    assert winners(rows, "nccl")["broadcast"] == [(4 << 20, "sdma"), (6 << 20, "nccl")]


def test_a_default_beaten_in_its_fast_mode_at_the_confirm_pass_loses_there():
    """4x H200's all-gathers (the CSV): NCCL fast in the confirm pass, beaten in every round;
    its 39.6 us at 3 MiB (its curve) no longer keeps 1.5-2 MiB (check: 27% regret)."""
    pts = {3 << 19: ((61.403, 70.572, 72.949), (44.658, 50.252, 50.576),
                     (43.664, 43.219, 43.762), (39.583, 39.214, 39.267)),
           2 << 20: ((62.847, 71.75, 65.347), (46.525, 49.045, 47.736),
                     (43.308, 42.076, 42.148), (40.653, 40.437, 40.852))}
    rows = [dict(_row("all_gather", n, be, list(t)), **{"pass": ps})
            for n, ts in pts.items() for ps, pair in (("bisect", ts[:2]), ("confirm", ts[2:]))
            for be, t in zip(("nccl", "sdma"), pair)]
    rows += [_row("all_gather", 3 << 20, "nccl", [39.59, 39.96, 46.284]),
             _row("all_gather", 3 << 20, "sdma", [44.552, 45.066, 45.813])]
    assert winners(rows, "nccl")["all_gather"] == [(3 << 19, "sdma"), (2 << 20, "sdma"),
                                                   (3 << 20, "nccl")]


def test_narrow_wins_are_measured_again_after_the_pass():
    """A win by less than CONFIRM is timed once more, default beside challenger, with sync calls
    where the run's were async; its second measurement decides, and a confirmed point is not
    asked for again."""
    rows = _rows("all_reduce", {8: {"nccl": 50.0, "sdma": 36.0},           # narrow: again
                                64: {"nccl": 50.0, "symm": 50.0 / (CONFIRM + 0.5)},  # wide
                                512: {"nccl": 40.0, "sdma": 60.0}})         # default's
    assert to_confirm(rows, "nccl") == {"all_reduce": [(8, "sdma")]}
    asked = []

    class Again:
        ctx = SimpleNamespace(calls="async")

        def __init__(self, times=(("nccl", 32.0), ("sdma", 36.0))):
            self.times = times

        def point(self, p, size, kind, backends=None, rounds=None, calls=None):
            asked.append((size, kind, tuple(backends), calls))
            return [dict(_row(p.op, size, be, [t] * 3), **{"pass": kind})
                    for be, t in self.times if be in backends]
    more = confirm_pass(Again(), Pass("all_reduce"), rows, "nccl", lambda n: None, 1, 100.0, 3)
    assert asked == [(8, "confirm", ("nccl", "sdma"), "sync")]      # the other way of calling
    assert winners(rows + more, "nccl")["all_reduce"] == [(8, "nccl"), (64, "symm"),
                                                          (512, "nccl")]
    # Every backend of the point is timed again, not the winner alone: a winner confirmed in a
    # slow spell must not lose to a third backend's row from a calm one (2x H100: symm 22 us
    # against sdma's 34 side by side, then 39 confirmed alone in a spell, sdma chosen).
    three = _rows("all_gather", {256: {"nccl": 48.0, "sdma": 34.0, "symm": 22.0},
                                 512: {"nccl": 37.0, "sdma": 34.0, "symm": 22.0}})
    asked.clear()
    spell = Again((("nccl", 93.0), ("sdma", 50.0), ("symm", 39.0)))
    more = confirm_pass(spell, Pass("all_gather"), three, "nccl", lambda n: None, 1, 1.5, 3)
    assert [a[2] for a in asked] == [("nccl", "sdma", "symm")] * 2
    assert winners(three + more, "nccl")["all_gather"] == [(256, "symm"), (512, "symm")]


def test_a_win_lost_only_to_a_fastest_round_from_elsewhere_is_confirmed():
    """A challenger that beats the default in every round side by side, but not the default's
    fastest round from a larger size measured at a calmer moment, is timed again rather than
    dropped (2x H100: sdma's 16 KiB broadcast 41 us against NCCL's 74 in a spell, NCCL's 39
    at 6 MiB from another moment; sdma took 25 there when calm)."""
    M = 1 << 20
    rows = [_row("broadcast", 16384, "nccl", [68.0, 70.0, 82.0]),
            _row("broadcast", 16384, "sdma", [39.0, 41.0, 46.0]),
            _row("broadcast", 6 * M, "nccl", [39.2, 39.9, 40.1]),
            _row("broadcast", 6 * M, "sdma", [42.3, 42.4, 42.6])]
    assert winners(rows, "nccl")["broadcast"] == [(16384, "nccl"), (6 * M, "nccl")]
    assert to_confirm(rows, "nccl") == {"broadcast": [(16384, "sdma")]}
    calm = [dict(_row("broadcast", 16384, be, [t] * 3), **{"pass": "confirm"})
            for be, t in (("nccl", 39.5), ("sdma", 25.2))]
    assert winners(rows + calm, "nccl")["broadcast"] == [(16384, "sdma"), (6 * M, "nccl")]
    assert to_confirm(rows + calm, "nccl") == {}


def test_a_boundary_that_confirming_opens_is_searched():
    """A confirmed point that goes back to the default leaves a new boundary beside a
    challenger's size: it is bisected, and the new size's narrow win confirmed in turn (2x
    H100: reduce-scatter 16 MiB back to NCCL left 4-16 MiB to the boundary's guess, and 8 MiB
    ran 34% slower than sdma there)."""
    M = 1 << 20
    rows = _rows("reduce_scatter", {4 * M: {"nccl": 63.0, "sdma": 44.0},
                                    16 * M: {"nccl": 66.0, "sdma": 60.0}})
    assert winners(rows, "nccl")["reduce_scatter"] == [(4 * M, "sdma"), (16 * M, "sdma")]
    truth = {4 * M: {"nccl": 63.0, "sdma": 44.0}, 8 * M: {"nccl": 62.0, "sdma": 46.0},
             16 * M: {"nccl": 66.0, "sdma": 65.0}}
    asked = []

    class Bench:
        ctx = SimpleNamespace(calls="async")
        backends = ["nccl", "sdma"]

        def point(self, p, size, kind, backends=None, rounds=None, calls=None):
            asked.append((size, kind, calls))
            return [dict(_row(p.op, size, be, [truth[size][be]] * 3), **{"pass": kind})
                    for be in backends]
    more = confirm_pass(Bench(), Pass("reduce_scatter"), rows, "nccl", lambda n: None, 2,
                        2.5, 3)
    assert asked == [(4 * M, "confirm", "sync"), (16 * M, "confirm", "sync"),
                     (8 * M, "bisect", None), (8 * M, "confirm", "sync")]
    assert winners(rows + more, "nccl")["reduce_scatter"] == [(4 * M, "sdma"), (8 * M, "sdma"),
                                                              (16 * M, "nccl")]
    held = [dict(r, **{"pass": "confirm"}) for r in _rows("x", {8: {"nccl": 50.0, "sdma": 36.0}})]
    assert to_confirm(held, "nccl") == {}                      # confirmed: it stands


def test_missing_default_measurement_takes_the_fastest():
    rows = _rows("all_gather", {8: {"mpi": 5.0, "sdma": 4.0}})
    assert winners(rows, "gloo")["all_gather"] == [(8, "sdma")]


def test_ranges_merge_equal_neighbours_and_span_zero_to_inf():
    seq = [(8, "mpi"), (64, "mpi"), (512, "gloo"), (4096, "gloo"), (32768, "mpi")]
    # Boundaries at the (rounded) geometric middle of the sizes whose winners differ.
    assert ranges(seq) == [(0, 192, "mpi"), (192, 12288, "gloo"), (12288, math.inf, "mpi")]
    assert ranges([(8, "nccl")]) == [(0, math.inf, "nccl")]
    assert ranges([(24 << 20, "sdma"), (32 << 20, "nccl")]) == \
        [(0, 28 << 20, "sdma"), (28 << 20, math.inf, "nccl")]
    for a, b in [(4, 5), (100, 101), (1 << 30, (1 << 30) + 4)]:    # nothing between: b's own
        got = ranges([(a, "x"), (b, "y")])
        assert got[1][0] in range(a + 1, b + 1)


def test_a_lone_win_between_two_of_the_defaults_is_settled_to_the_default():
    rows = _rows("reduce_scatter", {
        4: {"nccl": 30.0, "sdma": 31.0}, 16: {"nccl": 31.0, "sdma": 29.0},
        64: {"nccl": 30.0, "sdma": 31.0}, 256: {"nccl": 40.0, "sdma": 20.0},
        1024: {"nccl": 40.0, "sdma": 20.0}})
    assert [be for _, be in winners(rows, "nccl")["reduce_scatter"]] == \
        ["nccl", "sdma", "nccl", "sdma", "sdma"]
    assert [be for _, be in settled(rows, "nccl")["reduce_scatter"]] == \
        ["nccl", "nccl", "nccl", "sdma", "sdma"]             # two in a row, or at an end: kept


def test_the_defaults_near_ties_between_two_wins_of_one_challenger_go_to_it():
    """Sizes kept on the default (faster by less than the margin) between two clear wins of one
    challenger go to it where it was faster by median and by fastest round; not where it was
    slower at any size of the run, not between two different challengers or at an end, and
    a lone win the table drops is no flank."""
    def rows(mid: dict[int, dict[str, float]]) -> list[dict]:
        # 64's symm no faster than the run's: a larger size's fastest round bounds a smaller's
        return _rows("all_gather", {1: {"nccl": 220.0, "symm": 150.0}, **mid,
                                    64: {"nccl": 250.0, "symm": 213.0}})
    near = 220.0 / (1 + TIE / 2)                         # faster, inside the margin
    run = {4: {"nccl": 220.0, "symm": near}, 16: {"nccl": 220.0, "symm": near}}
    assert [be for _, be in winners(rows(run), "nccl")["all_gather"]] == \
        ["symm", "nccl", "nccl", "symm"]
    assert [be for _, be in settled(rows(run), "nccl")["all_gather"]] == ["symm"] * 4
    slower = {**run, 16: {"nccl": 220.0, "symm": 221.0}}
    assert [be for _, be in settled(rows(slower), "nccl")["all_gather"]] == \
        ["symm", "nccl", "nccl", "symm"]
    at_best = [r for r in rows(run) if not (r["bytes"] == 4 and r["backend"] == "nccl")]
    at_best.append(_row("all_gather", 4, "nccl", [230.0, 205.0, 230.0]))   # NCCL's fast round
    assert [be for _, be in settled(at_best, "nccl")["all_gather"]] == \
        ["symm", "nccl", "nccl", "symm"]
    other = _rows("all_gather", {1: {"nccl": 220.0, "symm": 200.0, "sdma": 230.0}, **run,
                                 64: {"nccl": 220.0, "symm": 230.0, "sdma": 200.0}})
    assert [be for _, be in settled(other, "nccl")["all_gather"]] == \
        ["symm", "nccl", "nccl", "sdma"]
    ends = _rows("all_gather", {**run, 64: {"nccl": 220.0, "symm": 200.0}})
    assert [be for _, be in settled(ends, "nccl")["all_gather"]] == ["nccl", "nccl", "symm"]
    lone = _rows("all_gather", {1: {"nccl": 220.0, "symm": near},
                                2: {"nccl": 220.0, "symm": 200.0}, **run,
                                64: {"nccl": 220.0, "symm": 200.0}})
    assert [be for _, be in winners(lone, "nccl")["all_gather"]] == \
        ["nccl", "symm", "nccl", "nccl", "symm"]
    assert [be for _, be in settled(lone, "nccl")["all_gather"]] == ["nccl"] * 4 + ["symm"]


def test_a_challenger_that_matched_the_defaults_fast_mode_at_the_point_wins_its_slow_one():
    """NCCL's 4 MiB reduce-scatter on 2x H100 (2026-11-26): 60, 39 and 54 us in three rounds
    beside sdma's 44, 38 and 40. No margin in every round, yet sdma lost none and matched NCCL's
    fast mode: it wins, and is confirmed. Not where it lost a round, where NCCL's fast mode was
    met only at another size, where its fastest round was slower, or its median within TIE."""
    M = 4 << 20
    point = [_row("x", M, "nccl", [59.9, 39.2, 54.1]), _row("x", M, "sdma", [43.7, 38.3, 40.2])]
    assert winners(point, "nccl") == {"x": [(M, "sdma")]}
    assert to_confirm(point, "nccl") == {"x": [(M, "sdma")]}
    lost = [point[0], _row("x", M, "sdma", [43.7, 40.0, 40.2])]
    assert winners(lost, "nccl") == {"x": [(M, "nccl")]}
    elsewhere = [_row("x", M, "nccl", [60.0, 57.0, 63.0]), _row("x", M, "sdma", [43.7, 38.3, 40.2]),
                 _row("x", 2 * M, "nccl", [38.5]), _row("x", 2 * M, "sdma", [50.0])]
    assert winners(elsewhere, "nccl")["x"][0] == (M, "nccl")
    slower_best = [_row("x", M, "nccl", [60.0, 39.0, 55.0]),
                   _row("x", M, "sdma", [43.0, 38.5, 40.0]),
                   _row("x", 2 * M, "nccl", [38.0]), _row("x", 2 * M, "sdma", [50.0])]
    assert winners(slower_best, "nccl")["x"][0] == (M, "nccl")
    close = [_row("x", M, "nccl", [41.0, 39.2, 40.0]), _row("x", M, "sdma", [40.0, 38.5, 39.5])]
    assert winners(close, "nccl") == {"x": [(M, "nccl")]}


def test_a_lone_win_between_two_of_another_challengers_goes_to_it_where_tied():
    """Under a GEMM (2x H100) symm and sdma took turns at the smallest sizes, within 2% of each
    other: a lone win between two of another challenger's goes to that one where it tied
    there by median; not where it was slower by more than TIE."""
    def rows(sdma_16: float, symm_16: float) -> list[dict]:
        return _rows("all_gather", {8: {"nccl": 250.0, "symm": 220.0, "sdma": 224.0},
                                    16: {"nccl": 250.0, "symm": symm_16, "sdma": sdma_16},
                                    32: {"nccl": 250.0, "symm": 221.0, "sdma": 226.0}})
    tied = rows(218.0, 221.0)
    assert [be for _, be in winners(tied, "nccl")["all_gather"]] == ["symm", "sdma", "symm"]
    assert [be for _, be in settled(tied, "nccl")["all_gather"]] == ["symm"] * 3
    clear = rows(200.0, 221.0)
    assert [be for _, be in settled(clear, "nccl")["all_gather"]] == ["symm", "sdma", "symm"]


def test_suspects_are_single_size_flips_only():
    seq = [(1, "a"), (2, "a"), (4, "b"), (8, "a"), (16, "b"), (32, "b")]
    assert suspects(seq) == [4, 8]          # 8 differs from 4 and 16, which now differ: 4 first
    assert suspects([(1, "a"), (2, "a"), (4, "b"), (8, "b")]) == []     # a change, not a flip
    assert suspects([(1, "a"), (2, "b"), (4, "b")]) == [1]      # an end's lone rule: re-check
    assert suspects([(1, "a"), (2, "b")]) == []                  # too few to call a flip


def test_gaps_are_geometric_middles_between_different_winners():
    assert gaps([(4, "a"), (64, "a"), (1024, "b")], 1.5, 4) == [(256, "a", "b")]
    assert gaps([(16 << 20, "a"), (64 << 20, "b")], 1.5, 2) == [(32 << 20, "a", "b")]
    assert gaps([(2048, "a"), (4096, "b")], 1.5, 4) == [(3072, "a", "b")]    # round, readable
    assert gaps([(4, "a"), (8, "b")], 1.5, 4) == []              # nothing between at unit 4
    assert gaps([(100, "a"), (140, "b")], 1.5, 4) == []          # close enough already


def test_regret_is_chosen_over_fastest():
    rows = _rows("all_reduce", {8: {"gloo": 100.0, "mpi": 50.0}, 64: {"gloo": 10.0, "mpi": 20.0}})
    got = regret(rows, {("all_reduce", 8): "gloo", ("all_reduce", 64): "gloo"})
    assert got == {"all_reduce": [(8, 1.0), (64, 0.0)]}


def test_regret_at_best_tells_a_slow_spell_from_a_wrong_choice():
    """check's second view: each backend by its fastest round. NCCL chosen, in a slow spell for
    two of three rounds: 39% by medians, nothing at best; a choice that is wrong at best too
    (sdma 22 us against NCCL's 36) stays."""
    rows = [_row("x", 8, "nccl", [50, 50, 31]), _row("x", 8, "sdma", [36, 36, 36]),
            _row("x", 64, "nccl", [36, 36, 36]), _row("x", 64, "sdma", [22, 22, 22])]
    chosen = {("x", 8): "nccl", ("x", 64): "nccl"}
    assert regret(rows, chosen) == {"x": [(8, 50 / 36 - 1), (64, 36 / 22 - 1)]}
    assert regret(rows, chosen, at_best=True) == {"x": [(8, 0.0), (64, 36 / 22 - 1)]}


def test_check_measures_a_losing_point_again_before_it_counts():
    rows = _rows("all_reduce", {8: {"gloo": 100.0, "mpi": 98.0},       # within the margin
                                64: {"gloo": 100.0, "mpi": 50.0},      # an outlier, or real
                                512: {"gloo": 10.0, "mpi": 20.0}})
    chosen = {("all_reduce", s): "gloo" for s in (8, 64, 512)}
    asked = []

    def again(op, size, mpi):
        asked.append((op, size))
        return _rows(op, {size: {"gloo": 100.0, "mpi": mpi}})
    out, todo = confirmed(rows, chosen, lambda op, size: again(op, size, 99.0))
    assert asked == [("all_reduce", 64)] and todo == [("all_reduce", 64, 1.0)]
    assert dict(out["all_reduce"])[64] == 100.0 / 99.0 - 1          # gone when measured again
    out, _ = confirmed(rows, chosen, lambda op, size: again(op, size, 50.0))
    assert dict(out["all_reduce"])[64] == 1.0                       # real: it stays
    assert dict(out["all_reduce"])[8] == 100.0 / 98.0 - 1 and len(asked) == 2
    out, _ = confirmed(rows, chosen, lambda op, size: again(op, size, 25.0))
    assert dict(out["all_reduce"])[64] == 1.0           # worse the second time: the lower counts


class _Model:
    """Stands in for Measurer: times from a cost model (a crossover at `cross` bytes), with one
    planted outlier that is gone when measured again."""

    def __init__(self, cross: int, outlier: int | None = None) -> None:
        self.cross, self.outlier = cross, outlier
        self.args = SimpleNamespace(rounds=3)
        self.backends = ["gloo", "mpi"]
        self.asked: list[tuple[int, str]] = []

    def point(self, p, size, kind, backends=None, rounds=None):
        self.asked.append((size, kind))
        rows = []
        for be in backends or self.backends:
            t = 100.0 if be == "gloo" else (50.0 if size < self.cross else 200.0)
            if be == "mpi" and size == self.outlier and kind == "grid":
                t = 400.0
            rows.append(_row(p.op, size, be, [t, t, t]))
        return rows


def test_search_bisects_the_crossover_and_rechecks_an_outlier():
    m = _Model(cross=3000, outlier=64)
    grid = [4 * 4 ** i for i in range(7)]                  # 4 .. 16384, factor 4
    rows = tune_pass(m, Pass("all_reduce"), grid, "gloo", 4, 1.5, 8, lambda n: None)
    seq = winners(rows, "gloo")["all_reduce"]
    assert (64, "recheck") in m.asked and dict(seq)[64] == "mpi"    # the outlier did not stick
    got = ranges(seq)
    assert [be for *_, be in got] == ["mpi", "gloo"]
    edge = got[1][0]
    below = max(s for s, be in seq if be == "mpi")
    above = min(s for s, be in seq if be == "gloo")
    assert below < 3000 <= above and above / below <= 1.5       # bisected within the ratio
    assert below < edge < above and edge == 2560                 # the rule: their middle
    assert [s for s, k in m.asked if k == "bisect"] == [2048, 3072]   # 1024|4096, then 2048|4096


def test_search_replays_nothing_new_when_grid_is_monotone():
    m = _Model(cross=10 ** 9)
    tune_pass(m, Pass("all_gather"), [4, 16, 64], "gloo", 4, 1.5, 8, lambda n: None)
    assert [k for _, k in m.asked] == ["grid"] * 3
