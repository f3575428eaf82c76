"""Tuning tables: units, schema validation with file:line, lookup against a linear scan."""

from __future__ import annotations

import math
import random

import pytest
import torch

from mcr.backends import KNOWN
from mcr.errors import TableError
from mcr.ops import make_key
from mcr.table_file import find_table_files, load_table
from mcr.tables import TableSet
from mcr.units import format_bytes, parse_bytes

HEAD = """\
schema_version: 1
system: {class: test, gpu: none}
provenance: {tool: test, date: 2026-11-22, statistic: median}
device: cpu
groups:
"""


def key(op: str, n: int, dt: str = "float32", pr: str = "standalone", buf: str = "plain",
        device: str = "cpu", gsize: int = 2):
    from mcr.ops import CallKey
    return CallKey(op, gsize, n, getattr(torch, dt), device, None, pr, buf)


def write(tmp_path, body: str, name: str = "t.yaml"):
    p = tmp_path / name
    p.write_text(HEAD + body)
    return p


@pytest.mark.parametrize("text,want", [("4096", 4096), ("64KiB", 65536), ("1mib", 1 << 20),
                                       (4096, 4096), ("inf", math.inf), (" 2 GiB ", 2 << 30),
                                       (math.inf, math.inf)])
def test_parse_bytes(text, want):
    assert parse_bytes(text) == want


@pytest.mark.parametrize("bad", ["-1", "12XB", "1.3", "", "KiB", True, "64K", "64 KB", "1MB",
                                 "1.5KiB", float("nan"), 1.5, -3])
def test_parse_bytes_rejects_ambiguous_and_fractional_sizes(bad):
    with pytest.raises(ValueError, match="byte size"):
        parse_bytes(bad)


def test_format_bytes_round_trips():
    for n in [1, 1000, 1024, 65536, 3 << 20, 5 << 30]:
        assert parse_bytes(format_bytes(n)) == n


def test_lookup_matches_linear_scan(tmp_path):
    rng = random.Random(7)
    bounds = sorted(rng.sample(range(1, 1 << 24), 40))
    names = ["gloo", "mpi"]
    lines = ["  2:", "    all_reduce:"]
    prev = 0
    expect = []
    for i, b in enumerate(bounds + [math.inf]):
        be = names[i % 2]
        if i % 5 == 3:  # leave a gap: no rule there
            prev = b
            continue
        hi = "inf" if b == math.inf else b
        lines.append(f"      - {{min: {prev}, max: {hi}, backend: {be}}}")
        expect.append((prev, b, be))
        prev = b
    ts = TableSet([load_table(write(tmp_path, "\n".join(lines) + "\n"), KNOWN)])
    for _ in range(3000):
        x = rng.randrange(0, 1 << 25)
        want = next((be for lo, hi, be in expect if lo <= x < hi), None)
        hit = ts.lookup(key("all_reduce", x))
        assert (hit[0] if hit else None) == want, x
    assert ts.lookup(key("all_reduce", 10, gsize=4)) is None
    assert ts.lookup(key("all_reduce", 10, device="cuda")) is None


def test_dtype_and_profile_rules_take_precedence(tmp_path):
    body = """\
  2:
    all_gather:
      - {max: inf, backend: gloo}
      - {max: 1MiB, backend: mpi, dtype: [bfloat16, float16]}
      - {max: inf, backend: nccl, profile: overlap}
"""
    ts = TableSet([load_table(write(tmp_path, body), KNOWN)])
    look = lambda n, dt, pr: ts.lookup(key("all_gather", n, dt, pr))[0]  # noqa: E731
    assert look(10, "float32", "standalone") == "gloo"
    assert look(10, "bfloat16", "standalone") == "mpi"
    assert look(2 << 20, "bfloat16", "standalone") == "gloo"   # past the dtype rule's range
    assert look(10, "float32", "overlap") == "nccl"
    assert look(10, "bfloat16", "overlap") == "mpi"            # dtype rule beats profile rule
    assert ts.profiled_ops == {"all_gather"}   # the ops MCR_PROFILE=auto looks at streams for


