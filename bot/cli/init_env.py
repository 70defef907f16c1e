"""`bot init`'s secrets written into the `.env` beside the config: mode 0600, the file's other lines kept, a variable
already there replaced in place."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_env"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLAIN = re.compile(r"^[A-Za-z0-9_\-.:/+=@,~]*$")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")


def _line(name: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError(f"the value of {name} holds a line break")
    if _PLAIN.match(value):
        return f"{name}={value}"
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")  # python-dotenv reads \\ and \' in single quotes
    return f"{name}='{escaped}'"


def write_env(path: Path, values: Mapping[str, str]) -> None:
    """Set `values` in the .env at `path`: a variable already assigned there is replaced on its first line (later
    assignments of it dropped, since the last one would win), the others appended; every other line is kept. The
    file is replaced whole, with mode 0600, so no reader ever sees half of it."""
    for name in values:
        if not _NAME.match(name):
            raise ValueError(f"{name!r} is not a variable name")
    old = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    lines: list[str] = []
    done: set[str] = set()
    for line in old:
        match = _ASSIGNMENT.match(line)
        assigned = match.group(1) if match else None
        if assigned is None or assigned not in values:
            lines.append(line)
        elif assigned not in done:
            lines.append(_line(assigned, values[assigned]))
            done.add(assigned)
    lines += [_line(name, value) for name, value in values.items() if name not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".env.", dir=path.parent)  # created with mode 0600
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write("".join(f"{line}\n" for line in lines))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
