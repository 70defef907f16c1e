"""A fake Slack on 127.0.0.1: the Web API methods a bot uses (Bearer auth, `ok: false` errors, 429 + Retry-After) and
a Socket Mode WebSocket that says hello, sends envelopes and records the acks. Helpers build the events Slack sends.

    async with FakeSlack() as slack:
        adapter = SlackAdapter("default", SlackAccount(bot_token=slack.bot_token, app_token=slack.app_token,
                                                       api_base_url=slack.url))
        await adapter.start(on_message, on_action)
        envelope = await slack.dm("hello")        # a message.im event, as an events_api envelope
        await slack.wait_for_ack(envelope)
        await slack.wait_for_calls("chat.postMessage", 1)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

import aiohttp
import pytest
from aiohttp import web
from helpers import WAIT, eventually

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
TEAM_ID = "T0TEAM01"
BOT_USER_ID = "U0BOT001"
BOT_ID = "B0BOT001"
BOT_NAME = "switchboard"
APP_ID = "A0APP001"
USER_ID = "U0ANN001"
MAX_TEXT = 40_000
APP_METHODS = {"apps.connections.open"}  # called with the app-level token; every other method with the bot token


@dataclass(frozen=True)
class ApiCall:
    """One Web API request: the method, the lowercased headers and the parsed body (JSON or form)."""

    method: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int
    ok: bool = False  # what the answer's `ok` said


class FakeSlack:
    """The server; `async with FakeSlack() as slack:` or the `fake_slack` fixture."""

    def __init__(self, *, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN, team_id: str = TEAM_ID) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.calls: list[ApiCall] = []
        self.acks: list[dict[str, Any]] = []  # every frame the client sent on the socket
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}  # (channel, ts) -> the message as posted
        self.reactions: list[tuple[str, str, str]] = []  # (channel, ts, name)
        self.connections = 0  # socket connections accepted so far
        self._rate_limited = 0
        self._retry_after = 0
        self._rate_limited_method: str | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._connected = asyncio.Event()
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port = 0

    # --- lifecycle ------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server root (what `api_base_url` takes; the Web API is under /api/)."""
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> FakeSlack:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        for socket in list(self._sockets):
            with contextlib.suppress(Exception):
                await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- Web API --------------------------------------------------------------------------------------------------

    def calls_to(self, method: str) -> list[ApiCall]:
        """Successful (HTTP 200) calls of one method."""
        return [call for call in self.calls if call.method == method and call.status == 200]

    @property
    def posted(self) -> list[dict[str, Any]]:
        """The bodies of every chat.postMessage that was accepted, in order."""
        return [call.body for call in self.calls_to("chat.postMessage") if call.ok]

    async def wait_for_calls(self, method: str, count: int, timeout: float = WAIT) -> list[ApiCall]:
        await eventually(lambda: len(self.calls_to(method)) >= count, f"{count} calls to {method}", timeout)
        return self.calls_to(method)

    def rate_limit(self, calls: int, *, retry_after: int = 0, method: str | None = None) -> None:
        """Answer the next `calls` Web API calls (of `method` only, if given) with 429 and this Retry-After."""
        self._rate_limited, self._retry_after, self._rate_limited_method = calls, retry_after, method

    async def _body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if not raw:
            return dict(request.query)
        if request.content_type == "application/json":
            parsed = json.loads(raw)
            return parsed if isinstance(parsed, dict) else {}
        return {**dict(request.query), **dict(parse_qsl(raw.decode()))}

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        headers = {name.lower(): value for name, value in request.headers.items()}
        body = await self._body(request)
        if self._rate_limited > 0 and self._rate_limited_method in (None, method):
            self._rate_limited -= 1
            self.calls.append(ApiCall(method, headers, body, 429))
            error = {"ok": False, "error": "ratelimited"}
            return web.json_response(error, status=429, headers={"Retry-After": str(self._retry_after)})
        answer = self._answer(method, headers, body)
        self.calls.append(ApiCall(method, headers, body, 200, bool(answer.get("ok"))))
        return web.json_response(answer)

    def _answer(self, method: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not token:
            return {"ok": False, "error": "not_authed"}
        expected = self.app_token if method in APP_METHODS else self.bot_token
        if token != expected:
            return {"ok": False, "error": "not_allowed_token_type" if token.startswith("xapp-") else "invalid_auth"}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        answer: dict[str, Any] = handler(body)
        return answer

    def _m_auth_test(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.test/",
            "team": "Fake Team",
            "user": BOT_NAME,
            "team_id": self.team_id,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self._port}/socket?ticket={next(self._ids)}"}

    def _m_conversations_open(self, body: dict[str, Any]) -> dict[str, Any]:
        users = str(body.get("users", ""))
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        return {"ok": True, "channel": {"id": dm_channel(users.split(",")[0])}}

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _text_error(self, body: dict[str, Any]) -> dict[str, Any] | None:
        if not body.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        text, blocks = body.get("text"), body.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        if isinstance(text, str) and len(text) > MAX_TEXT:
            return {"ok": False, "error": "msg_too_long"}
        if isinstance(blocks, list) and len(blocks) > 50:
            return {"ok": False, "error": "invalid_blocks", "errors": ["must be less than 51 items [json-pointer:]"]}
        return None

    def _channel_of(self, channel: str) -> str:
        return dm_channel(channel) if channel.startswith(("U", "W")) else channel  # a user id posts to their DM

    def _m_chat_postMessage(self, body: dict[str, Any]) -> dict[str, Any]:
        error = self._text_error(body)
        if error:
            return error
        channel, ts = self._channel_of(str(body["channel"])), self._new_ts()
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "ts": ts, "text": body.get("text", "")}
        if body.get("blocks"):
            message["blocks"] = body["blocks"]
        if body.get("thread_ts"):
            message["thread_ts"] = body["thread_ts"]
        self.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _m_chat_postEphemeral(self, body: dict[str, Any]) -> dict[str, Any]:
        error = self._text_error(body) or (None if body.get("user") else {"ok": False, "error": "user_not_in_channel"})
        return error or {"ok": True, "message_ts": self._new_ts()}

    def _existing(self, body: dict[str, Any], ts_key: str = "ts") -> tuple[str, str] | dict[str, Any]:
        key = (str(body.get("channel", "")), str(body.get(ts_key, "")))
        return key if key in self.messages else {"ok": False, "error": "message_not_found"}

    def _m_chat_update(self, body: dict[str, Any]) -> dict[str, Any]:
        found = self._existing(body)
        if isinstance(found, dict):
            return found
        error = self._text_error(body)
        if error:
            return error
        message = self.messages[found]
        message["text"] = body.get("text", "")
        if "blocks" in body:
            message["blocks"] = body["blocks"]
        return {"ok": True, "channel": found[0], "ts": found[1], "text": message["text"], "message": message}

    def _m_chat_delete(self, body: dict[str, Any]) -> dict[str, Any]:
        found = self._existing(body)
        if isinstance(found, dict):
            return found
        del self.messages[found]
        return {"ok": True, "channel": found[0], "ts": found[1]}

    def _m_reactions_add(self, body: dict[str, Any]) -> dict[str, Any]:
        found = self._existing(body, "timestamp")
        if isinstance(found, dict):
            return found
        if not body.get("name"):
            return {"ok": False, "error": "invalid_name"}
        self.reactions.append((found[0], found[1], str(body["name"])))
        return {"ok": True}

    # --- Socket Mode ----------------------------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._sockets.append(socket)
        self.connections += 1
        hello = {
            "type": "hello",
            "num_connections": 1,
            "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        await socket.send_json(hello)
        self._connected.set()
        try:
            async for frame in socket:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    with contextlib.suppress(ValueError):
                        self.acks.append(json.loads(frame.data))
        finally:
            self._sockets.remove(socket)
            if not self._sockets:
                self._connected.clear()
        return socket

    async def wait_connected(self, timeout: float = WAIT) -> None:
        await eventually(self._connected.is_set, "a Socket Mode connection to the fake Slack", timeout)

    def acked(self, envelope_id: str) -> bool:
        return any(ack.get("envelope_id") == envelope_id for ack in self.acks)

    async def wait_for_ack(self, envelope_id: str, timeout: float = WAIT) -> dict[str, Any]:
        await eventually(lambda: self.acked(envelope_id), f"the ack of envelope {envelope_id}", timeout)
        return next(ack for ack in self.acks if ack.get("envelope_id") == envelope_id)

    async def send_frame(self, frame: dict[str, Any] | str) -> None:
        """Send anything on the socket (a str verbatim), for malformed-frame tests."""
        await self.wait_connected()
        socket = self._sockets[-1]
        await (socket.send_str(frame) if isinstance(frame, str) else socket.send_json(frame))

    async def send_envelope(self, kind: str, payload: Any, *, envelope_id: str | None = None) -> str:
        """Send an envelope (`events_api`, `interactive`, `slash_commands`); returns its id."""
        envelope_id = envelope_id or f"env-{next(self._ids):04d}"
        frame: dict[str, Any] = {"envelope_id": envelope_id, "type": kind, "payload": payload}
        frame["accepts_response_payload"] = kind != "events_api"
        if kind == "events_api":
            frame["retry_attempt"], frame["retry_reason"] = 0, ""
        await self.send_frame(frame)
        return envelope_id

    # --- events ---------------------------------------------------------------------------------------------------

    def event_body(self, event: dict[str, Any]) -> dict[str, Any]:
        """An events_api payload (`event_callback`) around one event, as Slack wraps it."""
        number = next(self._ids)
        return {
            "token": "verification-token",
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{number:08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {"team_id": self.team_id, "user_id": BOT_USER_ID, "is_bot": True, "is_enterprise_install": False}
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-fake-{number}",
        }

    def new_ts(self) -> str:
        """A fresh message timestamp (Slack's message id)."""
        return self._new_ts()

    async def event(self, event: dict[str, Any]) -> str:
        """Send one event as an events_api envelope; returns the envelope id."""
        return await self.send_envelope("events_api", self.event_body(event))

    def _message(self, text: str, user: str, channel: str, channel_type: str, ts: str | None) -> dict[str, Any]:
        return {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts or self._new_ts(),
            "team": self.team_id,
            "channel": channel,
            "event_ts": ts,
            "channel_type": channel_type,
            "blocks": [],
        }

    async def dm(self, text: str, *, user: str = USER_ID, ts: str | None = None, **extra: Any) -> str:
        """A direct message to the bot (message.im); returns the envelope id."""
        event = self._message(text, user, dm_channel(user), "im", ts) | extra
        return await self.event(event)

    async def channel_message(
        self,
        text: str,
        *,
        channel: str = "C0GENERAL",
        user: str = USER_ID,
        mention: bool = False,
        thread_ts: str | None = None,
        ts: str | None = None,
        **extra: Any,
    ) -> list[str]:
        """A message in a channel (message.channels). With `mention`, `<@BOT>` starts the text and Slack delivers it
        twice: the `message` event and an `app_mention` with the same ts. Returns the envelope ids."""
        ts = ts or self._new_ts()
        if mention:
            text = f"<@{BOT_USER_ID}> {text}"
        event = self._message(text, user, channel, "channel", ts) | extra
        if thread_ts:
            event["thread_ts"] = thread_ts
        envelopes = [await self.event(event)]
        if mention:
            mention_event = {key: value for key, value in event.items() if key != "channel_type"}
            envelopes.append(await self.event(mention_event | {"type": "app_mention"}))
        return envelopes

    async def thread_reply(self, text: str, *, thread_ts: str, **kwargs: Any) -> list[str]:
        """A reply in a thread of a channel message."""
        return await self.channel_message(text, thread_ts=thread_ts, **kwargs)

    async def click(
        self,
        *,
        message_ts: str,
        value: str,
        channel: str = "C0GENERAL",
        user: str = USER_ID,
        name: str = "ann",
        action_id: str = "sb:0:0",
        thread_ts: str | None = None,
    ) -> str:
        """A block_actions click by `user` (whose username is `name`) on a button of one of the bot's messages;
        returns the envelope id."""
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if thread_ts:
            container["thread_ts"] = thread_ts
        payload: dict[str, Any] = {
            "type": "block_actions",
            "user": {"id": user, "username": name, "name": name, "team_id": self.team_id},
            "api_app_id": APP_ID,
            "token": "verification-token",
            "container": container,
            "trigger_id": f"{next(self._ids)}.fake-trigger",
            "team": {"id": self.team_id, "domain": "fake"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": "general"},
            "message": {"type": "message", "ts": message_ts, "user": BOT_USER_ID, "bot_id": BOT_ID, "text": "..."}
            | ({"thread_ts": thread_ts} if thread_ts else {}),
            "state": {"values": {}},
            "response_url": f"{self.url}/actions/response",
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": "blk1",
                    "text": {"type": "plain_text", "text": "Button", "emoji": True},
                    "value": value,
                    "action_ts": self._new_ts(),  # unique, as Slack's are: a redelivery repeats it
                }
            ],
        }
        return await self.send_envelope("interactive", payload)


def dm_channel(user: str) -> str:
    """The id of the bot's DM with a user in this fake (real ones are opaque D... ids)."""
    return "D" + user[1:]


def sign(body: str, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack puts on an HTTP event: `X-Slack-Signature` = v0= HMAC-SHA256 of `v0:{ts}:{body}`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


async def post_event(
    url: str, payload: dict[str, Any], *, secret: str = SIGNING_SECRET, timestamp: int | None = None
) -> tuple[int, str]:
    """POST an event as Slack does in HTTP mode (JSON, signed); returns (status, body)."""
    body = json.dumps(payload)
    headers = {"Content-Type": "application/json", **sign(body, secret, timestamp)}
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()


async def post_action(url: str, payload: dict[str, Any], *, secret: str = SIGNING_SECRET) -> tuple[int, str]:
    """POST an interactive payload as Slack does in HTTP mode (form `payload=<json>`, signed)."""
    body = urlencode({"payload": json.dumps(payload)})
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(body, secret)}
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    """A running FakeSlack for one test."""
    async with FakeSlack() as server:
        yield server
