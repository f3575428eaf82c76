"""symm's all-to-all with split sizes on the CPU, its kernel stood in: which calls it takes
(MCR_SYMM_OPS all_to_all_uneven, the largest block within the low-latency limit), what the
kernel is handed (bytes and offsets per peer), the fallback where the kernel cannot run, and
the summary. The kernel itself runs on a GPU in tests/test_symm_ll_gpu.py; its protocol in
tests/test_symm_ll_model.py."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as tdist
from test_symm import _cpu_staging

from mcr.backends.cuda.graphs import GraphCache
from mcr.backends.symm import ll as LL
from mcr.backends.symm.backend import SymmBackend
from mcr.config import Config, from_env
from mcr.ops import make_key

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
       "all_to_all_uneven")


def _uneven_key(nbytes: int, ranks: int) -> object:
    return make_key("all_to_all", ranks, nbytes, torch.bfloat16, "cuda", None, "standalone",
                    even=False)


def test_symm_takes_uneven_all_to_alls_only_where_asked_and_within_its_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On by default; without all_to_all_uneven in MCR_SYMM_OPS declined; with it, keys (group
    size x the largest block, rounded up) within the low-latency limit are served, larger ones
    declined; the knob's name is not an op."""
    assert SymmBackend(Config()).decline_key(_uneven_key(64, 2)) is None
    assert "all_to_all_uneven" in SymmBackend(Config(symm_ops=OPS[:-1])).decline_key(
        _uneven_key(64, 2))
    be = SymmBackend(Config(symm_ops=OPS))
    assert be.serves == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}
    assert be.decline_key(_uneven_key(2 * 2**20, 2)) is None
    assert "exceed" in be.decline_key(_uneven_key(4 * 2**20, 2))
    assert be.decline_key(_uneven_key(4 * 2**18, 4)) is None
    assert "exceed" in be.decline_key(_uneven_key(4 * 2**19, 4))
    monkeypatch.setenv("MCR_SYMM_OPS", "all_to_all_unequal")
    with pytest.raises(ValueError, match="all_to_all_unequal"):
        from_env()


class _UnevenStandin:
    """Stand-in for LLGroup.issue_uneven (the kernel needs CUDA and peers): rank 0 of a group
    of 2 whose peer sends `peer_block` to it. It checks what it is handed and writes what the
    kernel would: this rank's own block, then the peer's."""

    def __init__(self, peer_block: torch.Tensor) -> None:
        self.peer_block, self.calls, self.ll_bytes, self.pdl = peer_block, [], 1 << 20, False

    def issue_uneven(self, src, dst, in_counts, out_counts) -> None:
        assert src.is_contiguous() and dst.is_contiguous() and src.dtype == dst.dtype
        assert sum(in_counts) == src.numel() and sum(out_counts) == dst.numel()
        assert out_counts[0] == in_counts[0] and out_counts[1] == self.peer_block.numel()
        self.calls.append((list(in_counts), list(out_counts)))
        dst[:in_counts[0]].copy_(src[:in_counts[0]])
        dst[in_counts[0]:].copy_(self.peer_block)


def test_symm_uneven_all_to_all_hands_the_kernel_each_rank_s_splits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An uneven call reaches the kernel with this rank's splits (empty blocks included) and
    gives rank 0's reference result; an even call of the same counts takes the equal-split
    kernel (the key, not one rank's splits, says which); without the kernel the call goes to
    torch's all_to_all_single with the splits; the summary counts the uneven calls."""
    be = SymmBackend(Config(symm_ops=OPS))
    monkeypatch.setattr("mcr.backends.symm.backend.follow_stream", lambda last, dev: None)
    monkeypatch.setattr("mcr.backends.symm.backend.stream_of", lambda sid: None)
    g = SimpleNamespace(id=3, size=2, handles={"symm": "pg"})
    gen = torch.Generator().manual_seed(5)
    for dt, ins, outs in ((torch.bfloat16, [3, 5], [3, 7]), (torch.float32, [0, 4], [0, 1]),
                          (torch.uint8, [6, 0], [6, 2])):
        peer = torch.randint(0, 99, (outs[1],), generator=gen).to(dt)
        stand = _UnevenStandin(peer)
        be._groups = {3: _cpu_staging(GraphCache(0, torch.device("cpu")), stand)}
        x = torch.randint(0, 99, (sum(ins),), generator=gen).to(dt)
        out = torch.full((sum(outs),), 7, dtype=dt)
        assert be.all_to_all(out, x, outs, ins, g, sync=True, even=False) is None
        assert torch.equal(out, torch.cat([x[:ins[0]], peer])), dt
        assert stand.calls == [(ins, outs)]
    stand.issue = lambda *a: stand.calls.append("equal")
    be.all_to_all(torch.empty(4), torch.ones(4), [2, 2], [2, 2], g, sync=True)
    assert stand.calls[-1] == "equal"
    assert "1 all-to-alls with split sizes launched directly" in be.summary_lines()[0]
    seen = []
    monkeypatch.setattr(tdist, "all_to_all_single", lambda *a, **k: seen.append((a, k)))
    be._groups[3].ll = None
    be.all_to_all(torch.empty(3), torch.ones(5), [1, 2], [4, 1], g, sync=True, even=False)
    assert seen[0][0][2:] == ([1, 2], [4, 1]) and seen[0][1] == {"group": "pg"}


def test_issue_uneven_packs_bytes_and_offsets_per_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLGroup.issue_uneven's Splits (ll.cu's struct, by value): bytes to and from each rank and
    their byte offsets, for the element size of the call; the group's grid whatever the
    splits."""
    assert ctypes.sizeof(LL.Splits) == 4 * 8 * LL.MAX_WORLD
    ll = LL.LLGroup.__new__(LL.LLGroup)
    ll.splits, ll.uneven_grid, ll.device = LL.Splits(), 7, 0
    ll.uargs = (ctypes.c_uint64(), ctypes.c_uint64())
    ll.uparams_ptr, ll.functions = 1234, {LL.UNEVEN: 99}
    launched = []
    ll._launch = lambda *a: launched.append(a)
    monkeypatch.setattr(LL, "raw_stream", lambda dev: 55)
    src, dst = torch.zeros(9, dtype=torch.bfloat16), torch.zeros(6, dtype=torch.bfloat16)
    ll.issue_uneven(src, dst, [2, 0, 7], [1, 4, 1])
    sp = ll.splits
    assert list(sp.send_n)[:3] == [4, 0, 14] and list(sp.send_off)[:3] == [0, 4, 4]
    assert list(sp.recv_n)[:3] == [2, 8, 2] and list(sp.recv_off)[:3] == [0, 2, 10]
    assert ll.uargs[0].value == src.data_ptr() and ll.uargs[1].value == dst.data_ptr()
    assert launched == [(99, 7, LL.THREADS, 55, 1234)]
