"""The README documents every knob mcr reads, and nothing it does not."""

from __future__ import annotations

import re

from conftest import ROOT

from mcr.config import KNOBS


def test_readme_env_table_lists_every_knob():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(MCR_[A-Z0-9_]+)` \|", section, re.M))
    assert documented == {k.env for k in KNOBS}
