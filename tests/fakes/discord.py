"""A fake Discord on 127.0.0.1: the REST API under /api/v10 and the gateway WebSocket, as discord.py 2.7 uses them.

    async with FakeDiscord() as discord_server:
        account = {"token": discord_server.token, **discord_server.urls}    # api_base_url + gateway_url
        ...                                                                 # start the adapter
        await discord_server.dm("hi", user=discord_server.alice)
        await discord_server.wait_for_posts(1)                              # what the bot posted

One guild is set up (`GUILD_ID`) with a text channel (`CHANNEL_ID`), a thread in it (`THREAD_ID`) and a role
(`ROLE_ID`). Every request is recorded in `requests`; the bot's messages are in `messages`. `rate_limit(n)` makes
the next n REST calls answer 429 the way Discord does (so discord.py waits and retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import WSMsgType, web
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


@dataclass
class RecordedRequest:
    method: str
    path: str  # without the /api/v10 prefix
    query: dict[str, str]
    body: Any
    status: int = 0


@dataclass
class _Session:
    ws: web.WebSocketResponse
    session_id: str
    sequence: int = 0
    identified: asyncio.Event = field(default_factory=asyncio.Event)


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py parses a body only if Content-Type is exactly application/json (no charset).
    return web.Response(
        body=json.dumps(data).encode(), status=status, headers={"Content-Type": "application/json", **(headers or {})}
    )


class FakeDiscord:
    """The server; see the module docstring. Helpers that inject events wait until a bot is connected."""

    token = "fake-discord-token"

    def __init__(self, *, echo_own_messages: bool = True) -> None:
        self.bot = FakeUser(BOT_ID, "switchbot", bot=True)
        self.alice = FakeUser("1000000000000000011", "alice")
        self.bob = FakeUser("1000000000000000012", "bob")
        self.other_bot = FakeUser("1000000000000000013", "otherbot", bot=True)
        self.echo_own_messages = echo_own_messages  # the real gateway sends the bot's own messages back to it
        self.requests: list[RecordedRequest] = []
        self.messages: dict[str, dict[str, Any]] = {}  # every message the bot posted, by id (edits applied)
        self.deleted: list[str] = []
        self.reactions: list[tuple[str, str, str]] = []  # (channel id, message id, emoji)
        self.interaction_callbacks: list[tuple[str, dict[str, Any]]] = []  # (interaction id, body)
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.send_ready = True  # False: IDENTIFY is never answered
        self._ids = itertools.count(1600000000000000001)
        self._sessions: list[_Session] = []
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
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        for session in list(self._sessions):
            with contextlib.suppress(Exception):
                await session.ws.close()
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
        session = _Session(ws, session_id=f"session-{len(self._sessions) + 1}")
        self._sessions.append(session)
        try:
            await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}})
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op = payload.get("op")
                if op == 1:
                    self.heartbeats += 1
                    await ws.send_json({"op": 11})
                elif op == 2:
                    self.identifies.append(payload["d"])
                    if self.send_ready:
                        await self._ready(session)
                elif op == 6:
                    self.resumes.append(payload["d"])
                    session.sequence = int(payload["d"].get("seq") or 0)
                    await self._send(session, "RESUMED", {})
                    session.identified.set()
        finally:
            self._sessions.remove(session)
        return ws

    async def _ready(self, session: _Session) -> None:
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
        await self._send(session, "READY", ready)
        # The guild comes right after READY, and every event after the guild (`identified`), on the same connection:
        # however soon discord.py's guild_ready_timeout calls the bot ready, it knows the guild before it needs it.
        await self._send(session, "GUILD_CREATE", self.guild_payload())
        session.identified.set()

    async def _send(self, session: _Session, event: str, data: Any) -> None:
        session.sequence += 1
        await session.ws.send_json({"op": 0, "t": event, "s": session.sequence, "d": data})

    def _identified(self) -> list[_Session]:
        return [session for session in self._sessions if session.identified.is_set()]

    async def _connected(self) -> list[_Session]:
        await eventually(lambda: bool(self._identified()), "a bot connected to the fake Discord gateway")
        return self._identified()

    async def dispatch(self, event: str, data: Any) -> None:
        """Send one gateway event (anything, malformed included) to every connected bot."""
        for session in await self._connected():
            await self._send(session, event, data)

    async def drop_connection(self) -> None:
        """Close the gateway connections abruptly (discord.py reconnects and resumes)."""
        for session in list(self._sessions):
            await session.ws.close(code=4000, message=b"fake reset")

    # --- injecting messages ----------------------------------------------------------------------------------

    def _message(self, channel_id: str, author: FakeUser, content: str, **extra: Any) -> dict[str, Any]:
        return {
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
        body: Any = None
        raw = await request.read()
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        entry = RecordedRequest(request.method, path, dict(request.query), body)
        echoes: list[dict[str, Any]] = []
        response = self._answer(request.method, path, body, request, echoes)
        entry.status = response.status
        self.requests.append(entry)  # in the same step as the change it made: a test sees both or neither
        for message in echoes:  # the bot's own message, back over the gateway before the answer to its post
            await self.dispatch("MESSAGE_CREATE", message)
        return response

    def _answer(
        self, method: str, path: str, body: Any, request: web.Request, echoes: list[dict[str, Any]]
    ) -> web.StreamResponse:
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
        if method == "POST" and path == "/users/@me/channels":
            user_id = str(body["recipient_id"])
            user = next((u for u in (self.alice, self.bob, self.other_bot) if u.id == user_id), None)
            recipient = user or FakeUser(user_id, f"user{user_id[-4:]}")
            channel_id = self.dm_channel_id(recipient)
            return _json({"id": channel_id, "type": 1, "recipients": [recipient.payload()], "last_message_id": None})
        if parts[0] == "channels" and len(parts) >= 3:
            return self._channel_call(method, parts, body, echoes)
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

    def _channel_call(self, method: str, parts: list[str], body: Any, echoes: list[dict[str, Any]]) -> web.Response:
        channel_id = parts[1]
        if parts[2] == "typing" and method == "POST":
            return web.Response(status=204)
        if parts[2] != "messages":
            return _json({"message": "404: Not Found", "code": 0}, 404)
        if len(parts) == 3 and method == "POST":
            invalid = self._invalid(body)
            if invalid is not None:
                return invalid
            message = self._message(channel_id, self.bot, body.get("content") or "")
            message["components"] = self._components(body.get("components") or [])
            if channel_id in (CHANNEL_ID, OTHER_CHANNEL_ID, THREAD_ID):
                message["guild_id"] = GUILD_ID
            if body.get("message_reference"):
                message["type"] = 19
                message["message_reference"] = body["message_reference"]
            self.messages[message["id"]] = message
            if self.echo_own_messages:
                echoes.append(message)
            return _json(message)
        message_id = parts[3] if len(parts) > 3 else ""
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

    async def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        await eventually(condition, what, timeout)

    async def wait_for_posts(self, count: int, channel_id: str | None = None, timeout: float = WAIT) -> None:
        await eventually(lambda: len(self.posts(channel_id)) >= count, f"{count} posted messages", timeout)


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    """A running FakeDiscord for one test."""
    async with FakeDiscord() as server:
        yield server
