"""One MCP server looked after: started in the background, its tools listed (again on `tools/list_changed`),
restarted with backoff when it stops, and its calls made with a time limit. Its state and last error are kept."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from routing.errors import ToolError
from tools.base import Sleep
from tools.mcp.naming import offered
from tools.mcp.settings import McpServerSettings
from tools.sandbox import BotFolders, shield_problem

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.client.session import IncomingMessage
    from mcp.types import CallToolResult, Tool as ListedTool

    from tools.mcp.connection import StderrTail

__all__ = ["BACKOFF_MAX", "BACKOFF_START", "McpCallError", "McpServer", "ServerStatus", "State"]

log = logging.getLogger(__name__)

State = Literal["starting", "running", "restarting", "failed", "stopped"]

BACKOFF_START = 1.0  # seconds before the first restart; doubled after each failure in a row
BACKOFF_MAX = 300.0
STABLE_SECONDS = 60.0  # a server that ran this long starts its backoff over when it stops
MAX_LIST_PAGES = 100  # a server whose tool listing never ends is cut off here
REDACTED = "<redacted>"


class McpCallError(ToolError):
    """A call that got no answer: the server is not running, timed out, went away, or broke the protocol."""


@dataclass(frozen=True)
class ServerStatus:
    """A server as `bot mcp list` shows it."""

    name: str
    where: str  # the command line or URL
    state: State
    error: str | None  # why it is not running (the last failure)
    tools: tuple[str, ...]  # the names its tools have here (McpManager.status: without those left out)
    restarts: int  # how often it stopped after running and was started again
    problems: tuple[str, ...] = field(default=())  # tools left out and why (a clash, an unusable schema)


def _innermost(error: BaseException) -> BaseException:
    """The first error inside a group (anyio's task groups wrap errors), or the error itself."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _reason(error: BaseException) -> str:
    """One line for an exception (the first inside a group)."""
    error = _innermost(error)
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class McpServer:
    """A supervised MCP server. `start()` returns at once; `tools` holds what it offers while it runs; `call()`
    calls one of its tools. `on_change` is called whenever `tools` changes."""

    def __init__(
        self,
        name: str,
        settings: McpServerSettings,
        *,
        base_dir: Path,
        hide: BotFolders | None = None,
        on_change: Callable[[], None] = lambda: None,
        unset: Sequence[str] = (),
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.settings = settings
        self.base_dir = base_dir
        # The bot's folders: a stdio server runs shielded from them and from the bot's processes, like a command;
        # None only where no bot is around (a manager used on its own).
        self.hide = hide
        self.on_change = on_change
        self.unset = list(unset)
        self.state: State = "stopped"
        self.error: str | None = None
        self.tools: list[ListedTool] = []
        self.problems: list[str] = []  # filled by whoever turns `tools` into Switchboard tools
        self.restarts = 0
        self._sleep = sleep
        self._clock = clock
        self._session: ClientSession | None = None
        self._wake = asyncio.Event()  # the connection ended, or the tool list changed
        self._relist = False
        self._lost: str | None = None  # a call found the connection broken
        self._scope: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_attempt = asyncio.Event()  # set once the first start has run or failed

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start looking after the server in the background (a server whose variables are unset never starts)."""
        if self._task is not None:
            return
        if self.unset:
            names = ", ".join(f"${{{name}}}" for name in self.unset)
            self._fail(f"environment variable {names} is not set")
            log.warning("MCP server %s not started: %s", self.name, self.error)
            return
        self.state = "starting"
        self._task = asyncio.create_task(self._supervise(), name=f"mcp {self.name}")

    async def started(self) -> None:
        """Wait until the first start has run or failed."""
        await self._first_attempt.wait()

    async def stop(self) -> None:
        """Stop the server (a stdio one is asked to exit, then killed) and stop restarting it."""
        task, self._task = self._task, None
        if task is not None:
            if self._scope is not None:
                self._scope.cancel()
            else:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.state = "stopped"
        self._set_tools([])

    def status(self) -> ServerStatus:
        names = tuple(tool.name for tool in self.tools)  # the server's own names
        shown_error = self.error if self.state != "running" else None
        return ServerStatus(
            self.name, self.settings.where, self.state, shown_error, names, self.restarts, tuple(self.problems)
        )

    def _fail(self, error: str) -> None:
        self.state, self.error = "failed", self._redact(error)
        self._first_attempt.set()

    def _redact(self, text: str) -> str:
        for secret in sorted(self.settings.secret_values(), key=len, reverse=True):
            if len(secret) >= 6:  # as the log redaction: shorter values would blot out ordinary words
                text = text.replace(secret, REDACTED)
        return text

    async def _supervise(self) -> None:
        failures = 0
        with anyio.CancelScope() as self._scope:
            while True:
                began = self._clock()
                was_running, reason = await self._run_once()
                self._set_tools([])
                if was_running and self._clock() - began >= STABLE_SECONDS:
                    failures = 0
                failures += 1
                delay = min(BACKOFF_START * 2 ** (failures - 1), BACKOFF_MAX)
                if was_running:
                    self.state, self.error = "restarting", self._redact(reason)
                    self.restarts += 1
                    log.warning("MCP server %s stopped (%s); restarting in %g s", self.name, self.error, delay)
                else:
                    first = self.state == "starting"
                    self._fail(reason)
                    # One line for a server that will not start; the retries that follow fail quietly.
                    (log.warning if first else log.debug)(
                        "MCP server %s will not start: %s (its tools are left out; trying again in %g s)",
                        self.name, self.error, delay,
                    )  # fmt: skip
                await self._sleep(delay)

    async def _run_once(self) -> tuple[bool, str]:
        """One life of the server: connect, list its tools, serve until it ends. (whether it ran, why it ended)."""
        stderr: StderrTail | None = None
        running = False
        self._lost, self._relist = None, False
        self._wake.clear()
        shielded = self.settings.kind == "stdio" and self.hide is not None
        problem = await shield_problem() if shielded else None
        if problem is not None:  # never started bare instead
            return False, f"cannot start it apart from the bot: {problem}"
        try:
            from tools.mcp.connection import StderrTail, connect  # the SDK: imported once a server starts

            stderr = StderrTail(self.name) if self.settings.kind == "stdio" else None
            opened = connect(self.name, self.settings, self.base_dir, self._on_message, stderr, self.hide)
            async with opened as connection:
                session = connection.session
                await self._list(session)
                self._session, running = session, True
                self.state, self.error = "running", None
                self._first_attempt.set()
                log.info("MCP server %s running (%d tools)", self.name, len(self.tools))
                reason = await self._serve(session, connection.ended)
        except Exception as error:
            reason = self._start_failure(error) if not running else _reason(error)
        finally:
            self._session = None
            if stderr is not None:
                with anyio.CancelScope(shield=True):  # also when stopping: the reader task must not be left behind
                    await stderr.close()
        return running, _with_stderr(reason, stderr) + ("" if running else self._cwd_hint())

    def _cwd_hint(self) -> str:
        """Why a server that would not start missed a file it names: the file is in its cwd, one of the bot's own
        folders, which it does not see."""
        from tools.mcp.connection import server_cwd

        settings, cwd = self.settings, server_cwd(self.settings, self.base_dir)
        if settings.command is None or self.hide is None or not self.hide.hides(str(cwd)):
            return ""
        missed = [
            word for word in (settings.command, *settings.args) if not os.path.isabs(word) and (cwd / word).is_file()
        ]
        if not missed:
            return ""
        return (
            f" ({missed[0]} is in {cwd}, the bot's own folder, which MCP servers do not see: put the server's files in "
            "a folder of their own and set its cwd there)"
        )

    def _start_failure(self, failure: Exception) -> str:
        """Why a start failed, in words: the SDK's errors for these two say little."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        error = _innermost(failure)

        if isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT:
            return f"no answer within {self.settings.startup_timeout_seconds:g} s (startup_timeout_seconds)"
        if isinstance(error, MCPError) and error.code == CONNECTION_CLOSED:
            return "the server closed the connection while starting"
        return _reason(error)

    async def _serve(self, session: ClientSession, ended: asyncio.Event) -> str:
        """Wait for the connection to end, listing the tools again whenever the server says they changed."""
        watcher = asyncio.create_task(_forward(ended, self._wake))
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if ended.is_set():
                    return "the server closed the connection"
                if self._lost is not None:
                    return self._lost
                if self._relist:
                    self._relist = False
                    await self._list(session)
        finally:
            watcher.cancel()

    async def _list(self, session: ClientSession) -> None:
        from mcp.types import PaginatedRequestParams

        found: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            found += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        settings = self.settings
        self._set_tools([tool for tool in found if offered(tool.name, settings.include, settings.exclude)])

    def _set_tools(self, tools: list[ListedTool]) -> None:
        if not tools and not self.tools:
            return
        self.tools = tools
        self.on_change()

    async def _on_message(self, message: IncomingMessage) -> None:
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._relist = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport error: %s", self.name, _reason(message))

    # --- calls --------------------------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call the server's tool `tool`; McpCallError when no result comes (the reason in its message). Past
        `timeout_seconds` the SDK sends the server a cancellation; so does a run that is stopped meanwhile."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        session = self._session
        if session is None or self.state != "running":
            why = f": {self.error}" if self.error else ""
            raise McpCallError(f"the MCP server {self.name} is not running ({self.state}{why}); try again later")
        timeout = self.settings.timeout_seconds
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as error:
            if error.code == REQUEST_TIMEOUT:
                raise McpCallError(
                    f"timed out after {timeout:g} s; the call was cancelled on the MCP server {self.name}"
                ) from None
            if error.code == CONNECTION_CLOSED:
                self._connection_lost("the connection closed during a call")
                raise McpCallError(
                    f"the MCP server {self.name} stopped during the call (it is being restarted); the call may or "
                    "may not have taken effect"
                ) from None
            raise McpCallError(f"the MCP server {self.name} refused the call: {self._redact(error.message)}") from None
        except ValidationError:
            raise McpCallError(f"the MCP server {self.name} answered with a malformed result") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
            self._connection_lost(_reason(error))
            raise McpCallError(f"the connection to the MCP server {self.name} broke: {_reason(error)}") from None
        except RuntimeError as error:  # e.g. the server asked for input a tool call cannot give
            raise McpCallError(f"the MCP server {self.name}: {self._redact(_reason(error))}") from None

    def _connection_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
        self._wake.set()


async def _forward(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


def _with_stderr(reason: str, stderr: StderrTail | None) -> str:
    last = stderr.last() if stderr is not None else None
    return f"{reason}; its last line on stderr: {last}" if last else reason
