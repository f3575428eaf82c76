"""mcr's FSDP2 comm objects outside a training run: the ring of all-gather outputs
(mcr.integrations.fsdp.BufferRing), which buffer goes out when and the stream order a reused
buffer keeps; the import hook that installs them; and the benchmark of their host cost. No
DeepSpeed needed."""

from __future__ import annotations

import pytest
from conftest import gpus, run_torchrun


def test_after_import_runs_each_function_once_the_module_has_run(tmp_path, monkeypatch):
    """The hook that adapts a framework (FSDP2 for the `mcr` backend and MCR_FSDP alike): two
    functions on one module not yet imported both run after it executes, each once; on a module
    already imported, at once."""
    import sys

    from mcr.imports import after_import
    (tmp_path / "mcr_probe_mod.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mcr_probe_mod", raising=False)
    seen = []

    def first(m):
        seen.append(("first", m.VALUE))

    def second(m):
        seen.append(("second", m.VALUE))
    for fn in (first, second, first):
        after_import("mcr_probe_mod", fn)
    assert seen == []
    import mcr_probe_mod  # noqa: F401
    assert seen == [("first", 7), ("second", 7)]
    after_import("mcr_probe_mod", second)
    assert seen[-1] == ("second", 7) and len(seen) == 3
    monkeypatch.delitem(sys.modules, "mcr_probe_mod")


def test_fsdp_buffer_ring_reuses_only_dropped_buffers():
    """The all-gather output ring: one allocation per size, round-robin, never a live buffer."""
    import torch

    from mcr.errors import CallError
    from mcr.integrations.fsdp import BufferRing
    made = []

    def alloc(n, dt):
        made.append(torch.empty(n, dtype=dt))
        return made[-1]
    ring = BufferRing(alloc, 2)
    a = ring.take([4, 3], torch.float32)
    b = ring.take([12], torch.float32)
    assert len(made) == 2 and a.shape == (4, 3) and a.data_ptr() != b.data_ptr()
    with pytest.raises(CallError, match="more than 2 outputs"):
        ring.take([12], torch.float32)          # a's buffer is next, and a is alive
    ptr = a.data_ptr()
    del a
    c = ring.take([12], torch.float32)
    assert c.data_ptr() == ptr and len(made) == 2
    d = ring.take([5], torch.bfloat16)          # a new size: its own buffers
    assert len(made) == 4 and d.dtype == torch.bfloat16
    del b, c


@pytest.mark.gpu
@pytest.mark.skipif(gpus() < 1, reason="needs a GPU")
def test_fsdp_buffer_ring_orders_streams_gpu():
    """A ring buffer taken on another stream waits for its last holder's stream; on the same
    stream, stream order suffices (the caching allocator's contract, which FSDP2 keeps)."""
    import torch

    from mcr.integrations.fsdp import BufferRing
    n = 1 << 22
    ring = BufferRing(lambda k, dt: torch.empty(k, dtype=dt, device="cuda"), 1)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for trial in range(3):
        with torch.cuda.stream(s1):
            t = ring.take([n], torch.float32)
            torch.cuda._sleep(20_000_000)          # the holder's last use lands late
            t.fill_(1.0)
        del t
        with torch.cuda.stream(s2 if trial % 2 == 0 else s1):
            u = ring.take([n], torch.float32)
            u.fill_(2.0)
            v = u.sum()
        torch.cuda.synchronize()
        assert float(v) == 2.0 * n and bool((u == 2.0).all()), trial
        del u


def test_fsdp_dispatch_overhead_cpu():
    """dispatch_overhead --fsdp on 2 Gloo ranks: every variant measured against its FSDP2
    reference, and mcr's summary shows its calls served."""
    out = run_torchrun(2, "benchmarks/dispatch_overhead.py", "--fsdp", "--rounds", "3",
                       "--reps", "2")
    for v in ("all-gather via mcr (plain outputs)", "all-gather via mcr (ring of outputs)",
              "reduce-scatter AVG via mcr"):
        line = next(ln for ln in out.splitlines() if v in ln)
        assert line.rstrip().endswith(("FSDP2 all-gather", "FSDP2 reduce-scatter AVG")), line
    assert "served by mcr: " in out and "(100.0%)" in out, out[-3000:]


def test_fsdp_all_gather_rejects_bad_arguments():
    """A wrong profile or buffer kind is an error naming it when the comm object is built."""
    from mcr.integrations.fsdp import AllGather
    AllGather(profile="auto")
    with pytest.raises(ValueError, match=r"profile='fast' is not one of \['standalone', "
                                         r"'overlap', 'auto'\]"):
        AllGather(profile="fast")
    with pytest.raises(ValueError, match="buffers='pinned' is not auto, plain or ring"):
        AllGather(buffers="pinned")
