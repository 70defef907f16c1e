"""Our Socket Mode connection: one WebSocket at a time, its ping/stall watchdog, and the backoff between tries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from channels.backoff import FIRST_SECONDS, REAL_TIME, Backoff, Timing
from channels.health import ChannelHealth
from channels.slack.web_api import REFUSED, describe
from channels.start_errors import StartError

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    import aiohttp
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger("channels.slack")  # one logger for the channel, whichever module logs

ABNORMAL_CLOSURE = 1006  # what aiohttp reports for a connection that ended without a close frame
CLOSE_SECONDS = 2.0  # how long closing a connection may take; then the TCP connection is dropped regardless
OPEN_SECONDS = 30.0  # the WebSocket handshake of a new connection
# apps.connections.open is rate-limited per minute: a longer outage is retried about once a minute, never faster.
MAX_BACKOFF_SECONDS = 60.0
REFRESH = "Slack asked for a new connection"
Frames = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]


def _frame(data: Any) -> dict[str, Any]:
    """A text frame as a JSON object; {} for anything else (it reaches the envelope handler, which skips it)."""
    try:
        parsed = json.loads(data) if isinstance(data, str) and data.startswith("{") else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


@dataclass(eq=False)
class _Connection:
    """One Socket Mode WebSocket and what the watchdog knows of it (times on the event loop's clock)."""

    ws: aiohttp.ClientWebSocketResponse
    heard: float  # when Slack last sent anything on it (hello, an envelope, a pong, a ping); its opening at first
    pinged: float
    ended: str | None = None  # why it is done with: Slack closed it, or asked for a new one
    reader: asyncio.Task[None] | None = None


class SocketMode:
    """Slack's Socket Mode: one connection at a time, replaced by our own watchdog when it goes silent.

    Written here on aiohttp rather than taken from slack_sdk's SocketModeClient, because that client keeps two
    keep-alives of its own (aiohttp's heartbeat, which drops a socket whose pong is half an interval late, and a
    monitor that reconnects after four silent ping intervals) and retries forever on its own clock: when a silent
    connection is noticed, replaced and closed would not be ours to say. Here one watchdog decides. A ping goes out
    every `ping_interval`; `stall_seconds` without an envelope or a pong makes the connection `stalled`, and a new
    one is opened (apps.connections.open, a fresh URL) before the old one is closed for good, so at most two are
    ever open (Slack allows an app ten). Each new connection gets a full `stall_seconds`; connections that fail or
    never say hello are spaced by a backoff (1 s doubling up to MAX_BACKOFF_SECONDS, each wait between half and all
    of its step, on `timing`). `health` hears of all of it."""

    def __init__(
        self,
        account: str,
        client: AsyncWebClient,
        app_token: str,
        health: ChannelHealth,
        on_frame: Frames,
        *,
        ping_interval: float,
        stall_seconds: float,
        timing: Timing = REAL_TIME,
    ) -> None:
        self._account = account
        self._client = client
        self._app_token = app_token
        self._health = health
        self._on_frame = on_frame
        self._stall = stall_seconds
        # A quiet but healthy connection must answer at least two pings before it could count as stalled.
        self._ping_every = min(ping_interval, stall_seconds / 2)
        self._session: aiohttp.ClientSession | None = None
        self._current: _Connection | None = None
        self._attempts = 0  # connections opened or tried since the last hello: none, and the next goes at once
        self._backoff = Backoff(FIRST_SECONDS, MAX_BACKOFF_SECONDS, draw=timing.draw)
        self._sleep = timing.sleep
        self._wake = asyncio.Event()  # a reader saw its connection end
        self._watchdog: asyncio.Task[None] | None = None
        self._frames: set[asyncio.Task[None]] = set()  # envelopes being handled
        self._closed = False

    async def start(self) -> None:
        """Open the first connection and start the watchdog. An app token Slack refuses raises ChannelError; any other
        failure leaves the account degraded and the watchdog retrying."""
        import aiohttp
        from slack_sdk.errors import SlackApiError

        self._session = aiohttp.ClientSession()
        try:
            self._current = await self._open()
        except SlackApiError as error:
            if error.response.get("error") in REFUSED:
                await self.close()
                where = f"channels.slack.accounts.{self._account}.app_token"
                fix = f"an app-level token (xapp-…) with connections:write goes in {where}"
                reason = f"apps.connections.open refused the app token: {describe(error)}: {fix}"
                raise StartError("slack", self._account, "refused", reason) from None
            self._health.set("degraded", f"opening a Socket Mode connection failed: {describe(error)}")
        except Exception as error:
            self._health.set("degraded", f"opening a Socket Mode connection failed: {describe(error)}")
        self._watchdog = asyncio.create_task(self._watch(), name=f"slack {self._account} socket watchdog")

    async def close(self) -> None:
        """Stop the watchdog, let the envelopes being handled finish (5 s at most), close the connection."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.wait([self._watchdog])
        if self._frames:
            _, late = await asyncio.wait(self._frames, timeout=5)
            for task in late:
                task.cancel()
        if self._current is not None:
            await self._close(self._current)
        if self._session is not None:
            await self._session.close()

    async def send(self, text: str) -> None:
        """One frame (an envelope's ack) on the current connection; ConnectionError if there is none open."""
        current = self._current
        if current is None or current.ws.closed:
            raise ConnectionError("no Socket Mode connection is open")
        await current.ws.send_str(text)

    # --- the watchdog ---------------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            self._wake.clear()
            current = self._current
            if current is None or current.ended is not None:
                if current is not None and current.ended != REFRESH:
                    self._health.set("degraded", current.ended)
                await self._replace(current)
                continue
            silent = loop.time() - current.heard
            if silent >= self._stall:
                self._health.set("stalled", f"no envelope or pong for {silent:.0f} s")
                await self._replace(current)
                continue
            if loop.time() - current.pinged >= self._ping_every:
                await self._ping(current)
            due = min(current.pinged + self._ping_every, current.heard + self._stall)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(due - loop.time(), 0.0)):
                    await self._wake.wait()

    async def _ping(self, connection: _Connection) -> None:
        connection.pinged = asyncio.get_running_loop().time()
        try:
            await connection.ws.ping(b"switchboard")
        except Exception as error:  # a socket that cannot send is done with, whatever the reason
            connection.ended = connection.ended or f"a ping could not be sent: {describe(error)}"

    async def _replace(self, old: _Connection | None) -> None:
        """A new connection (after the backoff its predecessors earned) in place of `old`, which is then closed for
        good: it stays open until the new one is, so never more than two at once and no gap between them."""
        if self._attempts > 0:
            await self._sleep(self._backoff.next())
        try:
            new = await self._open()
        except Exception as error:  # the watchdog outlives every failure; the next try waits longer
            self._health.set("degraded", f"opening a Socket Mode connection failed: {describe(error)}")
            return
        self._current = new
        if old is not None:
            if old.ended != REFRESH:
                self._health.reconnected()
            await self._close(old)

    # --- one connection -------------------------------------------------------------------------------------------

    async def _open(self) -> _Connection:
        """apps.connections.open for a fresh URL, then the WebSocket to it, without aiohttp's own keep-alive."""
        assert self._session is not None
        self._attempts += 1
        opened = await self._client.apps_connections_open(app_token=self._app_token)
        ssl = self._client.ssl if self._client.ssl is not None else True
        proxy = self._client.proxy or None
        async with asyncio.timeout(OPEN_SECONDS):
            ws = await self._session.ws_connect(
                str(opened["url"]), autoping=False, heartbeat=None, proxy=proxy, ssl=ssl
            )
        now = asyncio.get_running_loop().time()
        connection = _Connection(ws, heard=now, pinged=now)
        connection.reader = asyncio.create_task(self._read(connection), name=f"slack {self._account} socket")
        return connection

    async def _read(self, connection: _Connection) -> None:
        """Every frame of one connection until it closes; envelopes are handled in tasks of their own, so a slow
        hand-over never holds up the pongs."""
        from aiohttp import WSMsgType

        loop = asyncio.get_running_loop()
        try:
            while True:
                message = await connection.ws.receive()
                if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                    code = connection.ws.close_code
                    reason = f"Slack closed the connection (code {code})"
                    if code in (None, ABNORMAL_CLOSURE):
                        reason = "the connection dropped without a close frame"
                    break
                connection.heard = loop.time()
                self._health.heard()
                if message.type is WSMsgType.PING:
                    await connection.ws.pong(message.data)
                elif message.type is WSMsgType.TEXT:
                    self._text(connection, _frame(message.data))
        except Exception as error:
            reason = f"the connection failed: {describe(error)}"
        connection.ended = connection.ended or reason
        self._wake.set()

    def _text(self, connection: _Connection, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "hello":
            self._attempts = 0
            self._backoff.reset()
            self._health.set("connected")
        elif kind == "disconnect":
            log.info("slack %s: Slack asked for a new connection (%s)", self._account, frame.get("reason"))
            connection.ended = connection.ended or REFRESH
            self._wake.set()
        else:
            task = asyncio.create_task(self._on_frame(frame))
            self._frames.add(task)
            task.add_done_callback(self._frame_done)

    def _frame_done(self, task: asyncio.Task[None]) -> None:
        self._frames.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("slack %s: a Socket Mode frame could not be handled: %r", self._account, task.exception())

    async def _close(self, connection: _Connection) -> None:
        """Close a connection for good: its reader stopped, a close frame sent and the TCP connection dropped, within
        CLOSE_SECONDS whatever the other end does (a stalled one answers nothing)."""
        connection.ended = connection.ended or "closed"
        if connection.reader is not None:
            connection.reader.cancel()
            await asyncio.wait([connection.reader])
        with contextlib.suppress(Exception):  # aiohttp drops the connection when the close is cut short
            async with asyncio.timeout(CLOSE_SECONDS):
                await connection.ws.close()
