"""What an MCP server's tool is called here: `<server>__<tool>`, made valid for every provider, and which of a
server's tools its `include`/`exclude` globs offer."""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Sequence

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "offered", "tool_name"]

SEPARATOR = "__"
MAX_TOOL_NAME = 64  # OpenAI's limit, the narrowest of the providers' (tools.registry)
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST = 8


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` with every character a provider refuses replaced by `_`; a name longer than 64 characters
    keeps its beginning and ends in a short hash of the server and tool, so that long names stay apart."""
    name = _INVALID.sub("_", f"{server}{SEPARATOR}{tool}")
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_DIGEST]
    return f"{name[: MAX_TOOL_NAME - _DIGEST - 1]}_{digest}"


def offered(tool: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether the server's tool `tool` (its own name) passes the filters: any `include` glob (none: all), then no
    `exclude` glob."""
    if include and not any(fnmatch.fnmatchcase(tool, glob) for glob in include):
        return False
    return not any(fnmatch.fnmatchcase(tool, glob) for glob in exclude)
