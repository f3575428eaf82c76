"""From measured rows to ordered size ranges, one backend each: the tuner's picking rules.

A row is one backend at one size (mcr.measure.sweep.make_row): median_us and the medians of
its interleaved rounds. Rules, in order:
- a challenger replaces the default only if faster by more than TIE in every round, each round
  timing them side by side: a switch must pay for itself, and beat the noise between rounds;
- and only if its fastest round beats the default's fastest round by TIE, each over every
  pass at that size: like against like, each at its best. A default that swings between modes
  (NCCL's small calls on 2x H100 and H200: ~31 or ~50 us, for every communicator of a process
  at once, for milliseconds to minutes) is judged by its fast mode, so a table tuned while it
  was slow does not lose to it when it is fast; a slow spell that slows the challenger too
  (sdma's small broadcasts: 22 us, then 38) does not hide a real win;
- a challenger that lost no round side by side, was no slower at both's fastest rounds and
  beat the default's median by TIE replaces it too: the default swung between modes within
  the point (NCCL's 4 MiB reduce-scatter on 2x H100: 39 us in one round, 54 and 60 in the
  others, beside sdma's steady 38-44), and the challenger is as fast as its fast mode and
  faster in its slow one (the check of a table that kept NCCL there met it slow: 36-40%
  regret at 2 MiB, by medians and by fastest rounds alike);
- a backend's fastest time at a size is no more than at any larger size (it moves fewer
  bytes): on 2x H200 NCCL's 4 MiB broadcast took 57-63 us in a slow spell, then 40 us at
  6 MiB; a challenger must beat that envelope, not the slow spell, and is judged by its own;
- a challenger's win by less than CONFIRM, or a win in every round that lost only to the
  default's fastest round from another size or pass, is measured again after every pass of
  its group (confirm), every backend of the point side by side, seconds to minutes later,
  with the other way of calling (sync where the run calls async): another chance to meet the
  default's fast mode, and a switch that holds whether the workload waits on each call or
  not (on 2x H200, sdma's small reduce-scatters won async by ~10% and lost sync by 7-17%);
  boundaries a confirmed point opens are searched and confirmed in turn; a challenger that
  beat the default in every round of the confirm pass, the default within MODE of its
  fastest at larger sizes there (its fast mode), wins: a library's time is not monotone in
  size (NCCL's all-gather on 4x H200: 42 us at 2 MiB, 39.6 at 3 MiB, both fast);
- at such a tie, a challenger whose median is no higher and whose slow tail (p90) is lower by
  more than TAIL replaces the default: its mean is lower, and a default whose latency swings
  between modes (NCCL's small calls on a shared host: 31 or 50 us) costs more in the job than
  one steady round showed;
- a size whose winner differs from both neighbours, which agree, is a suspect: re-measured
  before it is believed (suspects); a challenger's lone win between two of the default's that
  survives every re-measurement is still dropped from the table, and one between two of
  another challenger's goes to that one where it tied there (settled); the other way
  round, sizes left to the default between two wins of one challenger go to it where it was
  faster there too, by median and by fastest round, though not past the margin (settled);
- where neighbouring sizes' winners differ, the size between them is measured next (gaps),
  until the two are at most `ratio` apart: boundaries are searched, not guessed; the rule's
  boundary then lies at their middle (ranges).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

TIE = 0.03  # within 3% of the fastest, keep the default backend: a switch must pay for itself
TAIL = 0.10  # at a tie, a challenger's p90 this much lower (median no higher) still wins
CONFIRM = 2.0  # a win by less than this ratio is timed again at the end (NCCL's modes: ~1.7x)
MODE = 0.25   # within this of its fastest at larger sizes, a default ran in its fast mode


def _by_size(rows: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, dict[str, Any]]]]:
    """op -> size -> backend -> row; a later row for the same point replaces an earlier one
    (a re-check's or confirm's rounds stand for the point), and carries `fastest_round_us`,
    the fastest round of every row of that point."""
    by: dict[str, dict[int, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        point = by[r["op"]][int(r["bytes"])]
        before = point.get(r["backend"], {}).get("fastest_round_us", math.inf)
        point[r["backend"]] = dict(r, fastest_round_us=min(before, *_rounds(r)))
    return by


def _rounds(row: dict[str, Any]) -> list[float]:
    text = str(row.get("round_medians_us") or "")
    return [float(x) for x in text.split(";") if x] or [float(row["median_us"])]


def pick(point: dict[str, dict[str, Any]], default: str) -> str:
    """The backend for one size: the fastest, if it beat the default by more than TIE in every
    interleaved round (each round times them side by side, so drift between rounds cannot make
    a winner) and its fastest round beat the default's by TIE too; or if it won through the
    default's slow spell (spell_winner); else the steadier at a tie (steadier)."""
    best = _fastest(point)
    if default not in point or best == default:
        return best
    d, c = point[default], point[best]
    if round_winner(point, default) is not None and (
            _fastest_round(d) > _fastest_round(c) * (1 + TIE) or _beaten_in_fast_mode(d, c)):
        return best
    if spell_winner(point, default) is not None:
        return best
    return steadier(point, default)


