"""MkDocs hook: the config reference (from the pydantic models of bindings.yaml) and the CLI reference (from the
click commands), made at each build so that neither can drift from the code."""

from __future__ import annotations

import inspect
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


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add reference/config.md and reference/cli.md, made now."""
    files.append(File.generated(config, "reference/config.md", content=config_reference()))
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    return files


# --- the config ---------------------------------------------------------------------------------------------------


def config_reference() -> str:
    """The config reference page: every section of `Config`, then the keys of each platform's channel accounts."""
    from bot.config.settings import Config
    from channels.accounts import DiscordAccount, SlackAccount, TelegramAccount

    lines = [
        "# Config reference",
        "",
        "Every key of `bindings.yaml`, made from the settings models at each build of these pages: its type, its",
        "default and what it does. `${VAR}` may stand for any value. In a key, `[]` stands for each entry of a list",
        "and `<name>` for each name of a mapping. The sections:",
        "",
        *_rows(Config, "", flat=True),
        "",
    ]
    for name, field in Config.model_fields.items():
        lines += _section(name, field)
    for platform, model in (("telegram", TelegramAccount), ("discord", DiscordAccount), ("slack", SlackAccount)):
        lines += [f"## `channels.{platform}.accounts.<id>`", "", _doc(model), "", *_rows(model, ""), ""]
    return "\n".join(lines)


def _section(name: str, field: FieldInfo) -> list[str]:
    lines = [f"## `{name}`", ""]
    held = _held(field.annotation)
    if held is None:
        return [*lines, f"Type: {_type(field.annotation)}. {_what(field)}", ""]
    model, join = held
    shape = {"[].": "A list; each entry takes these keys.", ".<name>.": "A mapping of names to these keys."}
    intro = " ".join(part for part in (_doc(model), shape.get(join, "")) if part)
    return [*lines, intro, "", *_rows(model, ""), ""]


def _rows(model: type[BaseModel], prefix: str, depth: int = 0, *, flat: bool = False) -> list[str]:
    """A table row for each key of `model` and, below it unless `flat`, of the models its keys hold (`prefix` before
    each key)."""
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"] if depth == 0 else []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        kind = _type(field.annotation).replace("|", "\\|")
        rows.append(f"| `{key}` | {kind} | {_default(field).replace('|', '/')} | {_what(field)} |")
        held = _held(field.annotation)
        if held is not None and not flat and depth < 6 and held[0] is not model:
            rows += _rows(held[0], key + held[1], depth + 1)
    return rows


def _what(field: FieldInfo) -> str:
    """What the key does, from its `Field(description=...)`, as one table cell."""
    return " ".join((field.description or "").split()).replace("|", "\\|")


def _held(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The settings model a field holds, and what joins the field's key to the keys under it: `.` for the model
    itself (or an optional one), `[].` for a list of them, `.<name>.` for a mapping of names to them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "."
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _held(arguments[0])
    join = "[]." if origin in (list, tuple, set, frozenset) else ".<name>." if origin is dict else "."
    for argument in arguments[1:] if origin is dict else arguments:
        found = _held(argument)
        if found is not None:
            return found[0], join if found[1] == "." else join.rstrip(".") + found[1]
    return None


def _type(annotation: Any) -> str:
    """A type as a person reads it: `int`, `list of text`, `one of 'off', 'partial'`, `X or none`."""
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
    if annotation is Any:
        return "anything"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type):
        names = {"str": "text", "NoneType": "none", "SecretStr": "secret text"}
        return names.get(annotation.__name__, annotation.__name__)
    return str(annotation)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]
            again = field.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "—"
        if isinstance(value, BaseModel):
            return "(its defaults)"
        if value != again:
            return "made when absent"
        return f"`{value!r}`" if value not in ([], {}) else "empty"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default!r}`"


def _doc(model: type[BaseModel]) -> str:
    return inspect.cleandoc(model.__doc__ or "").replace("\n", " ")


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
