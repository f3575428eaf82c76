"""Bad input gives a clear error on every rank and no hang (real Gloo and Open MPI)."""

from __future__ import annotations

import re
import textwrap
import time

import pytest
import torch
from conftest import ROOT, run_mpi, run_torchrun

from mcr.config import KNOBS

TABLE = """\
schema_version: 1
system: {{class: test}}
provenance: {{tool: test, date: 2026-11-22, statistic: median}}
device: cpu
groups:
  {n}:
    all_reduce:
      - {{max: {cut}, backend: mpi}}
      - {{max: inf, backend: gloo}}
"""


def _expected(out: str, n: int, kind: str) -> None:
    ranks = sorted({int(r) for r in re.findall(rf"rank (\d+): EXPECTED {kind}", out)})
    assert ranks == list(range(n)), out[-4000:]
    ok = sorted(int(r) for r in re.findall(r"rank (\d+): ERRORS OK", out))
    assert ok == list(range(n)), out[-4000:]


@pytest.mark.parametrize("n", [2, 4])
def test_ranks_with_different_tables_refuse_to_start(tmp_path, n):
    (tmp_path / "t0.yaml").write_text(TABLE.format(n=n, cut="64KiB"))
    (tmp_path / "t1.yaml").write_text(TABLE.format(n=n, cut="1MiB"))
    _expected(run_mpi(n, "errors_worker.py", "different_tables", str(tmp_path), timeout=120),
              n, "MismatchError")


def test_ranks_with_different_knobs_refuse_to_start_mpi():
    _expected(run_mpi(2, "errors_worker.py", "different_knob", timeout=120), 2, "MismatchError")


def test_ranks_with_different_knobs_refuse_to_start_torchrun():
    _expected(run_torchrun(2, "errors_worker.py", "different_knob", timeout=120), 2,
              "MismatchError")


def test_bad_knob_value_is_refused_naming_what_is_allowed():
    _expected(run_mpi(2, "errors_worker.py", "bad_knob", timeout=120), 2, "ValueError")


def test_malformed_table_stops_every_rank(tmp_path):
    (tmp_path / "bad.yaml").write_text(TABLE.format(n=2, cut="64KiB").replace(
        "backend: mpi", "backend: nope"))
    out = run_mpi(2, "errors_worker.py", "bad_table", str(tmp_path), timeout=120)
    _expected(out, 2, "TableError")
    assert "bad.yaml:8" in out and "unknown backend 'nope'" in out, out[-3000:]


def test_local_bad_calls_raise_clearly():
    _expected(run_mpi(2, "errors_worker.py", "local", timeout=120), 2, "CallError")


def test_mcr_check_catches_cross_rank_size_and_dtype_mismatch():
    _expected(run_mpi(2, "errors_worker.py", "check_sizes", timeout=120), 2, "MismatchError")


def test_missing_peer_times_out_naming_op_backend_bytes():
    # A rank whose collective timed out leaves MPI unfinalized, so mpiexec reports a failure;
    # what matters is that the error came, on time, naming the call.
    out = run_mpi(2, "errors_worker.py", "timeout", timeout=120, check=False)
    assert out.count("rank 0: EXPECTED McrTimeoutError") == 4, out[-3000:]
    assert "all_reduce on backend 'mpi' (4000 bytes)" in out
    assert f"all_reduce on backend 'mpi' ({4 << 21} bytes)" in out   # the blocking form
    assert "all_reduce on backend 'gloo' (4000 bytes)" in out


def test_mpi_declines_under_torchrun():
    out = run_torchrun(2, "errors_worker.py", "no_mpi", timeout=120)
    _expected(out, 2, "BackendUnavailable")
    assert textwrap.shorten("not launched by an MPI launcher", 60) in out


A2A_TABLE = str(ROOT / "tests" / "data" / "a2a_boundary_cpu_np2.yaml")


def test_ranks_disagreeing_on_a_call_get_an_error_not_wrong_data_mpi():
    """Sizes, dtypes, roots, and sizes either side of a table boundary: MismatchError on every
    rank naming what each passed, with no MCR_CHECK (MPI and Gloo in play); a recv whose size
    differs from its send's: a MismatchError on the receiver (MPI)."""
    out = run_mpi(2, "errors_worker.py", "mismatch", env={"MCR_TUNING_TABLE": A2A_TABLE},
                  timeout=120)
    _expected(out, 2, "MismatchError")
    assert out.count("-> mpi") >= 2, out[-3000:]   # the all-to-all case ran


