"""The dispatcher: its order of choice (forced, table, default, any), fallbacks and their
counts, symmetric-output rules, CUDA graph capture, the auto profile."""

from __future__ import annotations

import pytest
import torch
from test_tables import HEAD, write

from mcr.backends import KNOWN
from mcr.table_file import load_table
from mcr.tables import TableSet


def test_dispatcher_order_and_fallback(tmp_path):
    """per-call > MCR_BACKEND > table > default, with declines falling through."""
    from mcr.backends import Unavailable
    from mcr.backends.torch_pg.gloo import GlooBackend
    from mcr.dispatcher import Dispatcher
    from mcr.errors import BackendUnavailable
    from mcr.groups import Group
    from mcr.ops import CallKey

    body = "  2:\n    all_reduce:\n      - {max: 1KiB, backend: mpi}\n      - {max: inf, " \
           "backend: nccl}\n"
    ts = TableSet([load_table(write(tmp_path, body), KNOWN)])
    backends = {"gloo": GlooBackend(), "nccl": Unavailable("nccl", "CUDA is not available"),
                "mpi": Unavailable("mpi", "not launched by an MPI launcher")}
    g = Group(ranks=[0, 1], rank=0, handles={"gloo": object()})
    key = CallKey("all_reduce", 2, 4096, torch.float32, "cpu", torch.distributed.ReduceOp.SUM,
                  "standalone")
    d = Dispatcher(backends, ts, None)
    assert d.choose(key, g).name == "gloo"                       # table's nccl declines
    assert ("table", "nccl", "CUDA is not available") in {
        (s, n, r) for (s, n, r) in d.fallbacks}
    with pytest.raises(BackendUnavailable, match="forced for this call.*not launched"):
        d.choose(key, g, forced="mpi")
    with pytest.raises(BackendUnavailable, match="unknown backend 'ucc'"):
        d.choose(key, g, forced="ucc")
    d2 = Dispatcher(backends, ts, "mpi")            # MCR_BACKEND declines too
    assert d2.choose(key, g).name == "gloo"
    assert d.choose(key, g) is d.choose(key, g)                  # cached


def test_dispatcher_tells_once_per_uncovered_group_size_of_two_or_more(tmp_path):
    """No rule for a group size: said once per (device, size); a group of one is never said."""
    from mcr.backends.torch_pg.gloo import GlooBackend
    from mcr.dispatcher import Dispatcher
    from mcr.groups import Group
    from mcr.ops import CallKey

    ts = TableSet([load_table(write(tmp_path, "  2:\n    all_reduce:\n      - {max: inf, "
                                              "backend: gloo}\n"), KNOWN)])
    told: list[tuple[int, str]] = []
    d = Dispatcher({"gloo": GlooBackend()}, ts, None,
                   lambda key, default: told.append((key.group_size, default)))
    for n in (1, 2, 3, 3, 1):
        g = Group(ranks=list(range(n)), rank=0, handles={"gloo": object()})
        for nbytes in (4, 4096):
            key = CallKey("all_reduce", n, nbytes, torch.float32, "cpu",
                          torch.distributed.ReduceOp.SUM, "standalone")
            assert d.choose(key, g).name == "gloo"
    assert told == [(3, "gloo")]


def test_dispatcher_picks_symmetric_rules_by_key(tmp_path):
    """A key whose output is symmetric memory gets the buffer: symmetric rule; others not."""
    from mcr.backends.mpi.backend import MpiBackend
    from mcr.backends.torch_pg.gloo import GlooBackend
    from mcr.config import from_env
    from mcr.dispatcher import Dispatcher
    from mcr.groups import Group
    from mcr.ops import CallKey

    body = "  2:\n    all_gather:\n      - {max: inf, backend: gloo}\n" \
           "      - {max: inf, backend: mpi, buffer: symmetric}\n"
    ts = TableSet([load_table(write(tmp_path, body), KNOWN)])
    backends = {"gloo": GlooBackend(), "mpi": MpiBackend(from_env())}
    g = Group(ranks=[0, 1], rank=0, handles={"gloo": object(), "mpi": object()})
    plain = CallKey("all_gather", 2, 4096, torch.float32, "cpu", None, "standalone")
    d = Dispatcher(backends, ts, None)
    assert d.choose(plain, g).name == "gloo"
    assert d.choose(plain._replace(buffer="symmetric"), g).name == "mpi"


