"""MkDocs hook: the config reference (from the pydantic models of bindings.yaml) and the CLI reference (from the
click commands), made at each build so that neither can drift from the code."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import click
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

_COMMENT = re.compile(r"^\s+(\w+)\s*:[^#]*#\s*(.+)$")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add reference/config.md and reference/cli.md, made now."""
    files.append(File.generated(config, "reference/config.md", content=config_reference()))
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    return files


# --- the config ---------------------------------------------------------------------------------------------------


def config_reference() -> str:
    from bot.config.settings import Config

    lines = [
        "# Config reference",
        "",
        "Every key of `bindings.yaml`, made from the settings models at each build of these pages: its type, its",
        "default and what it does. Channel accounts take the keys of their platform",
        "(`channels.<platform>.accounts.<id>`, below the sections); `${VAR}` may stand for any value.",
        "",
    ]
    for name, field in Config.model_fields.items():
        lines += _section(name, field)
    from channels.accounts import DiscordAccount, SlackAccount, TelegramAccount

    for platform, model in (("telegram", TelegramAccount), ("discord", DiscordAccount), ("slack", SlackAccount)):
        lines += [f"## `channels.{platform}.accounts.<id>`", "", _doc(model), "", *_table(model, ""), ""]
    return "\n".join(lines)


def _section(name: str, field: FieldInfo) -> list[str]:
    model = _model_of(field.annotation)
    lines = [f"## `{name}`", ""]
    if model is None:
        lines += [f"Type: {_type(field.annotation)}. {_comment_of(name)}".strip(), ""]
        return lines
    lines += [_doc(model), "", *_table(model, ""), ""]
    return lines


def _table(model: type[BaseModel], prefix: str, depth: int = 0) -> list[str]:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"] if depth == 0 else []
    comments = _comments(model)
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        what = (field.description or comments.get(name) or "").replace("|", "\\|")
        kind = _type(field.annotation).replace("|", "\\|")
        rows.append(f"| `{key}` | {kind} | {_default(field).replace('|', '/')} | {what} |")
        nested = _model_of(field.annotation)
        if nested is not None and depth < 3 and nested is not model:
            rows += _table(nested, f"{key}.", depth + 1)
    return rows


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (itself, in a list, or optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_of(argument)
        if found is not None:
            return found
    return None


def _type(annotation: Any) -> str:
    """A type as a person reads it: `int`, `list of str`, `one of "off", "partial"`, `X or none`."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(arguments[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(argument) for argument in arguments)
    if origin in (typing.Union, types.UnionType):
        shown = [_type(argument) for argument in arguments if argument is not type(None)]
        return " or ".join(shown) + (" or none" if type(None) in arguments else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type(arguments[0])}" if arguments else "list"
    if origin is dict:
        return f"mapping of {_type(arguments[0])} to {_type(arguments[1])}" if arguments else "mapping"
    if isinstance(annotation, type):
        names = {"str": "text", "NoneType": "none", "SecretStr": "secret text"}
        return names.get(annotation.__name__, annotation.__name__)
    return str(annotation)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "—"
        if isinstance(value, BaseModel):
            return "(its defaults)"
        return f"`{value!r}`" if value not in ([], {}) else "empty"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default!r}`"


def _doc(model: type[BaseModel]) -> str:
    return inspect.cleandoc(model.__doc__ or "").replace("\n", " ")


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment each field's line ends with, in the model's source (what the code says the key does)."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        for line in source.splitlines():
            match = _COMMENT.match(line)
            if match:
                found[match.group(1)] = match.group(2).strip()
    return found


def _comment_of(name: str) -> str:
    from bot.config.settings import Config

    return _comments(Config).get(name, "")


# --- the commands ---------------------------------------------------------------------------------------------------


def cli_reference() -> str:
    from bot.cli.main import cli

    lines = [
        "# CLI reference",
        "",
        "Every `bot` command and option, made from the commands themselves at each build of these pages.",
        "",
    ]
    for path, command in _commands(cli, "bot"):
        if path == "bot":
            continue
        lines += [f"## `{path}`", "", inspect.cleandoc(command.help or ""), ""]
        usage = " ".join(command.collect_usage_pieces(click.Context(command)))
        lines += ["```", f"{path} {usage}".rstrip(), "```", ""]
        options = [param for param in command.params if isinstance(param, click.Option) and not param.hidden]
        if options:
            lines += ["| option | what it does |", "|---|---|"]
            for option in options:
                names = ", ".join(f"`{name}`" for name in option.opts)
                shown = option.show_default and option.default is not None
                default = f" (default: `{option.default}`)" if shown else ""
                what = (option.help or "").replace("|", "\\|")
                lines.append(f"| {names} | {what}{default} |")
            lines.append("")
    return "\n".join(lines)


def _commands(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from _commands(command.commands[name], f"{path} {name}")
