"""A fake Telegram Bot API: a real aiohttp server on 127.0.0.1 that speaks the Bot API as python-telegram-bot uses it.

    async with FakeTelegram() as tg:             # or the `fake_telegram` fixture
        settings = TelegramAccount(token=tg.token, api_base_url=tg.url)
        update = await tg.private_message("hi")  # queue an update for getUpdates
        await tg.wait_sent(tg.user_id, 1)        # sendMessage texts land in tg.sent[chat_id]

Calls are `POST /bot<token>/<method>` with form-urlencoded (strings raw, everything else JSON), JSON, multipart (with
files) or empty bodies. getUpdates is held open up to `timeout` seconds; updates below the offset are dropped as
confirmed. Limits and errors are Telegram's: 4,096 characters after entity parsing (1,024 in a caption), HTML checked
like Telegram checks it, identical edits refused, and `fail_next(method, times, retry_after)` answers 429 with
`parameters.retry_after`.

Files, both ways:

        update = await tg.media_message("photo", jpeg_bytes, caption="look")   # also document, voice, audio, video,
        await tg.media_group([("photo", a, "two"), ("photo", b, "")])           # video_note, animation, sticker
        # the bot downloads with getFile and GET /file/bot<token>/<file_path> (20 MB at most, as Telegram)
        uploads = await tg.wait_uploads(1)   # what sendPhoto/Voice/Audio/Video/Document/MediaGroup received

sendPoll and createForumTopic (in a forum: `tg.forum_chat()`) answer as Telegram does.

A connection that hangs: after `tg.go_silent()` every getUpdates is accepted and never answered (until the server
stops), and `tg.resume()` answers only the ones that come after it, so a bot recovers only by asking again.
`tg.poll_connections` holds the client port of each getUpdates (a new port is a new connection), `tg.hung` how many
are held by the silence; every call in `tg.requests` has the client port it came on (`port`).

A webhook: setWebhook, deleteWebhook and getWebhookInfo (`pending_update_count`, `last_error_message`) as Telegram's;
the queued updates are posted one at a time, in order, with the secret header, each pending until the webhook answers
2xx (getUpdates answers 409 meanwhile). The public URL is HTTPS somewhere: `tg.route_webhook(local_url)` says where the
posts really go (the reverse proxy in front of the bot). `tg.stall_webhook(error)` makes Telegram stop trying (as its
retry delay grows after failures) until the webhook is set again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import html
import itertools
import json
import os
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from helpers import WAIT, eventually

TOKEN = "123456:TEST-token"
BOT_ID = 123456
BOT_USERNAME = "switchboard_test_bot"
MAX_TEXT = 4096
MAX_CAPTION = 1024
MAX_DOWNLOAD = 20 * 1024 * 1024  # getFile refuses larger files ("file is too big")
MAX_UPLOAD = 50 * 1024 * 1024  # a larger uploaded file is refused (413)
MAX_POLL_OPTIONS = 12
_JSON_FIELDS = {
    "reply_markup",
    "reply_parameters",
    "entities",
    "allowed_updates",
    "commands",
    "reaction",
    "link_preview_options",
    "scope",
    "media",
    "options",
    "caption_entities",
}
_INT_FIELDS = {"chat_id", "message_id", "message_thread_id", "offset", "limit", "timeout"}
_ALLOWED_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "code",
    "pre",
    "a",
    "tg-spoiler",
    "span",
    "blockquote",
    "tg-emoji",
}
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)((?:\s+[^>]*)?)>")
_ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|lt|gt|amp|quot);")


class EntityError(ValueError):
    pass


# kind -> (file server folder, the type Telegram gives it unless told another, the file extension)
_MEDIA: dict[str, tuple[str, str | None, str]] = {
    "photo": ("photos", None, ".jpg"),
    "document": ("documents", "application/octet-stream", ""),
    "voice": ("voice", "audio/ogg", ".oga"),
    "audio": ("music", "audio/mpeg", ".mp3"),
    "video": ("videos", "video/mp4", ".mp4"),
    "video_note": ("video_notes", None, ".mp4"),
    "animation": ("animations", "video/mp4", ".mp4"),
    "sticker": ("stickers", "image/webp", ".webp"),
}


def parse_html(text: str) -> str:
    """The visible text of Telegram HTML, or EntityError with Telegram's wording for what it refuses."""
    out: list[str] = []
    stack: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char == "<":
            match = _TAG.match(text, position)
            if match is None:
                raise EntityError(f"Unsupported start tag at byte offset {position}")
            closing, name = match.group(1), match.group(2).lower()
            if name not in _ALLOWED_TAGS:
                raise EntityError(f'Unsupported start tag "{name}" at byte offset {position}')
            if closing:
                if not stack or stack[-1] != name:
                    raise EntityError(f"Unexpected end tag at byte offset {position}")
                stack.pop()
            else:
                stack.append(name)
            position = match.end()
        elif char == "&":
            match = _ENTITY.match(text, position)
            if match is None:
                out.append("&")  # Telegram tolerates a lone ampersand
                position += 1
            else:
                out.append(html.unescape(match.group(0)))
                position = match.end()
        elif char == ">":
            out.append(">")
            position += 1
        else:
            out.append(char)
            position += 1
    if stack:
        raise EntityError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