def test_graph_capture_goes_to_capturable_libraries_only():
    """Inside CUDA graph capture, host-progressed libraries decline with the reason."""
    from mcr.backends.torch_pg.gloo import GlooBackend
    from mcr.backends.torch_pg.nccl import NcclBackend
    from mcr.groups import Group
    from mcr.ops import CallKey
    g = Group(ranks=[0, 1], rank=0, handles={"gloo": object(), "nccl": object()})
    key = CallKey("all_reduce", 2, 4096, torch.float32, "cuda", torch.distributed.ReduceOp.SUM,
                  "standalone", graph=True)
    assert NcclBackend().decline(key, g) is None
    cpu_key = key._replace(device="cpu")
    assert "cannot run inside CUDA graph capture" in GlooBackend().decline(cpu_key, g)
    assert GlooBackend().decline(cpu_key._replace(graph=False), g) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("profile, side, overlaps", [("auto", "gloo_lanes2", 1),
                                                     ("standalone", "mpi", 0)])
def test_auto_profile_takes_overlap_rules_on_side_streams(tmp_path, profile, side, overlaps):
    """Under MCR_PROFILE=auto a GPU call on a side stream (where FSDP2 and ZeRO-3 overlap their
    collectives with compute) takes the overlap rule; on the default stream, or with the profile
    set to standalone, the standalone one; the summary counts the overlap calls. Host-staged
    libraries: 2 ranks may share one GPU."""
    from conftest import run_mpi
    rules = ("  2:\n    all_reduce:\n      - {max: inf, backend: mpi}\n"
             "      - {max: inf, backend: gloo_lanes2, profile: overlap}\n")
    (tmp_path / "t.yaml").write_text(HEAD.replace("device: cpu", "device: cuda") + rules)
    out = run_mpi(2, "profile_worker.py", env={"MCR_TUNING_TABLE": str(tmp_path / "t.yaml"),
                                               "MCR_PROFILE": profile}, timeout=180)
    want = (f"PROFILE {profile} default=mpi side={side} side_standalone=mpi which_side={side} "
            f"overlap_calls={overlaps}")
    assert out.count(want) == 2, out[-3000:]


def test_dispatcher_counts_calls_per_profile_across_a_spill(tmp_path):
    """profiles() sums calls and bytes per table profile, served() per op and library, the
    same before and after the decision cache is dropped (set_tables spills it)."""
    from mcr.backends.torch_pg.gloo import GlooBackend
    from mcr.dispatcher import Dispatcher
    from mcr.groups import Group
    from mcr.ops import CallKey

    ts = TableSet([load_table(write(tmp_path, "  2:\n    all_reduce:\n      - {max: inf, "
                                              "backend: gloo}\n"), KNOWN)])
    d = Dispatcher({"gloo": GlooBackend()}, ts, None)
    g = Group(ranks=[0, 1], rank=0, handles={"gloo": object()})
    calls = [("standalone", 64), ("overlap", 4096), ("overlap", 4096), ("standalone", 8)]
    for i, (prof, nbytes) in enumerate(calls):
        if i == 2:
            d.set_tables(ts)
        key = CallKey("all_reduce", 2, nbytes, torch.float32, "cpu",
                      torch.distributed.ReduceOp.SUM, prof)
        d.choose(key, g)
    assert d.profiles() == {"standalone": [2, 72], "overlap": [2, 8192]}
    assert d.served() == {("all_reduce", "gloo"): [4, 8264]}


@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_a_new_size_every_call_decides_as_the_table_says_across_a_boundary(launcher):
    """Sizes that change every call, up and then down across a table's 1 KiB boundary (Gloo
    below, two Gloo lanes from it): each call served by the library its rule names, every
    sum right (a kind's new size reuses its last size's decision only where it holds). The
    same for all-to-alls, whose calls with split sizes have rules of their own."""
    from conftest import ROOT, run_mpi, run_torchrun
    run = run_mpi if launcher == "mpi" else run_torchrun
    out = run(2, "new_sizes_worker.py", env={
        "MCR_TUNING_TABLE": str(ROOT / "tests" / "data" / "ar_boundary_cpu.yaml")}, timeout=180)
    assert out.count("NEW SIZES OK 264") == 2, out[-3000:]