def _beaten_in_fast_mode(d: dict[str, Any], c: dict[str, Any]) -> bool:
    """Whether a confirm pass timed default d beside challenger c (which then beat it in every
    round) while d ran in its fast mode: within MODE of its fastest round at any size from
    this one up. The gap to a larger size's fastest round is then the library's own curve,
    not a slow spell, and does not bound d here (4x H200, NCCL's all-gather: 42 us at 2 MiB
    in its fast mode, 39.6 at 3 MiB; sdma's 40.4 lost to that round, NCCL kept 1.5-2.5 MiB,
    and check met it slow there: 27% regret by fastest rounds)."""
    return d.get("pass") == c.get("pass") == "confirm" and \
        min(_rounds(d)) <= _fastest_round(d) * (1 + MODE)


def _fastest_round(row: dict[str, Any]) -> float:
    """The row's fastest round, over every pass at its size (and larger ones, enveloped)."""
    return float(row.get("fastest_round_us", min(_rounds(row))))


def spell_winner(point: dict[str, dict[str, Any]], default: str) -> str | None:
    """The fastest challenger by median, if the default's rounds here met its fast mode (one
    within TIE of its fastest anywhere), the challenger lost no round side by side and was no
    slower at both's fastest, and it beat the default's median by more than TIE: the default
    swung between modes within the point and the challenger matched the fast one; else None.
    Not where the fast mode is known only from elsewhere (2x H200: NCCL's 4 MiB broadcast
    ran 57-63 us, 40 at 6 MiB, and OSU later met it at 33.5 against sdma's 39)."""
    best = _fastest(point)
    if default not in point or best == default:
        return None
    d, c = point[default], point[best]
    rd, rc = _rounds(d), _rounds(c)
    if min(rd) > _fastest_round(d) * (1 + TIE) or any(a < b for a, b in zip(rd, rc)):
        return None
    if float(d["median_us"]) <= float(c["median_us"]) * (1 + TIE):
        return None
    return best if _fastest_round(c) <= _fastest_round(d) else None


def _fastest(point: dict[str, dict[str, Any]]) -> str:
    """The backend of the lowest median (ties by name)."""
    return min(point, key=lambda be: (float(point[be]["median_us"]), be))


def round_winner(point: dict[str, dict[str, Any]], default: str) -> str | None:
    """The fastest challenger by median, if it beat the default by more than TIE in every
    interleaved round (each round times them side by side, so drift between rounds cannot
    make a winner); else None."""
    best = _fastest(point)
    if default not in point or best == default:
        return None
    paired = zip(_rounds(point[default]), _rounds(point[best]))
    return best if all(a > b * (1 + TIE) for a, b in paired) else None


def to_confirm(rows: list[dict[str, Any]], default: str) -> dict[str, list[tuple[int, str]]]:
    """op -> [(bytes, challenger)] measured again at the end, where not confirmed yet: a
    challenger that won by less than CONFIRM over the default's fastest round, and one that
    won every round side by side but lost to the default's fastest round from another size or
    pass (2x H100: sdma's broadcasts of 16 KiB-4 MiB ran 41 us against NCCL's 74 in one
    spell, lost to NCCL's 39 at 6 MiB from another, and NCCL kept them at 2x sdma's 25)."""
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for op, sizes in _enveloped(rows).items():
        for size, pt in sorted(sizes.items()):
            be = round_winner(pt, default) or spell_winner(pt, default)
            if be is None or pt[be].get("pass") == "confirm":
                continue
            narrow = _fastest_round(pt[default]) < float(pt[be]["median_us"]) * CONFIRM
            if pick(pt, default) != be or narrow:
                out[op].append((size, be))
    return dict(out)