def test_symmetric_buffer_rules_apply_to_symmetric_outputs_only(tmp_path):
    body = """\
  2:
    all_gather:
      - {max: inf, backend: gloo}
      - {max: 1MiB, backend: nccl, dtype: bfloat16}
      - {min: 64KiB, max: inf, backend: sdma, buffer: symmetric}
"""
    ts = TableSet([load_table(write(tmp_path, body), KNOWN)])
    look = lambda n, dt, buf: ts.lookup(key("all_gather", n, dt, buf=buf))[0]  # noqa: E731
    assert look(1 << 20, "float32", "plain") == "gloo"
    assert look(1 << 20, "float32", "symmetric") == "sdma"
    assert look(1 << 10, "float32", "symmetric") == "gloo"     # below the symmetric rule
    assert look(1 << 10, "bfloat16", "symmetric") == "nccl"    # then dtype rules, as for plain
    assert look(1 << 17, "bfloat16", "symmetric") == "sdma"    # buffer beats dtype
    assert look(1 << 17, "bfloat16", "plain") == "nccl"
    assert look(1 << 17, "bfloat16", "elsewhere") == "nccl"    # unknown kinds: plain rules


@pytest.mark.parametrize("body,line,words", [
    ("  2:\n    all_reduce:\n      - {max: 4KiB, backend: mpi}\n      - {min: 1KiB, max: inf, "
     "backend: gloo}\n", 9, ["overlapping range", "[1KiB, inf)"]),
    ("  2:\n    all_reduce:\n      - {min: 1MiB, max: inf, backend: mpi}\n      - {min: 0, "
     "max: 4KiB, backend: gloo}\n", 9, ["unsorted range"]),
    ("  2:\n    allreduce:\n      - {max: inf, backend: mpi}\n", 7, ["unknown op 'allreduce'"]),
    ("  2:\n    all_reduce:\n      - {max: inf, backend: ucx}\n", 8, ["unknown backend 'ucx'"]),
    ("  2:\n    all_reduce:\n      - {max: 12XB, backend: mpi}\n", 8, ["max", "12XB"]),
    ("  2:\n    all_reduce:\n      - {backend: mpi}\n", 8, ["max", "missing"]),
    ("  2:\n    all_reduce:\n      - {max: inf, backend: mpi, dtype: float8}\n", 8,
     ["unknown dtype 'float8'"]),
    ("  2:\n    all_reduce:\n      - {max: inf, backend: mpi, profile: fast}\n", 8,
     ["unknown profile 'fast'"]),
    ("  2:\n    all_reduce:\n      - {max: inf, backend: mpi, buffer: pinned}\n", 8,
     ["unknown buffer 'pinned'"]),
    ("  2:\n    all_reduce:\n      - {max: inf, backend: mpi, chunk: 3}\n", 8,
     ["unknown key", "chunk"]),
    ("  2:\n    all_reduce:\n      - {min: 4KiB, max: 4KiB, backend: mpi}\n", 8,
     ["empty range"]),
    ("  zero:\n    all_reduce: []\n", 6, ["a positive integer, 4) or nodes x ranks per node"]),
    ("  2:\n    all_reduce: []\n", 7, ["non-empty list"]),
])
def test_schema_errors_name_file_line_field(tmp_path, body, line, words):
    p = write(tmp_path, body)
    with pytest.raises(TableError) as e:
        load_table(p, KNOWN)
    msg = str(e.value)
    assert f"{p}:{line}:" in msg, msg
    for w in words:
        assert w in msg, msg