def test_ranks_disagreeing_on_a_call_get_an_error_not_an_abort_gloo():
    _expected(run_torchrun(2, "errors_worker.py", "mismatch", timeout=120), 2, "MismatchError")


def test_a_vanished_peer_is_an_mcr_error_naming_the_call():
    out = run_torchrun(2, "errors_worker.py", "peer_gone", timeout=120)
    assert "rank 0: EXPECTED LibraryError" in out and "rank 0: ERRORS OK" in out, out[-3000:]


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_an_uncaught_exception_under_mpirun_aborts_the_job(backend):
    """The failed rank takes the job down at once (MPI_Abort) instead of sitting in
    MPI_Finalize while its peer waits MCR_TIMEOUT_S (300 s here) in its next all-reduce."""
    out = run_mpi(2, "errors_worker.py", "uncaught", check=False, timeout=60,
                  env={"MCR_BACKEND": backend, "MCR_TIMEOUT_S": "300"})
    assert "RuntimeError: a planned failure on rank 1" in out, out[-3000:]
    assert "mcr: rank 1 ended with an uncaught RuntimeError; aborting the MPI job" in out, \
        out[-3000:]
    assert "NOT ABORTED" not in out, out[-3000:]


@pytest.mark.parametrize("backend,blocking,guard", [("mpi", "inf", "auto"), ("mpi", "0", "auto"),
                                                   ("mpi", "0", "0"), ("gloo", "8MiB", "auto")])
def test_a_rank_that_exits_early_under_mpirun_fails_its_peers_at_once(backend, blocking, guard):
    """sys.exit on one rank: its peer's next all-reduce raises within seconds, naming the rank,
    not after MCR_TIMEOUT_S (300 s here) while the leaver sits in MPI_Finalize. Guard "auto":
    the peer waits on the board before MPI's blocking form in its own thread; blocking "0" with
    guard "0" (no board): inside the MPI worker's blocking collective."""
    t0 = time.monotonic()
    out = run_mpi(2, "errors_worker.py", "exit", check=False, timeout=120,
                  env={"MCR_BACKEND": backend, "MCR_TIMEOUT_S": "300",
                       "MCR_MPI_BLOCKING_BYTES": blocking, "MCR_GUARD": guard})
    took = time.monotonic() - t0
    raised = re.search(r"rank 0: RAISED after ([\d.]+) s: LibraryError: (.*)", out)
    assert raised, out[-3000:]
    assert float(raised.group(1)) < 10 and took < 90, (took, raised.group(0))
    if backend == "mpi":
        assert "rank 1 left the job" in raised.group(2), raised.group(0)


@pytest.mark.parametrize("launcher", ["torchrun", "mpi", "gloo_under_mpi"])
def test_a_new_kind_of_call_with_a_rank_that_left_fails_at_once(launcher):
    """The first call of its kind waits in the always-on check (torch's store) before any
    library: a peer that left mcr without making it is named there within a second, not after
    MCR_CHECK_TIMEOUT_S (300 s here)."""
    env = {"MCR_TIMEOUT_S": "300", "MCR_BACKEND": "gloo" if launcher != "mpi" else "mpi"}
    out = (run_torchrun(2, "errors_worker.py", "exit_new", env=env, timeout=120, check=False)
           if launcher == "torchrun" else
           run_mpi(2, "errors_worker.py", "exit_new", check=False, timeout=120, env=env))
    raised = re.search(r"rank 0: RAISED after ([\d.]+) s: LibraryError: (.*)", out)
    assert raised and float(raised.group(1)) < 5, out[-3000:]
    assert "rank 1 of group [0, 1] left mcr" in raised.group(2), raised.group(0)


def test_a_restarted_session_does_not_read_the_last_ones_checks():
    """mcr stopped and started again on a torch.distributed it does not own: a false
    MismatchError before (the first session's keys answered the second's first call)."""
    out = run_torchrun(2, "errors_worker.py", "reinit_owned", timeout=120)
    assert sorted(re.findall(r"rank (\d+): ERRORS OK", out)) == ["0", "1"], out[-4000:]