def steadier(point: dict[str, dict[str, Any]], default: str) -> str:
    """At a tie of medians: the challenger with the lowest p90, if its median is no higher than
    the default's and its p90 lower by more than TAIL; else the default. Not where the default
    was measured in a slow spell (median past its fastest round or a larger size's by TIE):
    its tail there says nothing of its fast mode."""
    d = point[default]
    fastest = float(d.get("fastest_round_us", math.inf))
    if "p90_us" not in d or float(d["median_us"]) > fastest * (1 + TIE):
        return default
    calm = [(float(r["p90_us"]), be) for be, r in point.items()
            if be != default and float(r["median_us"]) <= float(d["median_us"])
            and float(r["p90_us"]) * (1 + TAIL) < float(d["p90_us"])]
    return min(calm)[1] if calm else default


def _enveloped(rows: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, dict[str, Any]]]]:
    """_by_size, with every backend's fastest_round_us lowered to its fastest at any larger
    size: a collective of fewer bytes is not slower, whatever mode the library was in. Every
    backend's, not the default's alone: a slow spell slows the challenger too (sdma's
    symmetric all-gathers on 2x H200: 41 us in the spell that slowed NCCL to 67, 25 outside
    it), and a default judged at its best beside a challenger judged in a spell kept NCCL
    for 1-320 KiB there, 1.6x slower."""
    by = _by_size(rows)
    for sizes in by.values():
        low: dict[str, float] = {}
        for size in sorted(sizes, reverse=True):
            for be, r in sizes[size].items():
                low[be] = min(low.get(be, math.inf), float(r["fastest_round_us"]))
                sizes[size][be] = dict(r, fastest_round_us=low[be])
    return by


def curves(rows: list[dict[str, Any]]) -> dict[str, dict[tuple[int, str], tuple[float, float]]]:
    """op -> (bytes, backend) -> (median, fastest round) as the rules see them: the latest
    measurement's median, and the fastest round of any (each bounded by its fastest
    at any larger size). For plots."""
    return {op: {(size, be): (float(r["median_us"]), float(r["fastest_round_us"]))
                 for size, pt in sizes.items() for be, r in pt.items()}
            for op, sizes in _enveloped(rows).items()}


def winners(rows: list[dict[str, Any]], default: str) -> dict[str, list[tuple[int, str]]]:
    """op -> [(bytes, chosen backend)] sorted by bytes."""
    return _picks(_enveloped(rows), default)


def _picks(by: dict[str, dict[int, dict[str, dict[str, Any]]]],
           default: str) -> dict[str, list[tuple[int, str]]]:
    """winners of points already enveloped."""
    return {op: [(size, pick(pt, default)) for size, pt in sorted(sizes.items())]
            for op, sizes in by.items()}


def settled(rows: list[dict[str, Any]], default: str) -> dict[str, list[tuple[int, str]]]:
    """winners, as a table writes them once every point is measured: near-ties follow their
    neighbours. A challenger's win at one size between two of the default's is dropped: after
    re-checks and confirms it is a near-tie that went one way (NCCL's small reduce-scatters
    against sdma's on 2x H200 flipped at every other grid size), and a switch must pay for
    itself. A challenger's win at one size between two of another challenger's goes to that
    one where its median there was within TIE (under a GEMM on 2x H100, symm and sdma took
    turns at the smallest sizes, each within 2% of the other). Then sizes kept on the default
    between two of one challenger's remaining wins go to it where it ran faster there too
    (_filled)."""
    by = _enveloped(rows)
    out = {}
    for op, seq in _picks(by, default).items():
        seq = [(size, _lone(seq, i, by[op][size], default)) for i, (size, _) in enumerate(seq)]
        out[op] = _filled(seq, by[op], default)
    return out


def _lone(seq: list[tuple[int, str]], i: int, point: dict[str, dict[str, Any]],
          default: str) -> str:
    """seq[i]'s backend, or its neighbours' where they agree and it won alone between them:
    always for the default, for a challenger where it tied the winner by median."""
    be = seq[i][1]
    if not 0 < i < len(seq) - 1 or seq[i - 1][1] != seq[i + 1][1] or seq[i - 1][1] == be:
        return be
    x = seq[i - 1][1]
    if x == default:
        return x
    tied = x in point and \
        float(point[x]["median_us"]) <= float(point[be]["median_us"]) * (1 + TIE)
    return x if tied else be


