"""The tools Switchboard ships, registered in one place (later issues add message, exec, fs, web, memory)."""

from __future__ import annotations

from tools.registry import ToolRegistry
from tools.session_status import SessionStatus


def builtin_registry() -> ToolRegistry:
    """A registry holding every built-in tool."""
    return ToolRegistry([SessionStatus()])
