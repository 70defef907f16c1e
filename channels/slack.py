"""The Slack channel: one workspace bot on slack-bolt's AsyncApp, over Socket Mode (default: our own connection with a
watchdog) or HTTP Events, normalizing events into InboundMessage/ActionEvent and sending through the Web API with
Block Kit buttons and files."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import random
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from pydantic import ValidationError

from channels.accounts import SlackAccount
from channels.backoff import FIRST_SECONDS, REAL_TIME, Backoff, Timing
from channels.base import (
    NOTICE_BUDGET_SECONDS,
    ActionEvent,
    Attachment,
    AttachmentKind,
    Button,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundFile,
    OutboundMessage,
    within,
)
from channels.health import ChannelHealth
from channels.markup_slack import markdown_to_mrkdwn
from channels.start_errors import StartError, mask, not_found, refused, unreachable, why_unreachable
from routing import Peer
from routing.errors import ChannelError

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    import aiohttp
    from aiohttp import web
    from slack_bolt.app.async_app import AsyncApp
    from slack_bolt.context.ack.async_ack import AsyncAck
    from slack_bolt.request.async_request import AsyncBoltRequest
    from slack_bolt.response import BoltResponse
    from slack_sdk.http_retry.async_handler import AsyncRetryHandler
    from slack_sdk.http_retry.request import HttpRequest
    from slack_sdk.http_retry.response import HttpResponse
    from slack_sdk.http_retry.state import RetryState
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 1024**3  # Slack's limit for one file (slack_sdk's MAX_V2_FILE_SIZE says the same)
MAX_CAPTION = 4000  # files.completeUploadExternal's initial_comment
CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,
    polls=False,  # Slack has no native polls
    files=True,
    max_upload_bytes=MAX_UPLOAD_BYTES,
    max_caption_length=MAX_CAPTION,
    max_text_length=3000,
    markup="slack-mrkdwn",
    streaming=True,
    edit_interval_seconds=1.0,
)
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_ACTIONS_PER_BLOCK = 25
MAX_BUTTON_LABEL = 75
MAX_BUTTON_VALUE = 2000
ACK_BUDGET_SECONDS = 2.5  # Slack wants an ack within 3 s; a slower hand-over finishes after the ack
DEFAULT_API_BASE_URL = "https://slack.com"
SLACK_FILE_HOST = ("https", "files.slack.com", 443)  # where url_private points; the only host besides the API's
CHUNK_BYTES = 64 * 1024
MAX_REDIRECTS = 5
MAX_FILES_PER_MESSAGE = 10  # files shared together in one message by one files.completeUploadExternal
SHARE_PAUSES = (0.0, 0.5, 1.0, 2.0)  # files.info is asked for the share's ts after these pauses (Slack shares late)
_REDIRECTS = {301, 302, 303, 307, 308}
_PORTS = {"http": 80, "https": 443}
_KINDS: dict[str, AttachmentKind] = {"image": "image", "audio": "audio", "video": "video"}
# Message subtypes that are something someone said; the rest (edits, deletions, joins ...) are not messages to answer.
_SAID = {None, "bot_message", "thread_broadcast", "file_share", "me_message"}
_EMOJI_NAMES = {
    "👍": "thumbsup",
    "👎": "thumbsdown",
    "✅": "white_check_mark",
    "❌": "x",
    "👀": "eyes",
    "❤️": "heart",
    "❤": "heart",
    "🎉": "tada",
    "😂": "joy",
    "🔥": "fire",
    "🤔": "thinking_face",
    "⏳": "hourglass_flowing_sand",
    "🙏": "pray",
    "👋": "wave",
    "⚠️": "warning",
    "🚀": "rocket",
    "💯": "100",
    "😊": "blush",
    "🙂": "slightly_smiling_face",
}


@dataclass
class _HandOver:
    """What became of one request: Bolt's response, and whether the gateway failed to take its message."""

    response: BoltResponse | None = None
    failed: bool = False


_HAND_OVER: contextvars.ContextVar[_HandOver | None] = contextvars.ContextVar("slack_hand_over", default=None)


