"""symm on the CPU, its kernels and CUDA graphs stood in: plans per kind of call, the
low-latency kernel's limits, graph replays and captures, and what capture allows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as tdist

from mcr.backends.cuda.graphs import GraphCache
from mcr.backends.symm.backend import SymmBackend
from mcr.ops import make_key


class _SymmKernelsStandin:
    """Stand-in for torch.ops.symm_mem's all-reduce kernels (CUDA and NVLink only: not on this
    machine): a group of 2 whose peer holds the same input, so a sum is 2 x input. It checks
    what the real kernels need of their arguments: the symmetric operand lies in the group's
    staging buffer, shaped and typed like the data, sizes in whole 4-byte words (what the GPU
    tests found they take; smaller sizes go padded)."""

    def __init__(self, buf: torch.Tensor) -> None:
        self.buf, self.calls = buf, []

    def _in_buffer(self, x: torch.Tensor) -> None:
        lo = self.buf.data_ptr()
        assert lo <= x.data_ptr() and x.data_ptr() + x.nbytes <= lo + self.buf.nbytes

    def one_shot_all_reduce_copy_out(self, symm, inp, op, name, out) -> None:
        self._in_buffer(symm)
        assert symm.shape == inp.shape and symm.dtype == inp.dtype and op == "sum"
        size_al = min(16, inp.nbytes & -inp.nbytes)   # it vector-loads the input in place
        assert size_al >= max(4, inp.itemsize) and inp.data_ptr() % size_al == 0
        symm.copy_(inp)
        out.copy_(symm * 2)
        self.calls.append("copy_in")

    def _staged(self, kind, symm, op, name, out) -> None:
        self._in_buffer(symm)
        assert symm.nbytes % max(4, symm.itemsize) == 0
        assert symm.dtype == out.dtype and symm.numel() == out.numel()
        out.copy_(symm * 2)
        self.calls.append(kind)

    def one_shot_all_reduce_out(self, symm, op, name, out) -> None:
        self._staged("one_shot", symm, op, name, out)

    def two_shot_all_reduce_out(self, symm, op, name, out) -> None:
        self._staged("two_shot", symm, op, name, out)


def _cpu_staging(graphs: GraphCache, ll: object = None) -> object:
    """symm's per-group state as the CPU tests need it: its buffers on the CPU, graphs and the
    low-latency kernel stood in or off (both need CUDA)."""
    from mcr.backends.symm.backend import _Staging
    st = _Staging.__new__(_Staging)
    st.buf = torch.empty((1 << 20) + 16, dtype=torch.uint8)
    st.scratch, st.name, st.plans = torch.empty_like(st.buf), "g", {}
    st.graphs, st.ll, st.calls = graphs, ll, 0
    st.dev, st.last_sid = torch.device("cpu"), None   # streams need CUDA
    st.moving, st.unrepeated, st.uneven = {}, 0, 0
    return st


def test_symm_plans_each_kind_of_call_once_and_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """symm's cached plans (by shape, dtype and 16-element offset) pick the kernel form per
    call; on CPU with the kernels stood in, every form gives 2 x input (sum) or input (avg),
    whatever order calls of different shapes, offsets and dtypes come in."""
    from mcr.config import Config
    be = SymmBackend.__new__(SymmBackend)
    be.cfg = Config(symm_max_bytes=1 << 20, symm_two_shot_bytes=64 << 10)
    st = _cpu_staging(GraphCache(0, torch.device("cpu")))   # every call direct
    monkeypatch.setattr("mcr.backends.symm.backend.follow_stream", lambda last, dev: None)
    be.ops = _SymmKernelsStandin(st.buf)
    be._copy_in_kernel, be._groups = True, {3: st}
    g = SimpleNamespace(id=3, size=2)   # what symm reads of an mcr Group
    gen = torch.Generator().manual_seed(0)
    cases = [(dt, n, off, op) for dt in (torch.bfloat16, torch.float32)
             for n in (1, 2, 3, 8, 1000, 4096, 40000, 131072 + 1)
             for off in (0, 1, 3, 16) for op in (tdist.ReduceOp.SUM, tdist.ReduceOp.AVG)
             if (n + off) * dt.itemsize <= 1 << 20]
    for dt, n, off, op in cases * 2 + cases[::-3]:   # again from the cache, in another order
        base = torch.randint(-8, 9, (n + off,), generator=gen).to(dt)
        x = base[off:]
        want = x * 2 if op is tdist.ReduceOp.SUM else x.clone()
        be.all_reduce(x, op, g, sync=True)
        assert torch.equal(x, want), (dt, n, off, op)
    assert set(be.ops.calls) == {"copy_in", "one_shot", "two_shot"}
    assert len(st.plans) == len({(dt, n, off % 16) for dt, n, off, _ in cases})


class _LLStandin:
    """Stand-in for symm_ll.LLGroup (its kernel needs CUDA and peers): rank 0 of a group of 2
    whose peer holds the same input. It checks what the kernel is handed: blocks of n bytes,
    all-gather outputs 2 x n, reduce-scatter and all-to-all inputs 2 x n, broadcasts in place
    from root."""

    def __init__(self, ll_bytes: int) -> None:
        self.ll_bytes, self.calls, self.ops, self.roots = ll_bytes, 0, [], []
        self.pdl = False        # launched plainly (MCR_SYMM_PDL unset)

    def issue(self, op: int, src: torch.Tensor, dst: torch.Tensor, n: int, avg: bool,
              root: int = 0) -> None:
        from mcr.backends.symm import ll as LL
        self.calls += 1
        self.ops.append(op)
        self.roots.append(root)
        assert src.is_contiguous() and dst.is_contiguous() and n <= self.ll_bytes
        if op == LL.BROADCAST:      # in place; the peer's tensor equals this one
            assert src.data_ptr() == dst.data_ptr() and dst.nbytes == n and root in (0, 1)
        elif op == LL.ALL_REDUCE:
            assert src.data_ptr() == dst.data_ptr() and dst.nbytes == n
            if not avg:
                dst.mul_(2)
        elif op == LL.ALL_GATHER:
            assert src.nbytes == n and dst.nbytes == 2 * n
            dst.view(2, -1).copy_(src.view(1, -1).expand(2, -1))
        elif op == LL.ALL_TO_ALL:     # block 0 of each rank's input comes here
            assert src.nbytes == dst.nbytes == 2 * n
            dst.view(2, -1).copy_(src.view(2, -1)[:1].expand(2, -1))
        else:
            assert op == LL.REDUCE_SCATTER and src.nbytes == 2 * n and dst.nbytes == n
            mine = src.view(2, -1)[0]
            dst.copy_(mine if avg else mine * 2)


def test_symm_leaves_the_low_latency_kernel_before_its_call_numbers_repeat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls up to MCR_SYMM_LL_BYTES take the low-latency kernel until the group's call count
    reaches CALL_LIMIT (its per-block numbers would then come round to lines still holding
    them); from that call on every size takes torch's kernels, the cached plans and graphs that
    named the kernel are gone, the summary says why, and every result stays right."""
    from mcr.config import Config
    monkeypatch.setattr("mcr.backends.symm.backend.CALL_LIMIT", 6)
    be = SymmBackend.__new__(SymmBackend)
    be.cfg = Config(symm_max_bytes=1 << 20)
    ll = _LLStandin(4096)
    st = _cpu_staging(GraphCache(0, torch.device("cpu")), ll)
    monkeypatch.setattr("mcr.backends.symm.backend.follow_stream", lambda last, dev: None)
    be.ops = _SymmKernelsStandin(st.buf)
    be._copy_in_kernel, be._groups = True, {3: st}
    g = SimpleNamespace(id=3, size=2)
    for i in range(10):
        for n in (1000, 4000):   # 2,000 bytes: the low-latency kernel while it serves; 8,000: never
            x = torch.arange(n, dtype=torch.bfloat16) + i
            want = x * 2
            be.all_reduce(x, tdist.ReduceOp.SUM, g, sync=True)
            assert torch.equal(x, want), (i, n)
    assert ll.calls == 3 and set(ll.ops) == {0}   # calls 1, 3 and 5; the 6th retires it
    assert st.ll is None and "calls made" in be.summary_lines()[0]
    assert be.ops.calls.count("copy_in") == 10 + 7


