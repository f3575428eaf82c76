"""The order in which backends take turns, sample by sample, when they are timed side by side.

A call can leave the host or the GPU busy after it returns (Gloo's threads, on the 2-core CI
VM, added 20-40 us to whichever call came next). A fixed rotation
(A B C, B C A, ...) puts every backend behind the same neighbour in every sample, so that cost
falls on one of them; these orders give each backend every neighbour about equally often, as a
crossover trial balances carryover (Williams' designs).
"""

from __future__ import annotations

import functools


def _candidates(k: int) -> list[tuple[int, ...]]:
    """Williams' zig-zag orders of k (r, r+1, r-1, r+2, ...), their reverses and rotations."""
    zig = [(j + 1) // 2 if j % 2 else (k - j // 2) % k for j in range(k)]
    rows = [[(r + z) % k for z in zig] for r in range(k)]
    return sorted({tuple(o[s:] + o[:s]) for row in rows for o in (row, row[::-1])
                   for s in range(k)})


@functools.lru_cache(maxsize=64)
def turn_orders(k: int, n: int) -> tuple[tuple[int, ...], ...]:
    """n orders of backends 0..k-1, one per sample, such that each backend runs right after
    each other one about equally often, also across samples. Deterministic: every rank gets
    the same orders, so their collectives match."""
    cands = _candidates(k)
    after = [[0] * k for _ in range(k)]   # after[a][b]: how often b ran right after a
    out: list[tuple[int, ...]] = []
    last: int | None = None

    def steps(o: tuple[int, ...]) -> list[tuple[int, int]]:
        prev = o[:-1] if last is None else (last, *o[:-1])
        return list(zip(prev, o[1:] if last is None else o))

    for _ in range(n):
        # Greedy: the order whose neighbour pairs have occurred least so far (first on ties).
        o = min(cands, key=lambda c: sum(after[a][b] for a, b in steps(c)))
        for a, b in steps(o):
            after[a][b] += 1
        out.append(o)
        last = o[-1]
    return tuple(out)