def test_top_level_errors(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("schema_version: 2\nsystem: {}\ndevice: tpu\ngroups: {}\nextra: 1\n")
    with pytest.raises(TableError) as e:
        load_table(p, KNOWN)
    msg = str(e.value)
    for w in [f"{p}:1: schema_version", f"{p}:2: system.class: missing",
              f"{p}:3: device: 'tpu'", f"{p}:5: extra: unknown", "provenance: missing"]:
        assert w in msg, msg


def test_malformed_yaml_names_line(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(HEAD + "  2:\n    all_reduce:\n      - {max: inf, backend: mpi\n")
    with pytest.raises(TableError, match=rf"{p}:\d+: not valid YAML"):
        load_table(p, KNOWN)


def test_duplicate_keys_are_errors(tmp_path):
    p = write(tmp_path, "  2:\n    all_reduce:\n      - {max: inf, backend: mpi}\n"
                        "    all_reduce:\n      - {max: inf, backend: gloo}\n")
    with pytest.raises(TableError, match=rf"{p}:9: duplicate key 'all_reduce'"):
        load_table(p, KNOWN)


def test_same_rule_in_two_files_is_an_error(tmp_path):
    body = "  2:\n    all_reduce:\n      - {max: inf, backend: mpi}\n"
    a, b = write(tmp_path, body, "a.yaml"), write(tmp_path, body, "b.yaml")
    with pytest.raises(TableError, match="also defined in"):
        TableSet([load_table(a, KNOWN), load_table(b, KNOWN)])


def _backend(ts, nbytes=64, gsize=2):
    return ts.lookup(make_key("all_reduce", gsize, nbytes, torch.float32, "cpu"))[0]


def test_layers_user_first_then_nearest_job_size(tmp_path):
    """The user's folder shadows shipped rules per op; within a layer the table measured with
    the job's rank count wins over another job size's sub-group rules; same size twice errs."""
    two = "  2:\n    all_reduce:\n      - {max: inf, backend: mpi}\n"
    four = ("  2:\n    all_reduce:\n      - {max: inf, backend: gloo}\n"
            "  4:\n    all_reduce:\n      - {max: inf, backend: gloo}\n")
    np2, np4 = write(tmp_path, two, "np2.yaml"), write(tmp_path, four, "np4.yaml")
    shipped = [load_table(np4, KNOWN), load_table(np2, KNOWN)]
    assert _backend(TableSet([shipped], world=2)) == "mpi"
    assert _backend(TableSet([shipped], world=4)) == "gloo"
    assert _backend(TableSet([shipped], world=4), gsize=4) == "gloo"
    user = [load_table(write(tmp_path, two.replace("mpi", "gloo"), "user.yaml"), KNOWN)]
    ts = TableSet([user, shipped], world=2)
    assert _backend(ts) == "gloo" and [t.path for t in ts.tables] == [str(tmp_path / "user.yaml"),
                                                                         str(np4)]
    assert (shipped[1], 2, "all_reduce") in ts.shadowed
    with pytest.raises(TableError, match="both measured with 2 ranks"):
        TableSet([[load_table(np2, KNOWN), load_table(write(tmp_path, two, "b.yaml"), KNOWN)]])


def test_fingerprint_tracks_rules_not_comments(tmp_path):
    body = "  2:\n    all_reduce:\n      - {max: 64KiB, backend: mpi}\n"
    a = TableSet([load_table(write(tmp_path, body, "a.yaml"), KNOWN)])
    b = TableSet([load_table(write(tmp_path, "# note\n" + body, "b.yaml"), KNOWN)])
    c = TableSet([load_table(write(tmp_path, body.replace("64KiB", "32KiB"), "c.yaml"), KNOWN)])
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_shipped_tables_are_valid():
    from mcr.runtime import TABLES_DIR
    files = find_table_files(TABLES_DIR, None)
    assert files, "no tables shipped in tuning_tables/"
    for f in files:
        t = load_table(f, KNOWN)
        assert t.provenance.get("command"), f"{f}: provenance.command missing"


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


def test_table_locations_are_checked(tmp_path):
    """Folders: .yml like .yaml, this class only; empty folders and non-files are errors."""
    body = "  2:\n    all_reduce:\n      - {max: inf, backend: gloo}\n"
    write(tmp_path, body)                       # class test, written as t.yaml
    (tmp_path / "t.yaml").rename(tmp_path / "t.yml")
    assert [f.name for f in find_table_files(tmp_path, "test", explicit=True)] == ["t.yml"]
    with pytest.raises(TableError, match="no table for this machine's class 'nvidia-h200'"):
        find_table_files(tmp_path, "nvidia-h200", explicit=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TableError, match="no tuning tables"):
        find_table_files(empty, "cpu", explicit=True)
    assert find_table_files(empty, "cpu") == []          # the shipped folder may lack a class
    with pytest.raises(TableError, match="not a regular file"):
        find_table_files("/dev/zero", "cpu", explicit=True)
    with pytest.raises(TableError, match="no such tuning table"):
        find_table_files(tmp_path / "nope", "cpu", explicit=True)


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


def test_every_shipped_table_round_trips_through_the_writer():
    """writer -> loader -> writer is byte-identical for every shipped table (table_file.dump)."""
    from mcr.runtime import TABLES_DIR
    from mcr.table_file import dump
    files = sorted(TABLES_DIR.glob("*.yaml"))
    assert files
    for f in files:
        first = dump(load_table(f, KNOWN).raw)
        again = f.parent / f"{f.stem}.roundtrip.yaml"
        try:
            again.write_text(first)
            t = load_table(again, KNOWN)
        finally:
            again.unlink()
        assert dump(t.raw) == first, f
        assert t.rules.keys() == load_table(f, KNOWN).rules.keys(), f


def test_writer_refuses_unknown_rule_fields():
    from mcr.table_file import dump
    doc = {"system": {"class": "x"}, "provenance": {"tool": "t", "date": "d", "statistic": "s"},
           "device": "cpu", "groups": {2: {"all_reduce": [{"max": "inf", "backend": "gloo",
                                                            "colour": "red"}]}}}
    with pytest.raises(TableError, match="unknown fields"):
        dump(doc)


def test_hostile_tables_are_refused_before_parsing(tmp_path):
    """Too large, or with YAML aliases (an alias bomb), refused fast with the reason."""
    import time
    big = tmp_path / "big.yaml"
    big.write_text(HEAD + "#" + "x" * (2 << 20) + "\n")
    with pytest.raises(TableError, match="larger than a tuning table can be"):
        load_table(big, KNOWN)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))
    t0 = time.monotonic()
    with pytest.raises(TableError, match=r"bomb.yaml:6: YAML anchors and aliases"):
        load_table(write(tmp_path, bomb, "bomb.yaml"), KNOWN)
    assert time.monotonic() - t0 < 2


