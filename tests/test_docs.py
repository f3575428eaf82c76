"""docs/environment.md documents every knob mcr reads, and nothing it does not; the README
names only knobs that exist and sends readers to docs that exist."""

from __future__ import annotations

import re

from conftest import ROOT

from mcr.config import KNOBS


def _env_section() -> str:
    return (ROOT / "docs" / "environment.md").read_text()


def test_env_table_lists_every_knob():
    section = _env_section()
    documented = set(re.findall(r"^\| `(MCR_[A-Z0-9_]+)` \|", section, re.M))
    assert documented == {k.env for k in KNOBS}


def test_defaults_agree_between_knobs_config_and_readme():
    """A knob's default is one value: what the environment parses to, Config's field default,
    and the README's default column."""
    from dataclasses import MISSING, fields

    from mcr.config import Config, _bool

    section = _env_section()
    readme = dict(re.findall(r"^\| `(MCR_[A-Z0-9_]+)` \| ([^|]+) \|", section, re.M))
    field_default = {f.name: f.default for f in fields(Config) if f.default is not MISSING}
    for k in KNOBS:
        parsed = k.parse(k.env, k.default) if k.default else None
        assert field_default[k.field] == parsed, f"{k.env}: Config says {field_default[k.field]!r}"
        cell = readme[k.env].strip()
        if not k.default:
            continue   # unset, or computed at init (the README says from what)
        if k.parse is _bool:
            assert cell == ("off" if not parsed else f"`{k.default}`"), f"{k.env}: README {cell}"
        else:
            assert cell == f"`{k.default}`", f"{k.env}: README says {cell}, knob {k.default!r}"


def test_readme_names_real_knobs_and_docs_and_stays_short():
    text = (ROOT / "README.md").read_text()
    known = {k.env for k in KNOBS}
    named = set(re.findall(r"`(MCR_[A-Z0-9_]+)", text))
    assert named and named <= known, f"README names knobs mcr does not read: {named - known}"
    for target in set(re.findall(r"\]\(([^)#]+)", text)):
        assert (ROOT / target).exists(), f"README links {target}, which does not exist"
    assert len(text.splitlines()) <= 300


def test_docs_link_to_files_that_exist():
    for doc in (ROOT / "docs").glob("*.md"):
        for target in set(re.findall(r"\]\(([^)#:]+)", doc.read_text())):
            assert (doc.parent / target).exists(), f"{doc.name} links {target}: not there"


def test_the_example_table_in_docs_loads(tmp_path):
    """docs/tables.md's example is a table mcr accepts, every selector in it included."""
    from mcr.backends import SERVES
    from mcr.table_file import load_table
    text = (ROOT / "docs" / "tables.md").read_text()
    body = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "t.yaml").write_text(body)
    t = load_table(tmp_path / "t.yaml", SERVES)
    sels = {k for r in t.raw["groups"]["2"].values() for e in r for k in e}
    assert {"dtype", "profile", "buffer", "splits"} <= sels