def test_symm_all_gather_and_reduce_scatter_by_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    """MCR_SYMM_OPS names what symm serves beyond all-reduce (all-gather, reduce-scatter,
    broadcast and all-to-all by default; MCR_SYMM_OPS=all_reduce leaves them to the others);
    symm declines blocks past the low-latency kernel's limit for the group's size
    (auto: 2 MiB pushed per rank), reduce-scatters other than sum/avg of bf16/fp32, uneven
    all-to-alls (unless MCR_SYMM_OPS names them) and groups past 8 ranks. Served calls reach
    the kernel with blocks of n bytes and give the right results (the kernel stood in)."""
    from mcr.config import Config
    S, A = tdist.ReduceOp.SUM, tdist.ReduceOp.AVG
    off = SymmBackend(Config(symm_ops=("all_reduce",)))
    assert off.serves == {"all_reduce"}
    be = SymmBackend(Config())
    assert be.serves == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}

    def key(op, nbytes, ranks, dtype=torch.bfloat16, redop=None):
        return make_key(op, ranks, nbytes, dtype, "cuda", redop, "standalone")
    assert be.decline_key(key("all_gather", 2 * 2**20, 2, torch.uint8)) is None
    assert "exceed" in be.decline_key(key("all_gather", 2 * 2**20 + 2, 2))
    assert be.decline_key(key("all_gather", 4 * 349525, 4)) is None
    assert "exceed" in be.decline_key(key("all_gather", 4 * 349526, 4))
    assert "8 ranks" in be.decline_key(key("all_gather", 64, 16))
    assert be.decline_key(key("reduce_scatter", 4096, 4, torch.float32, A)) is None
    assert "sum" in be.decline_key(key("reduce_scatter", 4096, 4, redop=tdist.ReduceOp.MAX))
    assert "bfloat16" in be.decline_key(key("reduce_scatter", 4096, 4, torch.float16, S))
    assert be.decline_key(key("all_to_all", 2 * 2**20, 2, torch.uint8)) is None
    assert "exceed" in be.decline_key(key("all_to_all", 4 * 349526, 4))
    uneven = make_key("all_to_all", 2, 64, torch.bfloat16, "cuda", None, "standalone",
                      even=False)
    assert be.decline_key(uneven) is None       # all_to_all_uneven is in the default
    assert "all_to_all_uneven" in SymmBackend(Config(symm_ops=("all_reduce", "all_to_all"))
                                              ).decline_key(uneven)
    ll = _LLStandin(1 << 20)
    st = _cpu_staging(GraphCache(0, torch.device("cpu")), ll)
    monkeypatch.setattr("mcr.backends.symm.backend.follow_stream", lambda last, dev: None)
    monkeypatch.setattr("mcr.backends.symm.backend.stream_of", lambda sid: None)
    be._groups = {3: st}
    g = SimpleNamespace(id=3, size=2, handles={})
    gen = torch.Generator().manual_seed(2)
    for dt, n in ((torch.bfloat16, 1), (torch.float32, 1000), (torch.uint8, 7)):
        x = torch.randint(0, 9, (n,), generator=gen).to(dt)
        out = torch.full((2 * n,), 5, dtype=dt)
        be.all_gather(out, x, g, sync=True)
        assert torch.equal(out, torch.cat([x, x]))
        if dt != torch.uint8:
            for op in (S, A):
                y = torch.randint(0, 9, (2 * n,), generator=gen).to(dt)
                got = torch.empty(n, dtype=dt)
                be.reduce_scatter(got, y, op, g, sync=True)
                assert torch.equal(got, y[:n] * (2 if op is S else 1)), (dt, n, op)
        y = torch.randint(0, 9, (2 * n,), generator=gen).to(dt)
        got = torch.full((2 * n,), 5, dtype=dt)
        be.all_to_all(got, y, [n, n], [n, n], g, sync=True)
        assert torch.equal(got, torch.cat([y[:n], y[:n]])), (dt, n)
    assert ll.ops == [1, 2, 2, 4, 1, 2, 2, 4, 1, 4]
    # Broadcast only where MCR_SYMM_OPS names it: the root pushes the whole tensor to each
    # peer, so the limit applies to all of it.
    member = SimpleNamespace(handles={"symm": None}, notes={}, ranks=[0, 1])
    assert "does not implement broadcast" in off.decline(key("broadcast", 64, 2), member)
    bc = SymmBackend(Config(symm_ops=("all_reduce", "broadcast")))
    assert bc.serves == {"all_reduce", "broadcast"}
    assert bc.decline_key(key("broadcast", 2**20, 2, torch.uint8)) is None
    assert "exceed" in bc.decline_key(key("broadcast", 2**20 + 1, 2))
    assert "exceed" in bc.decline_key(key("broadcast", 349526, 4))
    bc._groups = {3: st}
    for root in (0, 1):
        t = torch.arange(5, dtype=torch.float32)
        bc.broadcast(t, root, g, sync=True)
        assert torch.equal(t, torch.arange(5, dtype=torch.float32))
    assert ll.ops[-2:] == [3, 3] and ll.roots[-2:] == [0, 1]