@dataclass
class Call:
    """One request the bot made: the method and its parameters (JSON fields decoded, ids as ints)."""

    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # for bench/telegram.py's latencies; tests never time calls
    port: int = 0  # the client port of the connection it came on: which process sent it (helpers.connections_to)


@dataclass
class StoredMessage:
    chat_id: int
    message_id: int
    text: str  # as sent (HTML source when parse_mode is HTML); a file's or album's caption
    visible: str
    parse_mode: str | None
    reply_markup: Any
    thread_id: int | None
    media: dict[str, Any] | None = None  # what the message carries besides text: {"photo": [...]}, {"poll": {...}}


@dataclass
class FilePart:
    """A file field of a multipart request, as the server received it."""

    filename: str | None
    content_type: str
    data: bytes


@dataclass
class StoredFile:
    """A file the server holds: its id, where the file server serves it, and its bytes."""

    file_id: str
    unique_id: str
    path: str
    data: bytes


@dataclass
class Upload:
    """A file the bot sent: by which method, as which kind of media, into which chat, with what caption."""

    method: str  # sendPhoto, sendVoice, sendAudio, sendVideo, sendDocument, sendMediaGroup
    kind: str  # photo, voice, audio, video, document
    chat_id: int
    filename: str | None
    content_type: str
    data: bytes
    caption: str | None  # as sent (HTML source when parse_mode is HTML)
    message_id: int
    thread_id: int | None = None
    media_group_id: str | None = None


