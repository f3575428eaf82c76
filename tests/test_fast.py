"""Fast GPU backends: decline rules everywhere, the mori interface (stand-in), GPUs when present."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as tdist
from conftest import gpus, run_mpi
from torch.distributed import ReduceOp as R

from mcr.backends.cuda.symm_mem import rounds
from mcr.backends.sdma.backend import SdmaBackend, _reduce_blocks
from mcr.backends.sdma.cuda_engine import round_bytes
from mcr.backends.symm.backend import SymmBackend
from mcr.config import from_env
from mcr.groups import Group
from mcr.ops import CallKey, make_key


def _key(op: str, nbytes: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda",
         redop: object = None) -> CallKey:
    return CallKey(op, 4, nbytes, dtype, device, redop, "standalone")


def test_sdma_declines_by_key() -> None:
    """sdma names what it cannot serve, from rank-invariant fields only."""
    be = SdmaBackend(from_env(), "cuda")
    assert "GPU tensors" in be.decline_key(_key("all_gather", 64, device="cpu"))
    served = Group(ranks=[0, 1], rank=0, handles={"sdma": object()})
    assert "does not implement all_reduce" in be.decline(_key("all_reduce", 64), served)
    assert "equal-split" in be.decline_key(_key("all_to_all", 4096)._replace(even=False))
    assert be.decline_key(_key("all_to_all", 4096)) is None
    assert "integer" in be.decline_key(_key("reduce_scatter", 64, torch.int32,
                                            redop=tdist.ReduceOp.AVG))
    assert be.decline_key(_key("reduce_scatter", 64, redop=tdist.ReduceOp.SUM)) is None
    g = Group(ranks=[0, 1], rank=0, notes={"sdma": "ranks span 2 hosts"})
    assert be.decline(_key("all_gather", 64), g) == "ranks span 2 hosts"


def test_nccl_takes_bool_reductions_as_torch_does() -> None:
    """torch's NCCL reduces bool tensors (sum as max, an or), so mcr's nccl must not decline
    them (found by torch_diff_worker on one H100); bitwise ops and AVG of bool it cannot."""
    from mcr.backends.torch_pg.nccl import NcclBackend
    be, R = NcclBackend(), tdist.ReduceOp
    for op in (R.SUM, R.MAX, R.MIN, R.PRODUCT):
        assert be.decline_key(_key("all_reduce", 64, torch.bool, redop=op)) is None, op
    assert "sum, max, min or product" in be.decline_key(_key("all_reduce", 64, torch.bool,
                                                              redop=R.AVG))
    assert "bitwise" in be.decline_key(_key("all_reduce", 64, torch.int32, redop=R.BOR))


@pytest.mark.parametrize("raw,msg", [("-1", "0 or more"), ("many", "not an integer")])
def test_sdma_graphs_env_is_checked(monkeypatch: pytest.MonkeyPatch, raw: str, msg: str) -> None:
    """A bad MCR_SDMA_GRAPHS is refused by name at init, not silently replaced."""
    monkeypatch.setenv("MCR_SDMA_GRAPHS", raw)
    with pytest.raises(ValueError, match=f"MCR_SDMA_GRAPHS.*{msg}"):
        from_env()
    monkeypatch.setenv("MCR_SDMA_GRAPHS", "0")
    assert from_env().sdma_graphs == 0


def test_sdma_rounds_pipeline_large_blocks_only() -> None:
    MiB, slot = 1 << 20, 128 << 20
    for b, pipeline in [(1, 16 * MiB), (8 * MiB, 16 * MiB), (16 * MiB - 2, 16 * MiB),
                        (16 * MiB, 16 * MiB), (32 * MiB, 16 * MiB), (100 * MiB + 6, 16 * MiB),
                        (512 * MiB, 16 * MiB), (512 * MiB, float("inf")), (4 * MiB, 0)]:
        per = round_bytes(b, slot, pipeline)
        pieces = rounds(b, per)
        assert sum(ln for _, ln in pieces) == b and pieces[0][0] == 0, (b, pipeline)
        assert all(o + ln == o2 for (o, ln), (o2, _) in zip(pieces, pieces[1:]))
        assert per <= slot
        if b < pipeline:
            assert len(pieces) == -(-b // slot)      # whole, or slot-sized when larger
        else:
            assert 2 <= len(pieces) <= 4 and per % MiB == 0 or b <= per
    # sdma's own schedule (pipeline inf) is unpipelined: whole blocks up to a slot.
    assert round_bytes(64 * MiB, slot, float("inf")) == 64 * MiB


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_sdma_reduction_of_blocks(dtype: torch.dtype, n: int) -> None:
    """sdma reduce-scatter's local reduction of the n arrived blocks, every reduce op it
    serves, against torch's reduction in float64 (rounded once to dtype: no worse)."""
    g = torch.Generator().manual_seed(n)
    blocks = (torch.randn(n, 4099, generator=g) * 8).to(dtype)
    x = blocks.double()
    # (reference, scale of the rounding error a float reduction may add: n ulps of it)
    refs = {R.SUM: (x.sum(0), x.abs().sum(0)), R.AVG: (x.mean(0), x.abs().mean(0)),
            R.MAX: (x.amax(0), 0 * x[0]), R.MIN: (x.amin(0), 0 * x[0]),
            R.PRODUCT: (x.prod(0), x.prod(0).abs())}
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    for op, (ref, scale) in refs.items():
        if op == R.AVG and not dtype.is_floating_point:
            continue   # sdma declines it (test_sdma_declines_by_key)
        if op == R.PRODUCT and not dtype.is_floating_point:
            ref = ref.to(dtype).double()   # integer products wrap, as torch's and NCCL's do
        out = torch.empty(blocks.shape[1], dtype=dtype)
        _reduce_blocks(blocks, op, out)
        once = ref.to(dtype).double()      # the reference, rounded once to dtype
        finite = once.isfinite()
        assert torch.equal(out.double()[~finite], once[~finite]), (op, dtype, n)
        err = (out.double() - ref).abs() - (once - ref).abs() - n * eps * scale
        assert err[finite].max().item() <= 0, (op, dtype, n, err.max().item())


