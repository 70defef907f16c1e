"""The tools a process knows: registered by name, listed in registration order, grouped for policies."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tools.base import Tool

if TYPE_CHECKING:
    from tools.cron import JobBook
    from tools.exec import Authorize, ProcessTable
    from tools.message import Messenger, SentLog
    from tools.sessions import SessionBook
    from tools.subagents import Spawner

# The built-in groups a policy may name instead of listing tools. A tool joins a group also through
# its own `Tool.group`, so plugins can add to these or bring groups of their own.
BUILTIN_GROUPS: Mapping[str, tuple[str, ...]] = {
    "group:fs": ("read", "write", "edit", "ls", "find", "grep"),
    "group:runtime": ("exec", "process"),
    "group:web": ("web_fetch", "web_search"),
    "group:messaging": ("message",),
    "group:memory": ("memory_write", "memory_search", "memory_get"),
    "group:automation": ("cron",),
    "group:sessions": ("sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "subagents"),
    "group:mcp": (),  # every MCP server's tools (tools.mcp), which join it themselves
}

# Tool names the product defines even before their implementations are registered; policies that
# name them are not typos.
BUILTIN_TOOL_NAMES: frozenset[str] = frozenset(
    {name for members in BUILTIN_GROUPS.values() for name in members} | {"session_status"}
)

GROUP_PREFIX = "group:"
MCP_GROUP_PREFIX = "mcp:"  # `mcp:<server>`: the tools of one MCP server
# What every provider accepts as a function name (OpenAI's rule is the narrowest).
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_GROUP_NAME = re.compile(r"^(group|mcp):[a-z0-9_-]+$")


def is_group_entry(entry: str) -> bool:
    """Whether a policy entry names a group (`group:fs`, `mcp:github`) rather than tools."""
    return entry.startswith((GROUP_PREFIX, MCP_GROUP_PREFIX))


class ToolSource(Protocol):
    """Tools that come and go while the process runs (the MCP servers'): the registry asks for them each time it is
    read, so every run gets the tools of that moment. A source keeps its tools' names apart from the registry's own
    (`tools.mcp.McpManager.reserve`); a name already taken is skipped here all the same."""

    def current_tools(self) -> Sequence[Tool]: ...

    def group_names(self) -> frozenset[str]: ...


class ToolRegistry:
    """Tool instances by name. Names are unique regardless of case; policies match them case-insensitively."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        """Add `tool`; ValueError if its name is taken or unusable, or its group is not `group:<name>`."""
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ValueError(f"{type(tool).__name__}: tool name {name!r} must be 1-64 letters, digits, _ or -")
        if name.lower() in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        for group in (tool.group, *tool.groups):
            if group is not None and not _GROUP_NAME.match(group):
                raise ValueError(f"tool {name!r}: group {group!r} must look like 'group:<name>' in lowercase")
        self._tools[name.lower()] = tool
        return tool

    def attach(self, source: ToolSource) -> None:
        """Add `source`'s tools, as they are whenever the registry is read, after the registered ones."""
        self._sources.append(source)

    def _current(self) -> dict[str, Tool]:
        """The registered tools, then the sources' tools of this moment (one whose name is taken is skipped)."""
        if not self._sources:
            return self._tools
        tools = dict(self._tools)
        for source in self._sources:
            for tool in source.current_tools():
                tools.setdefault(tool.name.lower(), tool)
        return tools

    def get(self, name: str) -> Tool | None:
        """The tool with this name (any case), or None."""
        return self._current().get(name.lower())

    def __getitem__(self, name: str) -> Tool:
        tool = self.get(name)
        if tool is None:
            raise KeyError(name)
        return tool

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._current()

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._current().values()))

    def __len__(self) -> int:
        return len(self._current())

    def tools(self) -> list[Tool]:
        """Every tool, in registration order (the sources' tools of this moment last)."""
        return list(self._current().values())

    def names(self) -> list[str]:
        """Every tool's name, in registration order (the sources' tools of this moment last)."""
        return [tool.name for tool in self._current().values()]

    def groups_of(self, tool: Tool) -> frozenset[str]:
        """The groups `tool` belongs to: built-in ones that list its name, and its own `Tool.group` and `groups`."""
        name = tool.name.lower()
        groups = {group for group, members in BUILTIN_GROUPS.items() if name in members}
        groups.update(group for group in (tool.group, *tool.groups) if group is not None)
        return frozenset(groups)

    def group_names(self) -> frozenset[str]:
        """Every group a policy may name: the built-in ones, those the tools declare and the sources'."""
        declared = {group for tool in self._current().values() for group in (tool.group, *tool.groups) if group}
        for source in self._sources:
            declared |= source.group_names()
        return frozenset(BUILTIN_GROUPS) | declared

    def members(self, group: str) -> list[str]:
        """The tools in `group`, in registration order."""
        group = group.lower()
        return [tool.name for tool in self._current().values() if group in self.groups_of(tool)]

    def known_names(self) -> frozenset[str]:
        """Tool names a policy may mention without being a typo: the tools' and the built-in ones."""
        return BUILTIN_TOOL_NAMES | frozenset(self._current())


@dataclass(frozen=True)
class ToolSetup:
    """What the application hands a tool plugin: this process's chats (None where no channel runs), the way to
    ask for an approval, and the table of background commands."""

    messenger: Messenger | None
    authorize: Authorize
    processes: ProcessTable
    jobs: JobBook | None = None  # the scheduled jobs the `cron` tool manages (None: no tool where none run)
    sessions: SessionBook | None = None  # the sessions `sessions_list` and `sessions_history` read
    subagents: Spawner | None = None  # children and messages between sessions (a running gateway only)
    sent: SentLog | None = None  # what sessions sent, shared with the gateway's turns and outbox (None: the tool's own)


# A tool plugin (entry point group `switchboard.tools`): builds its tools for one application.
ToolFactory = Callable[[ToolSetup], Iterable[Tool]]
