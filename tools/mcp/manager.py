"""Every configured MCP server, looked after in the background, and their tools as Switchboard tools: a tool source
the registry asks for the tools of the moment, each named once (a clash is reported, never shadowed)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path

from tools.base import Sleep, Tool
from tools.mcp.naming import tool_name
from tools.mcp.server import McpServer, ServerStatus
from tools.mcp.settings import McpServerSettings
from tools.mcp.tools import MCP_GROUP, mcp_tool
from tools.sandbox import BotFolders
from tools.schema import SchemaDialect, normalize_schema

__all__ = ["McpManager", "render_status"]

log = logging.getLogger(__name__)

_DIALECTS: tuple[SchemaDialect, ...] = ("openai", "anthropic", "gemini")


def _schema_problem(schema: dict[str, object]) -> str | None:
    """Why a server's input schema cannot be offered to every provider, or None."""
    for dialect in _DIALECTS:
        try:
            normalize_schema(schema, dialect)
        except (ValueError, TypeError, KeyError, RecursionError) as error:
            return f"its input schema cannot be offered ({error})"
    return None


class McpManager:
    """The MCP servers of one application. `start()` starts them all in the background; `current_tools()` is what
    they offer now (a `tools.registry.ToolSource`); `status()` is what `bot mcp list` shows. With `hide` (the bot's
    folders) every stdio server runs shielded from the bot, and one that cannot be is not started."""

    def __init__(
        self,
        servers: Mapping[str, McpServerSettings],
        *,
        base_dir: Path,
        hide: BotFolders | None = None,
        unset: Mapping[str, Sequence[str]] | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unset = unset or {}
        self.servers = {
            name: McpServer(
                name, settings, base_dir=base_dir, hide=hide, on_change=self._rebuild, unset=unset.get(name, ()),
                sleep=sleep, clock=clock,
            )
            for name, settings in servers.items()
        }  # fmt: skip
        self._reserved: dict[str, str] = {}  # lowercased name -> the tool of ours that has it
        self._tools: list[Tool] = []
        self._reported: set[tuple[str, str]] = set()

    # --- a tool source ------------------------------------------------------------------------------------------

    def current_tools(self) -> Sequence[Tool]:
        """The tools every running server offers now, in config order, without the ones that clash."""
        return self._tools

    def group_names(self) -> frozenset[str]:
        """`group:mcp` and `mcp:<server>` for every configured server, running or not."""
        return frozenset({MCP_GROUP, *(f"mcp:{name}" for name in self.servers)})

    def reserve(self, names: Iterable[str]) -> None:
        """Names that other tools already have: an MCP tool that would take one is left out and reported."""
        self._reserved.update({name.lower(): name for name in names})
        self._rebuild()

    def _rebuild(self) -> None:
        taken = {key: f"the tool {name!r} of Switchboard or a plugin" for key, name in self._reserved.items()}
        tools: list[Tool] = []
        for server in self.servers.values():
            problems = []
            for listed in server.tools:
                name = tool_name(server.name, listed.name)
                owner = taken.get(name.lower())
                problem = _schema_problem(listed.input_schema)
                if owner is not None:
                    problem = f"its name here, {name!r}, clashes with {owner}"
                if problem is not None:
                    problems.append(f"tool {listed.name!r} is not offered: {problem}")
                    continue
                taken[name.lower()] = f"the tool {listed.name!r} of the MCP server {server.name}"
                tools.append(mcp_tool(server, listed, name))
            server.problems = problems
            for problem in problems:
                if (server.name, problem) not in self._reported:
                    self._reported.add((server.name, problem))
                    log.warning("MCP server %s: %s", server.name, problem)
        self._tools = tools

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every server in the background; nothing waits for any of them."""
        for server in self.servers.values():
            server.start()

    async def settle(self, timeout: float | None = None) -> None:
        """Wait until every server has run or failed once (at most `timeout` seconds; None: each server's own
        startup limit bounds it)."""
        waits = [server.started() for server in self.servers.values()]
        if waits:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*waits)

    async def stop(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(server.stop() for server in self.servers.values()))

    @contextlib.asynccontextmanager
    async def running(self, *, settle: bool = False) -> AsyncIterator[McpManager]:
        """The servers started for the block (and waited for until each ran or failed, with `settle`)."""
        self.start()
        try:
            if settle:
                await self.settle()
            yield self
        finally:
            await self.stop()

    def status(self) -> list[ServerStatus]:
        """Each server's state, last error and tools, in config order."""
        offered: dict[str, list[str]] = {}
        for tool in self._tools:
            offered.setdefault(getattr(tool, "server_name", ""), []).append(tool.name)
        servers = self.servers.items()
        return [dataclasses.replace(server.status(), tools=tuple(offered.get(name, ()))) for name, server in servers]


def render_status(statuses: Sequence[ServerStatus]) -> list[str]:
    """`bot mcp list`: one line per server (name, state, where), why it is not running, the names its tools have
    here, and the tools left out and why."""
    if not statuses:
        return ["No MCP servers are configured (mcp.servers in bindings.yaml)."]
    lines: list[str] = []
    for status in statuses:
        restarts = f", {status.restarts} restart{'s' if status.restarts != 1 else ''}" if status.restarts else ""
        lines.append(f"{status.name}  {status.state}{restarts}  {status.where}")
        if status.error:
            lines.append(f"  why: {status.error}")
        if status.state == "running":
            lines.append(f"  tools ({len(status.tools)}):")
            lines += [f"    {tool}" for tool in status.tools] or ["    (none)"]
        lines += [f"  left out: {problem}" for problem in status.problems]
    return lines
