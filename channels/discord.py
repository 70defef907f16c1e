"""The Discord channel: one bot account on the real discord.py Client (gateway WebSocket in, REST out), normalized
into InboundMessage / ActionEvent; buttons are persistent components whose custom_id is the button's value; files
come in as attachment URLs fetched from Discord's CDN and go out as multipart uploads; polls and threads are native.
The account's `health` follows the gateway: stalled when it goes silent or stops acknowledging heartbeats (the
connection is then left and the session resumed on a new one), degraded in a reconnect storm, whose further
connections ReconnectGate spaces with exponential backoff (up to 5 minutes, with jitter). Listening is elected per
gateway shard (channels.base.ElectedIngress): several processes on one token each send, one listens per shard."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import os
import re
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, Final

import aiohttp
import discord
import discord.ui
import yarl
from discord.gateway import DiscordWebSocket, ReconnectWebSocket
from discord.http import HTTPClient, Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from channels.accounts import DiscordAccount
from channels.backoff import CAP_SECONDS, FIRST_SECONDS, REAL_TIME, Backoff, Timing, pause
from channels.base import (
    NOTICE_BUDGET_SECONDS,
    ActionEvent,
    Attachment,
    AttachmentKind,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundFile,
    OutboundMessage,
    Poll,
    within,
)
from channels.health import UNHEALTHY, ChannelHealth
from channels.start_errors import StartError, StartErrorKind, mask, why_unreachable
from routing import Peer
from routing.errors import ChannelError

log = logging.getLogger(__name__)

API_PATH = "/api/v10"
MAX_CUSTOM_ID = 100  # Discord's limit on a component's custom_id, and so on a button's value
MAX_TEXT = 2000  # a message's content, and so a caption
MAX_FILES_PER_MESSAGE = 10
# A bot's upload limit in DMs and unboosted guilds (boost tier 2 allows 50 MiB, tier 3 100 MiB; one figure per
# account is all Capabilities holds, so the smallest). Each message's files together stay within it too.
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
DOWNLOAD_CHUNK = 64 * 1024
# Where attachments live; a ref naming anything else (but the configured test or proxy server) is not fetched.
CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
CDN_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)  # big files may take long in all
POLL_DURATION = timedelta(hours=24)
MAX_POLL_QUESTION = 300
MAX_POLL_ANSWERS = 10
MAX_POLL_ANSWER = 55
MAX_THREAD_NAME = 100
THREAD_ARCHIVE_MINUTES: Final = 1440  # a new thread hides from the channel list after a day without messages
PUBLIC_THREAD: Final = 11  # the channel type of a public thread
CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,
    polls=True,
    files=True,
    max_upload_bytes=MAX_UPLOAD_BYTES,
    max_caption_length=MAX_TEXT,
    max_text_length=MAX_TEXT,
    markup="discord-markdown",
    streaming=True,
    edit_interval_seconds=1.0,
)
_STYLES = {
    "primary": discord.ButtonStyle.primary,
    "secondary": discord.ButtonStyle.secondary,
    "success": discord.ButtonStyle.success,
    "danger": discord.ButtonStyle.danger,
}
# The model must not ping @everyone or whole roles because some text said so; users and replies are fine.
_ALLOWED_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)
# Discord's gateway asks for a heartbeat every 41.25 s; a shorter `stall_seconds` would drop healthy connections.
MIN_STALL_SECONDS = 45.0
BACKOFF_FIRST = FIRST_SECONDS  # the wait before the first connection beyond a storm's limit, doubling with each one
BACKOFF_CAP = CAP_SECONDS  # waited before a connection's CONNECT_SECONDS start (see _Client.connect), so it may be long
CONNECT_SECONDS = 60.0  # a new connection's handshake, HELLO and IDENTIFY or RESUME, as discord.py allows it
HEARTBEAT_ACK = 11
# A heartbeat ACK is `{"t":null,"s":null,"op":11,"d":null}`: only frames this short are parsed to find one, never
# the events, which discord.py parses anyway.
MAX_ACK_FRAME = 96


class DiscordStartError(StartError, RuntimeError):
    """The account could not connect: bad token, unreachable server, or no READY in time."""

    def __init__(self, reason: str, *, account: str = "default", kind: StartErrorKind = "failed") -> None:
        super().__init__("discord", account, kind, reason)


# --- pointing the SDK at configured servers, per client --------------------------------------------------------
#
# discord.py reads its REST root from the class attribute `Route.BASE` and its gateway from
# `DiscordWebSocket.DEFAULT_GATEWAY`. Setting those would move every client in the process, so instead each
# adapter's HTTPClient rewrites the URLs it is about to use, and interaction callbacks (which go through the
# webhook adapter, not the HTTPClient) use a rewriting webhook adapter installed in the client's task context.


def _rewrite(url: str, api_base: str | None) -> str:
    if api_base is not None and url.startswith(Route.BASE):
        return api_base + url[len(Route.BASE) :]
    return url


def _local_route(route: Route, api_base: str | None) -> Route:
    url = _rewrite(route.url, api_base)
    if url == route.url:
        return route
    local = copy.copy(route)  # the bucket key (method + path) stays as it was; only where it goes changes
    local.url = url
    return local


class _RoutedHTTPClient(HTTPClient):
    """discord.py's HTTPClient on the configured servers; every REST call and gateway connection is noted in
    `health`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        api_base: str | None,
        gateway: str | None,
        *,
        health: ChannelHealth | None = None,
    ) -> None:
        super().__init__(loop)
        self._api_base = api_base
        self._gateway = yarl.URL(gateway) if gateway else None
        self._health = health

    async def request(self, route: Route, **kwargs: Any) -> Any:
        with _noted(self._health, f"{route.method} {route.path}"):
            return await super().request(_local_route(route, self._api_base), **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        target = yarl.URL(url)
        if self._gateway is not None and target.host == DiscordWebSocket.DEFAULT_GATEWAY.host:
            # The default gateway (first connect, or after an invalidated session): ours instead, same query.
            target = self._gateway.with_query(target.query)
        try:
            return await super().ws_connect(str(target), compress=compress)
        except Exception as error:
            if self._health is not None:
                self._health.failed(f"gateway connection: {type(error).__name__}: {error}")
            raise


class _RoutedWebhookAdapter(AsyncWebhookAdapter):
    def __init__(self, api_base: str | None, health: ChannelHealth | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._api_base = api_base
        self._health = health

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        with _noted(self._health, f"{route.method} {route.path}"):
            return await super().request(_local_route(route, self._api_base), session, **kwargs)


@contextlib.contextmanager
def _noted(health: ChannelHealth | None, call: str) -> Iterator[None]:
    """A REST call's outcome in `health`: reached when it succeeds, its error remembered when it fails."""
    try:
        yield
    except Exception as error:
        if health is not None:
            health.failed(f"{call}: {type(error).__name__}: {error}")
        raise
    if health is not None:
        health.reached()


# --- reconnect storms ------------------------------------------------------------------------------------------


class ReconnectGate:
    """Counts new gateway connections and says how long each must wait. discord.py reconnects at once after a
    dropped connection, so a gateway that closes every one would see a hot loop: up to `limit` connections within
    `window` seconds go at once; the next one starts a storm, and it and each one after wait by `backoff`
    (BACKOFF_FIRST, twice as long each time up to BACKOFF_CAP, each wait between half and all of its step). The storm
    ends when a connection stays up `window / limit` seconds after its READY (slower than a storm could be), or after
    a whole window without a connection: the count and the backoff start over."""

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self.limit = limit
        self.window = window
        self.stable_seconds = window / limit
        self.backoff = backoff or Backoff(BACKOFF_FIRST, BACKOFF_CAP)
        self._clock = clock
        self._attempts: deque[float] = deque()
        self._ready_at: float | None = None

    @property
    def recent(self) -> int:
        """The connections within the window, as of the last attempt."""
        return len(self._attempts)

    def attempt(self) -> float:
        """A new connection is about to be made: the seconds it must wait first (0 unless in a storm)."""
        now = self._clock()
        if self._ready_at is not None and now - self._ready_at >= self.stable_seconds:
            self._attempts.clear()
        self._ready_at = None
        while self._attempts and now - self._attempts[0] >= self.window:
            self._attempts.popleft()
        if not self._attempts:
            self.backoff.reset()
        self._attempts.append(now)
        if self.backoff.waits == 0 and len(self._attempts) <= self.limit:
            return 0.0
        return self.backoff.next()

    def connected(self) -> None:
        """The connection got READY (or RESUMED); if it stays up long enough, the next attempt starts over."""
        self._ready_at = self._clock()


def _is_heartbeat_ack(frame: object) -> bool:
    """Whether a raw gateway frame (as discord.py's `socket_raw_receive` hands it over) is a heartbeat ACK."""
    if not isinstance(frame, str) or len(frame) > MAX_ACK_FRAME:
        return False
    try:
        parsed = json.loads(frame)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("op") == HEARTBEAT_ACK


# --- the client ------------------------------------------------------------------------------------------------


class _ActionButton(discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=r"(?P<value>[\s\S]+)"):
    """A button whose custom_id is its value. Registered as a dynamic item, it receives clicks on any message,
    also on messages sent before a restart: no per-message view has to be remembered."""

    def __init__(self, value: str, label: str = "", style: discord.ButtonStyle = discord.ButtonStyle.secondary) -> None:
        super().__init__(discord.ui.Button(label=label or value, style=style, custom_id=value))
        self.value = value

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[discord.Client],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> _ActionButton:
        return cls(match["value"])

    async def callback(self, interaction: discord.Interaction[discord.Client]) -> None:
        client = interaction.client
        if isinstance(client, _Client):
            await client.adapter._on_click(interaction, self.value)


class _Link:
    """One gateway connection's watchdog state (the adapter's own client's, or one shard listener's): its storm gate,
    when it last heard a frame and a heartbeat ACK, whether it was connected before (READY again then counts as a
    reconnect), and `stopping`, which cuts a storm's wait short. Connection events land in the account's `health`."""

    def __init__(self, adapter: DiscordAdapter, shard_id: int | None = None) -> None:
        self.adapter = adapter
        self.shard_id = shard_id  # None: the account is not sharded
        settings, timing = adapter.settings, adapter.timing
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_CAP, draw=timing.draw)
        self.gate = ReconnectGate(
            settings.storm_reconnects, settings.storm_minutes * 60, clock=timing.clock, backoff=backoff
        )
        self.last_heard = time.perf_counter()  # discord.py's watchdog keeps time on the same clock
        self.last_ack = self.last_heard
        self.connected_before = False
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()  # READY on this link's client
        self.client: _Client | None = None
        self.task: asyncio.Task[None] | None = None

    def heard(self, frame: object) -> None:
        """The gateway sent a frame: an event, a heartbeat ACK, a HELLO."""
        self.last_heard = time.perf_counter()
        if _is_heartbeat_ack(frame):
            self.last_ack = self.last_heard
        self.adapter.health.heard()

    def unacknowledged(self) -> float:
        """Seconds since the gateway last acknowledged a heartbeat (or since this connection began)."""
        return time.perf_counter() - self.last_ack

    def zombie(self, silence: float) -> None:
        """The connection still delivers events but acknowledged no heartbeat for `silence` seconds: a zombie, which
        Discord says to leave and resume; discord.py's own watchdog only notices a connection that is silent."""
        self.adapter.health.set(
            "stalled",
            f"no heartbeat ACK from the gateway for {silence:.1f}s though events still arrive; "
            "leaving the connection and resuming the session",
        )

    def connected(self) -> None:
        """READY or RESUMED: the account is connected (again)."""
        if self.connected_before:
            self.adapter.health.reconnected()
        self.connected_before = True
        self.gate.connected()
        self.adapter.health.set("connected")

    def disconnected(self) -> None:
        """A gateway connection ended (a new one follows unless stopping). After `stall_seconds` of silence, it was
        discord.py's watchdog that closed it: the account stalled."""
        adapter = self.adapter
        silence = time.perf_counter() - self.last_heard
        if self.stopping.is_set() or silence < adapter.stall_seconds:
            log.debug("discord %s: gateway disconnected", adapter.account)
            return
        adapter.health.set("stalled", f"no heartbeat ACK or event from the gateway for {silence:.0f}s; reconnecting")

    async def before_connect(self) -> bool:
        """Every new gateway connection passes here first: in a reconnect storm it waits its turn, the account
        degraded. False when the adapter is stopping: no connection then."""
        adapter = self.adapter
        delay = self.gate.attempt()
        if delay > 0:
            minutes = adapter.settings.storm_minutes
            adapter.health.set(
                "degraded",
                f"{self.gate.recent} gateway connections within {minutes:g} min (reconnect storm); "
                f"the next in {delay:.1f}s",
            )
            log.debug("discord %s: reconnect storm, waiting %.1fs", adapter.account, delay)
            await pause(adapter.timing.sleep, delay, self.stopping)
        if self.stopping.is_set():
            return False
        # A new connection's silence counts from its start, as discord.py's does.
        self.last_heard = self.last_ack = time.perf_counter()
        return True


class _Client(discord.Client):
    """discord.Client with this adapter's servers, guarded event parsers, and the adapter's handlers; its gateway
    connection watched by `link` (the adapter's own by default), as one shard of `link`'s when sharded."""

    def __init__(
        self,
        adapter: DiscordAdapter,
        api_base: str | None,
        gateway: str | None,
        guild_ready_timeout: float,
        *,
        link: _Link | None = None,
    ) -> None:
        link = link or adapter._main
        shard: dict[str, Any] = {}
        if link.shard_id is not None:
            shard = {"shard_id": link.shard_id, "shard_count": adapter.settings.shard_count}
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = True
        super().__init__(
            intents=intents,
            allowed_mentions=_ALLOWED_MENTIONS,
            guild_ready_timeout=guild_ready_timeout,
            # discord.py's own watchdog: a connection that hears nothing (no event, no heartbeat ACK) this long is
            # closed and replaced; `disconnect` then finds the silence and reports the stall. One that still hears
            # events but no ACK is ours to find (`connect`).
            heartbeat_timeout=adapter.stall_seconds,
            enable_debug_events=True,  # `socket_raw_receive` for every frame, heartbeat ACKs included (see dispatch)
            **shard,
        )
        self.adapter = adapter
        self.link = link
        http = _RoutedHTTPClient(self.loop, api_base, gateway, health=adapter.health)
        _reach_into_the_client(self, http, adapter.account)

    async def connect(self, *, reconnect: bool = True) -> None:
        """The gateway loop: discord.py's own (`Client.connect`, step for step; tests/test_discord_watchdog.py pins
        the version it follows) with the adapter's watchdog in it. Each new connection first waits its turn
        (`_Link.before_connect`: a reconnect storm's backoff, up to BACKOFF_CAP), before the CONNECT_SECONDS the
        connection itself gets, not within them as anything inside discord.py's loop would be; and a connection that
        still delivers events but acknowledges no heartbeat for `stall_seconds` is left and its session resumed.
        discord.py's own loop reconnects at once after any close it can resume and waits only after a failed
        connection (a random 0 to 2, 4 … 1024 s); here every reconnect goes through the one gate."""
        link = self.link
        params: dict[str, Any] = {"initial": True, "shard_id": self.shard_id}
        while not self.is_closed():
            if not await link.before_connect():
                return
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    self.ws = await DiscordWebSocket.from_client(self, **params)
                params["initial"] = False
                while True:
                    await self._poll(self.ws)
            except ReconnectWebSocket as request:  # Discord asked for it, or a close that can be resumed
                self.dispatch("disconnect")
                params.update(sequence=self.ws.sequence, resume=request.resume, session=self.ws.session_id)
                if request.resume:
                    params["gateway"] = self.ws.gateway
            except (
                OSError,
                discord.HTTPException,
                discord.GatewayNotFound,
                discord.ConnectionClosed,
                aiohttp.ClientError,
                TimeoutError,
            ) as error:
                self.dispatch("disconnect")
                if not reconnect:
                    await self.close()
                    if isinstance(error, discord.ConnectionClosed) and error.code == 1000:
                        return
                    raise
                if self.is_closed():
                    return
                if isinstance(error, discord.ConnectionClosed):  # a close no reconnect mends (a bad token, intents)
                    if error.code == 4014:
                        raise discord.PrivilegedIntentsRequired(error.shard_id) from None
                    if error.code != 1000:
                        await self.close()
                        raise
                if self.ws is None:  # the very first connection failed: start() says why, and it is tried again
                    raise
                log.warning(
                    "discord %s: the gateway connection failed (%s); reconnecting",
                    self.adapter.account,
                    mask(f"{type(error).__name__}: {error}", [self.adapter.settings.token]),
                )
                # As discord.py: always try to RESUME; the gateway says when it cannot.
                params.update(
                    sequence=self.ws.sequence, gateway=self.ws.gateway, resume=True, session=self.ws.session_id
                )

    async def _poll(self, ws: DiscordWebSocket) -> None:
        """One gateway frame. First, a connection that acknowledged no heartbeat for `stall_seconds` is closed with
        a code that can be resumed (4000, as discord.py closes a silent one), so that this poll ends it. It is found
        at its next frame; one that sends none at all is left by discord.py's watchdog after `stall_seconds`."""
        silence = self.link.unacknowledged()
        if silence >= self.adapter.stall_seconds and ws.open:
            self.link.zombie(silence)
            await ws.close(code=4000)
        await ws.poll_event()

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        # The raw frames are only counted as signs of life, here and synchronously, never as one task per frame.
        if event == "socket_raw_receive":
            self.link.heard(args[0] if args else None)
            return
        if event == "socket_raw_send":
            return
        if event == "disconnect":  # here, before discord.py's loop goes on to the next connection
            self.link.disconnected()
        super().dispatch(event, *args, **kwargs)

    async def setup_hook(self) -> None:
        self.add_dynamic_items(_ActionButton)

    async def on_ready(self) -> None:
        self.adapter._on_ready(self)

    async def on_resumed(self) -> None:
        log.info("discord %s: gateway session resumed", self.adapter.account)
        self.link.connected()

    async def on_message(self, message: discord.Message) -> None:
        self.adapter._queue_message(message)


# --- the one place that touches discord.py's private state --------------------------------------------------------
#
# discord.py has no public way to give a Client its own HTTPClient, nor to outlive a gateway event it cannot parse
# (the exception ends the receive loop). Both live in the client's ConnectionState, `Client._connection`: REST calls
# go through its `http`, and the gateway looks each event's parser up in its `parsers` dict (the same dict object).
# tests/test_private_apis.py fails if discord.py changes either.


def _reach_into_the_client(client: discord.Client, http: HTTPClient, account: str) -> None:
    """Send the client's REST calls through `http`, and guard each of its gateway event parsers."""
    client.http = http
    state = client._connection
    state.http = http
    for event, parser in list(state.parsers.items()):
        state.parsers[event] = _guarded(account, event, parser)


def _guarded(account: str, event: str, parser: Callable[[Any], None]) -> Callable[[Any], None]:
    """A gateway event that discord.py cannot parse would end its receive loop: log it and skip it instead."""

    def parse(data: Any) -> None:
        try:
            parser(data)
        except Exception as error:
            log.warning(
                "discord %s: skipped a malformed %s event (%s: %s)", account, event, type(error).__name__, error
            )

    return parse


def _attachment(item: discord.Attachment, voice: bool) -> Attachment:
    """One attachment as an Attachment: its kind from its content type (audio in a voice message is a voice note),
    its CDN URL as the ref."""
    mime = item.content_type or ""
    kind: AttachmentKind = "document"
    if mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("audio/"):
        kind = "voice" if voice else "audio"
    elif mime.startswith("video/"):
        kind = "video"
    return Attachment(
        kind=kind,
        ref=item.url,
        name=item.filename,
        mime_type=item.content_type,
        size=item.size,
        duration=item.duration,
    )


def cdn_url_allowed(url: str, api_base_url: str | None) -> bool:
    """Whether an attachment ref may be fetched: Discord's CDN over https, or the configured server (a test fake or
    a proxy, same scheme, host and port). A ref is data from a message: it must not make the bot fetch any URL."""
    try:
        target = yarl.URL(url)
    except (TypeError, ValueError):
        return False
    if not target.absolute or target.user is not None or target.password is not None:
        return False
    if target.scheme == "https" and target.host in CDN_HOSTS and target.port == 443:
        return True
    if api_base_url is None:
        return False
    base = yarl.URL(api_base_url)
    return base.scheme in ("http", "https") and (target.scheme, target.host, target.port) == (
        base.scheme,
        base.host,
        base.port,
    )


def _native_poll(poll: Poll) -> discord.Poll:
    """The poll as discord.py's, open for POLL_DURATION; ChannelError where Discord's limits would refuse it."""
    too_long = len(poll.question) > MAX_POLL_QUESTION or any(len(option) > MAX_POLL_ANSWER for option in poll.options)
    if too_long or len(poll.options) > MAX_POLL_ANSWERS:
        raise ChannelError(
            f"a Discord poll takes a question of up to {MAX_POLL_QUESTION} characters and up to "
            f"{MAX_POLL_ANSWERS} answers of up to {MAX_POLL_ANSWER} characters each"
        )
    native = discord.Poll(question=poll.question, duration=POLL_DURATION)
    for option in poll.options:
        native.add_answer(text=option)
    return native


def _file_size(item: OutboundFile) -> int:
    """The file's size on disk; ChannelError when it is missing or over a bot's upload limit."""
    try:
        size = os.stat(item.path).st_size
    except OSError as error:
        raise ChannelError(f"discord: cannot upload {item.name}: {error.strerror}") from error
    if size > MAX_UPLOAD_BYTES:
        raise ChannelError(
            f"discord: {item.name} is {size} bytes; a bot may upload at most {MAX_UPLOAD_BYTES} bytes "
            f"({MAX_UPLOAD_BYTES // (1024 * 1024)} MiB) per file"
        )
    return size


def _batches(media: Sequence[OutboundFile]) -> list[list[OutboundFile]]:
    """The files grouped into messages: at most MAX_FILES_PER_MESSAGE each, their sizes together within the upload
    limit (sizes are checked for every file before anything is sent)."""
    batches: list[list[OutboundFile]] = []
    room = 0
    for item, size in [(item, _file_size(item)) for item in media]:
        if not batches or len(batches[-1]) >= MAX_FILES_PER_MESSAGE or size > room:
            batches.append([])
            room = MAX_UPLOAD_BYTES
        batches[-1].append(item)
        room -= size
    return batches


def _opened(stack: contextlib.ExitStack, batch: Sequence[OutboundFile]) -> list[discord.File]:
    """discord.File for each file, opened now and closed when `stack` closes (discord.py streams them from disk)."""
    files = []
    for item in batch:
        file = discord.File(item.path, filename=item.name)
        stack.callback(file.close)
        files.append(file)
    return files


def _first_options(channel: discord.PartialMessageable, message: OutboundMessage) -> dict[str, Any]:
    """What goes with the first message a send makes: the reply-to and the buttons."""
    options: dict[str, Any] = {}
    if message.reply_to:
        options["reference"] = discord.MessageReference(
            message_id=int(message.reply_to), channel_id=channel.id, fail_if_not_exists=False
        )
    view = _view(message)
    if view is not None:
        options["view"] = view
    return options


def _view(message: OutboundMessage) -> discord.ui.View | None:
    if not message.buttons:
        return None
    view = discord.ui.View(timeout=None)
    for row, buttons in enumerate(message.buttons):
        for button in buttons:
            if not 0 < len(button.value) <= MAX_CUSTOM_ID:
                raise ValueError(f"a Discord button value must be 1 to {MAX_CUSTOM_ID} characters: {button.value!r}")
            item = _ActionButton(button.value, button.label, _STYLES[button.style])
            item.row = row
            view.add_item(item)
    return view


# --- the adapter -----------------------------------------------------------------------------------------------


class DiscordAdapter:
    """One Discord bot account: DMs, guild text channels and threads in, with their files; send (text, files, polls),
    edit, delete, react, typing and thread creation out.

    Its listening is elected (channels.base.ElectedIngress): one key per gateway shard. Started as usual, the
    adapter's client logs in and connects the gateway (shard 0, the others on clients of their own). With
    `ingress_deferred`, it only logs in (REST: sending, editing, downloads), and each shard listens on a client of
    its own between `open_ingress` and `close_ingress`."""

    channel = "discord"
    capabilities = CAPABILITIES

    def __init__(
        self,
        account: str,
        settings: DiscordAccount,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        timing: Timing = REAL_TIME,
    ) -> None:
        self.account = account
        self.settings = settings
        self.ingress_deferred = False  # set by the gateway before start(): then start() connects for sending only
        self._sleep = sleep  # how start() and open_ingress() wait out ready_timeout
        self.timing = timing  # the reconnect storm's clock, waits and jitter
        self.bot_username: str | None = None
        self.bot_user_id: str | None = None
        api_base = settings.api_base_url.rstrip("/") + API_PATH if settings.api_base_url else None
        self._api_base = api_base
        self._client: _Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._inbox: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None
        self._dm_channels: dict[str, int] = {}  # user id -> DM channel id
        self._cdn: aiohttp.ClientSession | None = None  # attachment downloads, over discord.py's connection pool
        self.health = ChannelHealth("discord", account, secrets=[settings.token])
        self.stall_seconds = self._stall_seconds(account, settings)
        # The adapter's own client's gateway connection (shard 0 when sharded; never connected when deferred).
        self._main = _Link(self, 0 if settings.shard_count > 1 else None)
        self._listeners: dict[str, _Link] = {}  # ingress key -> the shard listening on a client of its own
        self._ingress_lock = asyncio.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        """Log in and connect the gateway (every shard); with `ingress_deferred`, log in only: `open_ingress`
        connects a shard's listener."""
        self._on_message, self._on_action = on_message, on_action
        self._ready.clear()
        self._main.stopping.clear()
        self._client = _Client(self, self._api_base, self.settings.gateway_url, self.settings.guild_ready_timeout)
        self._worker = asyncio.create_task(self._deliver(), name=f"discord:{self.account}:deliver")
        self._task = asyncio.create_task(
            self._run(self._client, connect=not self.ingress_deferred), name=f"discord:{self.account}"
        )
        if await self._until_ready(self._ready, self._task):
            self._cdn = self._cdn_session(self._client)
            if not self.ingress_deferred:
                try:
                    for key in self.ingress_keys()[1:]:  # the other shards, on clients of their own
                        await self.open_ingress(key)
                except BaseException:
                    await self.stop()
                    raise
            return
        failure = self._failure(self._task)
        await self.stop()
        raise self._not_ready(failure) from failure

    async def _until_ready(self, ready: asyncio.Event, task: asyncio.Task[None]) -> bool:
        """Whether `ready` is set before `task` ends and within `ready_timeout`."""
        waiting = asyncio.create_task(ready.wait())
        timeout = asyncio.ensure_future(self._sleep(self.settings.ready_timeout))
        try:
            await asyncio.wait({waiting, timeout, task}, return_when="FIRST_COMPLETED")
        finally:
            waiting.cancel()
            timeout.cancel()
        return ready.is_set()

    @staticmethod
    def _failure(task: asyncio.Task[None]) -> BaseException | None:
        return task.exception() if task.done() and not task.cancelled() else None

    def _not_ready(self, failure: BaseException | None) -> DiscordStartError:
        """The error for a client that got no READY (or no login), noted in `health`."""
        if failure is not None:
            start_error = self._start_error(failure)
            self.health.failed(start_error.reason)
            return start_error
        what = "login" if self.ingress_deferred and not self._ready.is_set() else "READY from the gateway"
        error = f"no {what} within {self.settings.ready_timeout:g}s"
        self.health.failed(error)
        return DiscordStartError(error, account=self.account)

    def _start_error(self, failure: BaseException) -> DiscordStartError:
        """A failed login told straight: a refused token (401), a wrong api_base_url (404), no answer at all."""
        api = self.settings.api_base_url or "https://discord.com"
        if isinstance(failure, discord.LoginFailure):  # discord.py's word for a 401 from GET /users/@me
            fix = (
                "reset it in the Discord developer portal (Bot, Reset Token) and set it as "
                f"channels.discord.accounts.{self.account}.token"
            )
            return DiscordStartError(f"the token was refused (401): {fix}", account=self.account, kind="refused")
        if isinstance(failure, discord.HTTPException) and failure.status == 404:
            reason = f"api_base_url {api} answered 404 to GET /users/@me: check api_base_url"
            return DiscordStartError(reason, account=self.account, kind="not_found")
        why = why_unreachable(failure)
        if isinstance(failure, discord.HTTPException | aiohttp.ClientConnectionError | OSError) and why is not None:
            return DiscordStartError(f"cannot reach {api} ({why})", account=self.account, kind="unreachable")
        # The very first gateway connection failed: name both servers, either may be wrong.
        where = f"{self._api_base or 'Discord'} / {self.settings.gateway_url or 'the default gateway'}"
        reason = mask(f"could not connect to {where}: {type(failure).__name__}: {failure}", [self.settings.token])
        return DiscordStartError(reason, account=self.account)

    async def _run(self, client: _Client, *, connect: bool = True) -> None:
        # Interaction callbacks go through discord.py's webhook adapter, found in a context variable; set here,
        # it is inherited by every task the client creates, and by no other client.
        async_context.set(_RoutedWebhookAdapter(self._api_base, self.health))
        async with client:
            if connect:
                await client.start(self.settings.token, reconnect=True)
                return
            await client.login(self.settings.token)  # REST only: no gateway connection until open_ingress
            self._logged_in(client, gateway=False)
            await client.link.stopping.wait()

    async def stop(self) -> None:
        for key in list(self._listeners):
            await self.close_ingress(key)
        if self._cdn is not None:  # before the client, which closes the connector under it
            await self._cdn.close()
            self._cdn = None
        # Set just before the client closes (which marks it closed at once): a storm's wait cut short then finds the
        # client closed, and discord.py's connect loop ends quietly.
        self._main.stopping.set()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
        for task in (self._task, self._worker):
            if task is None:
                continue
            if task is self._worker:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(10):
                    await task
        self._task = self._worker = None
        self.health.set("stopped")

    def _logged_in(self, client: _Client, *, gateway: bool) -> None:
        """The adapter's own client is ready to send: READY on its gateway, or (deferred) its login."""
        if client.user is not None:
            self.bot_username = client.user.name
            self.bot_user_id = str(client.user.id)
            if gateway:
                log.info(
                    "discord %s: ready as %s (%s) in %d guilds",
                    self.account,
                    client.user,
                    client.user.id,
                    len(client.guilds),
                )
            else:
                log.info(
                    "discord %s: logged in as %s (%s); listening when elected",
                    self.account,
                    client.user,
                    client.user.id,
                )
        self._ready.set()
        if not gateway:
            self.health.set("connected")

    def _on_ready(self, client: _Client) -> None:
        if client is self._client:
            self._logged_in(client, gateway=True)
        else:
            log.info(
                "discord %s: listening as shard %s of %d",
                self.account,
                client.link.shard_id,
                self.settings.shard_count,
            )
        client.link.ready.set()
        client.link.connected()

    # --- elected listening (channels.base.ElectedIngress) ----------------------------------------------------

    def ingress_keys(self) -> list[str]:
        """One key per gateway shard, `discord:<sha256 of the token, 16 hex digits>:shard:<i>/<count>`: the same in
        every process on this bot token, and no secret."""
        digest = hashlib.sha256(self.settings.token.encode()).hexdigest()[:16]
        count = self.settings.shard_count
        return [f"discord:{digest}:shard:{index}/{count}" for index in range(count)]

    def _shard_of(self, key: str) -> int:
        try:
            return self.ingress_keys().index(key)
        except ValueError:
            raise ValueError(f"discord {self.account}: no ingress key {key!r}") from None

    async def open_ingress(self, key: str) -> None:
        """Connect the gateway as this key's shard, on a client of its own, and return once it got READY (after
        `start()`); idempotent. DiscordStartError when it gets no READY within `ready_timeout` (nothing stays
        open then)."""
        shard = self._shard_of(key)
        async with self._ingress_lock:
            if key in self._listeners or (shard == 0 and not self.ingress_deferred):
                return  # already listening (undeferred, shard 0 is the adapter's own client's)
            self._require_client()
            link = _Link(self, shard if self.settings.shard_count > 1 else None)
            link.client = _Client(
                self, self._api_base, self.settings.gateway_url, self.settings.guild_ready_timeout, link=link
            )
            link.task = asyncio.create_task(self._run(link.client), name=f"discord:{self.account}:shard:{shard}")
            self._listeners[key] = link
            if await self._until_ready(link.ready, link.task):
                link.task.add_done_callback(lambda task: self._listener_ended(link, task))
                return
            failure = self._failure(link.task)
            del self._listeners[key]
            await self._close_link(link)
            raise self._not_ready(failure) from failure

    async def close_ingress(self, key: str) -> None:
        """Close this key's gateway connection cleanly (code 1000, no resume, no reconnect; its watchdog and storm
        count go with it); sending keeps working; idempotent. Undeferred, shard 0 stays with the adapter's own
        client until `stop()`."""
        self._shard_of(key)
        async with self._ingress_lock:
            link = self._listeners.pop(key, None)
            if link is None:
                return
            await self._close_link(link)
            log.info("discord %s: stopped listening as %s", self.account, key)
            if not self._listeners and self.ingress_deferred and self.health.state in UNHEALTHY:
                self.health.set("connected")  # what was unwell was the listener; sending is fine

    def _listener_ended(self, link: _Link, task: asyncio.Task[None]) -> None:
        """A listener's client gave up on its own (discord.py does on a gateway close it cannot resume: a revoked
        token, an intent not allowed): the account hears nothing on that shard while still holding it."""
        if link.stopping.is_set() or task.cancelled():
            return
        error = task.exception()
        reason = f"the gateway listener of shard {link.shard_id or 0} ended"
        if error is not None:
            reason += f": {type(error).__name__}: {error}"
        log.error("discord %s: %s", self.account, mask(reason, [self.settings.token]))
        self.health.set("stalled", reason)

    @staticmethod
    async def _close_link(link: _Link) -> None:
        link.stopping.set()  # first: a storm's wait ends, and the disconnect is not taken for a stall
        if link.client is not None:
            with contextlib.suppress(Exception):
                await link.client.close()
        if link.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(10):
                    await link.task

    # --- the connection's health -------------------------------------------------------------------------------

    @staticmethod
    def _stall_seconds(account: str, settings: DiscordAccount) -> float:
        """`stall_seconds`, but never below Discord's heartbeat interval on the real gateway (a configured gateway
        sets its own interval: a test server's may be short)."""
        if settings.gateway_url or settings.stall_seconds >= MIN_STALL_SECONDS:
            return settings.stall_seconds
        log.warning(
            "discord %s: stall_seconds %g is shorter than Discord's heartbeat interval; %g is used",
            account,
            settings.stall_seconds,
            MIN_STALL_SECONDS,
        )
        return MIN_STALL_SECONDS

    @staticmethod
    def _cdn_session(client: _Client) -> aiohttp.ClientSession:
        """A session for CDN downloads on discord.py's connector (set at login): its pool and TLS settings, none of
        its headers, so the bot token never goes to the CDN. The adapter closes it; the connector stays the
        client's."""
        return aiohttp.ClientSession(connector=client.http.connector, connector_owner=False, timeout=CDN_TIMEOUT)

    # --- inbound -----------------------------------------------------------------------------------------------

    def _queue_message(self, message: discord.Message) -> None:
        # discord.py runs each event handler in its own task; one queue and one worker keep arrival order.
        self._inbox.put_nowait(lambda: self._handle_message(message))

    async def _deliver(self) -> None:
        while True:
            job = await self._inbox.get()
            try:
                await job()
            except Exception:
                log.exception("discord %s: an event could not be delivered; skipped", self.account)

    async def _handle_message(self, message: discord.Message) -> None:
        if self._on_message is None or self._client is None:
            return
        me = self._client.user
        if me is not None and message.author.id == me.id:
            return  # our own sends come back over the gateway
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, thread-created notices and the like
        inbound = self._normalize(message, me)
        if inbound is not None:
            await self._on_message(inbound)

    def _normalize(self, message: discord.Message, me: discord.ClientUser | None) -> InboundMessage | None:
        author = message.author
        channel = message.channel
        parent: Peer | None = None
        thread_id: str | None = None
        if message.guild is None:
            peer = Peer("direct", str(author.id))
            self._dm_channels[str(author.id)] = channel.id
        else:
            peer = Peer("channel", str(channel.id))
            if isinstance(channel, discord.Thread):
                thread_id = str(channel.id)
                if channel.parent_id is not None:
                    parent = Peer("channel", str(channel.parent_id))
        roles: tuple[str, ...] = ()
        if isinstance(author, discord.Member):
            roles = tuple(str(role.id) for role in author.roles if not role.is_default())
        reference = message.reference
        reply_to = str(reference.message_id) if reference is not None and reference.message_id else None
        resolved = reference.resolved if reference is not None else None
        reply_to_bot = me is not None and isinstance(resolved, discord.Message) and resolved.author.id == me.id
        mentioned = me is not None and any(user.id == me.id for user in message.mentions)
        text = message.content
        if me is not None:  # `<@bot> hello` reads as `hello` (and `<@bot> /new` as a command)
            text = re.sub(rf"<@!?{me.id}>", "", text).strip()
        return InboundMessage(
            channel=self.channel,
            account=self.account,
            peer=peer,
            parent_peer=parent,
            guild=str(message.guild.id) if message.guild is not None else None,
            member_roles=roles,
            sender_id=str(author.id),
            sender_name=author.display_name,
            sender_is_bot=author.bot,
            text=text,
            message_id=str(message.id),
            reply_to=reply_to,
            reply_to_bot=reply_to_bot,
            thread_id=thread_id,
            was_mentioned=mentioned or reply_to_bot,
            attachments=[_attachment(item, message.flags.voice) for item in message.attachments],
        )

    async def _on_click(self, interaction: discord.Interaction[discord.Client], value: str) -> None:
        notice = None
        try:
            event = self._action_event(interaction, value)
            if event is not None and self._on_action is not None:
                notice = await within(
                    self._on_action(event), NOTICE_BUDGET_SECONDS, f"discord {self.account}: a click"
                )  # Discord waits 3 seconds for an answer
        finally:
            try:  # a notice only the clicker sees, else a deferred update: the message stays as it is
                if notice:
                    await interaction.response.send_message(notice, ephemeral=True)
                else:
                    await interaction.response.defer()
            except discord.HTTPException as error:
                log.warning("discord %s: could not answer a button click: %s", self.account, error)

    def _action_event(self, interaction: discord.Interaction[discord.Client], value: str) -> ActionEvent | None:
        if interaction.message is None or interaction.channel_id is None:
            return None
        user = interaction.user
        channel = interaction.channel
        thread_id = str(channel.id) if isinstance(channel, discord.Thread) else None
        if interaction.guild_id is None:
            peer = Peer("direct", str(user.id))
            self._dm_channels[str(user.id)] = interaction.channel_id
        else:
            peer = Peer("channel", str(interaction.channel_id))
        return ActionEvent(
            channel=self.channel,
            account=self.account,
            peer=peer,
            sender_id=str(user.id),
            sender_name=user.display_name,
            message_id=str(interaction.message.id),
            value=value,
            thread_id=thread_id,
            click_id=str(interaction.id),
        )

    # --- outbound ----------------------------------------------------------------------------------------------

    def _require_client(self) -> _Client:
        if self._client is None or not self._ready.is_set():
            raise RuntimeError(f"discord account {self.account} is not connected")
        return self._client

    async def _channel(self, target: ChatTarget) -> discord.PartialMessageable:
        client = self._require_client()
        if target.thread_id:
            return client.get_partial_messageable(int(target.thread_id))
        peer_id = target.peer.id
        if peer_id is None:
            raise ValueError(f"discord: a target needs a peer id: {target}")
        if target.peer.kind == "direct":
            channel_id = self._dm_channels.get(peer_id)
            if channel_id is None:  # not seen since start: ask Discord for the DM channel (it returns the same one)
                data = await client.http.start_private_message(int(peer_id))
                channel_id = self._dm_channels[peer_id] = int(data["id"])
            return client.get_partial_messageable(channel_id, type=discord.ChannelType.private)
        return client.get_partial_messageable(int(peer_id))

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Send the text; with `media`, the files (the text as their caption, at most 10 files a message); with
        `poll`, the text and then a native poll. The reply-to and buttons go with the first message sent; returns the
        last message's id."""
        channel = await self._channel(
            target.model_copy(update={"thread_id": message.thread_id}) if message.thread_id else target
        )
        options = _first_options(channel, message)
        if message.poll is not None:
            return await self._send_poll(channel, message.text, message.poll, options)
        if message.media:
            return await self._send_files(channel, message.text, message.media, options)
        sent = await channel.send(message.text, **options)
        return str(sent.id)

    async def _send_poll(
        self, channel: discord.PartialMessageable, text: str, poll: Poll, options: dict[str, Any]
    ) -> str:
        native = _native_poll(poll)
        if text:
            await channel.send(text, **options)
            options = {}
        sent = await channel.send(poll=native, **options)
        return str(sent.id)

    async def _send_files(
        self, channel: discord.PartialMessageable, text: str, media: Sequence[OutboundFile], options: dict[str, Any]
    ) -> str:
        batches = _batches(media)
        caption: str | None = text or None
        if caption is not None and len(caption) > self.capabilities.max_caption_length:
            await channel.send(caption, **options)
            caption, options = None, {}
        sent_id = ""
        for batch in batches:
            with contextlib.ExitStack() as stack:
                sent = await channel.send(caption, files=_opened(stack, batch), **options)
            sent_id, caption, options = str(sent.id), None, {}
        return sent_id

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        channel = await self._channel(target)
        await channel.get_partial_message(int(message_id)).edit(content=message.text, view=_view(message))

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        channel = await self._channel(target)
        await channel.get_partial_message(int(message_id)).delete()

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        channel = await self._channel(target)
        await channel.get_partial_message(int(message_id)).add_reaction(emoji)

    async def typing(self, target: ChatTarget) -> None:
        channel = await self._channel(target)
        await channel.typing()

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """A public thread in the target's guild channel, started from message `message_id` when given; returns the
        thread's channel id, which is how a ChatTarget's `thread_id` names a Discord thread (messages in it come
        with the thread as peer and as thread_id, and sends go to the thread_id)."""
        client = self._require_client()
        channel_id = self._thread_parent(target)
        title = name.strip()[:MAX_THREAD_NAME]
        if not title:
            raise ChannelError("discord: a thread needs a name")
        if message_id:
            data = await client.http.start_thread_with_message(
                channel_id, int(message_id), name=title, auto_archive_duration=THREAD_ARCHIVE_MINUTES
            )
        else:
            data = await client.http.start_thread_without_message(
                channel_id, name=title, auto_archive_duration=THREAD_ARCHIVE_MINUTES, type=PUBLIC_THREAD
            )
        return str(data["id"])

    def _thread_parent(self, target: ChatTarget) -> int:
        """The guild channel a new thread goes in; ChannelError where Discord has no threads (DMs, threads)."""
        peer_id = target.peer.id
        if target.peer.kind == "direct" or peer_id is None:
            raise ChannelError("discord: threads start in a guild channel; direct messages have no threads")
        # The channel as the gateway described it: the adapter's own client's cache, or (deferred) a listener's.
        clients = [self._client, *(link.client for link in self._listeners.values())]
        known = [client.get_channel(int(peer_id)) for client in clients if client is not None]
        if target.thread_id or any(isinstance(channel, discord.Thread) for channel in known):
            raise ChannelError("discord: a thread cannot start inside a thread; start it in the parent channel")
        return int(peer_id)

    # --- files -------------------------------------------------------------------------------------------------

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The attachment's bytes from Discord's CDN, DOWNLOAD_CHUNK at a time; ChannelError for a ref that is not
        a CDN URL, an answer other than 200 (redirects included: they could lead anywhere), or a broken transfer."""
        what = attachment.name or "an attachment"
        if not cdn_url_allowed(attachment.ref, self.settings.api_base_url):
            raise ChannelError(f"discord: {what} is not on Discord's CDN; not fetched")
        if self._cdn is None:
            raise ChannelError(f"discord account {self.account} is not connected")
        try:
            async with self._cdn.get(yarl.URL(attachment.ref), allow_redirects=False) as response:
                if response.status != 200:
                    raise ChannelError(f"discord: could not download {what}: the CDN answered HTTP {response.status}")
                async for chunk in response.content.iter_chunked(DOWNLOAD_CHUNK):
                    yield chunk
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ChannelError(f"discord: could not download {what}: {type(error).__name__}: {error}") from error