class FakeTelegram:
    """A Bot API server for one bot; see the module docstring."""

    def __init__(
        self, token: str = TOKEN, *, bot_id: int = BOT_ID, username: str = BOT_USERNAME, port: int = 0
    ) -> None:
        """`port` 0 takes a free one; another is for a server that comes up where a bot already looks for it."""
        self.token = token
        self.bot_id = bot_id
        self.username = username
        self.user_id = 1001  # the default private sender
        self.group_id = -1001234567890
        self.updates: list[dict[str, Any]] = []
        self.requests: list[Call] = []
        self.offsets: list[int] = []
        self.sent: dict[int, list[str]] = defaultdict(list)  # chat id -> sendMessage texts as sent
        self.messages: dict[tuple[int, int], StoredMessage] = {}
        self.answered: list[str] = []  # callback query ids answered
        self.chats: dict[int, dict[str, Any]] = {}
        self.files: dict[str, StoredFile] = {}  # file_id -> file
        self.served: dict[str, StoredFile] = {}  # file server path -> file (a path expires: `expire_file`)
        self.downloads: list[str] = []  # file server paths the bot fetched
        self.uploads: list[Upload] = []
        self.topics: dict[tuple[int, int], str] = {}  # (chat id, message_thread_id) -> name
        self._failures: dict[str, list[int]] = defaultdict(list)  # method -> retry_after for each next call
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(5000)
        self._query_ids = itertools.count(1)
        self._file_ids = itertools.count(1)
        self._new_updates = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port = port
        # Like Telegram, answer 429 to sends beyond `max_per_second` (None: no limit); `rate_limited` counts them.
        # By the wall clock, so for bench/telegram.py only: a test on it would depend on the machine's speed.
        self.max_per_second: float | None = None
        self.rate_limited = 0
        self._recent_sends: collections.deque[float] = collections.deque()
        self.poll_connections: list[int] = []  # the client port of each getUpdates
        self.hung = 0  # getUpdates held by `go_silent`, never answered
        self._silent = False
        self._stopping = asyncio.Event()
        self.webhook: dict[str, Any] | None = None  # setWebhook's parameters while a webhook is set
        self.webhook_route: str | None = None  # where webhook posts really go (see route_webhook)
        self.webhook_posts = 0  # updates the webhook took (answered 2xx)
        self.last_webhook_error: tuple[int, str] | None = None  # (unix time, message) of the last failed post
        self._webhook_stalled = False
        self._deliverer: asyncio.Task[None] | None = None

    # --- addresses and inspection ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server root (the adapter appends /bot and /file/bot)."""
        return f"http://127.0.0.1:{self._port}"

    def bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Switchboard", "username": self.username}

    def chat_texts(self, chat_id: int, *, visible: bool = True) -> list[str]:
        """The bot's messages in a chat as they stand now (after edits and deletions), oldest first."""
        stored = sorted((m for m in self.messages.values() if m.chat_id == chat_id), key=lambda m: m.message_id)
        return [m.visible if visible else m.text for m in stored]

    async def wait_texts(self, chat_id: int, condition: Callable[[list[str]], bool]) -> list[str]:
        """Wait until the chat's current bot messages satisfy `condition` (streamed replies are edited in place)."""
        await self.wait_for(lambda: condition(self.chat_texts(chat_id)), f"the bot's messages in chat {chat_id}")
        return self.chat_texts(chat_id)

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [call.params for call in self.requests if call.method == method]

    def fail_next(self, method: str, times: int = 1, retry_after: int = 1) -> None:
        """Answer the next `times` calls of `method` with 429 Too Many Requests."""
        self._failures[method] += [retry_after] * times

    def go_silent(self) -> None:
        """Accept every getUpdates from now on and never answer it (until the server stops): a hung connection."""
        self._silent = True

    def resume(self) -> None:
        """Answer the getUpdates that come from now on; the ones held by the silence stay unanswered."""
        self._silent = False

    async def route_webhook(self, url: str) -> None:
        """Post what goes to the webhook's public URL to `url` instead (the bot's local listener)."""
        self.webhook_route = url
        await self._notify()

    def stall_webhook(self, error: str = "Connection timed out") -> None:
        """Telegram stops posting to the webhook after failures (`error` is the last one, as getWebhookInfo says),
        and updates pile up as pending, until setWebhook is called again."""
        self._webhook_stalled = True
        self.last_webhook_error = (int(time.time()), error)

    async def _notify(self) -> None:
        async with self._new_updates:
            self._new_updates.notify_all()

    async def wait_for(
        self, condition: Callable[[], bool], what: str = "a condition on the fake Telegram", timeout: float = WAIT
    ) -> None:
        """`eventually(condition)`: the deadline is generous, never a test of speed."""
        await eventually(condition, what, timeout)

    async def wait_sent(self, chat_id: int, count: int) -> list[str]:
        await self.wait_for(lambda: len(self.sent.get(chat_id, [])) >= count, f"{count} messages sent to {chat_id}")
        return self.sent[chat_id]

    async def wait_calls(self, method: str, count: int) -> list[dict[str, Any]]:
        await self.wait_for(lambda: len(self.calls(method)) >= count, f"{count} calls of {method}")
        return self.calls(method)

    async def wait_uploads(self, count: int) -> list[Upload]:
        await self.wait_for(lambda: len(self.uploads) >= count, f"{count} files uploaded")
        return self.uploads

    async def acknowledged(self, update: dict[str, Any]) -> None:
        """Wait until a getUpdates asked for an offset past `update` (the bot confirmed it)."""
        await self.wait_for(
            lambda: max(self.offsets, default=0) > update["update_id"], f"update {update['update_id']} confirmed"
        )

    # --- updates --------------------------------------------------------------------------------------------------

    def next_update_id(self) -> int:
        return next(self._update_ids)

    async def raw_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue any update as is (give it an update_id unless it has one or it is meant to lack one)."""
        await self._queue([update])
        return update

    async def _queue(self, updates: list[dict[str, Any]]) -> None:
        """Queue updates at once: a getUpdates answered meanwhile has all of them or none."""
        async with self._new_updates:
            self.updates.extend(updates)
            self._new_updates.notify_all()

    async def redeliver(self, update: dict[str, Any]) -> dict[str, Any]:
        """The same update's content delivered again under a new update_id (as after a lost confirmation)."""
        again = {**update, "update_id": next(self._update_ids)}
        return await self.raw_update(again)

    def _user(self, user_id: int, name: str | None = None, is_bot: bool = False) -> dict[str, Any]:
        first = name or f"User{user_id}"
        return {"id": user_id, "is_bot": is_bot, "first_name": first, "username": first.lower()}

    def _message(self, chat: dict[str, Any], sender: dict[str, Any], text: str, **extra: Any) -> dict[str, Any]:
        self.chats[chat["id"]] = chat
        message: dict[str, Any] = {
            "message_id": extra.pop("message_id", None) or next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            "text": text,
        }
        entities = list(extra.pop("entities", []))
        command = re.match(r"/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?", text)
        if command:
            entities.append({"type": "bot_command", "offset": 0, "length": command.end()})
        if entities:
            message["entities"] = entities
        message.update(extra)
        return message

    async def private_message(
        self, text: str, *, user_id: int | None = None, name: str = "Ann", is_bot: bool = False, **extra: Any
    ) -> dict[str, Any]:
        user_id = user_id or self.user_id
        chat = {"id": user_id, "type": "private", "first_name": name}
        message = self._message(chat, self._user(user_id, name, is_bot), text, **extra)
        return await self.raw_update({"update_id": next(self._update_ids), "message": message})

    async def group_message(
        self,
        text: str,
        *,
        chat_id: int | None = None,
        user_id: int = 2002,
        name: str = "Bo",
        mention: bool = False,
        reply_to_bot: int | None = None,
        forum: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        """A supergroup message; `mention` prefixes @botname (with a mention entity); `reply_to_bot` is the id of
        one of the bot's messages this one replies to."""
        chat: dict[str, Any] = {"id": chat_id or self.group_id, "type": "supergroup", "title": "Team"}
        if forum:
            chat["is_forum"] = True
        if mention:
            handle = f"@{self.username}"
            text = f"{handle} {text}"
            extra["entities"] = [*extra.get("entities", []), {"type": "mention", "offset": 0, "length": len(handle)}]
        if reply_to_bot is not None:
            stored = self.messages.get((chat["id"], reply_to_bot))
            extra["reply_to_message"] = {
                "message_id": reply_to_bot,
                "date": int(time.time()),
                "chat": chat,
                "from": self.bot_user(),
                "text": stored.visible if stored else "earlier answer",
            }
        message = self._message(chat, self._user(user_id, name), text, **extra)
        return await self.raw_update({"update_id": next(self._update_ids), "message": message})

    async def channel_post(self, text: str, *, chat_id: int = -1009876, title: str = "News") -> dict[str, Any]:
        """A post in a channel the bot is in: the channel itself is the sender (`sender_chat`, no `from`)."""
        chat = {"id": chat_id, "type": "channel", "title": title}
        post = {"message_id": next(self._message_ids), "date": int(time.time()), "chat": chat, "sender_chat": chat}
        post["text"] = text
        return await self.raw_update({"update_id": next(self._update_ids), "channel_post": post})

    async def topic_message(
        self, text: str, *, thread_id: int = 77, chat_id: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """A message in a forum topic (as Telegram sends it: a reply to the topic's creation message)."""
        chat_id = chat_id or self.group_id
        chat = {"id": chat_id, "type": "supergroup", "title": "Forum"}
        topic_start = {
            "message_id": thread_id,
            "date": int(time.time()),
            "chat": {**chat, "is_forum": True},
            "from": self.bot_user(),
            "forum_topic_created": {"name": "Topic", "icon_color": 7322096},
            "message_thread_id": thread_id,
            "is_topic_message": True,
        }
        return await self.group_message(
            text,
            chat_id=chat_id,
            forum=True,
            message_thread_id=thread_id,
            is_topic_message=True,
            reply_to_message=topic_start,
            **extra,
        )

    async def callback_query(
        self, data: str, *, message_id: int, chat_id: int | None = None, user_id: int | None = None, name: str = "Ann"
    ) -> dict[str, Any]:
        """A tap on an inline button of the bot's message `message_id` by `user_id` called `name`."""
        chat_id = chat_id or self.user_id
        chat = self.chats.get(chat_id) or {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        stored = self.messages.get((chat_id, message_id))
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user(),
            "text": stored.visible if stored else "buttons",
        }
        if stored and stored.thread_id:
            message.update(message_thread_id=stored.thread_id, is_topic_message=True)
        query = {
            "id": str(next(self._query_ids)),
            "from": self._user(user_id or self.user_id, name),
            "chat_instance": "ci-1",
            "data": data,
            "message": message,
        }
        return await self.raw_update({"update_id": next(self._update_ids), "callback_query": query})

    # --- files ----------------------------------------------------------------------------------------------------

    def add_file(self, data: bytes, folder: str = "documents", extension: str = "") -> StoredFile:
        """Hold `data` as a file the bot may fetch (getFile, then the file server at `folder/file_N<extension>`)."""
        number = next(self._file_ids)
        stored = StoredFile(f"FILE-{number}-{'x' * 20}", f"U{number}", f"{folder}/file_{number}{extension}", data)
        self.files[stored.file_id] = stored
        self.served[stored.path] = stored
        return stored

    def expire_file(self, file_id: str) -> None:
        """The file server forgets the file's path (Telegram's download links last an hour); getFile still works."""
        self.served.pop(self.files[file_id].path, None)

    def forum_chat(self, chat_id: int | None = None) -> int:
        """A supergroup with topics the bot is in (createForumTopic works there)."""
        chat_id = chat_id or self.group_id
        self.chats[chat_id] = {"id": chat_id, "type": "supergroup", "title": "Forum", "is_forum": True}
        return chat_id

    def _media_field(self, kind: str, stored: StoredFile, name: str | None, mime: str | None, duration: int) -> Any:
        """The object a message carries for a file of `kind`, as the Bot API describes it."""
        size = {"file_id": stored.file_id, "file_unique_id": stored.unique_id, "file_size": len(stored.data)}
        if kind == "photo":  # Telegram makes smaller sizes of a photo; the largest comes last
            thumb = self.add_file(stored.data[:100], "photos", ".jpg")
            small = {"file_id": thumb.file_id, "file_unique_id": thumb.unique_id, "file_size": len(thumb.data)}
            return [small | {"width": 90, "height": 68}, size | {"width": 1280, "height": 960}]
        if kind == "sticker":
            animated, video = mime == "application/x-tgsticker", mime == "video/webm"
            return size | {"type": "regular", "width": 512, "height": 512, "is_animated": animated, "is_video": video}
        if kind == "video_note":
            return size | {"length": 240, "duration": duration}
        item = size | {"mime_type": mime} | ({"file_name": name} if name else {})
        if kind in ("voice", "audio", "video", "animation"):
            item["duration"] = duration
        if kind in ("video", "animation"):
            item.update(width=640, height=480)
        return item

    def media_update(
        self,
        kind: str,
        data: bytes,
        *,
        caption: str = "",
        name: str | None = None,
        mime_type: str | None = None,
        duration: int = 3,
        chat_id: int | None = None,
        user_id: int | None = None,
        media_group_id: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """An update (not queued) of a message carrying a file of `kind` with these bytes: in a DM from `user_id`, or
        in the supergroup `chat_id`; `media_group_id` makes it a part of an album."""
        folder, usual_type, extension = _MEDIA[kind]
        mime = mime_type or usual_type
        stored = self.add_file(data, folder, os.path.splitext(name or "")[1] or extension)
        media: dict[str, Any] = {kind: self._media_field(kind, stored, name, mime, duration)}
        if kind == "animation":  # Telegram adds a document copy of an animation, for older clients
            media["document"] = {key: value for key, value in media[kind].items() if key not in ("width", "height")}
        if caption:
            media["caption"] = caption
        if media_group_id:
            media["media_group_id"] = media_group_id
        sender = self._user(user_id or self.user_id, "Ann")
        if chat_id is None:
            chat: dict[str, Any] = {"id": sender["id"], "type": "private", "first_name": "Ann"}
        else:
            chat = self.chats.get(chat_id) or {"id": chat_id, "type": "supergroup", "title": "Team"}
        message = self._message(chat, sender, "", **media, **extra)
        del message["text"]
        return {"update_id": next(self._update_ids), "message": message}

    async def media_message(self, kind: str, data: bytes, **options: Any) -> dict[str, Any]:
        """Queue a message carrying a file (see `media_update` for the options)."""
        return await self.raw_update(self.media_update(kind, data, **options))

    async def media_group(
        self, parts: list[tuple[str, bytes, str]] | list[tuple[str, bytes, str, dict[str, Any]]], **options: Any
    ) -> list[dict[str, Any]]:
        """Queue an album: one message for each (kind, bytes, caption[, that part's own options, e.g. its `name`]),
        sharing a media_group_id, all at once."""
        group = str(next(self._message_ids) * 1000)
        updates = [
            self.media_update(kind, data, caption=caption, media_group_id=group, **(options | dict(*own)))
            for kind, data, caption, *own in parts
        ]
        await self._queue(updates)
        return updates

    # --- the HTTP side --------------------------------------------------------------------------------------------

    @staticmethod
    def _ok(result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _error(status: int, description: str, **parameters: Any) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if parameters:
            body["parameters"] = parameters
        return web.json_response(body, status=status)

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            raw = await request.json() if request.can_read_body else {}
            return dict(raw or {})
        params: dict[str, Any] = {}
        form = await request.post() if request.can_read_body else {}
        for key, value in form.items():
            if isinstance(value, web.FileField):
                params[key] = FilePart(value.filename, value.content_type, value.file.read())
                continue
            text = value if isinstance(value, str) else str(value)
            if key in _JSON_FIELDS:
                params[key] = json.loads(text)
            elif key in _INT_FIELDS and re.fullmatch(r"-?\d+", text):
                params[key] = int(text)
            else:
                params[key] = text
        params.update({key: value for key, value in request.query.items() if key not in params})
        for key in _INT_FIELDS & params.keys():
            if isinstance(params[key], str) and re.fullmatch(r"-?\d+", params[key]):
                params[key] = int(params[key])
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        method = request.match_info["method"]
        try:
            params = await self._params(request)
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, "Request Entity Too Large")
        except (ValueError, json.JSONDecodeError):
            return self._error(400, "Bad Request: can't parse request body")
        if any(isinstance(value, FilePart) and len(value.data) > MAX_UPLOAD for value in params.values()):
            return self._error(413, "Request Entity Too Large")
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        port = int(peer[1]) if peer else 0
        self.requests.append(Call(method, params, port=port))
        if method == "getUpdates":
            self.poll_connections.append(port)
        if self._failures.get(method):
            retry_after = self._failures[method].pop(0)
            return self._error(429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after)
        if self.max_per_second is not None and method in ("sendMessage", "editMessageText"):
            now = time.monotonic()
            while self._recent_sends and now - self._recent_sends[0] >= 1.0:
                self._recent_sends.popleft()
            if len(self._recent_sends) >= self.max_per_second:
                self.rate_limited += 1
                return self._error(429, "Too Many Requests: retry after 1", retry_after=1)
            self._recent_sends.append(now)
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            return self._error(404, "Not Found")
        response: web.Response = await handler(params)
        return response

    async def _m_getme(self, params: dict[str, Any]) -> web.Response:
        return self._ok(self.bot_user())

    async def _m_deletewebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = None
        if params.get("drop_pending_updates") in (True, "true", "True"):
            self.updates = []
        return self._ok(True)

    async def _m_setwebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = dict(params) if params.get("url") else None  # an empty url removes it, as deleteWebhook
        self._webhook_stalled = False  # a webhook set (again) is tried at once
        await self._notify()
        return self._ok(True)

    def _pending(self) -> list[dict[str, Any]]:
        return [update for update in self.updates if isinstance(update.get("update_id"), int)]

    async def _m_getwebhookinfo(self, params: dict[str, Any]) -> web.Response:
        webhook = self.webhook or {}
        info: dict[str, Any] = {
            "url": webhook.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self._pending()),
            "max_connections": 40,
        }
        if webhook.get("allowed_updates"):
            info["allowed_updates"] = webhook["allowed_updates"]
        if self.last_webhook_error is not None:
            info["last_error_date"], info["last_error_message"] = self.last_webhook_error
        return self._ok(info)

    async def _deliver_webhook(self) -> None:
        """Post pending updates to the webhook, oldest first, each until it is taken; a failure is remembered for
        getWebhookInfo and retried shortly (Telegram's delay grows; `stall_webhook` stands for where it ends)."""

        def deliverable() -> bool:
            ready = self.webhook is not None and self.webhook_route is not None and not self._webhook_stalled
            return self._stopping.is_set() or (ready and bool(self._pending()))

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:
            while True:
                async with self._new_updates:
                    await self._new_updates.wait_for(deliverable)
                    if self._stopping.is_set():
                        return
                    update, webhook, route = self._pending()[0], self.webhook or {}, self.webhook_route or ""
                headers = {"X-Telegram-Bot-Api-Secret-Token": str(webhook.get("secret_token") or "")}
                try:
                    async with session.post(route, json=update, headers=headers) as answer:
                        taken = 200 <= answer.status < 300
                        error = f"Wrong response from the webhook: {answer.status} {answer.reason}"
                except (aiohttp.ClientError, TimeoutError) as failure:
                    taken, error = False, f"Connection failed: {type(failure).__name__}"
                if taken:
                    self.webhook_posts += 1
                    self.updates = [other for other in self.updates if other is not update]
                else:
                    self.last_webhook_error = (int(time.time()), error)
                    await asyncio.sleep(0.05)

    async def _m_setmycommands(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

    async def _m_sendchataction(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

    async def _m_setmessagereaction(self, params: dict[str, Any]) -> web.Response:
        if not params.get("message_id"):
            return self._error(400, "Bad Request: message to react not found")
        return self._ok(True)

    async def _m_answercallbackquery(self, params: dict[str, Any]) -> web.Response:
        self.answered.append(str(params.get("callback_query_id")))
        return self._ok(True)

    async def _m_getupdates(self, params: dict[str, Any]) -> web.Response:
        if self.webhook is not None:
            return self._error(409, "Conflict: can't use getUpdates method while webhook is active")
        if self._silent:
            self.hung += 1
            await self._stopping.wait()
            return self._error(502, "Bad Gateway")
        offset = int(params.get("offset") or 0)
        timeout = min(float(params.get("timeout") or 0), 30)
        self.offsets.append(offset)
        async with self._new_updates:
            if offset:  # Telegram forgets what the bot confirmed
                self.updates = [
                    u for u in self.updates if not isinstance(u.get("update_id"), int) or u["update_id"] >= offset
                ]

            def ready() -> list[dict[str, Any]]:
                return [u for u in self.updates if not isinstance(u.get("update_id"), int) or u["update_id"] >= offset]

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._new_updates.wait_for(lambda: bool(ready()) or self._stopping.is_set()), timeout
                )
            found = ready()[: int(params.get("limit") or 100)]
            # an update without a numeric id can never be confirmed: hand it out once
            self.updates = [u for u in self.updates if isinstance(u.get("update_id"), int) or u not in found]
            return self._ok(found)

    def _visible(self, text: str, parse_mode: Any) -> str | web.Response:
        """The text as Telegram shows it (its HTML parsed), or Telegram's answer to HTML it cannot parse."""
        if str(parse_mode or "").lower() != "html":
            return text
        try:
            return parse_html(text)
        except EntityError as error:
            return self._error(400, f"Bad Request: can't parse entities: {error}")

    def _check_text(self, params: dict[str, Any]) -> tuple[str, str] | web.Response:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            return self._error(400, "Bad Request: message text is empty")
        visible = self._visible(text, params.get("parse_mode"))
        if isinstance(visible, web.Response):
            return visible
        if len(visible) > MAX_TEXT:
            return self._error(400, "Bad Request: message is too long")
        if not visible.strip():
            return self._error(400, "Bad Request: message text is empty")
        markup = params.get("reply_markup")
        for row in (markup or {}).get("inline_keyboard", []):
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(str(data).encode()) <= 64:
                    return self._error(400, "Bad Request: BUTTON_DATA_INVALID")
        return text, visible

    def _render(self, stored: StoredMessage) -> dict[str, Any]:
        chat = self.chats.get(stored.chat_id) or {
            "id": stored.chat_id,
            "type": "private" if stored.chat_id > 0 else "supergroup",
        }
        message: dict[str, Any] = {
            "message_id": stored.message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user(),
            "text": stored.visible,
        }
        if stored.media is not None:
            del message["text"]
            message.update(stored.media)
            if stored.visible:
                message["caption"] = stored.visible
        if stored.thread_id:
            message.update(message_thread_id=stored.thread_id, is_topic_message=True)
        if stored.reply_markup:
            message["reply_markup"] = stored.reply_markup
        return message

    async def _m_sendmessage(self, params: dict[str, Any]) -> web.Response:
        chat_id = params.get("chat_id")
        if not isinstance(chat_id, int):
            return self._error(400, "Bad Request: chat not found")
        checked = self._check_text(params)
        if isinstance(checked, web.Response):
            return checked
        text, visible = checked
        stored = StoredMessage(
            chat_id=chat_id,
            message_id=next(self._message_ids),
            text=text,
            visible=visible,
            parse_mode=params.get("parse_mode"),
            reply_markup=params.get("reply_markup"),
            thread_id=params.get("message_thread_id"),
        )
        self.messages[(chat_id, stored.message_id)] = stored
        self.sent[chat_id].append(text)
        return self._ok(self._render(stored))

    async def _m_editmessagetext(self, params: dict[str, Any]) -> web.Response:
        stored = self.messages.get((params.get("chat_id"), params.get("message_id")))  # type: ignore[arg-type]
        if stored is None:
            return self._error(400, "Bad Request: message to edit not found")
        checked = self._check_text(params)
        if isinstance(checked, web.Response):
            return checked
        text, visible = checked
        markup = params.get("reply_markup")
        if visible == stored.visible and markup == stored.reply_markup:
            return self._error(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly "
                "the same as a current content and reply markup of the message",
            )
        stored.text, stored.visible, stored.reply_markup = text, visible, markup
        stored.parse_mode = params.get("parse_mode")
        return self._ok(self._render(stored))

    async def _m_editmessagereplymarkup(self, params: dict[str, Any]) -> web.Response:
        stored = self.messages.get((params.get("chat_id"), params.get("message_id")))  # type: ignore[arg-type]
        if stored is None:
            return self._error(400, "Bad Request: message to edit not found")
        if params.get("reply_markup") == stored.reply_markup:
            return self._error(400, "Bad Request: message is not modified")
        stored.reply_markup = params.get("reply_markup")
        return self._ok(self._render(stored))

    async def _m_deletemessage(self, params: dict[str, Any]) -> web.Response:
        key = (params.get("chat_id"), params.get("message_id"))
        if key not in self.messages:
            return self._error(400, "Bad Request: message to delete not found")
        del self.messages[key]
        return self._ok(True)

    # --- files and polls -------------------------------------------------------------------------------------------

    async def _m_getfile(self, params: dict[str, Any]) -> web.Response:
        stored = self.files.get(str(params.get("file_id")))
        if stored is None:
            return self._error(400, "Bad Request: invalid file_id")
        if len(stored.data) > MAX_DOWNLOAD:
            return self._error(400, "Bad Request: file is too big")
        found = {"file_id": stored.file_id, "file_unique_id": stored.unique_id, "file_size": len(stored.data)}
        return self._ok(found | {"file_path": stored.path})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """GET /file/bot<token>/<file_path>: the file's bytes, sent in pieces."""
        stored = self.served.get(request.match_info["path"])
        if request.match_info["token"] != self.token or stored is None:
            return self._error(404, "Not Found")
        self.downloads.append(stored.path)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(stored.data)
        await response.prepare(request)
        for start in range(0, len(stored.data), 256 * 1024):
            await response.write(stored.data[start : start + 256 * 1024])
        await response.write_eof()
        return response

    def _caption(self, item: dict[str, Any]) -> tuple[str, str] | web.Response:
        """A file's caption as sent and as shown, or Telegram's refusal."""
        caption = str(item.get("caption") or "")
        visible = self._visible(caption, item.get("parse_mode"))
        if isinstance(visible, web.Response):
            return visible
        if len(visible) > MAX_CAPTION:
            return self._error(400, "Bad Request: message caption is too long")
        return caption, visible

    def _store_file(
        self, method: str, kind: str, part: FilePart, caption: tuple[str, str], params: dict[str, Any], group: str
    ) -> StoredMessage:
        """Record an uploaded file and the message it made."""
        chat_id, message_id = int(params["chat_id"]), next(self._message_ids)
        stored_file = self.add_file(part.data, kind + "s", os.path.splitext(part.filename or "")[1])
        media: dict[str, Any] = {kind: self._media_field(kind, stored_file, part.filename, part.content_type, 1)}
        if group:
            media["media_group_id"] = group
        thread = params.get("message_thread_id")
        stored = StoredMessage(
            chat_id, message_id, caption[0], caption[1], None, params.get("reply_markup"), thread, media
        )
        self.messages[(chat_id, message_id)] = stored
        self.uploads.append(
            Upload(
                method=method,
                kind=kind,
                chat_id=chat_id,
                filename=part.filename,
                content_type=part.content_type,
                data=part.data,
                caption=caption[0] or None,
                message_id=message_id,
                thread_id=thread,
                media_group_id=group or None,
            )
        )
        return stored

    async def _send_file(self, method: str, kind: str, params: dict[str, Any]) -> web.Response:
        """sendPhoto, sendVoice, sendAudio, sendVideo, sendDocument: one uploaded file with an optional caption."""
        if not isinstance(params.get("chat_id"), int):
            return self._error(400, "Bad Request: chat not found")
        part = params.get(kind)
        if not isinstance(part, FilePart) or not part.data:
            return self._error(400, f"Bad Request: there is no {kind} in the request")
        caption = self._caption(params)
        if isinstance(caption, web.Response):
            return caption
        return self._ok(self._render(self._store_file(method, kind, part, caption, params, "")))

    async def _m_sendphoto(self, params: dict[str, Any]) -> web.Response:
        return await self._send_file("sendPhoto", "photo", params)

    async def _m_sendvoice(self, params: dict[str, Any]) -> web.Response:
        return await self._send_file("sendVoice", "voice", params)

    async def _m_sendaudio(self, params: dict[str, Any]) -> web.Response:
        return await self._send_file("sendAudio", "audio", params)

    async def _m_sendvideo(self, params: dict[str, Any]) -> web.Response:
        return await self._send_file("sendVideo", "video", params)

    async def _m_senddocument(self, params: dict[str, Any]) -> web.Response:
        return await self._send_file("sendDocument", "document", params)

    def _check_album(self, params: dict[str, Any]) -> str | None:
        """Why Telegram would refuse this album, or None."""
        items = params.get("media")
        if not isinstance(items, list) or not 2 <= len(items) <= 10:
            return "Bad Request: an album must have 2 to 10 items"
        kinds = {str(item.get("type")) for item in items}
        if not kinds <= {"photo", "video", "document", "audio"}:
            return "Bad Request: can't parse InputMedia: unsupported type"
        if len(kinds) > 1 and not kinds <= {"photo", "video"}:
            return (
                "Bad Request: documents and audio files can be only grouped in an album with messages of the same type"
            )
        for item in items:
            name = str(item.get("media", "")).removeprefix("attach://")
            if not isinstance(params.get(name), FilePart):
                return "Bad Request: can't parse InputMedia: media not found"
        return None

    async def _m_sendmediagroup(self, params: dict[str, Any]) -> web.Response:
        if not isinstance(params.get("chat_id"), int):
            return self._error(400, "Bad Request: chat not found")
        refused = self._check_album(params)
        if refused:
            return self._error(400, refused)
        parts: list[tuple[str, FilePart, tuple[str, str]]] = []
        for item in params["media"]:
            caption = self._caption(item)
            if isinstance(caption, web.Response):
                return caption
            parts.append((item["type"], params[item["media"].removeprefix("attach://")], caption))
        group = str(next(self._message_ids) * 1000)
        sent = [self._store_file("sendMediaGroup", kind, part, caption, params, group) for kind, part, caption in parts]
        return self._ok([self._render(stored) for stored in sent])

    async def _m_sendpoll(self, params: dict[str, Any]) -> web.Response:
        chat_id = params.get("chat_id")
        if not isinstance(chat_id, int):
            return self._error(400, "Bad Request: chat not found")
        question = str(params.get("question") or "")
        options = [
            option["text"] if isinstance(option, dict) else str(option) for option in params.get("options") or []
        ]
        if not 1 <= len(question) <= 300:
            return self._error(400, "Bad Request: poll question length must not exceed 300")
        if not 2 <= len(options) <= MAX_POLL_OPTIONS or not all(1 <= len(option) <= 100 for option in options):
            return self._error(400, f"Bad Request: poll must have 2-{MAX_POLL_OPTIONS} options of 1-100 characters")
        poll = {
            "id": str(next(self._message_ids)),
            "question": question,
            "options": [
                {"text": option, "voter_count": 0, "persistent_id": str(index)} for index, option in enumerate(options)
            ],
            "total_voter_count": 0,
            "is_closed": False,
            "is_anonymous": True,
            "type": "regular",
            "allows_multiple_answers": False,
            "allows_revoting": True,  # required since Bot API 9.6
            "members_only": False,  # required since Bot API 10.0
        }
        thread = params.get("message_thread_id")
        stored = StoredMessage(
            chat_id, next(self._message_ids), "", "", None, params.get("reply_markup"), thread, {"poll": poll}
        )
        self.messages[(chat_id, stored.message_id)] = stored
        return self._ok(self._render(stored))

    async def _m_createforumtopic(self, params: dict[str, Any]) -> web.Response:
        chat_id = params.get("chat_id")
        if not isinstance(chat_id, int) or not self.chats.get(chat_id, {}).get("is_forum"):
            return self._error(400, "Bad Request: the chat is not a forum")
        name = str(params.get("name") or "")
        if not 1 <= len(name) <= 128:
            return self._error(400, "Bad Request: TOPIC_NAME_INVALID")
        thread_id = next(self._message_ids)
        self.topics[(chat_id, thread_id)] = name
        return self._ok({"message_thread_id": thread_id, "name": name, "icon_color": 7322096})

    async def __aenter__(self) -> FakeTelegram:
        # a 50 MB file with its multipart envelope and the other fields
        app = web.Application(client_max_size=MAX_UPLOAD + 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        await site.start()
        self._port = self._runner.addresses[0][1]
        self._deliverer = asyncio.create_task(self._deliver_webhook())
        return self

    async def __aexit__(self, *_: object) -> None:
        async with self._new_updates:  # ends every getUpdates held open, so the server stops without waiting
            self._stopping.set()
            self._new_updates.notify_all()
        if self._deliverer is not None:
            self._deliverer.cancel()  # a post under way ends here too
            with contextlib.suppress(asyncio.CancelledError):
                await self._deliverer
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server