def test_a_receive_from_a_rank_that_left_fails():
    """Point-to-point: a receive from a rank that ended raises ~2 s after it left."""
    out = run_mpi(2, "errors_worker.py", "exit_p2p", check=False, timeout=120,
                  env={"MCR_BACKEND": "mpi", "MCR_TIMEOUT_S": "300"})
    raised = re.search(r"rank 0: RAISED after ([\d.]+) s: LibraryError: (.*)", out)
    assert raised and float(raised.group(1)) < 10, out[-3000:]
    assert "rank 1 left the job" in raised.group(2), raised.group(0)


@pytest.mark.parametrize("blocking", ["0", "8MiB"])
def test_ranks_that_left_after_making_the_call_are_not_errors(blocking):
    """A broadcast relayed through a late rank: the ranks that got their part and left made
    the call, so a rank still waiting (for the late one) must not fail when they leave."""
    out = run_mpi(4, "errors_worker.py", "relay", timeout=120,
                  env={"MCR_BACKEND": "mpi", "MCR_MPI_BLOCKING_BYTES": blocking})
    assert sorted(re.findall(r"rank (\d): RELAY OK", out)) == ["0", "1", "2", "3"], out[-3000:]


def test_ranks_that_end_at_different_times_are_not_errors():
    """A leaving notice fails only calls that need the rank that left."""
    out = run_mpi(3, "errors_worker.py", "stagger", timeout=120, env={"MCR_BACKEND": "mpi"})
    assert sorted(re.findall(r"rank (\d): STAGGER OK", out)) == ["0", "2"], out[-3000:]


@pytest.mark.parametrize("knob", ["MCR_SDMA_MAX_BYTES", "MCR_SYMM_MAX_BYTES",
                                  "MCR_NCCL_CE_MAX_BYTES"])
@pytest.mark.parametrize("value", ["inf", "0"])
def test_a_buffer_size_must_be_finite(monkeypatch, knob, value):
    """inf is a threshold's 'never'; a buffer of inf (or 0) bytes is refused as the
    environment is read, naming the knob."""
    from mcr.config import from_env
    monkeypatch.setenv(knob, value)
    with pytest.raises(ValueError, match=rf"{knob}='{value}': sizes a buffer"):
        from_env()


@pytest.mark.parametrize("knob", ["MCR_MPI_CHUNK_BYTES", "MCR_HIER_CHUNK_BYTES"])
def test_a_chunk_too_small_to_make_progress_is_refused(monkeypatch, knob):
    """0 (which crawled past the timeout) or a few bytes a piece: refused as the environment is
    read; inf (one piece) and 4KiB up are taken."""
    from mcr.config import from_env
    for bad in ("0", "1", "4095"):
        monkeypatch.setenv(knob, bad)
        with pytest.raises(ValueError, match=rf"{knob}='{bad}': a chunk must be at least 4KiB"):
            from_env()
    for good, want in (("inf", float("inf")), ("4KiB", 4096)):
        monkeypatch.setenv(knob, good)
        assert getattr(from_env(), knob.removeprefix("MCR_").lower()) == want


@pytest.mark.parametrize("knob", [k.env for k in KNOBS if k.parse.__name__ in (
    "_bytes", "_size", "_chunk", "_bytes_or_auto", "_positive") or k.parse.__qualname__.startswith(
    "int_from")])
def test_no_numeric_knob_takes_a_negative_value(monkeypatch, knob):
    from mcr.config import from_env
    monkeypatch.setenv(knob, "-1")
    with pytest.raises(ValueError, match=knob):
        from_env()


def test_a_second_init_with_other_arguments_is_an_error():
    _expected(run_mpi(2, "errors_worker.py", "reinit", timeout=120), 2, "CallError")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_host_library_refused_inside_graph_capture():
    _expected(run_mpi(2, "errors_worker.py", "capture", timeout=120), 2, "BackendUnavailable")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_groups_on_a_gloo_world_bound_to_a_gpu():
    """torch fails to build NCCL groups there (a TypeError); mcr's NCCL calls must work."""
    n = min(2, torch.cuda.device_count())
    out = run_torchrun(n, "bound_gloo_worker.py", timeout=180)
    assert len(re.findall(r"rank \d+: BOUND OK", out)) == n, out[-3000:]


