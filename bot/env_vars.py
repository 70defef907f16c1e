"""`${VAR}` and `${VAR:-default}` in parsed config values, replaced from the environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tools.yaml_tree import Path

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
