"""mcr-tune end to end on CPU with real Gloo and Open MPI: tables it writes load and say what it
measured, sub-groups get rules, an interrupted run resumes, `check` and `show` work, bad
options are refused before anything starts."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, _env, launch
from mcr.tuner.decide import settled
from mcr.tuner.search import read_rows

from mcr.backends import KNOWN
from mcr.ops import make_key
from mcr.table_file import load_table
from mcr.tables import TableSet

TUNE = [sys.executable, "-m", "mcr.tuner"]
QUICK = ["-m", "4:4KiB", "-i", "5", "-x", "2", "--rounds", "2", "--max-seconds", "0.2"]


def _tune(*args: str, timeout: float = 300, check: bool = True, env: dict | None = None):
    # No launcher variables and no OMPI_ALLOW_RUN_AS_ROOT: mcr-tune starts mpiexec itself.
    e = _env(env)
    for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        e.pop(k, None)
    p = launch([*TUNE, *args], e, timeout)
    if check and p.returncode != 0:
        pytest.fail(f"mcr-tune {' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}"
                    f"\n{p.stderr[-3000:]}")
    return p


def test_four_ranks_write_rules_for_the_world_and_its_sub_group(tmp_path):
    stem = tmp_path / "cpu_np4"
    p = _tune("-n", "4", "--out", str(stem), *QUICK)
    assert "0 size(s) replayed" in p.stdout
    assert "2 group(s) [4, 2]" in p.stdout      # largest first (tune_groups says why)
    table = load_table(stem.with_suffix(".yaml"), KNOWN)
    ops = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}
    assert {(g, op) for g, op in table.rules} == {(g, op) for g in (2, 4) for op in ops}
    assert table.ranks == 4 and table.provenance["measured_bytes"] == [8, "4KiB"]
    rows = read_rows(stem.with_suffix(".csv"))
    assert {r["backend"] for r in rows if r["op"] != "all_reduce"} == {"gloo", "mpi"}
    assert {r["backend"] for r in rows if r["op"] == "all_reduce"} == \
        {"gloo", "mpi", "mpi_lanes2", "mpi_lanes4", "mpi_lanes8", "gloo_lanes2", "gloo_lanes4",
         "gloo_lanes8"}   # the tuner picks the lanes
    ts = TableSet([table])
    for k in (2, 4):
        for even in (True, False):   # all-to-alls with split sizes are a curve of their own
            mine = [r for r in rows if r["group"] == k and (r["splits"] != "uneven") == even]
            chosen = settled(mine, "gloo")
            assert even or list(chosen) == ["all_to_all"]
            for op, seq in chosen.items():
                for size, be in seq:   # the written ranges say what the rows decided, by size
                    key = make_key(op, k, size, torch.float32, "cpu", even=even)
                    assert ts.lookup(key)[0] == be, (k, op, size, even)
        # Uneven calls are keyed on group size x a power-of-two block: every such size, no other.
        assert sorted({r["bytes"] for r in rows if r["group"] == k and r["splits"]}) == \
            [k * 4 << j for j in range(13) if 8 <= k * 4 << j <= 4096]
    for op in ops:
        assert (tmp_path / f"cpu_np4_{op}.png").stat().st_size > 10_000
    assert not (tmp_path / "cpu_np4.partial.csv").exists()
    shown = _tune("show", str(stem.with_suffix(".yaml"))).stdout
    assert "group of 2:" in shown and "group of 4:" in shown and "extrapolated" in shown
    for op in ops:
        (tmp_path / f"cpu_np4_{op}.png").unlink()
    _tune("plot", str(stem))                           # redrawn from the CSV alone
    assert all((tmp_path / f"cpu_np4_{op}.png").stat().st_size > 10_000 for op in ops)


def test_groups_are_tuned_larger_first_parts_before_hier():
    """Every group's members must have made the same symmetric-memory rendezvous before it
    (torch counts them per process): larger groups first; across nodes the node's group and
    hier's parts, then the world, then the node's smaller sub-groups."""
    from mcr.tuner.cli import tune_groups
    assert list(tune_groups(8, 1, 8).items()) == [(8, list(range(8))), (4, [0, 1, 2, 3]),
                                                  (2, [0, 1])]
    assert list(tune_groups(8, 2, 4)) == [4, "2x1", "2x4", 2]
    assert tune_groups(8, 2, 4)["2x1"] == [0, 4]
    assert list(tune_groups(4, 2, 2)) == [2, "2x1", "2x2"]
    assert tune_groups(2, 2, 1) == {"2x1": [0, 1]}


def test_ranks_outside_a_sub_group_wait_out_its_pass(tmp_path):
    """Ranks 2 and 3 wait while 0 and 1 tune the 2-rank group for longer than MCR_TIMEOUT_S
    (on 4x H200 that pass took minutes and the idle ranks' barrier gave up at 120 s)."""
    t0 = time.monotonic()
    _tune("-n", "4", "--out", str(tmp_path / "t"), "--ops", "all_gather,broadcast",
          "-m", "4:1MiB", "-i", "100", "-x", "2", "--rounds", "3", "--max-seconds", "1",
          env={"MCR_TIMEOUT_S": "6"})
    # The 2-rank pass is about half the run: it must have outlasted the timeout to test this.
    # The timeout bounds the gap between two sizes measured (9 libraries x 3 rounds at 1 MiB:
    # over 3 s on a slow 2-core host, where 3 made the waiting ranks give up).
    assert time.monotonic() - t0 > 4 * 6
    assert {g for g, _ in load_table(tmp_path / "t.yaml", KNOWN).rules} == {2, 4}


def test_nodes_of_one_host_tune_hier_and_its_parts(tmp_path):
    """4 ranks declared as 2 nodes of 2: one node's group, the inter-node group and the world
    are tuned, in that order, hier among the world's candidates."""
    stem = tmp_path / "cpu_2x2"
    p = _tune("-n", "4", "--out", str(stem), "--ops", "all_gather,all_reduce", *QUICK,
              env={"MCR_LOCAL_SIZE": "2"})
    assert "group(s) [2, '2x1', '2x2']" in p.stdout, p.stdout[-2000:]
    table = load_table(stem.with_suffix(".yaml"), KNOWN)
    assert {g for g, _ in table.rules} == {2, "2x1", "2x2"} and table.nodes == 2
    rows = read_rows(stem.with_suffix(".csv"))
    assert {r["backend"] for r in rows if r["group"] == "2x2"} >= {"gloo", "mpi", "hier"}
    assert "hier" not in {r["backend"] for r in rows if r["group"] != "2x2"}
    assert "group of 2x2:" in _tune("show", str(stem.with_suffix(".yaml"))).stdout


def test_interrupted_run_resumes_from_its_rows(tmp_path):
    stem = tmp_path / "t"
    partial = tmp_path / "t.partial.csv"
    args = ["-n", "2", "--out", str(stem), "-m", "4:256KiB", "-i", "10", "--rounds", "2",
            "--max-seconds", "0.3"]
    e = _env(None)
    proc = subprocess.Popen([*TUNE, *args], env=e, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not partial.exists() or
                                      len(partial.read_text().splitlines()) < 12):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with open(partial, newline="") as f:
        before = list(csv.DictReader(f))
    assert before, "the run wrote no partial rows before it was stopped"
    p = _tune(*args)
    assert "resuming:" in p.stdout
    replayed = int(p.stdout.split(" size(s) replayed")[0].rsplit(" ", 1)[-1])
    measured = {(r["group"], r["op"], r["bytes"], r["pass"]) for r in before}
    assert replayed >= len(measured) - 1     # the last size may be cut
    with open(stem.with_suffix(".csv"), newline="") as f:
        after = list(csv.DictReader(f))
    kept = [r for r in before if r in after]
    assert len(kept) >= len(before) - 2
    load_table(stem.with_suffix(".yaml"), KNOWN)


def test_check_reports_regret_per_op(tmp_path):
    stem = tmp_path / "c"
    _tune("-n", "2", "--out", str(stem), "--ops", "all_reduce,all_gather", *QUICK)
    out = _tune("check", str(stem.with_suffix(".yaml")), "-n", "2", *QUICK).stdout
    lines = [ln.split() for ln in out.splitlines() if ln.startswith("  all_")]
    assert {ln[0] for ln in lines} == {"all_reduce", "all_gather"}
    for ln in lines:
        assert int(ln[1]) >= 3 and float(ln[2].rstrip("%")) >= 0 and float(ln[3].rstrip("%")) >= 0
        at_best = [float(x.rstrip("%")) for x in ln[-2:]]         # median, worst at best
        assert 0 <= at_best[0] <= at_best[1]


@pytest.mark.parametrize("args,says", [
    (["--ops", "all_reduce,allreduce"], "--ops allreduce: not an op it tunes"),
    (["--profiles", "overlap", "-d", "cpu"], "--profiles overlap needs CUDA tensors"),
    (["--overlap-load", "cover"], "--overlap-load cover sets the overlap profile's load"),
    (["--splits", "even,skewed"], "--splits even,skewed: use even and/or uneven"),
    (["--overlap-ops", "all_gather,alltoall"], "--overlap-ops alltoall: not an op it tunes"),
    (["--out", "tuning_tables/cpu_np2"], "is a table shipped with mcr; add --overwrite"),
    (["show", "nowhere.yaml"], "nowhere.yaml: not a regular file"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["-c"], "-c/--validate is for the OSU benchmarks"),
    (["check", "t.yaml", "--csv", "x.csv"], "mcr-tune check: --csv is for the OSU benchmarks"),
    (["--check", "t.yaml"], "check is a subcommand, not an option: mcr-tune check TABLE.yaml"),
])
def test_bad_options_are_refused_before_starting(args, says):
    p = _tune(*args, check=False, timeout=60)
    assert p.returncode != 0 and says in p.stdout + p.stderr
    assert "mpiexec" not in p.stdout


def test_help_names_the_subcommands():
    out = _tune("--help", timeout=60).stdout
    for sub in ("mcr-tune show TABLE.yaml", "mcr-tune check TABLE.yaml", "mcr-tune plot STEM"):
        assert sub in out, out
