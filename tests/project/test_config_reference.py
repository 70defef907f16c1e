"""Every key of bindings.yaml says what it does: each field of each settings model reachable from `Config` (and of the
channel account models) has a description, and the config reference the docs generate from those models
(docs/hooks/reference.py) has a row for each key with its "what it does" cell filled."""

from __future__ import annotations

import importlib
import re
import sys
import typing
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, Field

from bot.config.settings import Config
from channels.accounts import DiscordAccount, SlackAccount, TelegramAccount

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"
ACCOUNTS: dict[str, type[BaseModel]] = {"telegram": TelegramAccount, "discord": DiscordAccount, "slack": SlackAccount}
CELL = re.compile(r"(?<!\\)\|")  # a table's cell border (an escaped \| is inside a cell)


def reference() -> ModuleType:
    """docs/hooks/reference.py, the MkDocs hook that writes the config reference."""
    sys.path.insert(0, str(HOOKS))
    try:
        return importlib.import_module("reference")
    finally:
        sys.path.remove(str(HOOKS))


def nested(annotation: object) -> tuple[type[BaseModel], str] | None:
    """The settings model a field holds, and what follows the field's name in a key under it: `.` for the model
    itself (or an optional one), `[].` for a list of them, `.<name>.` for a mapping of names to them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "."
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return nested(arguments[0])
    join = "[]." if origin is list else ".<name>." if origin is dict else "."
    for argument in arguments[1:] if origin is dict else arguments:
        found = nested(argument)
        if found is not None:
            return found[0], join if found[1] == "." else join.rstrip(".") + found[1]
    return None


def keys(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """Every key under `model`, dotted as the reference writes it, with the description of its field."""
    found: dict[str, str] = {}
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        found[key] = (field.description or "").strip()
        inner = nested(field.annotation)
        if inner is not None and inner[0] is not model:
            found |= keys(inner[0], key + inner[1])
    return found


def every_key() -> dict[str, str]:
    """Every key of the file: the sections of `Config`, and the keys of each platform's channel accounts."""
    found = keys(Config)
    for platform, model in ACCOUNTS.items():
        found |= keys(model, f"channels.{platform}.accounts.<id>.")
    return found


def prefixes() -> dict[str, str]:
    """What each section of the reference puts before its rows' keys to make the file's key."""
    found = {"": ""}
    for name, field in Config.model_fields.items():
        inner = nested(field.annotation)
        found[name] = name + (inner[1] if inner is not None else ".")
    found |= {f"channels.{platform}.accounts.<id>": f"channels.{platform}.accounts.<id>." for platform in ACCOUNTS}
    return found


def rows(text: str) -> dict[str, str]:
    """The reference's table rows, under the key each stands for in the file (its section's prefix and the row's
    key), with what the row says the key does."""
    found: dict[str, str] = {}
    prefix = ""
    for line in text.splitlines():
        heading = re.match(r"^## `(.+)`$", line)
        if heading:
            prefix = prefixes()[heading.group(1)]
        elif line.startswith("| `"):
            cells = [cell.strip() for cell in CELL.split(line)[1:-1]]
            found[prefix + cells[0].strip("`")] = cells[-1]
    return found


def test_every_key_has_a_description() -> None:
    missing = [key for key, description in every_key().items() if not description]
    assert missing == [], f"{len(missing)} keys without Field(description=...): {', '.join(missing)}"


def test_the_reference_has_a_row_saying_what_each_key_does() -> None:
    written = rows(reference().config_reference())
    empty = [key for key, what in written.items() if not what]
    assert empty == [], f"{len(empty)} rows of the config reference say nothing: {', '.join(empty)}"
    expected = every_key()
    assert sorted(set(expected) - set(written)) == [], "keys the config reference has no row for"
    assert sorted(set(written) - set(expected)) == [], "rows of the config reference that are no key"


def test_the_walk_reaches_every_model_and_sees_a_missing_description() -> None:
    # The checks above are only as good as this walk: it goes through optional models, lists and mappings of them,
    # and reports a field without a description however deep it is.
    class Leaf(BaseModel):
        said: int = Field(default=1, description="a number")
        silent: int = 2

    class Root(BaseModel):
        one: Leaf | None = Field(default=None, description="one")
        many: list[Leaf] = Field(default_factory=list, description="a list")
        named: dict[str, Leaf] = Field(default_factory=dict, description="a mapping")

    found = keys(Root)
    assert [key for key, description in found.items() if not description] == [
        "one.silent",
        "many[].silent",
        "named.<name>.silent",
    ]
    assert len(every_key()) > 250
    assert "agents[].exec.allowlist[].executable" in every_key()
    assert "providers.<name>.models.<name>.price.input" in every_key()
    assert "channels.slack.accounts.<id>.media.max_bytes" in every_key()
