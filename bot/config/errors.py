"""Config errors as people read them: `file:line: key.path: message`, with a suggestion for typos."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from routing.errors import SwitchboardError

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "Loc",
    "describe",
    "format_path",
    "issues_from_validation",
]

Loc = tuple[str | int, ...]
_PYDANTIC_STEP = re.compile(r"^(\[key\]|function-(before|after|wrap|plain)\[.*\])$")

_PLAIN_MESSAGES = {
    "missing": "required key is missing",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "float_parsing": "must be a number",
    "list_type": "must be a list",
    "dict_type": "must be a mapping of keys to values",
    "model_type": "must be a mapping of keys to values",
    "model_attributes_type": "must be a mapping of keys to values",
}


_DID_YOU_MEAN = re.compile(r"did you mean '([^']*)'\?")


@dataclass(frozen=True)
class ConfigIssue:
    """One thing wrong with a config file: where (line, column for YAML syntax, key path) and what.

    `fatal` False marks an error the bot works around when it starts (an account whose token variable is unset is
    skipped; an agent whose model key is missing answers with that error): `bot config check` still fails on it."""

    line: int | None
    path: str
    message: str
    column: int | None = None
    file: str | None = None
    fatal: bool = True

    @property
    def did_you_mean(self) -> str | None:
        """The suggestion the message makes for a typo, if any."""
        found = _DID_YOU_MEAN.search(self.message)
        return found.group(1) if found else None

    def render(self, file: str | None = None) -> str:
        """`file:line: key.path: message` (`file:line:column: message` for YAML syntax)."""
        name = file if file is not None else (self.file or "")
        where = name if self.line is None else f"{name}:{self.line}"
        where += f":{self.column}" if self.line is not None and self.column is not None else ""
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(SwitchboardError):
    """A config file that cannot be used; `issues` holds every problem found, in file order."""

    def __init__(self, file: str, issues: Sequence[ConfigIssue]) -> None:
        self.file = file
        self.issues = sorted(issues, key=lambda issue: (issue.line or 0, issue.path))
        super().__init__("\n".join(issue.render(file) for issue in self.issues))


def format_path(loc: Iterable[str | int]) -> str:
    """`("bindings", 2, "match")` -> `bindings[2].match`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def describe(error: ErrorDetails, root: type[BaseModel]) -> str:
    """A short message for one pydantic error, never echoing the value (it may hold a secret)."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown_key(error["loc"], root)
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"must be one of {expected}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind in _PLAIN_MESSAGES:
        return _PLAIN_MESSAGES[kind]
    message = error["msg"]
    return message[:1].lower() + message[1:]


def issues_from_validation(
    error: ValidationError, root: type[BaseModel], line_of: Any, at: Loc = ()
) -> list[ConfigIssue]:
    """Turn a pydantic ValidationError into issues; `line_of(loc)` finds the line of a key path, and `at` is where
    in the file the model `root` was validated (the top when empty)."""
    issues = []
    for detail in error.errors(include_url=False, include_input=False):
        loc = (*at, *_clean_loc(detail["loc"]))
        issues.append(ConfigIssue(line_of(loc), format_path(loc), describe(detail, root)))
    return issues


def _clean_loc(loc: tuple[str | int, ...]) -> Loc:
    # pydantic adds its own steps to a loc: `[key]` for a bad dict key, `function-after[...]` and the
    # like for wrapped validators. They are not keys of the file.
    return tuple(part for part in loc if not (isinstance(part, str) and _PYDANTIC_STEP.match(part)))


def _unknown_key(loc: Loc, root: type[BaseModel]) -> str:
    key = str(loc[-1])
    valid = _keys_at(_clean_loc(loc[:-1]), root)
    if not valid:
        return "unknown key"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key; valid keys are {', '.join(valid)}"


def _keys_at(loc: Loc, root: type[BaseModel]) -> list[str]:
    """The keys the model at `loc` accepts, found by walking the type annotations from `root`."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return []
            current = field.annotation
        elif get_origin(current) in (list, tuple):
            current = get_args(current)[0]
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip `Annotated[...]` and `X | None` down to the type that holds keys."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            annotation = members[0] if len(members) == 1 else annotation
            if len(members) != 1:
                return annotation
        else:
            return annotation
