"""DiscordAdapter: one bot account's start and stop, elected shard listeners, inbound queue, and outbound calls."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable

import aiohttp
import discord
import yarl
from discord.webhook.async_ import async_context

from channels.accounts import DiscordAccount
from channels.backoff import REAL_TIME, Timing
from channels.base import (
    NOTICE_BUDGET_SECONDS,
    Attachment,
    ChatTarget,
    OnAction,
    OnMessage,
    OutboundMessage,
    within,
)
from channels.discord.cdn import DOWNLOAD_CHUNK, cdn_session, cdn_url_allowed
from channels.discord.client import Client
from channels.discord.errors import DiscordStartError, start_failure
from channels.discord.gateway import Link, stall_seconds
from channels.discord.parsing import action_event, normalize
from channels.discord.sending import (
    CAPABILITIES,
    MAX_THREAD_NAME,
    PUBLIC_THREAD,
    THREAD_ARCHIVE_MINUTES,
    buttons_view,
    first_options,
    send_files,
    send_poll,
)
from channels.discord.servers import API_PATH, RoutedWebhookAdapter
from channels.health import UNHEALTHY, ChannelHealth
from channels.start_errors import mask
from routing.errors import ChannelError

log = logging.getLogger("channels.discord")  # the package's one logger, as when it was one module


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
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._inbox: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None
        self._dm_channels: dict[str, int] = {}  # user id -> DM channel id
        self._cdn: aiohttp.ClientSession | None = None  # attachment downloads, over discord.py's connection pool
        self.health = ChannelHealth("discord", account, secrets=[settings.token])
        self.stall_seconds = stall_seconds(account, settings)
        # The adapter's own client's gateway connection (shard 0 when sharded; never connected when deferred).
        self._main = Link(self, 0 if settings.shard_count > 1 else None)
        self._listeners: dict[str, Link] = {}  # ingress key -> the shard listening on a client of its own
        self._ingress_lock = asyncio.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        """Log in and connect the gateway (every shard); with `ingress_deferred`, log in only: `open_ingress`
        connects a shard's listener."""
        self._on_message, self._on_action = on_message, on_action
        self._ready.clear()
        self._main.stopping.clear()
        self._client = Client(self, self._api_base, self.settings.gateway_url, self.settings.guild_ready_timeout)
        self._worker = asyncio.create_task(self._deliver(), name=f"discord:{self.account}:deliver")
        self._task = asyncio.create_task(
            self._run(self._client, connect=not self.ingress_deferred), name=f"discord:{self.account}"
        )
        if await self._until_ready(self._ready, self._task):
            self._cdn = cdn_session(self._client)
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
            start_error = start_failure(failure, account=self.account, settings=self.settings, api_base=self._api_base)
            self.health.failed(start_error.reason)
            return start_error
        what = "login" if self.ingress_deferred and not self._ready.is_set() else "READY from the gateway"
        error = f"no {what} within {self.settings.ready_timeout:g}s"
        self.health.failed(error)
        return DiscordStartError(error, account=self.account)

    async def _run(self, client: Client, *, connect: bool = True) -> None:
        # Interaction callbacks go through discord.py's webhook adapter, found in a context variable; set here,
        # it is inherited by every task the client creates, and by no other client.
        async_context.set(RoutedWebhookAdapter(self._api_base, self.health))
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

    def _logged_in(self, client: Client, *, gateway: bool) -> None:
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

    def _on_ready(self, client: Client) -> None:
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
            link = Link(self, shard if self.settings.shard_count > 1 else None)
            link.client = Client(
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

    def _listener_ended(self, link: Link, task: asyncio.Task[None]) -> None:
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
    async def _close_link(link: Link) -> None:
        link.stopping.set()  # first: a storm's wait ends, and the disconnect is not taken for a stall
        if link.client is not None:
            with contextlib.suppress(Exception):
                await link.client.close()
        if link.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(10):
                    await link.task

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
        inbound = normalize(message, me, channel_name=self.channel, account=self.account, dm_channels=self._dm_channels)
        if inbound is not None:
            await self._on_message(inbound)

    async def _on_click(self, interaction: discord.Interaction[discord.Client], value: str) -> None:
        notice = None
        try:
            event = action_event(
                interaction, value, channel_name=self.channel, account=self.account, dm_channels=self._dm_channels
            )
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

    # --- outbound ----------------------------------------------------------------------------------------------

    def _require_client(self) -> Client:
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
        options = first_options(channel, message)
        if message.poll is not None:
            return await send_poll(channel, message.text, message.poll, options)
        if message.media:
            return await send_files(channel, message.text, message.media, options, self.capabilities.max_caption_length)
        sent = await channel.send(message.text, **options)
        return str(sent.id)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        channel = await self._channel(target)
        await channel.get_partial_message(int(message_id)).edit(content=message.text, view=buttons_view(message))

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