def test_sdma_pipe_is_sdma_below_its_threshold() -> None:
    """The tuner times sdma_pipe only where its schedule differs from sdma's."""
    MiB = 1 << 20
    pipe = SdmaBackend(from_env(), "cuda", "sdma_pipe", 16 * MiB)
    whole = SdmaBackend(from_env(), "cuda", "sdma", float("inf"), shares=pipe)
    assert whole._groups is pipe._groups       # one transit buffer, one set of symmetric buffers

    def key(op, nbytes, n=2, buffer="plain"):
        return make_key(op, n, nbytes, torch.bfloat16, "cuda", buffer=buffer)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert pipe.same_as(key(op, 32 * MiB)) is None            # 16 MiB per rank block
        assert pipe.same_as(key(op, 32 * MiB - 2)) == "sdma"
        assert pipe.same_as(key(op, 32 * MiB, n=4)) == "sdma"     # 8 MiB per rank block
        assert pipe.same_as(key(op, 32 * MiB, buffer="symmetric")) is None
    assert pipe.same_as(key("broadcast", 16 * MiB)) is None      # the whole buffer is the block
    assert pipe.same_as(key("broadcast", 16 * MiB, buffer="symmetric")) == "sdma"
    assert whole.same_as(key("all_gather", 1 << 30)) is None


def test_symm_declines_by_key() -> None:
    """symm serves small sum/avg all-reduces of bf16/fp32 only."""
    be = SymmBackend.__new__(SymmBackend)
    be.cfg = from_env()
    assert be.decline_key(_key("all_reduce", 1024, redop=tdist.ReduceOp.SUM)) is None
    assert "exceed" in be.decline_key(_key("all_reduce", 1 << 30, redop=tdist.ReduceOp.SUM))
    assert "sum" in be.decline_key(_key("all_reduce", 64, redop=tdist.ReduceOp.MAX))
    assert "bfloat16" in be.decline_key(_key("all_reduce", 64, torch.int32,
                                             redop=tdist.ReduceOp.SUM))


def test_mori_engine_against_standin() -> None:
    """The ROCm sdma engine's calls into mori's API, with a named Gloo stand-in for mori."""
    out = run_mpi(2, "mori_worker.py", timeout=300)
    assert out.count("OK 32 checks against the mori stand-in") == 2


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 1, reason="needs a GPU")
def test_symm_gpu() -> None:
    """symm against NCCL on every GPU of this node, one included: each size form and offset,
    repeated buffers replayed from CUDA graphs, and calls on two streams left unordered; again
    with all-reduce and broadcast alone on symm (MCR_SYMM_OPS=all_reduce,broadcast), and with
    all-to-alls with split sizes on it too (all_to_all_uneven)."""
    out = run_mpi(gpus(), "fast_worker.py", "--symm-only", timeout=300)
    assert out.count(" checks") == gpus()
    for ops in ("all_reduce,broadcast", "all_reduce,all_to_all,all_to_all_uneven"):
        out = run_mpi(gpus(), "fast_worker.py", "--symm-only", timeout=300,
                      env={"MCR_SYMM_OPS": ops})
        assert out.count(" checks") == gpus()


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ GPUs")
def test_all_reduce_paths_agree_across_ranks_and_with_graph_replays_gpu() -> None:
    """Every GPU all-reduce path leaves the same bits on every rank; captured and replayed
    on fresh inputs, the bits of an eager call."""
    from conftest import run_torchrun
    out = run_torchrun(gpus(), "agree_worker.py", timeout=600)
    assert out.count("AGREE OK") == gpus(), out[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 2, reason="needs 2+ GPUs")
