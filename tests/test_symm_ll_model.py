"""symm/ll.cu's protocol, modelled line by line in Python and run under random schedules.

The kernel's safety rests on an argument, not on a barrier: a rank writes the receive lines of
call k+2 (same parity) only after it heard from every peer in call k+1, which each peer sent
after it had read call k's. GPUs here run a few schedules; this model runs thousands, with
ranks and threads advancing in random order (one rank often far ahead), and mixed sequences of
all-reduce, all-gather, reduce-scatter, broadcast from changing roots and all-to-alls with
random split sizes (empty blocks included). A stand-in for the kernel's memory and threads, not
for its arithmetic: what it checks is that every call ends (a line overwritten before it was
read would leave its reader polling forever) and that every rank's result is right. Keep it
in step with symm/ll.cu's ll_call, ll_broadcast and mcr_ll_a2av.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

AR, AG, RS, BC = 0, 1, 2, 3     # symm/ll.cu's op codes
AV = 5                          # mcr_ll_a2av, the all-to-all with split sizes (its own kernel)
WAIT, STEP = "wait", "step"


class Rank:
    """One rank's receive region (slot lines keyed (parity, source, line)) and call numbers."""

    def __init__(self, rank: int, world: int, blocks: int) -> None:
        self.rank, self.world = rank, world
        self.mem: dict[tuple[int, int, int], tuple[int, int]] = {}
        self.seqs = [0] * blocks


def _poll(me: Rank, key: tuple[int, int, int], seq: int) -> Iterator[str]:
    while True:
        line = me.mem.get(key)
        if line is not None and line[1] == seq:
            return
        yield WAIT


def _thread(op: int, root: int, me: Rank, ranks: list[Rank], src: list[int], dst: list[int],
            n: int, b: int, t: int, nblocks: int, threads: int, seq: int,
            tokens: bool) -> Iterator[str]:
    """One kernel thread: its sends, then its receives (no barrier between them)."""
    r, w, par = me.rank, me.world, seq & 1
    first, stride = b * threads + t, nblocks * threads
    words = range(first, n, stride)
    peers = [(r + q) % w for q in range(1, w)]
    if op == BC:
        yield from _broadcast(root, me, ranks, src, words, b * threads, t, seq, tokens)
        return
    for i in words:
        v = src[i] if op != RS else None
        for p in peers:
            ranks[p].mem[(par, r, i)] = (src[p * n + i] if op == RS else v, seq)
            yield STEP
        if op == AG:
            dst[r * n + i] = v
    for i in words:
        if op == AG:
            for s in range(w):
                if s != r:
                    yield from _poll(me, (par, s, i), seq)
                    dst[s * n + i] = me.mem[(par, s, i)][0]
            continue
        own = src[r * n + i] if op == RS else src[i]
        acc = 0
        for s in range(w):
            if s == r:
                acc += own
            else:
                yield from _poll(me, (par, s, i), seq)
                acc += me.mem[(par, s, i)][0]
        dst[i] = acc
        yield STEP


def _broadcast(root: int, me: Rank, ranks: list[Rank], data: list[int], words: range,
               token: int, t: int, seq: int, tokens: bool) -> Iterator[str]:
    """ll_broadcast's thread: the root pushes its words; thread 0 of every other rank's block
    pushes a token line to every peer and waits for the other non-roots' tokens."""
    r, w, par = me.rank, me.world, seq & 1
    peers = [(r + q) % w for q in range(1, w)]
    if r == root:
        for i in words:
            for p in peers:
                ranks[p].mem[(par, r, i)] = (data[i], seq)
                yield STEP
    elif t == 0 and tokens:
        for p in peers:
            ranks[p].mem[(par, r, token)] = (0, seq)
            yield STEP
    if r != root:
        for i in words:
            yield from _poll(me, (par, root, i), seq)
            data[i] = me.mem[(par, root, i)][0]
            yield STEP
    if t == 0 and tokens:
        for s in range(w):
            if s not in (r, root):
                yield from _poll(me, (par, s, token), seq)


