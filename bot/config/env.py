"""`${VAR}` and `${VAR:-default}` in parsed config values, replaced from the environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path as PathLib
from typing import Any

from tools.yaml_tree import Path

__all__ = ["ENV_FILE", "Substitution", "env_file_values", "load_env_file", "substitute_env", "with_env_file"]

# `$${X}` is the escape for a literal `${X}`; names follow the shell's rules.
_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class Substitution:
    """The data with references replaced, which paths used them, and the variables that were unset."""

    data: Any
    from_env: set[Path] = field(default_factory=set)
    values: set[str] = field(default_factory=set)  # what the environment supplied: never repeated in an error
    missing: dict[Path, list[str]] = field(default_factory=dict)


def substitute_env(data: Any, environ: Mapping[str, str]) -> Substitution:
    """Replace references in every string value (never in keys); the result is a new structure."""
    result = Substitution(data=None)
    result.data = _walk(data, (), environ, result)
    return result


def _walk(value: Any, path: Path, environ: Mapping[str, str], result: Substitution) -> Any:
    if isinstance(value, dict):
        return {key: _walk(item, (*path, key), environ, result) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, (*path, index), environ, result) for index, item in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name is None:
            return "${"
        result.from_env.add(path)
        found = environ.get(name)
        if found:
            result.values.add(found)
            return found
        if default is not None:
            return default
        if found is None:
            result.missing.setdefault(path, []).append(name)
        return ""

    return _REFERENCE.sub(replace, value)


ENV_FILE = ".env"


def env_file_values(config_path: str | os.PathLike[str]) -> dict[str, str]:
    """The variables `.env` beside the config sets (none when there is no such file); values without `=` are left
    out. Read with python-dotenv: `KEY=value`, quotes, `export KEY=...` and comments as shells write them."""
    from dotenv import dotenv_values

    file = PathLib(config_path).resolve().parent / ENV_FILE
    if not file.is_file():
        return {}
    return {name: value for name, value in dotenv_values(file).items() if value is not None}


def with_env_file(config_path: str | os.PathLike[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` over `.env`'s variables: a variable the process has wins over the file's."""
    return {**env_file_values(config_path), **environ}


def load_env_file(config_path: str | os.PathLike[str]) -> list[str]:
    """Put `.env`'s variables into this process's environment where it has none of that name (the bot's own
    lookups, the providers' keys and the MCP servers' `env` all read it); the names it set."""
    added = [name for name in env_file_values(config_path).items() if name[0] not in os.environ]
    for name, value in added:
        os.environ[name] = value
    return [name for name, _ in added]