def test_fast_paths_gpu() -> None:
    """sdma and symm against NCCL on every GPU of this node."""
    out = run_mpi(gpus(), "fast_worker.py", "--big", "64MiB", timeout=900)
    assert out.count(" checks") == gpus()
    # sdma_pipe: the pipelined schedule (side-stream rounds) from 1 MiB per rank block.
    out = run_mpi(gpus(), "fast_worker.py", "--quick", "--sdma", "sdma_pipe", timeout=900,
                  env={"MCR_SDMA_PIPELINE_BYTES": "1MiB"})
    assert out.count(" checks") == gpus()


def test_symmetric_rendezvous_counts_are_compared_first() -> None:
    """Ranks that made different numbers of symmetric-memory rendezvous (one sat out a
    sub-group's) get a clear error at once, not torch's wait to the store's timeout; equal
    counts pass. Three ranks as threads on one real TCPStore, each with the signature check an
    mcr session gives it (one root: the threads share one process)."""
    import threading

    from mcr.backends.cuda.turns import RendezvousTurns
    from mcr.errors import CallError, McrTimeoutError
    from mcr.signature import SignatureCheck
    master = tdist.TCPStore("127.0.0.1", 0, 3, True, wait_for_workers=False)
    stores = [master] + [tdist.TCPStore("127.0.0.1", master.port, 3, False) for _ in range(2)]

    def turns(r: int, made: int, timeout: float = 20) -> RendezvousTurns:
        t = RendezvousTurns()
        t.made, t.check = made, SignatureCheck(stores[r], timeout)
        t.check.root = "mcr/test/"
        return t

    def run(made: list[int], group: str, ranks: list[int]) -> list[object]:
        got: list[object] = [None] * len(made)

        def one(r: int) -> None:
            t = turns(r, made[r])
            try:
                t.before(group, r, ranks)
                t.after()
                got[r] = t.made
            except Exception as e:   # noqa: BLE001 - the test reads which error each rank got
                got[r] = e
        th = [threading.Thread(target=one, args=(r,)) for r in range(len(made))]
        for x in th:
            x.start()
        for x in th:
            x.join(30)
        return got
    assert run([4, 4, 4], "g_equal", [0, 1, 2]) == [5, 5, 5]
    got = run([210, 210, 3], "g_behind", [0, 2, 3])
    assert all(isinstance(e, CallError) for e in got), got
    assert "rank 0: 210; rank 2: 210; rank 3: 3" in str(got[0])
    with pytest.raises(McrTimeoutError, match=r"group \[0, 1\].*within 0.2 s"):
        turns(0, 0, 0.2).before("g_alone", 0, [0, 1])
    unchecked = RendezvousTurns()            # no mcr session: nothing to compare with
    unchecked.before("g_none", 0, [0, 1])


def test_capture_before_a_groups_first_call_falls_to_a_library_ready_for_it() -> None:
    """Inside CUDA graph capture, a backend that sets up a group's buffers at its first call
    (collectives and host syncs, which capture forbids) declines until that call was made
    outside capture; outside capture it serves. (Seen on 2x H200: a decode step captured with
    an all-gather the table sends to sdma, first made inside the capture, crashed it.)"""
    from mcr.config import Config
    be = SymmBackend(Config())
    g = SimpleNamespace(id=7, size=2, handles={"symm": object()}, notes={})

    def key(graph: bool):
        return make_key("all_reduce", 2, 4096, torch.bfloat16, "cuda", tdist.ReduceOp.SUM,
                        "standalone", graph=graph)
    assert be.decline(key(False), g) is None
    assert "first call" in be.decline(key(True), g)
    be._groups[7] = object()          # its first call made, outside capture
    assert be.decline(key(True), g) is None
    sdma = SdmaBackend.__new__(SdmaBackend)
    sdma.name, sdma._groups, sdma.engine = "sdma", {}, "cuda"
    g.handles["sdma"] = object()
    assert "first call" in sdma.decline(key(True)._replace(op="all_gather"), g)


def test_an_async_work_is_reused_only_once_nothing_holds_it() -> None:
    """Work.of_torch reuses the last Work it handed out, never one its caller (or anyone,
    weakly) still holds, and a reused one starts as new."""
    import weakref

    from mcr.work import Work

    class Library:          # a torch work that is done: wait() returns at once
        def wait(self, timeout: object = None) -> bool:
            return True

        def is_completed(self) -> bool:
            return True

    held = Work.of_torch("all_reduce", "gloo", 4, 2, Library(), False)
    other = Work.of_torch("all_reduce", "gloo", 8, 2, Library(), False)
    assert other is not held and held.nbytes == 4
    held.wait()
    other._after = [lambda: None]
    before = id(other)
    del other                                        # dropped unwaited, with an after hook
    again = Work.of_torch("all_gather", "gloo", 16, 2, Library(), False)
    assert id(again) == before                       # the dropped one, reset
    assert (again.op, again.nbytes, again._after, again._done) == ("all_gather", 16, None, False)
    assert held._done and held.nbytes == 4           # the held one untouched
    ref = weakref.ref(again)
    del again
    fresh = Work.of_torch("all_reduce", "gloo", 4, 2, Library(), False)
    assert ref() is None and fresh.op == "all_reduce"   # weakly held: not reused, let go