@pytest.mark.parametrize("n", [2, 4])
def test_all_to_all_splits_that_disagree_are_an_error_on_every_rank_mpi(n):
    out = run_mpi(n, "errors_worker.py", "uneven_splits", timeout=120)
    _expected(out, n, "MismatchError")
    assert out.count("uneven all-to-all on mpi") == n, out[-3000:]


def test_all_to_all_splits_that_disagree_are_an_error_on_every_rank_gloo():
    out = run_torchrun(2, "errors_worker.py", "uneven_splits", timeout=120)
    _expected(out, 2, "MismatchError")
    assert out.count("uneven all-to-all on gloo") == 2, out[-3000:]


@pytest.mark.parametrize("launcher,n,ending", [
    ("mpi", 2, "wait"), ("mpi", 4, "wait"), ("torchrun", 2, "wait"), ("torchrun", 4, "wait"),
    ("mpi", 2, "exit"), ("torchrun", 4, "exit")])
def test_a_new_kind_of_call_against_an_old_one_names_both_within_a_minute(launcher, n, ending):
    """Default settings: one rank at a new kind of call, its peers at a kind made before, at
    the same point. Every rank raises a MismatchError naming both calls, well within 60 s;
    also where each rank's program ends as soon as it has its error (exit; wait: the ranks
    leave once every rank has said its error)."""
    scenario = "new_vs_old" + ("_exit" if ending == "exit" else "")
    out = (run_mpi(n, "errors_worker.py", scenario, timeout=120, check=False)
           if launcher == "mpi" else
           run_torchrun(n, "errors_worker.py", scenario, timeout=120, check=False))
    assert sorted(int(r) for r in re.findall(r"rank (\d+): EXPECTED MismatchError", out)) == \
        list(range(n)), out[-4000:]
    took = [float(x) for x in re.findall(r"ERRORS OK after ([\d.]+) s", out)]
    assert len(took) == n and max(took) < 30, out[-4000:]


@pytest.mark.parametrize("launcher", ["mpi", "torchrun"])
def test_sessions_one_after_another_with_sub_groups(launcher):
    """init, sub-groups, destroy, three times in one process (the second init hung at times
    under torchrun, its groups reading the first session's keys)."""
    out = (run_mpi(2, "errors_worker.py", "sessions", timeout=120) if launcher == "mpi" else
           run_torchrun(2, "errors_worker.py", "sessions", timeout=120))
    assert sorted(re.findall(r"rank (\d+): ERRORS OK", out)) == ["0", "1"], out[-3000:]


# Each case: (the call rank 0 makes, the call its peers make), as the errors name them.
WARM = {"size": ("all_reduce sum of 1000 x float32", "all_reduce sum of 999 x float32"),
        "sizebig": ("all_reduce sum of 20000 x float32", "all_reduce sum of 19999 x float32"),
        "dtype": ("all_reduce sum of 64 x float32", "all_reduce sum of 64 x int32"),
        "redop": ("all_reduce sum of 64 x float32", "all_reduce max of 64 x float32"),
        "redopint": ("all_reduce sum of 64 x int32", "all_reduce band of 64 x int32"),
        "op": ("all_reduce sum of 64 x float32", "all_gather of 64 x float32"),
        "root": ("root 0", "root 1"),
        "async": ("all_reduce sum of 64 x float32", "all_reduce sum of 64 x int32"),
        "new": ("all_reduce sum of 777 x float32", "all_reduce sum of 778 x float32"),
        "straddle": ("256 x float32 (1024 B) -> gloo_lanes2", "254 x float32 (1016 B) -> gloo")}
AR_TABLE = str(ROOT / "tests" / "data" / "ar_boundary_cpu.yaml")


def _warm(launcher: str, n: int, case: str, env: dict[str, str]) -> str:
    lib = "auto" if case == "straddle" else "mpi" if launcher == "mpi" else "gloo"
    env = dict(env, **({"MCR_TUNING_TABLE": AR_TABLE} if case == "straddle" else {}))
    run = run_mpi if launcher == "mpi" else run_torchrun
    out = run(n, "errors_worker.py", f"warm_{case}_{lib}", env=env, timeout=150, check=False)
    # Two ranks' lines can share one line of the launcher's output (print writes the text and
    # its newline apart): a message ends where the next rank's line begins.
    lines = re.findall(r"rank (\d+): EXPECTED MismatchError: (.*?)"
                       r"(?=rank \d+: (?:EXPECTED|ERRORS)|\n|$)", out)
    assert sorted(int(r) for r, _ in lines) == list(range(n)), out[-4000:]
    for _, msg in lines:      # every rank's error names both calls
        assert all(c in msg for c in WARM[case]), msg
    return out