class _GraphStandin:
    """Stand-in for a captured CUDA graph (capture needs CUDA): replay() runs again what was
    issued during the capture, on the same tensors, as a replay runs the same kernels on the same
    addresses with whatever data they hold then."""

    def __init__(self, issue) -> None:
        self.issue = issue

    def replay(self) -> None:
        self.issue(None)


def _standin_graphs(monkeypatch: pytest.MonkeyPatch, capacity: int,
                    capture_error: bool = False) -> tuple[GraphCache, list[bool]]:
    """A GraphCache whose captures make _GraphStandin, and a flag list: [True] means the
    caller's stream is capturing."""
    import mcr.backends.cuda.graphs as graphs
    capturing = [False]
    monkeypatch.setattr(graphs, "capturing", lambda: capturing[0])

    def capture(self, issue):
        if capture_error:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captures += 1
        return _GraphStandin(issue)
    monkeypatch.setattr(GraphCache, "_capture", capture)
    return GraphCache(capacity, torch.device("cpu")), capturing


def test_graph_cache_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Captured on a key's second sighting and replayed after; least recently used dropped
    first; a capture under way or capacity 0 issues directly; a failed capture warns once and
    turns graphs off for the cache."""
    cache, capturing = _standin_graphs(monkeypatch, capacity=2)
    ran: list[str] = []

    def call(key: str) -> None:
        if not cache.replay(key):
            cache.run(key, lambda m, k=key: ran.append(k), lambda: None)
    for k in "aa":
        call(k)
    assert (cache.direct, cache.captures, cache.replays) == (1, 1, 1)
    call("a")
    assert cache.replays == 2 and ran == ["a"] * 3      # a replay runs the captured work
    for k in "bbcc":                                     # b, then c: a is the oldest, dropped
        call(k)
    assert cache.dropped == 1 and "a" not in cache.graphs and set(cache.graphs) == {"b", "c"}
    call("a")                                            # seen anew: issued directly
    assert cache.direct == 4 and not cache.replay("zz")
    capturing[0] = True                                  # under the caller's capture: direct
    before = (cache.replays, cache.direct)
    call("b")
    assert (cache.replays, cache.direct) == (before[0], before[1] + 1)
    capturing[0] = False
    cache0, _ = _standin_graphs(monkeypatch, capacity=0)
    for _ in range(3):
        cache0.run("k", lambda m: None, lambda: None)
    assert (cache0.direct, cache0.captures) == (3, 0)
    bad, _ = _standin_graphs(monkeypatch, capacity=4, capture_error=True)
    out: list[int] = []
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
        for _ in range(2):
            bad.run("k", lambda m: out.append(1), lambda: None)
    bad.run("k", lambda m: out.append(1), lambda: None)
    assert out == [1, 1, 1] and bad.capacity == 0 and bad.direct == 3


@pytest.mark.parametrize("fail_at", [1, 3])
def test_graph_replay_the_driver_refuses_runs_the_call_once(
        monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
    """A replay the driver refuses (its first, right after the capture, or a later one): that
    call is issued directly instead, exactly once, with a warning; graphs are off after it and
    the summary says so."""
    cache, _ = _standin_graphs(monkeypatch, capacity=4)
    replays = [0]

    class Refusing(_GraphStandin):
        def replay(self) -> None:
            replays[0] += 1
            if replays[0] == fail_at:
                raise RuntimeError("CUDA error: invalid argument\nmore lines")
            super().replay()
    monkeypatch.setattr(GraphCache, "_capture",
                        lambda self, issue: Refusing(issue))
    ran: list[int] = []
    with pytest.warns(RuntimeWarning, match="replay failed.*invalid argument$"):
        for i in range(6):
            cache.run("k", lambda m, i=i: ran.append(i), lambda: None)
    # A replay runs the captured call's work again (call 1's); the refused call runs its own.
    want = [0, 1, 2, 3, 4, 5] if fail_at == 1 else [0, 1, 1, 3, 4, 5]
    assert ran == want and cache.capacity == 0 and not cache.graphs
    assert cache.refused == 1 and "a replay failed" in cache.note()


def test_symm_replays_read_new_data_per_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """symm with graphs on (CUDA capture stood in): the same tensor again with new data, sum and
    avg on the same address, views at other offsets: every result is 2 x input (sum) or the
    input (avg), and repeated keys were replayed."""
    from mcr.config import Config
    be = SymmBackend.__new__(SymmBackend)
    be.cfg = Config(symm_max_bytes=1 << 20, symm_two_shot_bytes=64 << 10)
    st = _cpu_staging(_standin_graphs(monkeypatch, capacity=64)[0])
    monkeypatch.setattr("mcr.backends.symm.backend.follow_stream", lambda last, dev: None)
    monkeypatch.setattr("mcr.backends.symm.backend.stream_of", lambda sid: None)
    be.ops = _SymmKernelsStandin(st.buf)
    be._copy_in_kernel, be._groups = True, {3: st}
    g = SimpleNamespace(id=3, size=2)
    gen = torch.Generator().manual_seed(1)
    base = torch.empty(70000, dtype=torch.float32)
    views = [base[:1], base[:1000], base[1:1001], base[3:40003], base[:65536 + 1]]
    for it in range(6):
        for x in views:
            for op in (tdist.ReduceOp.SUM, tdist.ReduceOp.AVG):
                x.copy_(torch.randint(-8, 9, x.shape, generator=gen).to(x.dtype))
                want = x * 2 if op is tdist.ReduceOp.SUM else x.clone()
                be.all_reduce(x, op, g, sync=True)
                assert torch.equal(x, want), (it, x.numel(), x.storage_offset(), op)
    keys = len(views) * 2
    assert st.graphs.captures == keys and st.graphs.replays == keys * 5
    assert set(be.ops.calls) == {"copy_in", "one_shot", "two_shot"}



def test_symm_sizes_whose_addresses_keep_moving_stop_capturing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Low-latency all-reduces of one size at ever other addresses (HF decode allocates each
    step): after MOVING captures at that size, calls whose address has no graph are launched
    directly, not captured; results stay right, captures stay bounded per size, a size whose
    address stays put keeps its graph, and the summary says how many calls went direct."""
    from mcr.backends.symm.backend import MOVING
    from mcr.config import Config
    be = SymmBackend.__new__(SymmBackend)
    be.cfg = Config(symm_max_bytes=1 << 20)
    ll = _LLStandin(4096)
    cache, _ = _standin_graphs(monkeypatch, capacity=64)
    st = _cpu_staging(cache, ll)
    monkeypatch.setattr("mcr.backends.symm.backend.follow_stream", lambda last, dev: None)
    monkeypatch.setattr("mcr.backends.symm.backend.stream_of", lambda sid: None)
    be.ops = _SymmKernelsStandin(st.buf)
    be._copy_in_kernel, be._groups = True, {3: st}
    g = SimpleNamespace(id=3, size=2)
    moving = [torch.empty(1000, dtype=torch.bfloat16) for _ in range(16)]   # 16 addresses
    still = torch.empty(7, dtype=torch.float32)      # and a size whose address stays put
    for i in range(200):
        for x in (moving[(i * 7) % 16], still):
            x.copy_(torch.arange(x.numel(), dtype=x.dtype) + i % 5)
            want = x * 2
            be.all_reduce(x, tdist.ReduceOp.SUM, g, sync=True)
            assert torch.equal(x, want), (i, x.numel())
    assert ll.calls == 400       # each call ran the kernel once (a sum run twice would show)
    assert st.moving[("all_reduce", 2000, torch.bfloat16, False)] == MOVING
    assert cache.captures == MOVING + 1       # 1000 elements: MOVING; 7 elements: one
    assert cache.replays > 200 and st.unrepeated > 100
    assert "launched without capture" in be.summary_lines()[0]
    # The same for the other low-latency calls (an MoE layer's all-to-all buffers move too).
    sent = [torch.arange(2 * 500, dtype=torch.bfloat16) + k for k in range(16)]
    outs = [torch.empty(1000, dtype=torch.bfloat16) for _ in range(3)]
    for i in range(100):
        y, out = sent[(i * 5) % 16], outs[i % 3]
        be.all_to_all(out, y, [500, 500], [500, 500], g, sync=True)
        assert torch.equal(out, torch.cat([y[:500], y[:500]])), i
    # Exactly one run a call, replayed or not: an all-to-all run twice gives the same data
    # but advances this rank's call numbers past its peers' (an MoE layer hung on that).
    assert ll.calls == 400 + 100
    assert st.moving[("all_to_all", 1000)] == MOVING
    assert cache.captures == 2 * MOVING + 1
