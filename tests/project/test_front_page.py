"""The README is a front page (issue 39): at most about 12 KB, the two set-up commands, its links all lead somewhere;
and the docs' table of bindings.yaml's sections (issue 24, docs/concepts/config.md) names every top-level section."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config.settings import Config

ROOT = Path(__file__).resolve().parent.parent.parent
README = ROOT / "README.md"
SECTIONS_PAGE = ROOT / "docs" / "concepts" / "config.md"


def section_table() -> list[str]:
    """The first column of the table under "## The sections" of the config page, in order."""
    text = SECTIONS_PAGE.read_text(encoding="utf-8")
    start = text.index("## The sections")
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


def test_the_readme_is_a_front_page_of_at_most_12_kb() -> None:
    assert len(README.read_bytes()) <= 12 * 1024


def test_the_readme_shows_the_two_set_up_commands_and_no_other() -> None:
    text = README.read_text(encoding="utf-8")
    shell_blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    commands = [line.split("#")[0].strip() for block in shell_blocks for line in block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"]


def test_every_relative_link_of_the_readme_leads_to_a_file() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]
    assert len(targets) >= 10
    missing = [target for target in targets if not (ROOT / target.split("#")[0]).exists()]
    assert missing == []
