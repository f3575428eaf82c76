"""Hierarchical all-gather, reduce-scatter and all-reduce for a group that spans nodes.

Each call is split into an intra-node part (the ranks of one node) and an inter-node part (one
rank of each node, the same local rank), each made as an ordinary mcr call on a group this
backend builds: so the dispatcher picks each part's library from the tables of those groups
(copy engines or symmetric memory inside a node, NCCL or MPI between nodes; shared memory or
Gloo on CPU). Every byte crosses the network once per remote node, as in a flat ring.

Messages may be cut into chunks (MCR_HIER_CHUNK_BYTES of each rank's block, default one chunk,
in at most MCR_HIER_MAX_CHUNKS: every chunk costs one call of each part on the host, 0.1-0.3 ms
with NCCL between nodes, which delays whatever the caller issues next; on 4 GPUs as 2 nodes over
sockets, chunks bought no speed and cost that host time): the first part of every
chunk is issued at once, and each later part of a chunk as soon as its previous part is
done, so the intra- and inter-node libraries run side by side. Those later parts are issued
before the call returns: a host-progressed part blocks the host until its input is ready (a
stream-ordered one only orders the stream), which keeps every rank issuing the parts in program
order whatever order the caller waits in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .backends import HOST, Backend, bind_group, register_composed, release_group
from .collectives import all_gather_into_tensor as ag
from .collectives import all_reduce as ar
from .collectives import reduce_scatter_tensor as rs
from .config import Config
from .groups import Group, Spec
from .ops import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from .work import Composite, Work

Part = Callable[[int], Any]     # issue one part of chunk c, return its work (or None: done)


class HierBackend(Backend):
    """Two-level collectives over a node-major group of whole nodes."""

    name = "hier"
    domain = HOST
    serves = frozenset({ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE})

    def __init__(self, cfg: Config, registry: dict[str, Backend]) -> None:
        self.chunk_bytes = cfg.hier_chunk_bytes   # inf: no pipelining
        self.max_chunks = cfg.hier_max_chunks
        self.registry = registry    # every backend, to bind the groups this one builds

    def bind(self, spec: Spec) -> Any:
        """(intra-node group, inter-node group) of this rank, building them on every rank that
        takes part (torch's new_group needs all of them, in one order); None on one node."""
        nodes, per = spec.shape()
        if nodes < 2 or per < 2:
            spec.notes[self.name] = (
                "the group is one node" if nodes < 2 else
                "one rank per node: flat libraries serve it" if per == 1 else
                "its nodes hold different numbers of its ranks, or a node's ranks are not "
                "consecutive in it")
            return None
        mine: list[Group] = []
        for kind, parts in (("intra", [spec.ranks[n * per:(n + 1) * per] for n in range(nodes)]),
                            ("inter", [spec.ranks[lr::per] for lr in range(per)])):
            for ranks in parts:
                g = bind_group(self.registry, spec.child(ranks, f"hier.{kind}"),
                               spec.default_gpu)
                if g.rank >= 0:
                    mine.append(g)
        return tuple(mine) if spec.member else None

    def release(self, handle: Any, world: bool) -> None:
        """Free the groups bind() built."""
        for g in handle:
            release_group(self.registry, g, world=False)

    def _chunks(self, n: int, esize: int) -> list[tuple[int, int]]:
        """(start, length) in elements of each chunk of a rank's block of n elements."""
        step = max(1, int(min(self.chunk_bytes, n * esize) // esize), -(-n // self.max_chunks))
        return [(s, min(step, n - s)) for s in range(0, n, step)]

    @staticmethod
    def _pipeline(chunks: int, parts: list[Part]) -> list[Any]:
        """Issue part 0 of every chunk, then each next part of a chunk once the previous one is
        done; the works of the last parts."""
        works = [parts[0](c) for c in range(chunks)]
        for part in parts[1:]:
            nxt = []
            for c in range(chunks):
                if works[c] is not None:
                    works[c].wait()
                nxt.append(part(c))
            works = nxt
        return works

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, g: Group, *,
                   sync: bool = False) -> Work:
        """Between nodes first (each rank's block once over the network), then inside the
        node; the result lands local-rank-major and is put in rank order at the end."""
        intra, inter = g.handles[self.name]
        nodes, per, b = g.nodes, g.per_node, inp.numel()
        x, y = inp.reshape(-1), out.view(nodes, per, b)
        chunks = self._chunks(b, inp.element_size())
        across = [x.new_empty(nodes * n) for _, n in chunks]
        within = [x.new_empty(per * nodes * n) for _, n in chunks]
        works = self._pipeline(len(chunks), [
            lambda c: ag(across[c], x[chunks[c][0]:sum(chunks[c])], group=inter, async_op=True),
            lambda c: ag(within[c], across[c], group=intra, async_op=True)])

        def place() -> None:
            for (s, n), w in zip(chunks, within):
                y[:, :, s:s + n].copy_(w.view(per, nodes, n).transpose(0, 1))
        return Composite(ALL_GATHER, self.name, out.nbytes, g.size, works, [place])

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, redop: Any, g: Group, *,
                       sync: bool = False) -> Work:
        """Inside the node first (blocks regrouped local-rank-major), then between nodes."""
        intra, inter = g.handles[self.name]
        nodes, per, b = g.nodes, g.per_node, out.numel()
        x, y = inp.view(nodes, per, b).transpose(0, 1), out.view(-1)
        chunks = self._chunks(b, inp.element_size())
        within = [x[:, :, s:s + n].contiguous().view(-1) for s, n in chunks]
        across = [y.new_empty(nodes * n) for _, n in chunks]
        works = self._pipeline(len(chunks), [
            lambda c: rs(across[c], within[c], redop, group=intra, async_op=True),
            lambda c: rs(y[chunks[c][0]:sum(chunks[c])], across[c], redop, group=inter,
                         async_op=True)])
        return Composite(REDUCE_SCATTER, self.name, inp.nbytes, g.size, works)

    def all_reduce(self, t: torch.Tensor, redop: Any, g: Group, *, sync: bool = False) -> Work:
        """Reduce-scatter inside the node, all-reduce of each local rank's slice between nodes
        (one lane per local rank, each its own inter-node group), all-gather inside the node."""
        intra, inter = g.handles[self.name]
        per, m = g.per_node, t.numel()
        s = -(-m // per)
        flat = t.view(-1)
        padded = flat if s * per == m else torch.cat([flat, flat.new_zeros(s * per - m)])
        x = padded.view(per, s)
        chunks = self._chunks(s, t.element_size())
        within = [x[:, a:a + n].contiguous().view(-1) for a, n in chunks]
        mine = [t.new_empty(n) for _, n in chunks]
        works = self._pipeline(len(chunks), [
            lambda c: rs(mine[c], within[c], redop, group=intra, async_op=True),
            lambda c: ar(mine[c], redop, group=inter, async_op=True),
            lambda c: ag(within[c], mine[c], group=intra, async_op=True)])

        def place() -> None:
            for (a, n), w in zip(chunks, within):
                if w.data_ptr() != x.data_ptr() or n != s:   # else the gather wrote in place
                    x[:, a:a + n].copy_(w.view(per, n))
            if padded is not flat:
                flat.copy_(padded[:m])
        return Composite(ALL_REDUCE, self.name, t.nbytes, g.size, works, [place])


register_composed("hier", lambda ctx: HierBackend(ctx.cfg, ctx.registry))