def _uneven(me: Rank, ranks: list[Rank], src: list[list[int]], dst: list[list[int]],
            sends: list[int], recvs: list[int], b: int, t: int, nblocks: int, threads: int,
            seq: int, tokens: bool) -> Iterator[str]:
    """mcr_ll_a2av's thread: src[p] goes to rank p, dst[s] comes from rank s; thread 0 of
    each block sends a token line where its data does not reach the block's first line, and
    waits for the peers' likewise."""
    r, w, par = me.rank, me.world, seq & 1
    first, stride, token = b * threads + t, nblocks * threads, b * threads
    for p in ((r + q) % w for q in range(1, w)):
        for i in range(first, sends[p], stride):
            ranks[p].mem[(par, r, i)] = (src[p][i], seq)
            yield STEP
        if t == 0 and tokens and token >= sends[p]:
            ranks[p].mem[(par, r, token)] = (0, seq)
            yield STEP
    for i in range(first, sends[r], stride):
        dst[r][i] = src[r][i]
    for s in range(w):
        if s == r:
            continue
        for i in range(first, recvs[s], stride):
            yield from _poll(me, (par, s, i), seq)
            dst[s][i] = me.mem[(par, s, i)][0]
            yield STEP
        if t == 0 and tokens and token >= recvs[s]:
            yield from _poll(me, (par, s, token), seq)


def _expected(op: int, root: int, inputs: list[list[int]], n: int, r: int) -> list[int]:
    if op == AR:
        return [sum(x[i] for x in inputs) for i in range(n)]
    if op == AG:
        return [v for x in inputs for v in x]
    if op == BC:
        return list(inputs[root])
    return [sum(x[r * n + i] for x in inputs) for i in range(n)]


