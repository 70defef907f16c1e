"""The README's table of bindings.yaml's sections (issue 24) names every top-level section the config takes."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config.settings import Config

README = Path(__file__).resolve().parent.parent.parent / "README.md"


def section_table() -> list[str]:
    """The first column of the table under "The config: `bindings.yaml`", in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## The config: `bindings.yaml`")
    rows = text[start:].split("\n| section | what it holds |\n|---|---|\n", 1)[1]
    names = []
    for line in rows.splitlines():
        if not line.startswith("|"):
            break
        match = re.match(r"\| `([a-z_]+)` \|", line)
        assert match is not None, f"a row that names no section: {line[:60]}"
        names.append(match.group(1))
    return names


def test_the_section_table_names_every_config_section_once() -> None:
    names = section_table()
    assert len(names) == len(set(names)), names
    assert set(names) == set(Config.model_fields)