@pytest.mark.parametrize("launcher,n,case", [
    *[(launcher, 2, case) for launcher in ("mpi", "torchrun") for case in WARM],
    *[(launcher, 4, case) for launcher in ("mpi", "torchrun")
      for case in ("size", "dtype", "root", "straddle", "new")]])
def test_calls_that_differ_after_warm_up_fail_on_every_rank_naming_both(launcher, n, case):
    """MCR_CHECK unset, both kinds of call made before by every rank: size, dtype, reduce op,
    op, root, an asynchronous call, sizes either side of a table boundary (two libraries); or
    sizes no rank made before in a size class it did (new).
    Every rank raises a MismatchError naming both calls; a rank that saw it before its
    library ran keeps its tensor (the worker checks). MCR_STALL_S=4 for the ranks that were
    inside their library already."""
    out = _warm(launcher, n, case, {"MCR_STALL_S": "4"})
    took = [float(x) for x in re.findall(r"ERRORS OK after ([\d.]+) s", out)]
    assert len(took) == n and max(took) < 20, out[-4000:]


@pytest.mark.parametrize("launcher,case", [("mpi", "size"), ("mpi", "dtype"),
                                           ("torchrun", "dtype"), ("torchrun", "async")])
def test_small_all_reduces_that_differ_carry_their_signature_in_the_message(launcher, case):
    """MCR_GUARD=data (as on several nodes): the signature travels as a trailer of the
    all-reduce itself; every rank names both calls (an MPI size mismatch reaches MPI, which
    truncates: named as well; Gloo would abort the process on one, so it is not run)."""
    out = _warm(launcher, 2, case, {"MCR_STALL_S": "4", "MCR_GUARD": "data"})
    took = [float(x) for x in re.findall(r"ERRORS OK after ([\d.]+) s", out)]
    assert len(took) == 2 and max(took) < 20, out[-4000:]


@pytest.mark.parametrize("launcher", ["mpi", "torchrun"])
def test_a_rank_inside_its_library_when_a_peer_parts_learns_it_within_a_minute(launcher):
    """Default settings; rank 1 comes a second late with another call, so rank 0 is inside its
    library (Gloo, MPI) by then: rank 1 sees it before its library runs, rank 0 from the
    stall watch, both naming both calls well within 60 s."""
    out = _warm(launcher, 2, "dtype", {"LATE_RANK": "1"})
    took = [float(x) for x in re.findall(r"ERRORS OK after ([\d.]+) s", out)]
    assert len(took) == 2 and max(took) < 30, out[-4000:]


@pytest.mark.parametrize("guard", ["auto", "0"])
def test_store_keys_stay_few_when_sizes_change_every_call(guard):
    out = run_mpi(2, "errors_worker.py", "store_keys", env={"MCR_GUARD": guard}, timeout=180)
    assert sorted(re.findall(r"rank (\d+): ERRORS OK", out)) == ["0", "1"], out[-3000:]


@pytest.mark.parametrize("text, timed_out", [
    ("[gloo/transport/tcp/pair.cc:534] Timed out waiting 1000ms for recv operation to complete",
     True),
    ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran "
     "for 600000 milliseconds before timing out.", True),
    ("Operation timed out!", True),
    ("FutureWrappingWork::wait() with finite timeout not implemented", False),
    ("Connection closed by peer [127.0.0.1]:29500", False)])
def test_a_library_error_is_a_timeout_only_where_it_says_one(text, timed_out):
    """A library's error becomes McrTimeoutError (naming MCR_TIMEOUT_S) only where the library
    said it timed out; any other error keeps its own text, naming the call."""
    from mcr.errors import LibraryError, McrTimeoutError
    from mcr.waits import mcr_error
    e = mcr_error(RuntimeError(text), "all_reduce on backend 'gloo' (4 bytes)", 600)
    assert isinstance(e, McrTimeoutError if timed_out else LibraryError), (type(e), str(e))
    assert "all_reduce on backend 'gloo'" in str(e)
    if not timed_out:
        assert text in str(e)