def run(world: int, calls: list[tuple[int, int, int]], seed: int, blocks: int = 2,
        threads: int = 2, parity: bool = True, tokens: bool = True,
        uneven_grid: str = "group") -> str | None:
    """Run every rank through `calls` ((op, root, n words; AV: n the largest block)) under one
    random schedule; None if every call ended with the right result on every rank, else what
    went wrong. uneven_grid: "group" (every rank launches the group's largest grid, as
    ll.py does) or "own" (each rank sizes it by its own splits, what the model must catch)."""
    rng = random.Random(seed)
    ranks = [Rank(r, world, blocks) for r in range(world)]
    speed = [rng.choice((1, 1, 8)) for _ in range(world)]    # some ranks race ahead
    inputs: dict[int, list[list[int]]] = {}
    results: dict[tuple[int, int], list[int]] = {}
    live: dict[int, dict] = {}
    splits: dict[int, list[list[int]]] = {}     # AV call -> words rank s sends rank p

    def launch_uneven(r: int, k: int, n: int) -> None:
        m = splits.setdefault(k, [[rng.choice((0, rng.randint(1, n))) for _ in range(world)]
                                  for _ in range(world)])
        sends, recvs = m[r], [m[s][r] for s in range(world)]
        src = [[rng.randrange(1, 100) + 100 * r + 1000 * k for _ in range(c)] for c in sends]
        inputs.setdefault(k, [[] for _ in range(world)])[r] = src
        dst = [[-1] * c for c in recvs]
        nb = blocks if uneven_grid == "group" else \
            max(1, min(blocks, -(-max(sends + recvs) // threads)))
        seqs = [ranks[r].seqs[b] + 1 for b in range(nb)]
        gens = [_uneven(ranks[r], ranks, src, dst, sends, recvs, b, t, nb, threads,
                        seqs[b] if parity else 2 * seqs[b], tokens)
                for b in range(nb) for t in range(threads)]
        live[r] = {"gens": gens, "dst": dst, "seqs": seqs, "call": k}

    def launch(r: int, k: int) -> None:
        op, root, n = calls[k]
        if op == AV:
            launch_uneven(r, k, n)
            return
        src = [rng.randrange(1, 100) + 100 * r + 1000 * k
               for _ in range(n * world if op == RS else n)]
        inputs.setdefault(k, [[] for _ in range(world)])[r] = list(src)
        dst = src if op in (AR, BC) else [-1] * (n * world if op == AG else n)
        nb = max(1, min(blocks, -(-n // threads)))     # symm/ll.py grid(): the size alone
        seqs = [ranks[r].seqs[b] + 1 for b in range(nb)]
        # parity=False: every call on one region, what the model must catch
        gens = [_thread(op, root, ranks[r], ranks, src, dst, n, b, t, nb, threads,
                        seqs[b] if parity else 2 * seqs[b], tokens)
                for b in range(nb) for t in range(threads)]
        live[r] = {"gens": gens, "dst": dst, "seqs": seqs, "call": k}

    for r in range(world):
        launch(r, 0)
    waiting: set[int] = set()
    while live:
        actors = [(r, g) for r, st in live.items() for g in st["gens"]]
        if all(id(g) in waiting for _, g in actors):
            return f"deadlock: ranks at calls {sorted((r, st['call']) for r, st in live.items())}"
        r, g = rng.choices(actors, weights=[speed[a[0]] for a in actors])[0]
        try:
            if next(g) == WAIT:
                waiting.add(id(g))
            else:
                waiting.clear()
            continue
        except StopIteration:
            live[r]["gens"].remove(g)
            waiting.clear()
        if not live[r]["gens"]:     # the kernel ended: the next call is launched behind it
            st = live.pop(r)
            ranks[r].seqs[:len(st["seqs"])] = st["seqs"]
            results[(st["call"], r)] = [list(x) for x in st["dst"]] \
                if calls[st["call"]][0] == AV else list(st["dst"])
            if st["call"] + 1 < len(calls):
                launch(r, st["call"] + 1)
    for (k, r), got in sorted(results.items()):
        op, root, n = calls[k]
        want = [inputs[k][s][r] for s in range(world)] if op == AV else \
            _expected(op, root, inputs[k], n, r)
        if got != want:
            return f"call {k} (op {op}, root {root}) on rank {r}: {got} != {want}"
    return None


def _calls(rng: random.Random, count: int, world: int = 3,
           ops: tuple[int, ...] = (AR, AG, RS, BC, AV)) -> list[tuple[int, int, int]]:
    return [(rng.choice(ops), rng.randrange(world), rng.randint(1, 9)) for _ in range(count)]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_call_ends_right_under_random_schedules(world: int) -> None:
    """Mixed ops and roots, sizes that launch one or two blocks, ranks racing ahead: every call
    ends on every rank with the right result."""
    rng = random.Random(world)
    for seed in range(150):
        calls = _calls(rng, 12, world)
        assert run(world, calls, seed) is None, (seed, calls)


def test_one_region_for_every_call_fails_the_model() -> None:
    """Without the two parities a rank one call ahead overwrites lines its peers have not read,
    and the model sees it (so the test above can fail)."""
    rng = random.Random(7)
    calls = [_calls(rng, 12) for _ in range(50)]
    assert any(run(3, c, seed, parity=False) is not None for seed, c in enumerate(calls))
    assert all(run(3, c, seed) is None for seed, c in enumerate(calls))


def test_a_broadcast_without_tokens_fails_the_model() -> None:
    """Without the other ranks' tokens the root hears from no peer: a root that races two
    broadcasts ahead overwrites lines a peer has not read, and the model sees it."""
    calls = [(BC, 0, 4)] * 8
    assert any(run(3, calls, seed, tokens=False) is not None for seed in range(100))
    assert all(run(3, calls, seed) is None for seed in range(100))


def test_uneven_all_to_alls_without_tokens_fail_the_model() -> None:
    """All-to-alls whose splits leave a block without data from a peer: without the tokens
    that block hears nothing from it, and a rank racing ahead overwrites lines a peer has not
    read (the model sees it)."""
    calls = [(AV, 0, 5)] * 8
    assert any(run(3, calls, seed, tokens=False) is not None for seed in range(100))
    assert all(run(3, calls, seed) is None for seed in range(100))


def test_an_uneven_grid_sized_by_each_rank_fails_the_model() -> None:
    """Each rank sizing the uneven kernel's grid by its own splits puts the ranks' per-block
    call numbers out of step (blocks run on one rank and not on its peer): the model sees it,
    so the group-wide grid of the test above matters."""
    rng = random.Random(3)
    calls = [_calls(rng, 10, 3, (AV, AR)) for _ in range(60)]
    assert any(run(3, c, seed, uneven_grid="own") is not None for seed, c in enumerate(calls))
    assert all(run(3, c, seed) is None for seed, c in enumerate(calls))
