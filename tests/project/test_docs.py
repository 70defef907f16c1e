"""The docs (docs/, built by mkdocs.yml): every YAML example is a config that `bot config check` accepts (laid over
a working base, its ${VAR}s set), and the generated references name every config section and every command."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import pytest
import yaml
from configs import merged

from bot.cli.main import cli
from bot.config.loading import validate_config
from bot.config.settings import Config
from tools.policy_config import NON_OWNER_DENY, SUBAGENT_DENY

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^( *)```yaml\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
BASE = {
    "defaults": {"model": "local/m"},
    "providers": {"local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
}


def examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for number, match in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8")), 1):
            indent = len(match.group(1))
            text = "\n".join(line[indent:] for line in match.group(2).splitlines())
            found.append((f"{page.relative_to(DOCS)}#{number}", text))
    return found


EXAMPLES = examples()


def test_the_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize(("where", "text"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_yaml_example_passes_config_check(tmp_path: Path, where: str, text: str) -> None:
    example = yaml.safe_load(text)
    assert isinstance(example, dict), where
    variables = set(re.findall(r"\$\{(\w+)", text)) | {"OPENROUTER_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}
    environ = {name: f"{name.lower()}-0123456789abcdef" for name in variables}
    names_a_model = "providers" in example or "model" in (example.get("defaults") or {})
    path = tmp_path / "bindings.yaml"
    path.write_text(yaml.safe_dump(example if names_a_model else merged(BASE, example)))
    config, errors, _ = validate_config(path, environ=environ)
    assert errors == [] and config is not None, (where, [issue.render(str(path)) for issue in errors])


def test_the_references_name_every_section_and_command() -> None:
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import reference
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    config = reference.config_reference()
    assert all(f"## `{section}`" in config for section in Config.model_fields)
    commands = reference.cli_reference()
    assert all(f"## `bot {name}`" in commands for name in cli.commands)


@pytest.mark.parametrize(("layer", "default"), [("non_owner", NON_OWNER_DENY), ("subagent", SUBAGENT_DENY)])
def test_the_tools_guide_names_each_default_deny_list_as_the_code_has_it(layer: str, default: tuple[str, ...]) -> None:
    rows = (DOCS / "guides" / "tools.md").read_text(encoding="utf-8").splitlines()
    row = next(line for line in rows if line.startswith(f"| `{layer}`"))
    listed = re.search(r"the default deny list ((?:`[^`]+`(?:, )?)+)", row)
    assert listed is not None, row
    assert tuple(re.findall(r"`([^`]+)`", listed.group(1))) == default


def shown_commands() -> list[tuple[str, str]]:
    """Every `bot …` command line the README and the docs show: code spans and lines of code blocks that start with
    `bot ` or `.venv/bin/bot `."""
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        blocks = [line for block in re.findall(r"```\w*\n(.*?)```", text, re.DOTALL) for line in block.splitlines()]
        for line in [*re.findall(r"`([^`\n]+)`", text), *blocks]:
            if re.match(r"(\.venv/bin/)?bot [a-z]", line.strip()):
                found.append((page.name, line.strip().split("#")[0].strip()))
    return found


def test_every_bot_command_the_docs_show_exists_with_its_options() -> None:
    shown = shown_commands()
    assert len(shown) >= 40
    wrong = []
    for page, line in shown:
        words = line.removeprefix(".venv/bin/").split()[1:]
        command: click.Command = cli
        while isinstance(command, click.Group) and words and words[0] in command.commands:
            command = command.commands[words.pop(0)]
        if command is cli:
            wrong.append(f"{page}: no such command: {line}")
            continue
        known = {name for param in command.params for name in [*param.opts, *param.secondary_opts]} | {"--help"}
        options = [word.split("=")[0] for word in words if word.startswith("--")]
        wrong += [f"{page}: no option {option}: {line}" for option in options if option not in known]
    assert wrong == []


def test_the_chat_commands_page_lists_the_command_table_and_nothing_else() -> None:
    from bot.intake.commands import BY_NAME

    rows = (DOCS / "reference" / "chat-commands.md").read_text(encoding="utf-8").split("\n## ")[0]
    first_cells = [line.split("|")[1] for line in rows.splitlines() if line.startswith("| `/")]
    assert {name for cell in first_cells for name in re.findall(r"`/(\w+)", cell)} == set(BY_NAME)
