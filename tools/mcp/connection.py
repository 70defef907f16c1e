"""One connection to an MCP server on the official SDK: the stdio process (shielded from the bot like a command, an
environment built from scratch, its stderr kept for the reason it stopped) or the remote URL, the initialized
session, and a signal when it ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp.types import Implementation

from tools.exec import base_environment
from tools.mcp.settings import McpServerSettings
from tools.sandbox import BotFolders, shield

if TYPE_CHECKING:
    from mcp.client.session import MessageHandlerFnT

__all__ = ["Connection", "StderrTail", "connect", "server_cwd", "server_environment"]

log = logging.getLogger(__name__)

CLIENT = Implementation(name="switchboard", version="0.1.0")
STDERR_LINES = 20  # kept per start: the last of them say why a server stopped
_READ_CHUNK = 4096


def server_environment(settings: McpServerSettings) -> dict[str, str]:
    """A stdio server's whole environment: the few harmless variables every command gets (PATH, HOME, the locale;
    tools.exec), then its own `env`. Nothing else of the bot's: no token or key reaches it unless written there."""
    return base_environment() | settings.env


class StderrTail:
    """A pipe for a stdio server's stderr, read as it comes: the last lines are kept (the server's own words for why
    it stopped) and each is logged at debug level."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines: deque[str] = deque(maxlen=STDERR_LINES)
        read_fd, write_fd = os.pipe()
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin reading; call once the process holds its own copy of the pipe (then ours is closed)."""
        self.writer.close()
        self._task = asyncio.create_task(self._read(), name=f"mcp {self.server} stderr")

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self._reader)
        pending = ""
        try:
            while chunk := await reader.read(_READ_CHUNK):
                *lines, pending = (pending + chunk.decode(errors="replace")).split("\n")
                for line in lines:
                    self._keep(line)
            self._keep(pending)
        finally:
            transport.close()

    def _keep(self, line: str) -> None:
        if line.strip():
            self.lines.append(line.rstrip()[:500])
            log.debug("mcp %s: %s", self.server, line.rstrip())

    def last(self) -> str | None:
        """The last line the server wrote to stderr, if any."""
        return self.lines[-1] if self.lines else None

    async def close(self) -> None:
        """Stop reading (what was read stays in `lines`)."""
        if not self.writer.closed:
            self.writer.close()
        if self._task is None:
            self._reader.close()
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await self._task


@dataclass
class Connection:
    """An initialized session with the server, and the event set when the server's side of it has ended."""

    session: ClientSession
    ended: asyncio.Event


def server_cwd(settings: McpServerSettings, base_dir: Path) -> Path:
    """The folder a stdio server starts in: its `cwd`, taken from the config's folder, which is the default."""
    return base_dir / Path(settings.cwd).expanduser() if settings.cwd else base_dir


def _stdio(name: str, settings: McpServerSettings, base_dir: Path, stderr: StderrTail, hide: BotFolders | None) -> Any:
    """The SDK's stdio client for the server; under the shield (tools.sandbox) when `hide` names the bot's folders."""
    assert settings.command is not None
    cwd = server_cwd(settings, base_dir)
    argv = [settings.command, *settings.args]
    if hide is not None:
        argv = shield(argv, str(cwd), hide).argv
    parameters = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(settings), cwd=cwd)
    return stdio_client(parameters, errlog=stderr.writer)


def _remote(settings: McpServerSettings) -> Any:
    assert settings.url is not None
    headers = dict(settings.headers)
    if settings.kind == "sse":
        return sse_client(settings.url, headers=headers, timeout=settings.startup_timeout_seconds)
    # The SDK's own timeouts for streamable HTTP: 30 s to connect or send, 5 minutes for a response stream to speak.
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    return _owned_client(client, streamable_http_client(settings.url, http_client=client))


@contextlib.asynccontextmanager
async def _owned_client(client: Any, transport: Any) -> AsyncIterator[Any]:
    """`transport` with the HTTP client it was given, closed after it."""
    async with client, transport as streams:
        yield streams


@contextlib.asynccontextmanager
async def connect(
    name: str,
    settings: McpServerSettings,
    base_dir: Path,
    on_message: MessageHandlerFnT,
    stderr: StderrTail | None,
    hide: BotFolders | None,
) -> AsyncIterator[Connection]:
    """Start (stdio; shielded from the bot when `hide` names its folders: call `shield_problem` first) or reach
    (remote) the server and initialize a session; `startup_timeout_seconds` bounds the handshake. The session's read
    stream passes through a pump that sets `ended` when the server's side closes, which the SDK does not otherwise
    tell."""
    ended = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        if settings.command is not None:
            assert stderr is not None
            read, write = await stack.enter_async_context(_stdio(name, settings, base_dir, stderr, hide))
            stderr.start()
        else:
            read, write = await stack.enter_async_context(_remote(settings))
        forward, pumped = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def pump() -> None:
            try:
                async with forward:
                    async for item in read:
                        await forward.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            finally:
                ended.set()

        group = await stack.enter_async_context(anyio.create_task_group())
        group.start_soon(pump)
        stack.callback(group.cancel_scope.cancel)  # runs after the session closes, before the transport does
        session = await stack.enter_async_context(
            ClientSession(
                pumped,
                write,
                read_timeout_seconds=settings.startup_timeout_seconds,
                message_handler=on_message,
                client_info=CLIENT,
            )
        )
        await session.initialize()
        yield Connection(session, ended)