def _filled(seq: list[tuple[int, str]], sizes: dict[int, dict[str, dict[str, Any]]],
            default: str) -> list[tuple[int, str]]:
    """seq with each run of the default's sizes between two wins of one challenger given to
    that challenger, if it was faster at every size of the run by median and by fastest
    round: the margin missed there, by noise, what both neighbours showed. (2x H100, under a
    GEMM: symm ran 8-10 us under NCCL's ~220 us window at every size to 32 KiB, and the margin
    alone left NCCL three ranges among symm's.)"""
    out = list(seq)
    i = 1
    while i < len(out):
        if out[i][1] != default:
            i += 1
            continue
        j = i
        while j < len(out) and out[j][1] == default:
            j += 1
        x = out[j][1] if j < len(out) else default
        if x != default and out[i - 1][1] == x and all(
                _ahead(sizes[out[k][0]], x, default) for k in range(i, j)):
            out[i:j] = [(size, x) for size, _ in out[i:j]]
        i = j
    return out


def _ahead(point: dict[str, dict[str, Any]], be: str, default: str) -> bool:
    """be ran faster than the default at this point by median and by fastest round."""
    if be not in point or default not in point:
        return False
    c, d = point[be], point[default]
    return (float(c["median_us"]) < float(d["median_us"])
            and _fastest_round(c) <= _fastest_round(d))


def suspects(seq: list[tuple[int, str]]) -> list[int]:
    """Sizes whose winner differs from both neighbours while those agree (interior), or from
    its one neighbour at either end: one point's outlier must not make a rule unchecked."""
    out = []
    for i, (size, be) in enumerate(seq):
        nb = [seq[j][1] for j in (i - 1, i + 1) if 0 <= j < len(seq)]
        if len(seq) >= 3 and nb and all(b != be for b in nb) and len(set(nb)) == 1:
            out.append(size)
    return out


def middle(a: int, b: int, unit: int) -> int | None:
    """About the geometric middle of sizes a < b, rounded to a multiple of unit times a power of
    two near a quarter of it (so boundaries read 48MiB, not 47453132); None if no such size
    lies strictly between them."""
    geo = math.sqrt(a * b)
    q = unit * 2 ** max(0, math.floor(math.log2(max(geo / 4 / unit, 1))))
    mid = round(geo / q) * q
    return mid if a < mid < b else None


def gaps(seq: list[tuple[int, str]], ratio: float, unit: int) -> list[tuple[int, str, str]]:
    """Sizes to measure next, with the two winners they lie between: the middle (in units of
    `unit`) of neighbours whose winners differ and that lie more than `ratio` apart."""
    out = []
    for (a, ba), (b, bb) in zip(seq, seq[1:]):
        mid = middle(a, b, unit) if ba != bb and b > a * ratio else None
        if mid is not None:
            out.append((mid, ba, bb))
    return out


def ranges(seq: list[tuple[int, str]]) -> list[tuple[int, float, str]]:
    """[(min, max, backend)], first from 0, last to inf. Where neighbouring sizes' winners
    differ the boundary is their middle: each measured size keeps its winner, and a size
    between them gets the nearer one's (bisection left them at most --bisect-ratio apart)."""
    out: list[tuple[int, float, str]] = []
    for i, (size, be) in enumerate(seq):
        if out and out[-1][2] == be:
            continue
        lo = 0 if not out else middle(seq[i - 1][0], size, 1) or size
        if out:
            out[-1] = (out[-1][0], lo, out[-1][2])
        out.append((lo, float("inf"), be))
    return out


def regret(rows: list[dict[str, Any]], chosen: dict[tuple[str, int], str],
           at_best: bool = False) -> dict[str, list[tuple[int, float]]]:
    """op -> [(bytes, time of the chosen backend / time of the fastest - 1)] for each measured
    size: what a table's choice costs against the best library at sizes it was not tuned on.
    at_best: each backend's fastest round instead of its median, as the tuner compares them
    (a library's slow spell during the check then costs nothing, a wrong choice still does)."""
    stat = "fastest_round_us" if at_best else "median_us"
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for op, sizes in _by_size(rows).items():
        for size, pt in sorted(sizes.items()):
            be = chosen.get((op, size))
            if be is None or be not in pt:
                continue
            best = min(float(r[stat]) for r in pt.values())
            out[op].append((size, float(pt[be][stat]) / best - 1))
    return dict(out)
