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


def test_uneven_split_rules_apply_to_all_to_alls_with_split_sizes_only(tmp_path):
    body = """\
  2:
    all_to_all:
      - {max: 1KiB, backend: gloo}
      - {max: inf, backend: mpi}
      - {min: 4KiB, max: inf, backend: gloo, splits: uneven}
"""
    ts = TableSet([load_table(write(tmp_path, body), KNOWN)])

    def look(n: int, even: bool) -> str:
        return ts.lookup(make_key("all_to_all", 2, n, torch.float32, "cpu", even=even))[0]
    assert look(1 << 20, True) == "mpi" and look(1 << 20, False) == "gloo"
    assert look(2048, True) == look(2048, False) == "mpi"   # below the uneven rule: the rest
    assert look(512, True) == look(512, False) == "gloo"


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
    ("  2:\n    all_reduce:\n      - {max: inf, backend: mpi, splits: uneven}\n", 8,
     ["all_reduce[0].splits", "only all_to_all calls have split sizes"]),
    ("  2:\n    all_to_all:\n      - {max: inf, backend: mpi, splits: skewed}\n", 8,
     ["unknown splits 'skewed'"]),
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


@pytest.mark.parametrize("kind", ["fifo", "dev_zero_link", "big", "bomb"])
def test_a_folder_s_files_pass_the_single_file_guards(tmp_path, kind):
    """A FIFO, a link to /dev/zero, an oversized file or an alias bomb inside a tables folder
    (MCR_TUNING_TABLE's, or the user folder read at every start) is refused fast, naming the
    file: no hang, no unbounded read, no long parse."""
    import os
    import time
    f = tmp_path / "t.yaml"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "dev_zero_link":
        f.symlink_to("/dev/zero")
    elif kind == "big":
        f.write_text(HEAD + "#" + "x" * (50 << 20) + "\n")
    else:
        f.write_text("a: &a [x, x]\nb: [*a, *a]\n")
    t0 = time.monotonic()
    with pytest.raises(TableError, match=r"t\.yaml"):
        for explicit in (True, False):
            load_tables_of(find_table_files(tmp_path, "test", explicit=explicit))
    assert time.monotonic() - t0 < 2


def load_tables_of(paths):
    for p in paths:
        load_table(p, KNOWN)


@pytest.mark.parametrize("backend", ["nccl", "rccl", "sdma", "sdma_pipe", "ce", "symm",
                                     "nccl_ce"])
def test_a_cpu_table_may_not_name_a_gpu_only_library(tmp_path, backend):
    from mcr.backends import SERVES
    body = f"  2:\n    all_reduce:\n      - {{max: 64KiB, backend: mpi}}\n" \
           f"      - {{max: inf, backend: {backend}}}\n"
    with pytest.raises(TableError, match=rf"t\.yaml:9: .*backend {backend!r} serves cuda "
                                         r"tensors only; this table is for device cpu"):
        load_table(write(tmp_path, body), SERVES)
    gpu = write(tmp_path, body.replace("mpi", "gloo"), "g.yaml")
    gpu.write_text(gpu.read_text().replace("device: cpu", "device: cuda"))
    assert load_table(gpu, SERVES).device == "cuda"