def test_a_normal_table_loads_in_milliseconds():
    import time

    from mcr.runtime import TABLES_DIR
    t0 = time.monotonic()
    for f in sorted(TABLES_DIR.glob("*.yaml")):
        load_table(f, KNOWN)
    assert time.monotonic() - t0 < 0.5


def test_user_folder_is_read_before_the_shipped_tables(tmp_path):
    """A job finds the shipped table (mpi on this machine's class), and a table in
    MCR_USER_TABLES shadows it op by op; MCR_TUNING_TABLE alone replaces both."""
    from conftest import run_mpi
    out = run_mpi(2, "tables_worker.py", env={"MCR_USER_TABLES": str(tmp_path / "none")})
    assert out.count("all_reduce 64 -> mpi") == 2 and "tuning_tables/cpu_np2.yaml" in out
    rule = "  2:\n    all_reduce:\n      - {max: 1KiB, backend: gloo}\n"
    (tmp_path / "mine.yaml").write_text(HEAD.replace("class: test", "class: cpu") + rule)
    out = run_mpi(2, "tables_worker.py", env={"MCR_USER_TABLES": str(tmp_path)})
    assert out.count("all_reduce 64 -> gloo") == 2, out[-2000:]
    # the whole op comes from the user's table (1 MiB: in no range of it, so the default),
    # other ops still from the shipped one
    assert out.count("all_reduce 1048576 -> gloo") == 2 and out.count("all_gather 64 -> mpi") == 2
    out = run_mpi(2, "tables_worker.py", env={"MCR_TUNING_TABLE": str(tmp_path / "mine.yaml")})
    assert out.count("all_gather 64 -> gloo") == 2 and "tuning_tables" not in out


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