class _Seen:
    """The last few thousand keys, to drop the second delivery of one message (`message` + `app_mention`)."""

    def __init__(self, size: int = 4096) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def add(self, key: str) -> bool:
        """True if the key is new."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True

    def discard(self, key: str) -> None:
        self._keys.pop(key, None)


def api_url(base: str | None) -> str:
    """The Web API root for `api_base_url` (a server root, as for the other channels)."""
    return (base or DEFAULT_API_BASE_URL).rstrip("/") + "/api/"


def _rate_limit_retries(sleep: Callable[[float], Awaitable[None]]) -> AsyncRetryHandler:
    """slack_sdk's retry of a 429 (three times at most, each after Retry-After seconds and up to one more), waiting
    with `sleep`."""
    from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler

    class RateLimitRetries(AsyncRateLimitErrorRetryHandler):
        async def prepare_for_next_attempt_async(
            self,
            *,
            state: RetryState,
            request: HttpRequest,
            response: HttpResponse | None = None,
            error: Exception | None = None,
        ) -> None:
            if response is None:
                raise error or RuntimeError("slack: a retry without a response")
            state.next_attempt_requested = True
            retry_after = next((value for name, value in response.headers.items() if name.lower() == "retry-after"), [])
            await sleep((int(retry_after[0]) if retry_after else 1) + random.random())
            state.increment_current_attempt()

    return RateLimitRetries(max_retry_count=3)


def _web_client(
    settings: SlackAccount, health: ChannelHealth, sleep: Callable[[float], Awaitable[None]]
) -> AsyncWebClient:
    """slack_sdk's Web API client at `api_base_url`, retrying dropped connections and 429s, telling `health` how each
    call went: reached when Slack answered (with an error too, which is remembered), failed when it could not be."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
    from slack_sdk.web.async_client import AsyncWebClient
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

    class ReportingClient(AsyncWebClient):
        async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
            try:
                response = await super().api_call(api_method, **kwargs)
            except SlackApiError as error:
                health.reached()
                health.failed(f"{api_method}: {_describe(error)}")
                raise
            except Exception as error:
                health.failed(f"{api_method}: {_describe(error)}")
                raise
            health.reached()
            return response

    return ReportingClient(
        token=settings.bot_token.get_secret_value(),
        base_url=api_url(settings.api_base_url),
        retry_handlers=[AsyncConnectionErrorRetryHandler(), _rate_limit_retries(sleep)],
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _file_kind(file: dict[str, Any]) -> AttachmentKind:
    """image, audio or video by the mimetype's type; a clip recorded in Slack's audio recorder (subtype
    `slack_audio`) is a voice note whatever its mimetype; anything else is a document."""
    if file.get("subtype") == "slack_audio":
        return "voice"
    return _KINDS.get((_text(file.get("mimetype")) or "").split("/")[0], "document")


def _attachment(file: Any) -> Attachment | None:
    """One file of a message; None for a file with nothing to fetch from Slack (deleted, hidden by the free plan's
    limit, stored elsewhere, or a Slack Connect file whose details need files.info)."""
    if not isinstance(file, dict) or file.get("is_external"):
        return None
    ref = _text(file.get("url_private")) or _text(file.get("url_private_download"))
    if ref is None:
        log.debug("slack: file %s without url_private (mode %r) skipped", file.get("id"), file.get("mode"))
        return None
    size, duration = file.get("size"), file.get("duration_ms")
    return Attachment(
        kind=_file_kind(file),
        ref=ref,
        name=_text(file.get("name")),
        mime_type=_text(file.get("mimetype")),
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        duration=duration / 1000 if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
    )


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or _PORTS[parts.scheme]


def file_origins(api_base_url: str | None) -> frozenset[tuple[str, str, int]]:
    """The origins the bot token may be sent to for a file: Slack's file host (files.slack.com), `files.` + the API
    host (files.slack-gov.com for slack-gov.com), and the API host itself (where a proxy or a test fake serves
    files): all servers that already get the token or are Slack's own."""
    api = _origin(api_url(api_base_url))
    if api is None:
        return frozenset({SLACK_FILE_HOST})
    return frozenset({SLACK_FILE_HOST, api, (api[0], f"files.{api[1]}", api[2])})


def _share_ts(file: Any, channel: str) -> str | None:
    """The ts of the message that shared `file` in `channel`, from the file's `shares` (public or private)."""
    shares = file.get("shares") if isinstance(file, dict) else None
    for scope in ("public", "private"):
        places = shares.get(scope) if isinstance(shares, dict) else None
        entries = places.get(channel) if isinstance(places, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and _text(entry.get("ts")):
                return str(entry["ts"])
    return None


async def _file_chunks(path: str) -> AsyncIterator[bytes]:
    """A file on disk, CHUNK_BYTES at a time."""
    import aiofiles

    async with aiofiles.open(path, "rb") as file:
        while chunk := await file.read(CHUNK_BYTES):
            yield chunk


def _transfer_timeout() -> aiohttp.ClientTimeout:
    """No limit on a whole transfer (a large file takes its time), but on connecting and on each read."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)


def _refuse_download(response: aiohttp.ClientResponse, attachment: Attachment, what: str) -> None:
    """ChannelError (the response released) for an HTTP error, a redirect without a Location, or a web page instead
    of the file: Slack answers with its sign-in page when the token may not read files."""
    problem = None
    if response.status >= 300:
        problem = f"HTTP {response.status}"
    elif response.content_type == "text/html" and attachment.mime_type != "text/html":
        problem = "Slack answered with its sign-in page: the bot token needs the files:read scope"
    if problem is not None:
        response.release()
        raise ChannelError(f"{what} could not be downloaded: {problem}")


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _button(button: Button, row: int, column: int) -> dict[str, Any]:
    label = button.label if len(button.label) <= MAX_BUTTON_LABEL else button.label[: MAX_BUTTON_LABEL - 1] + "…"
    if len(button.value) > MAX_BUTTON_VALUE:
        raise ValueError(f"button value is {len(button.value)} characters; Slack allows {MAX_BUTTON_VALUE}")
    element: dict[str, Any] = {
        "type": "button",
        "action_id": f"sb:{row}:{column}",  # unique within the message, as Slack requires
        "text": {"type": "plain_text", "text": label or " ", "emoji": True},
        "value": button.value,
    }
    # Slack has two styles; "success" reads as the affirmative one, "secondary" is the default look.
    style = {"primary": "primary", "success": "primary", "danger": "danger"}.get(button.style)
    if style:
        element["style"] = style
    return element


def build_blocks(mrkdwn: str, buttons: list[list[Button]]) -> list[dict[str, Any]]:
    """Section blocks for the text (≤3000 characters each) and one actions block per button row, never more than
    50 blocks: rows are packed together (25 buttons a block) when there are too many, and what still does not fit
    is dropped with a warning."""
    sections = [
        {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn[start : start + MAX_SECTION_TEXT]}}
        for start in range(0, len(mrkdwn), MAX_SECTION_TEXT)
        if mrkdwn[start : start + MAX_SECTION_TEXT].strip()
    ]
    rows = [[_button(button, r, c) for c, button in enumerate(row)] for r, row in enumerate(buttons) if row]
    actions = [row[start : start + MAX_ACTIONS_PER_BLOCK] for row in rows for start in range(0, len(row), 25)]
    if len(sections) + len(actions) > MAX_BLOCKS:
        flat = [element for row in rows for element in row]
        actions = [flat[start : start + MAX_ACTIONS_PER_BLOCK] for start in range(0, len(flat), MAX_ACTIONS_PER_BLOCK)]
    room = MAX_BLOCKS - len(actions)
    if room < 1 or len(sections) > room:
        log.warning("slack: a message with %d text and %d button blocks cut to %d", len(sections), len(actions), 50)
        actions = actions[: MAX_BLOCKS - 1]
        sections = sections[: MAX_BLOCKS - len(actions)]
    return [*sections, *({"type": "actions", "elements": elements} for elements in actions)]


ABNORMAL_CLOSURE = 1006  # what aiohttp reports for a connection that ended without a close frame
CLOSE_SECONDS = 2.0  # how long closing a connection may take; then the TCP connection is dropped regardless
OPEN_SECONDS = 30.0  # the WebSocket handshake of a new connection
# apps.connections.open is rate-limited per minute: a longer outage is retried about once a minute, never faster.
MAX_BACKOFF_SECONDS = 60.0
REFRESH = "Slack asked for a new connection"
# apps.connections.open errors that no retry mends: the app token is wrong, revoked or not an app-level token.
_REFUSED = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked", "not_allowed_token_type"})
Frames = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]


def _describe(error: BaseException) -> str:
    from slack_sdk.errors import SlackApiError

    if isinstance(error, SlackApiError):  # a body that is not JSON (a wrong URL's 404 page) has no error field
        data = error.response.data
        return str(data.get("error")) if isinstance(data, dict) else f"HTTP {error.response.status_code}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


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


class _SocketMode:
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
            if error.response.get("error") in _REFUSED:
                await self.close()
                where = f"channels.slack.accounts.{self._account}.app_token"
                fix = f"an app-level token (xapp-…) with connections:write goes in {where}"
                reason = f"apps.connections.open refused the app token: {_describe(error)}: {fix}"
                raise StartError("slack", self._account, "refused", reason) from None
            self._health.set("degraded", f"opening a Socket Mode connection failed: {_describe(error)}")
        except Exception as error:
            self._health.set("degraded", f"opening a Socket Mode connection failed: {_describe(error)}")
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
            connection.ended = connection.ended or f"a ping could not be sent: {_describe(error)}"

    async def _replace(self, old: _Connection | None) -> None:
        """A new connection (after the backoff its predecessors earned) in place of `old`, which is then closed for
        good: it stays open until the new one is, so never more than two at once and no gap between them."""
        if self._attempts > 0:
            await self._sleep(self._backoff.next())
        try:
            new = await self._open()
        except Exception as error:  # the watchdog outlives every failure; the next try waits longer
            self._health.set("degraded", f"opening a Socket Mode connection failed: {_describe(error)}")
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
            reason = f"the connection failed: {_describe(error)}"
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


class SlackAdapter:
    """One Slack app in one workspace. Events are handed to the gateway before they are acknowledged."""

    channel = "slack"
    capabilities = CAPABILITIES

    def __init__(
        self,
        account: str,
        settings: SlackAccount,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        timing: Timing = REAL_TIME,
    ) -> None:
        self.account = account
        self.settings = settings
        self._sleep = sleep  # how a rate-limited Web API call waits before its retry
        self._timing = timing  # Socket Mode's reconnect waits and their jitter
        self.bot_username: str | None = None
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None
        self.http_port: int | None = None  # HTTP mode: the port actually bound (http_port 0 picks one)
        self.client: AsyncWebClient | None = None
        self.app: AsyncApp | None = None
        self._socket: _SocketMode | None = None
        self._http: web.AppRunner | None = None
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None
        self._seen = _Seen()
        self._dm_channels: dict[str, str] = {}  # user id -> the D... channel of the bot's DM with them
        self._message_channels: OrderedDict[str, str] = OrderedDict()  # ts of a message we sent -> its channel
        self._late: set[asyncio.Task[None]] = set()  # hand-overs still running after their ack
        self._mention: re.Pattern[str] | None = None
        self._file_origins = file_origins(settings.api_base_url)  # where the bot token may go for a file
        secrets = [settings.bot_token, settings.app_token, settings.signing_secret]
        self.health = ChannelHealth(
            self.channel, account, secrets=[secret.get_secret_value() for secret in secrets if secret is not None]
        )

    # --- start and stop -----------------------------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        from slack_bolt.app.async_app import AsyncApp

        self._on_message, self._on_action = on_message, on_action
        self.client = _web_client(self.settings, self.health, self._sleep)
        try:
            auth = await self.client.auth_test()
        except Exception as error:
            raise self._start_error(error) from error
        self.bot_username = auth.get("user")
        self.bot_user_id = auth.get("user_id")
        self.bot_id = auth.get("bot_id")
        self.team_id = auth.get("team_id")
        self._mention = re.compile(rf"<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>") if self.bot_user_id else None
        http = self.settings.mode == "http"
        secret = self.settings.signing_secret.get_secret_value() if self.settings.signing_secret else ""
        self.app = AsyncApp(
            client=self.client,
            signing_secret=secret,
            request_verification_enabled=http,
            # Listeners run before the ack: the gateway has recorded the message when Slack hears back.
            process_before_response=True,
            logger=logging.getLogger(f"{__name__}.bolt"),
        )
        self.app.event("message")(self._event)
        self.app.event("app_mention")(self._event)
        self.app.event(re.compile(".*"))(self._other_event)
        self.app.action(re.compile(".*"))(self._action)
        self.app.error(self._error)
        if http:
            await self._start_http()
        else:
            await self._start_socket()
        log.info("slack %s: connected as %s (%s) in team %s", self.account, self.bot_username, self.mode, self.team_id)

    def _start_error(self, error: Exception) -> StartError:
        """A failed auth.test told straight: a refused bot token, a wrong api_base_url (404), no answer at all."""
        from slack_sdk.errors import SlackApiError

        root = self.settings.api_base_url or DEFAULT_API_BASE_URL
        if isinstance(error, SlackApiError):
            code = error.response.get("error") if isinstance(error.response.data, dict) else None
            if code in _REFUSED:
                fix = f"copy the Bot User OAuth Token (xoxb-…) into channels.slack.accounts.{self.account}.bot_token"
                return refused("slack", self.account, str(code), fix)
            if error.response.status_code == 404:
                return not_found("slack", self.account, root, "auth.test")
        why = why_unreachable(error)
        if why is not None:
            return unreachable("slack", self.account, root, why)
        secrets = [self.settings.bot_token.get_secret_value()]
        return StartError("slack", self.account, "failed", mask(f"auth.test: {_describe(error)}", secrets))

    @property
    def mode(self) -> str:
        return "Socket Mode" if self.settings.mode == "socket" else "HTTP Events"

    async def _start_socket(self) -> None:
        assert self.client is not None and self.settings.app_token is not None
        self._socket = _SocketMode(
            self.account,
            self.client,
            self.settings.app_token.get_secret_value(),
            self.health,
            self._envelope,
            ping_interval=self.settings.ping_interval,
            stall_seconds=self.settings.stall_seconds,
            timing=self._timing,
        )
        await self._socket.start()  # connected (the health says so) once Slack says hello

    async def _start_http(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post(self.settings.http_path, self._http_request)
        self._http = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._http.setup()
        await web.TCPSite(self._http, self.settings.http_host, self.settings.http_port).start()
        self.http_port = int(self._http.addresses[0][1])
        self.health.set("connected")

    async def stop(self) -> None:
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        for task in list(self._late):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(5):
                    await task
        self.health.set("stopped")

    # --- inbound: transport ---------------------------------------------------------------------------------------

    async def _envelope(self, message: dict[str, Any]) -> None:
        """One Socket Mode frame: dispatch it through Bolt, then ack it. A frame Bolt cannot read is acked anyway
        (Slack would only send it again); one whose hand-over failed is not, so that Slack redelivers it."""
        from slack_bolt.adapter.socket_mode.internals import build_headers
        from slack_bolt.request.async_request import AsyncBoltRequest
        from slack_sdk.socket_mode.request import SocketModeRequest

        envelope_id = message.get("envelope_id")
        if not isinstance(envelope_id, str) or not envelope_id:
            if message.get("type") not in ("hello", None):
                log.debug("slack %s: socket frame of type %r without an envelope", self.account, message.get("type"))
            return
        payload = message.get("payload")
        if isinstance(payload, dict) and message.get("type") in ("events_api", "interactive", "slash_commands"):
            request = SocketModeRequest(type=str(message["type"]), envelope_id=envelope_id, payload=payload)
            bolt = AsyncBoltRequest(mode="socket_mode", body=payload, headers=build_headers(request))
            if not await self._dispatch(bolt, f"envelope {envelope_id}"):
                log.warning("slack %s: envelope %s not acked; Slack will redeliver it", self.account, envelope_id)
                return
        else:
            kind = message.get("type")
            log.warning("slack %s: skipped malformed envelope %s (type %r)", self.account, envelope_id, kind)
        await self._ack(envelope_id)

    async def _ack(self, envelope_id: str) -> None:
        """Ack on the current connection; if there is none, Slack sends the envelope again on the next one."""
        import aiohttp

        try:
            if self._socket is None:
                raise ConnectionError("Socket Mode is stopped")
            await self._socket.send(json.dumps({"envelope_id": envelope_id}))
        except (ConnectionError, aiohttp.ClientError) as error:
            log.warning(
                "slack %s: envelope %s not acked (%s); Slack will redeliver it", self.account, envelope_id, error
            )

    async def _http_request(self, request: web.Request) -> web.Response:
        from aiohttp import web
        from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

        self.health.heard()
        bolt = await to_bolt_request(request)
        outcome = _HandOver()
        if not await self._dispatch(bolt, "an HTTP request", outcome):
            return web.Response(status=500)  # Slack retries; the journal drops what was recorded after all
        if outcome.response is None or outcome.response.status >= 500:
            return web.Response(status=200)  # unreadable: acknowledged so that Slack does not send it again
        return await to_aiohttp_response(outcome.response)

    async def _dispatch(self, bolt: AsyncBoltRequest, what: str, outcome: _HandOver | None = None) -> bool:
        """Run one request through Bolt. False only when the gateway could not take what it carried (so it must not
        be acknowledged); a request Bolt or this adapter cannot read is logged and counts as handled."""
        assert self.app is not None
        outcome = outcome or _HandOver()
        token = _HAND_OVER.set(outcome)
        try:
            outcome.response = await self.app.async_dispatch(bolt)
        except Exception as error:
            log.warning("slack %s: skipped unreadable %s: %r", self.account, what, error)
            return True
        finally:
            _HAND_OVER.reset(token)
        if outcome.failed:
            return False
        if outcome.response.status >= 500:
            log.warning("slack %s: skipped %s that could not be handled", self.account, what)
        return True

    async def _error(self, error: Exception, body: dict[str, Any]) -> None:
        log.warning("slack %s: an event could not be handled: %r", self.account, error)

    # --- inbound: events ------------------------------------------------------------------------------------------

    async def _other_event(self, body: dict[str, Any]) -> None:
        event = body.get("event")
        log.debug("slack %s: ignored event %r", self.account, event.get("type") if isinstance(event, dict) else None)

    async def _event(self, body: dict[str, Any]) -> None:
        try:
            message = self._inbound(body)
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as error:
            log.warning("slack %s: skipped a malformed event: %r", self.account, error)
            return
        if message is None:
            return
        key = f"{message.peer.kind}:{message.peer.id}:{message.message_id}"
        if not self._seen.add(key):
            log.debug("slack %s: second delivery of %s dropped", self.account, message.message_id)
            return
        assert self._on_message is not None
        try:
            what = f"slack {self.account}: handing over message {message.message_id}"
            await within(self._on_message(message), ACK_BUDGET_SECONDS, what, self._late)
        except BaseException:
            self._seen.discard(key)  # not recorded: the redelivery must get through
            outcome = _HAND_OVER.get()
            if outcome is not None:
                outcome.failed = True
            raise

    def _inbound(self, body: dict[str, Any]) -> InboundMessage | None:
        """The message in an events_api body, or None for events that are not someone saying something."""
        event = body["event"]
        subtype = event.get("subtype")
        if subtype not in _SAID:
            log.debug("slack %s: ignored message subtype %s", self.account, subtype)
            return None
        bot_id = event.get("bot_id")
        user = event.get("user") or bot_id
        if (self.bot_user_id and user == self.bot_user_id) or (bot_id and bot_id == self.bot_id):
            return None  # our own message
        channel, ts = event["channel"], event["ts"]
        if not (isinstance(user, str) and user and isinstance(channel, str) and channel and isinstance(ts, str)):
            raise ValueError("an event without user, channel or ts")
        channel_type = event.get("channel_type") or ("im" if channel.startswith("D") else None)
        if channel_type == "im":
            peer = Peer("direct", user)
            self._dm_channels[user] = channel
        elif channel_type == "mpim":
            peer = Peer("group", channel)
        else:
            peer = Peer("channel", channel)
        text = event.get("text") or ""
        if not isinstance(text, str):
            raise ValueError("text is not a string")
        mentioned = event.get("type") == "app_mention" or bool(self._mention and self._mention.search(text))
        if self._mention is not None:
            # A leading mention is how people address the bot; `@bot /new` must still read as a command.
            text = self._mention.sub(f"@{self.bot_username}" if self.bot_username else "", text)
            if self.bot_username:
                text = re.sub(rf"^\s*@{re.escape(self.bot_username)}\b[\s:,]*", "", text)
        thread_ts = event.get("thread_ts")
        thread_ts = thread_ts if isinstance(thread_ts, str) and thread_ts else None
        profile = event.get("user_profile") if isinstance(event.get("user_profile"), dict) else {}
        name = profile.get("display_name") or profile.get("real_name") or event.get("username")
        attachments = [item for item in map(_attachment, event.get("files") or []) if item is not None]
        return InboundMessage(
            channel=self.channel,
            account=self.account,
            peer=peer,
            team=body.get("team_id") or event.get("team") or self.team_id,
            sender_id=user,
            sender_name=name if isinstance(name, str) and name else None,
            sender_is_bot=bool(bot_id) or subtype == "bot_message",
            text=_unescape(text.strip()),
            message_id=ts,
            reply_to=thread_ts if thread_ts and thread_ts != ts else None,
            reply_to_bot=bool(self.bot_user_id) and event.get("parent_user_id") == self.bot_user_id,
            thread_id=thread_ts,
            was_mentioned=mentioned,
            attachments=attachments,
        )

    async def _action(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        try:
            events = self._actions(body)
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as error:
            log.warning("slack %s: skipped a malformed button click: %r", self.account, error)
            return
        assert self._on_action is not None
        for event in events:
            try:
                what = f"slack {self.account}: a click on {event.message_id}"
                notice = await within(self._on_action(event), NOTICE_BUDGET_SECONDS, what, self._late)
                if notice:  # only the clicker sees it
                    channel = await self._channel(
                        ChatTarget(channel=self.channel, account=self.account, peer=event.peer)
                    )
                    await self._api().chat_postEphemeral(channel=channel, user=event.sender_id, text=notice)
            except Exception:
                log.exception("slack %s: a click on %s could not be handled", self.account, event.message_id)

    def _actions(self, body: dict[str, Any]) -> list[ActionEvent]:
        if body.get("type") != "block_actions":
            return []
        user = body["user"]["id"]
        container = body.get("container") or {}
        message = body.get("message") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        ts = container.get("message_ts") or message.get("ts")
        if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(user, str)):
            raise ValueError("a click without channel, message or user")
        peer = Peer("direct", user) if channel.startswith("D") else Peer("channel", channel)
        if peer.kind == "direct":
            self._dm_channels[user] = channel
        thread = container.get("thread_ts") or message.get("thread_ts")
        name = body["user"].get("username") or body["user"].get("name")
        return [
            ActionEvent(
                channel=self.channel,
                account=self.account,
                peer=peer,
                sender_id=user,
                sender_name=name,
                message_id=ts,
                value=action["value"],
                thread_id=thread if isinstance(thread, str) and thread else None,
                click_id=action.get("action_ts") if isinstance(action.get("action_ts"), str) else None,
            )
            for action in body.get("actions") or []
            if isinstance(action, dict) and action.get("type") == "button" and isinstance(action.get("value"), str)
        ]

    # --- outbound -------------------------------------------------------------------------------------------------

    def _api(self) -> AsyncWebClient:
        if self.client is None:
            raise RuntimeError(f"slack account {self.account} is not started")
        return self.client

    async def _channel(self, target: ChatTarget, ts: str | None = None, *, conversation: bool = False) -> str:
        """The Slack channel id for a target; for a DM, the D... channel (posting to a user id opens it, so a user id
        does for a new message unless a `conversation` id is needed: file shares take only C/G/D ids)."""
        peer_id = target.peer.id
        if not peer_id:
            raise ValueError("a Slack target needs a peer id")
        if target.peer.kind != "direct":
            return peer_id
        if ts is not None and ts in self._message_channels:
            return self._message_channels[ts]
        if peer_id in self._dm_channels:
            return self._dm_channels[peer_id]
        if ts is None and not conversation:
            return peer_id
        opened = await self._api().conversations_open(users=peer_id)
        channel = str(opened["channel"]["id"])
        self._dm_channels[peer_id] = channel
        return channel

    def _remember(self, ts: str, channel: str) -> None:
        self._message_channels[ts] = channel
        while len(self._message_channels) > 4096:
            self._message_channels.popitem(last=False)

    @staticmethod
    def _render(message: OutboundMessage) -> tuple[str, list[dict[str, Any]]]:
        text = markdown_to_mrkdwn(message.text)
        return text, build_blocks(text, message.buttons) if message.buttons else []

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Text (with buttons), or files with the text as their comment; the ts of the last message posted."""
        if message.poll is not None:
            raise ChannelError("slack: Slack has no native polls")
        if message.media:
            return await self._send_files(target, message)
        return await self._post(target, message)

    async def _post(self, target: ChatTarget, message: OutboundMessage) -> str:
        text, blocks = self._render(message)
        extra: dict[str, Any] = {"blocks": blocks} if blocks else {}
        thread = message.thread_id or target.thread_id
        if thread:
            extra["thread_ts"] = thread
        response = await self._api().chat_postMessage(channel=await self._channel(target), text=text, **extra)
        ts, channel = str(response["ts"]), str(response["channel"])
        self._remember(ts, channel)
        if target.peer.kind == "direct" and target.peer.id:
            self._dm_channels.setdefault(target.peer.id, channel)
        return ts

    @staticmethod
    def _caption(message: OutboundMessage) -> str | None:
        """The text as the files' comment, when it fits one and has no buttons (a file share carries none)."""
        text = markdown_to_mrkdwn(message.text)
        return text if text.strip() and not message.buttons and len(text) <= MAX_CAPTION else None

    async def _send_files(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Upload the files (up to ten shared in one message) after the text, unless the text is their comment.
        Returns the last share's ts, or None where Slack has not said it (the files are shared all the same)."""
        channel = await self._channel(target, conversation=True)
        thread = message.thread_id or target.thread_id
        caption = self._caption(message)
        last: str | None = None
        if caption is None and message.text.strip():
            last = await self._post(target, message)
        for start in range(0, len(message.media), MAX_FILES_PER_MESSAGE):
            uploaded = [await self._upload(file) for file in message.media[start : start + MAX_FILES_PER_MESSAGE]]
            last = await self._share(channel, uploaded, thread, caption)
            caption = None
        return last

    async def _upload(self, file: OutboundFile) -> dict[str, str | None]:
        """files.getUploadURLExternal, then the bytes streamed from disk to the upload URL; the file's id and title."""
        import aiofiles.os

        try:
            size = (await aiofiles.os.stat(file.path)).st_size
        except OSError as error:
            raise ChannelError(f"slack: cannot read {file.name}: {error.strerror}") from None
        if size > MAX_UPLOAD_BYTES:
            raise ChannelError(f"slack: {file.name} is {size} bytes; Slack takes files up to {MAX_UPLOAD_BYTES}")
        ticket = await self._api().files_getUploadURLExternal(filename=file.name, length=size)
        await self._upload_bytes(str(ticket["upload_url"]), file, size)
        return {"id": str(ticket["file_id"]), "title": file.name}

    async def _upload_bytes(self, url: str, file: OutboundFile, size: int) -> None:
        """POST the file's raw bytes to its upload URL as slack_sdk does, but chunk by chunk from disk (slack_sdk
        reads the whole file into memory first). The URL is signed by Slack: no token goes with it."""
        import aiohttp

        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        try:
            async with (
                aiohttp.ClientSession(timeout=_transfer_timeout()) as session,
                session.post(url, data=_file_chunks(file.path), headers=headers, proxy=self._proxy()) as response,
            ):
                if response.status != 200:
                    raise ChannelError(f"slack: uploading {file.name} failed: HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise ChannelError(f"slack: uploading {file.name} failed: {type(error).__name__}: {error}") from None

    async def _share(
        self, channel: str, files: list[dict[str, str | None]], thread: str | None, text: str | None
    ) -> str | None:
        """files.completeUploadExternal: one message in `channel` (in `thread`) with the files and `text`."""
        done = await self._api().files_completeUploadExternal(
            files=files, channel_id=channel, thread_ts=thread, initial_comment=text
        )
        answered = done.get("files")
        first = answered[0] if isinstance(answered, list) and answered else None
        ts = _share_ts(first, channel) or await self._share_ts_later(str(files[0]["id"]), channel)
        if ts is not None:
            self._remember(ts, channel)
        return ts

    async def _share_ts_later(self, file_id: str, channel: str) -> str | None:
        """The ts of the message that shared a file, from files.info: completeUploadExternal does not say it, and
        Slack shares a moment later, so it is asked again after short pauses. None if Slack never says."""
        from slack_sdk.errors import SlackApiError

        for pause in SHARE_PAUSES:
            if pause:
                await self._sleep(pause)
            try:
                info = await self._api().files_info(file=file_id)
            except SlackApiError as error:
                log.warning("slack %s: files.info on %s: %s", self.account, file_id, error.response.get("error"))
                return None
            ts = _share_ts(info.get("file"), channel)
            if ts is not None:
                return ts
        log.info("slack %s: file %s shared, but Slack has not said in which message", self.account, file_id)
        return None

    def _proxy(self) -> str | None:
        """The proxy the Web API client uses (slack_sdk reads HTTPS_PROXY), for file transfers too."""
        proxy = self.client.proxy if self.client is not None else None
        return proxy if isinstance(proxy, str) and proxy else None

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The bytes of a file of a message (its url_private), CHUNK_BYTES at a time, with the bot token (which
        needs the files:read scope). The token goes only to Slack's file host (`file_origins`): a file elsewhere is
        refused, and a redirect to another host is followed without it."""
        import aiohttp

        what = f"slack: the file {attachment.name or '(no name)'}"
        if _origin(attachment.ref) not in self._file_origins:
            raise ChannelError(f"{what} is not on Slack's file host; not downloaded")
        try:
            async with (
                aiohttp.ClientSession(timeout=_transfer_timeout()) as session,
                await self._fetch(session, attachment, what) as response,
            ):
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    yield chunk
        except (aiohttp.ClientError, TimeoutError) as error:
            # Not chained: an aiohttp error's request_info carries the request's headers, the token among them.
            raise ChannelError(f"{what} could not be downloaded: {type(error).__name__}: {error}") from None

    async def _fetch(self, session: aiohttp.ClientSession, attachment: Attachment, what: str) -> aiohttp.ClientResponse:
        """The response at the end of the file's redirects, followed here rather than by aiohttp so that each hop
        is judged: the Authorization header goes only to a hop on Slack's file host."""
        url = attachment.ref
        token = self.settings.bot_token.get_secret_value()
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"Authorization": f"Bearer {token}"} if _origin(url) in self._file_origins else {}
            response = await session.get(url, headers=headers, allow_redirects=False, proxy=self._proxy())
            location = response.headers.get("Location")
            if response.status not in _REDIRECTS or not location:
                _refuse_download(response, attachment, what)
                return response
            response.release()
            url = urljoin(str(response.url), location)
            if _origin(url) is None:
                raise ChannelError(f"{what} could not be downloaded: redirected to a non-HTTP address")
        raise ChannelError(f"{what} could not be downloaded: more than {MAX_REDIRECTS} redirects")

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """A Slack thread is the replies to one message: `message_id` when given (nothing is posted), else `name`
        posted as a new message in the chat. Returns the parent's ts, the thread_ts that ChatTarget.thread_id holds."""
        if message_id:
            return message_id
        return await self._post(target.model_copy(update={"thread_id": None}), OutboundMessage(text=name))

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        text, blocks = self._render(message)
        # An empty list takes away the buttons an earlier version had; leaving blocks out would keep them.
        channel = await self._channel(target, message_id)
        await self._api().chat_update(channel=channel, ts=message_id, text=text, blocks=blocks)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        await self._api().chat_delete(channel=await self._channel(target, message_id), ts=message_id)

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        name = _EMOJI_NAMES.get(emoji.strip(), emoji.strip().strip(":"))
        channel = await self._channel(target, message_id)
        await self._api().reactions_add(channel=channel, timestamp=message_id, name=name)

    async def typing(self, target: ChatTarget) -> None:
        # Slack shows no typing indicator for bots (the RTM one is gone); nothing to send.
        log.debug("slack %s: typing in %s:%s (no-op on Slack)", self.account, target.peer.kind, target.peer.id)


__all__ = ["CAPABILITIES", "SlackAccount", "SlackAdapter", "api_url", "build_blocks", "file_origins"]
