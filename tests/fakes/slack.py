"""A fake Slack on 127.0.0.1: the Web API methods a bot uses (Bearer auth, `ok: false` errors, 429 + Retry-After),
a Socket Mode WebSocket that says hello, sends envelopes and records the acks, and files: url_private downloads
(Bearer auth, the sign-in page without it) and the external upload flow (files.getUploadURLExternal, the POST of the
bytes, files.completeUploadExternal, files.info). Helpers build the events Slack sends.

    async with FakeSlack() as slack:
        adapter = SlackAdapter("default", SlackAccount(bot_token=slack.bot_token, app_token=slack.app_token,
                                                       api_base_url=slack.url))
        await adapter.start(on_message, on_action)
        envelope = await slack.dm("hello")        # a message.im event, as an events_api envelope
        await slack.wait_for_ack(envelope)
        await slack.wait_for_calls("chat.postMessage", 1)

        photo = slack.add_file(b"...png bytes...", "photo.png")      # served at photo["url_private"]
        await slack.share_files([photo], text="look")                # a file_share message in the DM
        (upload,) = await slack.wait_for_uploads(1)                  # what the bot uploaded: bytes, channel, comment

Bad sockets: `go_deaf()` leaves a socket open but silent; `drop_sockets()` cuts the open ones without a close frame;
`refuse_sockets(n)` answers the next n WebSocket handshakes with 503. An event sent while the app has no socket open
(after its first) is held for its next connection, as Slack holds events for an app that is reconnecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import mimetypes
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlencode

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
# The bot token's scopes, sent back in `x-oauth-scopes` on every Web API answer to it, as Slack does.
BOT_SCOPES = (
    "app_mentions:read", "channels:history", "chat:write", "files:read", "files:write", "groups:history",
    "im:history", "im:write", "reactions:write",
)  # fmt: skip
APP_METHODS = {"apps.connections.open"}  # called with the app-level token; every other method with the bot token
CONVERSATION_ID = re.compile(
    r"^[CGDZ][A-Z0-9]+$"
)  # what files.completeUploadExternal takes as channel_id (no user ids)
SIGN_IN_PAGE = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Fake Team</body></html>"


@dataclass(frozen=True)
class ApiCall:
    """One Web API request: the method, the lowercased headers and the parsed body (JSON or form)."""

    method: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int
    ok: bool = False  # what the answer's `ok` said


@dataclass
class FakeFile:
    """A file the fake serves at its url_private: one a test shares into a message (`add_file`) or one the bot
    uploaded. `path` is where url_private points (a redirecting path for the redirect tests)."""

    id: str
    name: str
    data: bytes
    mimetype: str
    path: str
    user: str = USER_ID
    title: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # more of the file object: subtype, duration_ms ...
    shares: list[tuple[str, str, str | None]] = field(default_factory=list)  # (channel, message ts, thread ts)


@dataclass
class Upload:
    """One file the bot uploaded: what files.getUploadURLExternal was told, what was POSTed to the upload URL, and
    what files.completeUploadExternal shared (channel, thread, comment and the ts of the message)."""

    file_id: str
    filename: str
    length: int
    data: bytes | None = None  # the bytes received (a multipart upload's file part)
    headers: dict[str, str] = field(default_factory=dict)  # of the POST, lowercased
    multipart: bool = False
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    initial_comment: str | None = None
    ts: str | None = None


@dataclass(frozen=True)
class FileRequest:
    """One GET of a file: the host:port it reached, the path and the Authorization header (None without one)."""

    host: str
    path: str
    authorization: str | None


class FakeSlack:
    """The server; `async with FakeSlack() as slack:` or the `fake_slack` fixture. A second server (`other_url`)
    stands for a host that is not Slack's, where redirected downloads land."""

    def __init__(self, *, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN, team_id: str = TEAM_ID) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.calls: list[ApiCall] = []
        self.acks: list[dict[str, Any]] = []  # every frame the client sent on the socket
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}  # (channel, ts) -> the message as posted
        self.reactions: list[tuple[str, str, str]] = []  # (channel, ts, name)
        self.connections = 0  # socket connections accepted so far
        self.refused = 0  # socket handshakes refused (refuse_sockets)
        self.max_open_sockets = 0  # the most socket connections that were open at once
        # Which live socket gets the frames, by opening order (-1: the newest), as Slack spreads events over the
        # connections of several processes.
        self.deliver_to = -1
        self.opened_at: list[float] = []  # when each socket connection came in (the event loop's clock)
        self.pings = 0  # WebSocket pings the client sent
        self.files: dict[str, FakeFile] = {}
        self.uploads: list[Upload] = []
        self.file_requests: list[FileRequest] = []
        self.files_read = True  # the bot token has the files:read scope (without it, downloads get the sign-in page)
        self.scopes: list[str] = list(BOT_SCOPES)  # what `x-oauth-scopes` says the bot token has
        self.share_lag = 0  # files.info calls that still show a completed upload unshared (Slack shares late)
        self._rate_limited = 0
        self._retry_after = 0
        self._rate_limited_method: str | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._transports: dict[web.WebSocketResponse, asyncio.Transport] = {}  # each socket's TCP connection
        self._refusing = 0
        self._deaf: set[web.WebSocketResponse] = set()  # open but sending nothing: no hello, envelopes or pongs
        self._deaf_from_the_start = False  # new sockets go deaf too (go_deaf(later_ones_too=True))
        self._queued: list[dict[str, Any] | str] = []  # frames sent while every socket was deaf, for the next live one
        self._connected = asyncio.Event()
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._other: web.AppRunner | None = None
        self._port = 0
        self._other_port = 0

    # --- lifecycle ------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server root (what `api_base_url` takes; the Web API is under /api/)."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def other_url(self) -> str:
        """The root of the server that is not Slack (a different port: another origin)."""
        return f"http://127.0.0.1:{self._other_port}"

    async def start(self) -> FakeSlack:
        app = web.Application(client_max_size=2 * 1024**3)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/files-pri/{key}/{name}", self._file)
        app.router.add_get("/files-pri/{key}/download/{name}", self._file)
        app.router.add_get("/files-moved/{id}", self._moved)
        app.router.add_get("/files-away/{id}", self._away)
        app.router.add_get("/login", self._sign_in)
        app.router.add_post("/upload/v1/{id}", self._upload)
        other = web.Application()
        other.router.add_get("/cdn/{id}", self._cdn)
        self._runner, self._port = await _serve(app)
        self._other, self._other_port = await _serve(other)
        return self

    async def stop(self) -> None:
        for socket in list(self._sockets):
            with contextlib.suppress(Exception):
                await socket.close()
        for runner in (self._runner, self._other):
            if runner is not None:
                await runner.cleanup()
        self._runner = self._other = None

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
        if answer.get("ok") and method not in APP_METHODS:
            return web.json_response(answer, headers={"x-oauth-scopes": ",".join(self.scopes)})
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

    # --- files ----------------------------------------------------------------------------------------------------

    def add_file(
        self,
        data: bytes,
        name: str = "file.bin",
        mimetype: str | None = None,
        *,
        user: str = USER_ID,
        redirect: Literal["same", "other"] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Hold a file and return its Slack file object (url_private served here), for `share_files`. `redirect`
        makes url_private a redirect: to the real one (`same` host) or to `other_url` (served without a token).
        `extra` adds to the object: `subtype="slack_audio"`, `duration_ms=...` for an audio clip."""
        file_id = f"F0FILE{next(self._ids):04d}"
        path = {"same": f"/files-moved/{file_id}", "other": f"/files-away/{file_id}"}.get(redirect or "", "")
        mime = mimetype or mimetypes.guess_type(name)[0] or "application/octet-stream"
        held = FakeFile(file_id, name, data, mime, path or self._file_path(file_id, name), user, name, extra)
        self.files[file_id] = held
        return self._file_object(held)

    async def share_files(
        self,
        files: list[dict[str, Any]],
        text: str = "",
        *,
        channel: str | None = None,
        user: str = USER_ID,
        subtype: str | None = "file_share",
        **extra: Any,
    ) -> list[str]:
        """A message carrying files as Slack sends it when someone uploads them (subtype file_share; None for a
        plain message with files): in the DM with `user`, or in `channel`. Returns the envelope ids."""
        extra |= {"files": files, "upload": True, "display_as_bot": False}
        if subtype is not None:
            extra["subtype"] = subtype
        if channel is None:
            return [await self.dm(text, user=user, **extra)]
        return await self.channel_message(text, channel=channel, user=user, **extra)

    @property
    def shared_uploads(self) -> list[Upload]:
        """The bot's uploads that files.completeUploadExternal shared, in order."""
        return [upload for upload in self.uploads if upload.ts is not None]

    async def wait_for_uploads(self, count: int, timeout: float = WAIT) -> list[Upload]:
        await eventually(lambda: len(self.shared_uploads) >= count, f"{count} shared uploads", timeout)
        return self.shared_uploads

    def _file_path(self, file_id: str, name: str, *, download: bool = False) -> str:
        """Where Slack keeps a file: /files-pri/<team>-<file id>/[download/]<name, lower case>."""
        folder = f"/files-pri/{self.team_id}-{file_id}/" + ("download/" if download else "")
        return folder + quote(name.lower().replace(" ", "_"), safe="")

    def _file_object(self, held: FakeFile, *, shared: bool = True) -> dict[str, Any]:
        """The file as Slack describes it (in events, files.info and completeUploadExternal's answer)."""
        shares: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for channel, ts, thread_ts in held.shares if shared else []:
            entry = {"reply_users": [], "reply_count": 0, "ts": ts, "channel_name": channel, "team_id": self.team_id}
            entry |= {"share_user_id": held.user} | ({"thread_ts": thread_ts} if thread_ts else {})
            scope = "public" if channel.startswith("C") else "private"
            shares.setdefault(scope, {}).setdefault(channel, []).append(entry)
        return {
            "id": held.id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": held.name,
            "title": held.title or held.name,
            "mimetype": held.mimetype,
            "filetype": held.name.rsplit(".", 1)[-1].lower() if "." in held.name else "binary",
            "user": held.user,
            "user_team": self.team_id,
            "size": len(held.data),
            "mode": "hosted",
            "is_external": False,
            "is_public": False,
            "url_private": f"{self.url}{held.path}",
            "url_private_download": self.url + self._file_path(held.id, held.name, download=True),
            "permalink": f"https://fake.slack.test/files/{held.user}/{held.id}/{quote(held.name)}",
            "file_access": "visible",
            "shares": shares,
            "channels": [channel for channel, _, _ in held.shares if channel.startswith("C")],
            **held.extra,
        }

    def _record_file_request(self, request: web.Request) -> None:
        self.file_requests.append(FileRequest(request.host, request.path, request.headers.get("Authorization")))

    def _held(self, request: web.Request) -> FakeFile | None:
        key = request.match_info.get("key", "")
        file_id = key.split("-", 1)[1] if "-" in key else request.match_info.get("id", "")
        return self.files.get(file_id)

    @staticmethod
    def _content(held: FakeFile, request: web.Request) -> web.Response:
        headers = {"Content-Type": held.mimetype}
        if "/download/" in request.path:
            headers["Content-Disposition"] = f'attachment; filename="{quote(held.name)}"'
        return web.Response(body=held.data, headers=headers)

    async def _file(self, request: web.Request) -> web.Response:
        """url_private: the bytes for the bot token with files:read; Slack's sign-in page for anything else."""
        self._record_file_request(request)
        held = self._held(request)
        if held is None:
            return web.Response(status=404, text="file not found")
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            raise web.HTTPFound(f"/login?redir={quote(request.path, safe='')}")
        if not self.files_read:
            return web.Response(text=SIGN_IN_PAGE, content_type="text/html")
        return self._content(held, request)

    async def _moved(self, request: web.Request) -> web.Response:
        self._record_file_request(request)
        held = self._held(request)
        if held is None:
            return web.Response(status=404, text="file not found")
        raise web.HTTPFound(self._file_path(held.id, held.name))  # relative: the same host

    async def _away(self, request: web.Request) -> web.Response:
        self._record_file_request(request)
        raise web.HTTPFound(f"{self.other_url}/cdn/{request.match_info['id']}")

    async def _cdn(self, request: web.Request) -> web.Response:
        """The other host: serves a file to anyone (a signed CDN link would), recording what it was sent."""
        self._record_file_request(request)
        held = self._held(request)
        return web.Response(status=404, text="no such file") if held is None else self._content(held, request)

    async def _sign_in(self, request: web.Request) -> web.Response:
        self._record_file_request(request)
        return web.Response(text=SIGN_IN_PAGE, content_type="text/html")

    async def _upload(self, request: web.Request) -> web.Response:
        """The upload URL files.getUploadURLExternal gave: takes the raw bytes, or a multipart form's file part."""
        upload = self._upload_of(request.match_info["id"])
        if upload is None:
            return web.Response(status=404, text="unknown upload")
        upload.headers = {name.lower(): value for name, value in request.headers.items()}
        upload.multipart = request.content_type == "multipart/form-data"
        upload.data = await (_file_part(request) if upload.multipart else request.read())
        return web.Response(text=f"OK - {len(upload.data)}")

    def _upload_of(self, file_id: str) -> Upload | None:
        return next((upload for upload in self.uploads if upload.file_id == file_id), None)

    def _m_files_getUploadURLExternal(self, body: dict[str, Any]) -> dict[str, Any]:
        filename, length = str(body.get("filename") or ""), str(body.get("length") or "")
        if not filename or not length.isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F0UPLD{next(self._ids):04d}"
        self.uploads.append(Upload(file_id, filename, int(length)))
        return {"ok": True, "upload_url": f"{self.url}/upload/v1/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            listed = json.loads(str(body.get("files") or "[]"))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        uploads = [self._upload_of(str(item.get("id"))) for item in listed if isinstance(item, dict)]
        if not uploads or any(upload is None or upload.data is None for upload in uploads):
            return {"ok": False, "error": "file_not_found"}
        channel = body.get("channel_id")
        if channel is not None and not CONVERSATION_ID.match(str(channel)):
            message = "[ERROR] input must match regex pattern: ^[CGDZ][A-Z0-9]{8,}$ [json-pointer:/channel_id]"
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": [message]}}
        titles = {str(item.get("id")): item.get("title") for item in listed if isinstance(item, dict)}
        key = self._share_message(body) if channel is not None else None
        held = [self._complete(upload, titles, key, body) for upload in uploads if upload is not None]
        return {"ok": True, "files": [self._file_object(item, shared=False) for item in held]}

    def _complete(
        self, upload: Upload, titles: dict[str, Any], key: tuple[str, str] | None, body: dict[str, Any]
    ) -> FakeFile:
        """Hold an uploaded file (downloadable like any other) and share it in the message `key`, if any."""
        upload.title = str(titles.get(upload.file_id) or upload.filename)
        mime = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
        path = self._file_path(upload.file_id, upload.filename)
        held = FakeFile(upload.file_id, upload.filename, upload.data or b"", mime, path, BOT_USER_ID, upload.title)
        self.files[held.id] = held
        if key is not None:
            upload.channel, upload.ts = key
            upload.thread_ts, upload.initial_comment = body.get("thread_ts"), body.get("initial_comment")
            held.shares.append((key[0], key[1], upload.thread_ts))
            self.messages[key].setdefault("files", []).append(self._file_object(held, shared=False))
        return held

    def _share_message(self, body: dict[str, Any]) -> tuple[str, str]:
        """The message that shares one completeUploadExternal call's files, with its comment: (channel, ts)."""
        key = (str(body["channel_id"]), self._new_ts())
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "ts": key[1], "upload": True}
        message["text"] = body.get("initial_comment") or ""
        if body.get("thread_ts"):
            message["thread_ts"] = body["thread_ts"]
        self.messages[key] = message
        return key

    def _m_files_info(self, body: dict[str, Any]) -> dict[str, Any]:
        held = self.files.get(str(body.get("file", "")))
        if held is None:
            return {"ok": False, "error": "file_not_found"}
        lagging = self.share_lag > 0
        self.share_lag -= 1 if lagging else 0
        return {"ok": True, "file": self._file_object(held, shared=not lagging)}

    # --- Socket Mode ----------------------------------------------------------------------------------------------

    @property
    def open_sockets(self) -> int:
        """Socket connections open right now."""
        return len(self._sockets)

    def go_deaf(self, *, later_ones_too: bool = False) -> None:
        """The open sockets stay open but send nothing from now on: no envelopes, no pongs (a silent connection, as
        when Slack's side of it hangs). Frames sent meanwhile are held for the next socket that is not deaf, as Slack
        redelivers what it could not. With `later_ones_too`, new sockets are deaf from the start (no hello) until
        `hear_again`."""
        self._deaf.update(self._sockets)
        self._deaf_from_the_start = later_ones_too

    def hear_again(self) -> None:
        """New sockets are live again (the deaf ones stay deaf until the client closes them)."""
        self._deaf_from_the_start = False

    async def drop_sockets(self) -> None:
        """Cut the TCP connection of every open socket, without a close frame (a network failure, a Slack host that
        went away); returns once the server has seen them end."""
        dropped = list(self._sockets)
        for socket in dropped:
            transport = self._transports.get(socket)
            if transport is not None:
                transport.abort()
        await eventually(lambda: not any(socket in self._sockets for socket in dropped), "the sockets dropped")

    def refuse_sockets(self, count: int) -> None:
        """Answer the next `count` WebSocket handshakes with 503 (apps.connections.open still hands out URLs)."""
        self._refusing = count

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self._refusing > 0:
            self._refusing -= 1
            self.refused += 1
            return web.Response(status=503, text="Service Unavailable")
        self.opened_at.append(asyncio.get_running_loop().time())  # before the client can know it is connected
        socket = web.WebSocketResponse(autoping=False)  # pongs are sent here, unless the socket is deaf
        await socket.prepare(request)
        if request.transport is not None:
            self._transports[socket] = request.transport
        self._sockets.append(socket)
        self.connections += 1
        self.max_open_sockets = max(self.max_open_sockets, len(self._sockets))
        if self._deaf_from_the_start:
            self._deaf.add(socket)
        try:
            await self._serve_socket(socket)
        finally:
            self._sockets.remove(socket)
            self._transports.pop(socket, None)
            self._deaf.discard(socket)
            if not self._sockets:
                self._connected.clear()
        return socket

    async def _serve_socket(self, socket: web.WebSocketResponse) -> None:
        if socket not in self._deaf:
            await self._say_hello(socket)
        async for frame in socket:
            if frame.type == aiohttp.WSMsgType.PING:
                self.pings += 1
                if socket not in self._deaf:
                    await socket.pong(frame.data)
            elif frame.type == aiohttp.WSMsgType.TEXT:
                with contextlib.suppress(ValueError):
                    self.acks.append(json.loads(frame.data))

    async def _say_hello(self, socket: web.WebSocketResponse) -> None:
        """Slack's hello, then the frames held while every socket was deaf."""
        hello = {
            "type": "hello",
            "num_connections": 1,
            "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        await socket.send_json(hello)
        self._connected.set()
        queued, self._queued = self._queued, []
        for frame in queued:
            await (socket.send_str(frame) if isinstance(frame, str) else socket.send_json(frame))

    async def wait_connected(self, timeout: float = WAIT) -> None:
        await eventually(self._connected.is_set, "a Socket Mode connection to the fake Slack", timeout)

    def acked(self, envelope_id: str) -> bool:
        return any(ack.get("envelope_id") == envelope_id for ack in self.acks)

    async def wait_for_ack(self, envelope_id: str, timeout: float = WAIT) -> dict[str, Any]:
        await eventually(lambda: self.acked(envelope_id), f"the ack of envelope {envelope_id}", timeout)
        return next(ack for ack in self.acks if ack.get("envelope_id") == envelope_id)

    async def send_frame(self, frame: dict[str, Any] | str) -> None:
        """Send anything on the socket (a str verbatim), for malformed-frame tests."""
        if self.connections and not self._sockets:
            self._queued.append(frame)  # the app lost its connection: held for its next one
            return
        await self.wait_connected()
        live = [socket for socket in self._sockets if socket not in self._deaf]
        if not live:
            self._queued.append(frame)  # sent when a live socket opens
            return
        socket = live[self.deliver_to if -len(live) <= self.deliver_to < len(live) else -1]
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


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    """Run an app on 127.0.0.1 on a free port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, int(runner.addresses[0][1])


async def _file_part(request: web.Request) -> bytes:
    """The bytes of a multipart form's file part (`file`, or the first part with a filename)."""
    reader = await request.multipart()
    async for part in reader:
        if isinstance(part, aiohttp.BodyPartReader) and (part.name == "file" or part.filename):
            return bytes(await part.read())
    return b""


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
