"""The discord.Client of one adapter: its intents and servers, its watched gateway loop, guarded parsers, buttons."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
import discord
import discord.ui
from discord.gateway import DiscordWebSocket, ReconnectWebSocket
from discord.http import HTTPClient

from channels.discord.gateway import CONNECT_SECONDS, Link, LinkOwner
from channels.discord.servers import RoutedHTTPClient
from channels.start_errors import mask

log = logging.getLogger("channels.discord")  # the package's one logger, as when it was one module

# The model must not ping @everyone or whole roles because some text said so; users and replies are fine.
_ALLOWED_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)


# --- the client ------------------------------------------------------------------------------------------------


class ActionButton(discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=r"(?P<value>[\s\S]+)"):
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
    ) -> ActionButton:
        return cls(match["value"])

    async def callback(self, interaction: discord.Interaction[discord.Client]) -> None:
        client = interaction.client
        if isinstance(client, Client):
            await client.adapter._on_click(interaction, self.value)


class ClientOwner(LinkOwner, Protocol):
    """What a Client calls on its adapter (DiscordAdapter): its own link, and its handlers for READY, messages and
    button clicks."""

    _main: Link

    def _on_ready(self, client: Client) -> None: ...

    def _queue_message(self, message: discord.Message) -> None: ...

    async def _on_click(self, interaction: discord.Interaction[discord.Client], value: str) -> None: ...


class Client(discord.Client):
    """discord.Client with this adapter's servers, guarded event parsers, and the adapter's handlers; its gateway
    connection watched by `link` (the adapter's own by default), as one shard of `link`'s when sharded."""

    def __init__(
        self,
        adapter: ClientOwner,
        api_base: str | None,
        gateway: str | None,
        guild_ready_timeout: float,
        *,
        link: Link | None = None,
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
        http = RoutedHTTPClient(self.loop, api_base, gateway, health=adapter.health)
        _reach_into_the_client(self, http, adapter.account)

    async def connect(self, *, reconnect: bool = True) -> None:
        """The gateway loop: discord.py's own (`Client.connect`, step for step;
        tests/channels/test_discord_watchdog.py pins the version it follows) with the adapter's watchdog in it. Each
        new connection first waits its turn (`Link.before_connect`: a reconnect storm's backoff, up to BACKOFF_CAP),
        before the CONNECT_SECONDS the connection itself gets, not within them as anything inside discord.py's loop
        would be; and a connection that still delivers events but acknowledges no heartbeat for `stall_seconds` is
        left and its session resumed. discord.py's own loop reconnects at once after any close it can resume and
        waits only after a failed connection (a random 0 to 2, 4 … 1024 s); here every reconnect goes through the one
        gate."""
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
        self.add_dynamic_items(ActionButton)

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
# tests/project/test_private_apis.py fails if discord.py changes either.


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
