"""A fake Discord on 127.0.0.1: the REST API under /api/v10 and the gateway WebSocket, as discord.py 2.7 uses them.

    async with FakeDiscord() as discord_server:
        account = {"token": discord_server.token, **discord_server.urls}    # api_base_url + gateway_url
        ...                                                                 # start the adapter
        await discord_server.dm("hi", user=discord_server.alice)
        await discord_server.wait_for_posts(1)                              # what the bot posted

One guild is set up (`GUILD_ID`) with a text channel (`CHANNEL_ID`), a thread in it (`THREAD_ID`) and a role
(`ROLE_ID`). Every request is recorded in `requests`; the bot's messages are in `messages`. `rate_limit(n)` makes
the next n REST calls answer 429 the way Discord does (so discord.py waits and retries).

Files: `attachment(data, name, type)` keeps bytes on the fake's CDN (`/attachments/...`, downloads recorded in
`downloads`) and returns the attachment object for a message, which `message_with_files` posts:

    photo = discord_server.attachment(png_bytes, "cat.png", "image/png")
    await discord_server.message_with_files([photo], "look")                # a DM from alice; channel_id= for a guild
    await discord_server.message_with_files([discord_server.attachment(ogg, "voice-message.ogg", "audio/ogg",
                                                                       duration=3.5)], voice=True)

What the bot uploads (multipart: `payload_json` + `files[n]`) is in `uploads()`, each file with its bytes; its
messages carry the files as attachments on this CDN too. Polls come back on the message (`messages[id]["poll"]`);
threads the bot starts (from a message, or in a channel) are in `threads` and announced with THREAD_CREATE.

The gateway keeps each session (what IDENTIFY starts) apart from the connections that carry it: every event is
numbered in its session, and a RESUME on a new connection replays the events after the `seq` the bot names, as
Discord's does (nothing the bot missed is lost, nothing it had comes twice); an unknown session gets INVALID_SESSION.

A bad gateway: `stop_acking()` makes the open connections zombies, the kind Discord tells clients to leave and resume:
they keep delivering events (and, with `chatter`, a typing event every so often, so they are never silent) but
acknowledge no heartbeat; new connections are healthy. `go_silent()` makes the open and new connections say nothing
at all (their events wait in the session for a RESUME) until `speak_again()`. `close_new_connections = True` closes
every connection right after its IDENTIFY or RESUME. `connections` counts the gateway connections made,
`open_connections` those open now; `heartbeat_interval_ms` is what HELLO asks for. A sharded bot gets each event on the
shard Discord would send it on (see `dispatch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import mimetypes
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import BodyPartReader, WSMsgType, hdrs, web
from helpers import WAIT, eventually

BOT_ID = "1100000000000000001"
APP_ID = BOT_ID
GUILD_ID = "1200000000000000001"
CHANNEL_ID = "1300000000000000001"
OTHER_CHANNEL_ID = "1300000000000000002"
THREAD_ID = "1400000000000000001"
ROLE_ID = "1500000000000000001"
OTHER_ROLE_ID = "1500000000000000002"
TIMESTAMP = "2025-01-01T00:00:00.000000+00:00"
MAX_CONTENT = 2000
MAX_THREAD_NAME = 100
MAX_UPLOAD = 10 * 1024 * 1024  # a bot's limit per file in DMs and unboosted guilds
DISCORD_EPOCH_MS = 1420070400000  # a snowflake's time counts from here
VOICE_MESSAGE_FLAG = 8192
GUILD_TEXT_CHANNELS = (CHANNEL_ID, OTHER_CHANNEL_ID)
# Application flags: the Message Content Intent, switched on in the Developer Portal (the limited one is an unverified
# bot's, in fewer than 100 guilds).
GATEWAY_MESSAGE_CONTENT = 1 << 19
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 18


@dataclass(frozen=True)
class FakeUser:
    id: str
    username: str
    bot: bool = False

    def payload(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "username": self.username,
            "global_name": self.username.title(),
            "discriminator": "0",
            "avatar": None,
            "bot": self.bot,
        }


@dataclass(frozen=True)
class UploadedFile:
    """One `files[n]` part of a multipart request, as it arrived."""

    field: str
    filename: str
    content_type: str
    data: bytes


@dataclass
class RecordedRequest:
    method: str
    path: str  # without the /api/v10 prefix
    query: dict[str, str]
    body: Any  # the JSON body (a multipart request's payload_json)
    status: int = 0
    files: list[UploadedFile] = field(default_factory=list)  # a multipart request's files, in order
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Session:
    """A gateway session: its id, its shard, and every event sent in it (an event's `s` is its place in `events`,
    from 1), which a RESUME replays from."""

    session_id: str
    shard: tuple[int, int] | None = None  # IDENTIFY's [shard_id, num_shards], when the bot is sharded
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(eq=False)
class _Connection:
    """One gateway WebSocket and the session it carries (none before its READY or RESUMED)."""

    ws: web.WebSocketResponse
    session: _Session | None = None
    silent: bool = False  # go_silent: it answers nothing and writes no event (they wait in the session)
    acking: bool = True  # False (stop_acking): events flow, heartbeats go unacknowledged
    chatter: asyncio.Task[None] | None = None


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py parses a body only if Content-Type is exactly application/json (no charset).
    return web.Response(
        body=json.dumps(data).encode(), status=status, headers={"Content-Type": "application/json", **(headers or {})}
    )


class FakeDiscord:
    """The server; see the module docstring. Helpers that inject events wait until a bot is connected."""

    token = "fake-discord-token"

    def __init__(self, *, echo_own_messages: bool = True, message_content_intent: bool = True) -> None:
        self.bot = FakeUser(BOT_ID, "switchbot", bot=True)
        self.alice = FakeUser("1000000000000000011", "alice")
        self.bob = FakeUser("1000000000000000012", "bob")
        self.other_bot = FakeUser("1000000000000000013", "otherbot", bot=True)
        self.echo_own_messages = echo_own_messages  # the real gateway sends the bot's own messages back to it
        # `GET /applications/@me` flags: the Message Content Intent is on unless a test turns it off
        self.application_flags = GATEWAY_MESSAGE_CONTENT if message_content_intent else 0
        self.requests: list[RecordedRequest] = []
        self.messages: dict[str, dict[str, Any]] = {}  # every message the bot posted, by id (edits applied)
        self.posted: dict[str, dict[str, Any]] = {}  # every message a test posted (dm, guild_message …), by id
        self.threads: dict[str, dict[str, Any]] = {}  # threads the bot started, by id
        self.cdn: dict[str, tuple[bytes, str]] = {}  # attachment path -> (bytes, content type)
        self.downloads: list[RecordedRequest] = []  # GETs of attachment URLs
        self.deleted: list[str] = []
        self.reactions: list[tuple[str, str, str]] = []  # (channel id, message id, emoji)
        self.interaction_callbacks: list[tuple[str, dict[str, Any]]] = []  # (interaction id, body)
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.send_ready = True  # False: IDENTIFY is never answered
        self.heartbeat_interval_ms = 41250
        self.connections = 0  # gateway connections made, in all
        self.close_new_connections = False  # True: each connection is closed right after its IDENTIFY or RESUME
        self._silent = False  # new connections say nothing (see go_silent)
        self._ids = itertools.count(1600000000000000001)
        self._session_numbers = itertools.count(1)
        self._sessions: dict[str, _Session] = {}  # by session id: what a RESUME may continue
        self._connections: list[_Connection] = []
        self._rate_limited = 0
        self._retry_after = 0.05
        self._rate_limit_match: Callable[[str, str], bool] = lambda method, path: True
        self._runner: web.AppRunner | None = None
        self._port = 0

    # --- addresses -------------------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/gateway"

    @property
    def urls(self) -> dict[str, str]:
        """The account settings that point an adapter here."""
        return {"api_base_url": self.root, "gateway_url": self.gateway_url}

    def dm_channel_id(self, user: FakeUser) -> str:
        """Each user's DM channel with the bot (a fixed id derived from theirs)."""
        return str(int(user.id) + 700000000000000000)

    # --- start and stop --------------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=4 * MAX_UPLOAD)  # over the limit is Discord's 413, not aiohttp's
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{path:.*}", self._download)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        for connection in list(self._connections):
            if connection.chatter is not None:
                connection.chatter.cancel()
            with contextlib.suppress(Exception):
                await connection.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- the guild -------------------------------------------------------------------------------------------

    def guild_payload(self) -> dict[str, Any]:
        everyone = {"id": GUILD_ID, "name": "@everyone", "permissions": "0", "position": 0, "color": 0}
        roles = [
            everyone,
            {"id": ROLE_ID, "name": "support", "permissions": "0", "position": 1, "color": 0},
            {"id": OTHER_ROLE_ID, "name": "regulars", "permissions": "0", "position": 2, "color": 0},
        ]
        channels = [
            {"id": CHANNEL_ID, "type": 0, "name": "general", "position": 0, "guild_id": GUILD_ID},
            {"id": OTHER_CHANNEL_ID, "type": 0, "name": "random", "position": 1, "guild_id": GUILD_ID},
        ]
        threads = [
            {
                "id": THREAD_ID,
                "type": 11,
                "name": "a thread",
                "guild_id": GUILD_ID,
                "parent_id": CHANNEL_ID,
                "owner_id": self.alice.id,
                "message_count": 1,
                "member_count": 1,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": TIMESTAMP,
                    "locked": False,
                },
            }
        ]
        return {
            "id": GUILD_ID,
            "name": "Fake Guild",
            "icon": None,
            "owner_id": self.alice.id,
            "roles": roles,
            "emojis": [],
            "stickers": [],
            "features": [],
            "channels": channels,
            "threads": threads,
            "members": [],
            "member_count": 3,
            "large": False,
            "unavailable": False,
            "joined_at": TIMESTAMP,
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "system_channel_flags": 0,
        }

    # --- the gateway -----------------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        connection = _Connection(ws, silent=self._silent)
        self._connections.append(connection)
        try:
            await ws.send_json({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op = payload.get("op")
                if op == 1:
                    self.heartbeats += 1
                if connection.silent:  # it hears (and counts heartbeats) but answers nothing
                    continue
                if op in (2, 6) and self.close_new_connections:
                    await ws.close(code=4000, message=b"fake: every connection is closed")
                    break
                if op == 1 and connection.acking:
                    await ws.send_json({"op": 11})
                elif op == 2:
                    await self._identify(connection, payload["d"])
                elif op == 6:
                    await self._resume(connection, payload["d"])
        finally:
            self._connections.remove(connection)
            if connection.chatter is not None:
                connection.chatter.cancel()
        return ws

    async def _identify(self, connection: _Connection, data: dict[str, Any]) -> None:
        self.identifies.append(data)
        shard = (int(data["shard"][0]), int(data["shard"][1])) if data.get("shard") else None
        session = _Session(f"session-{next(self._session_numbers)}", shard)
        self._sessions[session.session_id] = session
        if self.send_ready:
            await self._ready(connection, session)

    async def _ready(self, connection: _Connection, session: _Session) -> None:
        ready = {
            "v": 10,
            "user": {**self.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "session_id": session.session_id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": APP_ID, "flags": 0},
            "private_channels": [],
            "relationships": [],
        }
        await self._write(connection, session, "READY", ready)
        # The guild comes right after READY, and every event after the guild (the connection takes events once it
        # has its session), on the same connection: however soon discord.py's guild_ready_timeout calls the bot
        # ready, it knows the guild before it needs it.
        await self._write(connection, session, "GUILD_CREATE", self.guild_payload())
        connection.session = session

    async def _resume(self, connection: _Connection, data: dict[str, Any]) -> None:
        """The events of the session after the bot's `seq`, then RESUMED; the session's other connection (the one
        the bot left) gets no more events."""
        self.resumes.append(data)
        session = self._sessions.get(str(data.get("session_id")))
        if session is None:
            await connection.ws.send_json({"op": 9, "d": False})  # INVALID_SESSION: not resumable
            return
        sent = int(data.get("seq") or 0)
        while sent < len(session.events):  # events sent meanwhile on the old connection are caught up too
            await connection.ws.send_json(session.events[sent])
            sent += 1
        for other in self._connections:
            if other.session is session:
                other.session = None
        connection.session = session
        await self._send(connection, "RESUMED", {})

    async def _write(self, connection: _Connection, session: _Session, event: str, data: Any) -> None:
        """Number an event in its session and send it on the connection (unless silent). A connection closing under
        it drops it, as a network would; the session keeps it for a RESUME."""
        frame = {"op": 0, "t": event, "s": len(session.events) + 1, "d": data}
        session.events.append(frame)
        if not connection.silent:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await connection.ws.send_json(frame)

    async def _send(self, connection: _Connection, event: str, data: Any) -> None:
        if connection.session is not None:
            await self._write(connection, connection.session, event, data)

    def _identified(self) -> list[_Connection]:
        return [connection for connection in self._connections if connection.session is not None]

    async def _connected(self) -> list[_Connection]:
        await eventually(lambda: bool(self._identified()), "a bot connected to the fake Discord gateway")
        return self._identified()

    @property
    def open_connections(self) -> int:
        """The gateway connections open now (`connections` counts all ever made)."""
        return len(self._connections)

    async def dispatch(self, event: str, data: Any, *, wait: bool = True) -> None:
        """Send one gateway event (anything, malformed included) to every connected bot (a silent connection keeps
        it in its session for a RESUME); to a sharded bot, on the shard Discord would use (a guild's:
        `(guild_id >> 22) % num_shards`; DMs: shard 0). `wait=False`: to the bots connected now, none if none is (a
        bot without a gateway connection misses it)."""
        for connection in await self._connected() if wait else self._identified():
            if _on_shard(connection, data):
                await self._send(connection, event, data)

    def stop_acking(self, *, chatter: float | None = None) -> None:
        """The open connections become zombies: they acknowledge no heartbeat from now on, and keep delivering
        events; with `chatter`, a typing event every `chatter` seconds besides, so that they are never silent. New
        connections are healthy (a zombie connection does not heal; a new one works)."""
        for connection in self._connections:
            connection.acking = False
            if chatter is not None and connection.chatter is None:
                connection.chatter = asyncio.create_task(self._chatter(connection, chatter))

    async def _chatter(self, connection: _Connection, every: float) -> None:
        typing = {"channel_id": self.dm_channel_id(self.alice), "user_id": self.alice.id}
        while not connection.ws.closed:
            await asyncio.sleep(every)
            await self._send(connection, "TYPING_START", typing | {"timestamp": int(time.time())})

    def go_silent(self) -> None:
        """The open connections, and new ones until `speak_again()`, say nothing more: no heartbeat ACK, no answer,
        no event (events wait in their session, replayed when a RESUME names it)."""
        self._silent = True
        for connection in self._connections:
            connection.silent = True

    def speak_again(self) -> None:
        """New connections work again; the silent ones stay silent."""
        self._silent = False

    async def drop_connection(self, code: int = 4000) -> None:
        """Close the gateway connections abruptly (discord.py reconnects and resumes; not after a `code` such as
        4004, authentication failed)."""
        for connection in list(self._connections):
            await connection.ws.close(code=code, message=b"fake reset")

    # --- injecting messages ----------------------------------------------------------------------------------

    def _message(self, channel_id: str, author: FakeUser, content: str, **extra: Any) -> dict[str, Any]:
        message = {
            "id": str(next(self._ids)),
            "channel_id": channel_id,
            "author": author.payload(),
            "content": content,
            "timestamp": TIMESTAMP,
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "components": [],
            "flags": 0,
            **extra,
        }
        if author != self.bot:
            self.posted[message["id"]] = message
        return message

    def _reply_fields(self, reply_to: str | None, channel_id: str) -> dict[str, Any]:
        if reply_to is None:
            return {}
        referenced = self.messages.get(reply_to)
        return {
            "type": 19,
            "message_reference": {"type": 0, "message_id": reply_to, "channel_id": channel_id},
            "referenced_message": referenced,
        }

    async def dm(
        self, text: str, *, user: FakeUser | None = None, reply_to: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        """A direct message from `user` (alice by default) to the bot; returns the MESSAGE_CREATE payload."""
        user = user or self.alice
        channel_id = self.dm_channel_id(user)
        data = self._message(channel_id, user, text, **self._reply_fields(reply_to, channel_id), **extra)
        await self.dispatch("MESSAGE_CREATE", data)
        return data

    async def guild_message(
        self,
        text: str,
        *,
        user: FakeUser | None = None,
        channel_id: str = CHANNEL_ID,
        mention: bool = False,
        roles: tuple[str, ...] = (),
        reply_to: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A message in a guild channel (or thread); `mention` puts `<@bot>` in the text and the bot in `mentions`."""
        user = user or self.alice
        if mention:
            text = f"<@{self.bot.id}> {text}"
        fields: dict[str, Any] = {
            "guild_id": GUILD_ID,
            "member": {"roles": list(roles), "joined_at": TIMESTAMP, "deaf": False, "mute": False, "flags": 0},
            "mentions": [self.bot.payload()] if mention else [],
            **self._reply_fields(reply_to, channel_id),
            **extra,
        }
        data = self._message(channel_id, user, text, **fields)
        await self.dispatch("MESSAGE_CREATE", data)
        return data

    def attachment(
        self, data: bytes, filename: str, content_type: str | None = None, *, duration: float | None = None
    ) -> dict[str, Any]:
        """Keep `data` on the fake CDN and return its attachment object for a message (`duration` makes it a voice
        message's recording: duration_secs and a waveform, as Discord sends them). The name is percent-encoded in
        the URL, as in Discord's links: a name such as `../../x` stays one segment of the path."""
        attachment_id = str(next(self._ids))
        path = f"{CHANNEL_ID}/{attachment_id}/{filename}"  # as the CDN route reads it back: decoded
        self.cdn[path] = (data, content_type or "application/octet-stream")
        url = f"{self.root}/attachments/{CHANNEL_ID}/{attachment_id}/{quote(filename, safe='')}"
        found: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(data),
            "url": url + "?ex=67890abc&is=67880abc&hm=0123abcd",  # the CDN signs its links
            "proxy_url": url,
        }
        if content_type is not None:
            found["content_type"] = content_type
        if duration is not None:
            found["duration_secs"] = duration
            found["waveform"] = "AAAAAAAAAAAA"
        return found

    async def message_with_files(
        self,
        attachments: Sequence[dict[str, Any]],
        text: str = "",
        *,
        channel_id: str | None = None,
        voice: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A message carrying `attachments` (from `attachment`): a DM unless `channel_id` names a guild channel or
        thread; `voice` flags it a voice message. Other arguments as for `dm` / `guild_message`."""
        extra: dict[str, Any] = {"attachments": list(attachments), "flags": VOICE_MESSAGE_FLAG if voice else 0}
        if channel_id is None:
            return await self.dm(text, **extra, **kwargs)
        return await self.guild_message(text, channel_id=channel_id, **extra, **kwargs)

    async def thread_message(self, text: str, **kwargs: Any) -> dict[str, Any]:
        """A message in the guild's thread (`THREAD_ID`, whose parent is `CHANNEL_ID`)."""
        return await self.guild_message(text, channel_id=THREAD_ID, **kwargs)

    async def click(self, message_id: str, custom_id: str, *, user: FakeUser | None = None) -> dict[str, Any]:
        """A click on a button of a message the bot posted; returns the INTERACTION_CREATE payload."""
        user = user or self.alice
        message = self.messages[message_id]
        channel_id = message["channel_id"]
        in_guild = "guild_id" in message
        data: dict[str, Any] = {
            "id": str(next(self._ids)),
            "application_id": APP_ID,
            "type": 3,
            "token": f"interaction-token-{message_id}",
            "version": 1,
            "channel_id": channel_id,
            "channel": {"id": channel_id, "type": 0 if in_guild else 1},
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {"0": GUILD_ID} if in_guild else {"1": user.id},
            "context": 0 if in_guild else 1,
            "attachment_size_limit": 10485760,
            "message": message,
            "data": {"custom_id": custom_id, "component_type": 2},
        }
        if in_guild:
            data["guild_id"] = GUILD_ID
            data["guild_locale"] = "en-US"
            data["member"] = {
                "user": user.payload(),
                "roles": [],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "0",
            }
        else:
            data["user"] = user.payload()
        await self.dispatch("INTERACTION_CREATE", data)
        return data

    # --- REST ------------------------------------------------------------------------------------------------

    def rate_limit(
        self, calls: int, *, retry_after: float = 0.05, method: str | None = None, path_contains: str = ""
    ) -> None:
        """Answer the next `calls` matching REST calls with 429 (Retry-After, Via, JSON body)."""
        self._rate_limited = calls
        self._retry_after = retry_after
        self._rate_limit_match = lambda m, p: (method is None or m == method) and path_contains in p

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        if request.content_type == "multipart/form-data":
            body, files = await _multipart(request)
        else:
            body, files = _parsed(await request.read()), []
        entry = RecordedRequest(request.method, path, dict(request.query), body, files=files)
        events: list[tuple[str, dict[str, Any]]] = []
        response = self._answer(request.method, path, entry, request, events)
        entry.status = response.status
        self.requests.append(entry)  # in the same step as the change it made: a test sees both or neither
        for event, data in events:  # e.g. the bot's own message, back over the gateway before the answer to its post
            await self.dispatch(event, data, wait=False)
        return response

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """The CDN: an attachment's bytes by path (the signing query is not checked), 404 when unknown."""
        path = request.match_info["path"]
        entry = RecordedRequest("GET", path, dict(request.query), None, headers=dict(request.headers))
        stored = self.cdn.get(path)
        response = (
            web.Response(body=stored[0], headers={"Content-Type": stored[1]})
            if stored is not None
            else web.Response(status=404, text="This content is no longer available.")
        )
        entry.status = response.status
        self.downloads.append(entry)
        return response

    def _answer(
        self, method: str, path: str, entry: RecordedRequest, request: web.Request, events: list[tuple[str, Any]]
    ) -> web.StreamResponse:
        body = entry.body
        if request.headers.get("Authorization") != f"Bot {self.token}" and not path.startswith("/interactions/"):
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        if self._rate_limited > 0 and self._rate_limit_match(method, path):
            self._rate_limited -= 1
            return _json(
                {"message": "You are being rate limited.", "retry_after": self._retry_after, "global": False},
                429,
                {"Retry-After": str(self._retry_after), "Via": "1.1 google", "X-RateLimit-Scope": "user"},
            )
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/users/@me":
            return _json({**self.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0})
        if method == "GET" and path == "/oauth2/applications/@me":
            return _json(self._application())
        if method == "GET" and path == "/applications/@me":  # the current application, with its intent flags
            return _json({**self._application(), "flags": self.application_flags})
        if method == "POST" and path == "/users/@me/channels":
            user_id = str(body["recipient_id"])
            user = next((u for u in (self.alice, self.bob, self.other_bot) if u.id == user_id), None)
            recipient = user or FakeUser(user_id, f"user{user_id[-4:]}")
            channel_id = self.dm_channel_id(recipient)
            return _json({"id": channel_id, "type": 1, "recipients": [recipient.payload()], "last_message_id": None})
        if parts[0] == "channels" and len(parts) >= 3:
            return self._channel_call(method, parts, entry, events)
        if parts[0] == "interactions" and len(parts) == 4 and parts[3] == "callback":
            self.interaction_callbacks.append((parts[1], body))
            return _json({"interaction": {"id": parts[1], "type": 3}, "resource": {"type": body.get("type")}})
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _application(self) -> dict[str, Any]:
        return {
            "id": APP_ID,
            "name": "switchbot",
            "description": "",
            "icon": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": self.alice.payload(),
            "verify_key": "0" * 64,
            "flags": 0,
        }

    def _channel_call(
        self, method: str, parts: list[str], entry: RecordedRequest, events: list[tuple[str, Any]]
    ) -> web.Response:
        channel_id = parts[1]
        body = entry.body
        if parts[2] == "typing" and method == "POST":
            return web.Response(status=204)
        if parts[2:] == ["threads"] and method == "POST":
            return self._start_thread(channel_id, None, body, events)
        if parts[2] != "messages":
            return _json({"message": "404: Not Found", "code": 0}, 404)
        if len(parts) == 3 and method == "POST":
            return self._create_message(channel_id, entry, events)
        message_id = parts[3] if len(parts) > 3 else ""
        if len(parts) == 5 and parts[4] == "threads" and method == "POST":
            return self._start_thread(channel_id, message_id, body, events)
        if message_id not in self.messages:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        if len(parts) == 4 and method == "PATCH":
            invalid = self._invalid(body)
            if invalid is not None:
                return invalid
            message = self.messages[message_id]
            if "content" in body:
                message["content"] = body["content"]
            if "components" in body:
                message["components"] = self._components(body["components"] or [])
            message["edited_timestamp"] = TIMESTAMP
            return _json(message)
        if len(parts) == 4 and method == "DELETE":
            self.deleted.append(message_id)
            return web.Response(status=204)
        if len(parts) == 7 and parts[4] == "reactions" and parts[6] == "@me" and method == "PUT":
            self.reactions.append((channel_id, message_id, parts[5]))
            return web.Response(status=204)
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _in_guild(self, channel_id: str) -> bool:
        return channel_id in (*GUILD_TEXT_CHANNELS, THREAD_ID) or channel_id in self.threads

    def _create_message(self, channel_id: str, entry: RecordedRequest, events: list[tuple[str, Any]]) -> web.Response:
        body = entry.body
        invalid = self._invalid(body) or _refused(body, entry.files)
        if invalid is not None:
            return invalid
        message = self._message(channel_id, self.bot, body.get("content") or "")
        message["components"] = self._components(body.get("components") or [])
        message["attachments"] = [self._stored(channel_id, upload) for upload in entry.files]
        if body.get("poll"):
            message["poll"] = _poll(body["poll"], message["id"])
        if self._in_guild(channel_id):
            message["guild_id"] = GUILD_ID
        if body.get("message_reference"):
            message["type"] = 19
            message["message_reference"] = body["message_reference"]
        self.messages[message["id"]] = message
        if self.echo_own_messages:
            events.append(("MESSAGE_CREATE", message))
        return _json(message)

    def _stored(self, channel_id: str, upload: UploadedFile) -> dict[str, Any]:
        """An uploaded file as Discord keeps it: on the CDN, its content type guessed from its name."""
        attachment_id = str(next(self._ids))
        path = f"{channel_id}/{attachment_id}/{upload.filename}"
        content_type = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
        self.cdn[path] = (upload.data, content_type)
        url = f"{self.root}/attachments/{path}"
        return {
            "id": attachment_id,
            "filename": upload.filename,
            "size": len(upload.data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    def _start_thread(
        self, channel_id: str, message_id: str | None, body: Any, events: list[tuple[str, Any]]
    ) -> web.Response:
        """POST /channels/{id}/threads, or /channels/{id}/messages/{mid}/threads (the thread takes the message's id)."""
        if channel_id not in GUILD_TEXT_CHANNELS:
            return _json({"message": "Cannot execute action on this channel type", "code": 50024}, 400)
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not 0 < len(name) <= MAX_THREAD_NAME:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        if message_id is not None:
            known = self.messages.get(message_id) or self.posted.get(message_id)
            if known is None or known["channel_id"] != channel_id:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            if message_id in self.threads:
                return _json({"message": "A thread has already been created for this message", "code": 160004}, 400)
        thread_id = message_id or str(next(self._ids))
        thread = {
            "id": thread_id,
            "type": body.get("type", 11) if message_id is None else 11,
            "name": name,
            "guild_id": GUILD_ID,
            "parent_id": channel_id,
            "owner_id": BOT_ID,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "flags": 0,
            "last_message_id": None,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": body.get("auto_archive_duration") or 1440,
                "archive_timestamp": TIMESTAMP,
                "locked": False,
            },
        }
        self.threads[thread_id] = thread
        events.append(("THREAD_CREATE", {**thread, "newly_created": True}))
        return _json(thread, 201)

    @staticmethod
    def _components(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Discord answers with ids on every component; the SDK reads them back from the message.
        numbered = itertools.count(1)
        return [
            {**row, "id": next(numbered), "components": [{**item, "id": next(numbered)} for item in row["components"]]}
            for row in rows
        ]

    @staticmethod
    def _invalid(body: Any) -> web.Response | None:
        content = body.get("content") if isinstance(body, dict) else None
        if content is not None and len(content) > MAX_CONTENT:
            errors = {
                "content": {
                    "_errors": [
                        {"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {MAX_CONTENT} or fewer in length."}
                    ]
                }
            }
            return _json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)
        return None

    # --- waiting -------------------------------------------------------------------------------------------------

    def calls(self, method: str, path_contains: str = "") -> list[RecordedRequest]:
        """Recorded requests with this method whose path contains the text."""
        return [r for r in self.requests if r.method == method and path_contains in r.path]

    def posts(self, channel_id: str | None = None) -> list[RecordedRequest]:
        """Successful message posts (to one channel if given), in order."""
        return [
            r
            for r in self.calls("POST", "/messages")
            if r.status == 200 and (channel_id is None or r.path == f"/channels/{channel_id}/messages")
        ]

    def texts(self, channel_id: str | None = None) -> list[str]:
        return [r.body.get("content") or "" for r in self.posts(channel_id)]

    def uploads(self, channel_id: str | None = None) -> list[UploadedFile]:
        """Every file the bot uploaded with its messages (to one channel if given), in order."""
        return [upload for request in self.posts(channel_id) for upload in request.files]

    async def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        await eventually(condition, what, timeout)

    async def wait_for_posts(self, count: int, channel_id: str | None = None, timeout: float = WAIT) -> None:
        await eventually(lambda: len(self.posts(channel_id)) >= count, f"{count} posted messages", timeout)


def _on_shard(connection: _Connection, data: Any) -> bool:
    """Whether Discord sends this event on the connection's shard."""
    shard = connection.session.shard if connection.session is not None else None
    if shard is None:
        return True
    shard_id, num_shards = shard
    guild_id = data.get("guild_id") if isinstance(data, dict) else None
    return (int(guild_id) >> 22) % num_shards == shard_id if guild_id else shard_id == 0


def _parsed(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


async def _multipart(request: web.Request) -> tuple[Any, list[UploadedFile]]:
    """A multipart/form-data body as Discord reads it: the JSON of `payload_json`, and the `files[n]` parts."""
    body: Any = None
    files: list[UploadedFile] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        data = await part.read()
        if part.name == "payload_json":
            body = _parsed(bytes(data))
        elif part.name is not None and part.name.startswith("files["):
            content_type = part.headers.get(hdrs.CONTENT_TYPE, "")
            files.append(UploadedFile(part.name, part.filename or "", content_type, bytes(data)))
    return body, files


def _refused(body: Any, files: list[UploadedFile]) -> web.Response | None:
    """Discord's answer to a message with nothing to show, or with a file over the upload limit."""
    if any(len(upload.data) > MAX_UPLOAD for upload in files):
        return _json({"message": "Request entity too large", "code": 40005}, 413)
    if not isinstance(body, dict):
        return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
    shown = ("content", "components", "embeds", "sticker_ids", "poll")
    if files or any(body.get(key) for key in shown):
        return None
    return _json({"message": "Cannot send an empty message", "code": 50006}, 400)


def _poll(sent: dict[str, Any], message_id: str) -> dict[str, Any]:
    """A poll as a message carries it: the question and numbered answers, an expiry `duration` hours after the
    message's snowflake time, no votes yet."""
    created = datetime.fromtimestamp(((int(message_id) >> 22) + DISCORD_EPOCH_MS) / 1000, UTC)
    expiry = created + timedelta(hours=sent.get("duration") or 24)
    answers = [{"answer_id": number, **answer} for number, answer in enumerate(sent.get("answers") or [], 1)]
    return {
        "question": sent.get("question") or {},
        "answers": answers,
        "expiry": expiry.isoformat(),
        "allow_multiselect": bool(sent.get("allow_multiselect")),
        "layout_type": sent.get("layout_type") or 1,
        "results": {"is_finalized": False, "answer_counts": []},
    }


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    """A running FakeDiscord for one test."""
    async with FakeDiscord() as server:
        yield server
