"""A fake Telegram Bot API: a real aiohttp server on 127.0.0.1 that speaks the Bot API as python-telegram-bot uses it.

    async with FakeTelegram() as tg:             # or the `fake_telegram` fixture
        settings = TelegramAccount(token=tg.token, api_base_url=tg.url)
        update = await tg.private_message("hi")  # queue an update for getUpdates
        await tg.wait_sent(tg.user_id, 1)        # sendMessage texts land in tg.sent[chat_id]

Calls are `POST /bot<token>/<method>` with form-urlencoded (strings raw, everything else JSON), JSON or empty bodies.
getUpdates is held open up to `timeout` seconds; updates below the offset are dropped as confirmed. Limits and errors
are Telegram's: 4,096 characters after entity parsing, HTML checked like Telegram checks it, identical edits refused,
and `fail_next(method, times, retry_after)` answers 429 with `parameters.retry_after`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import html
import itertools
import json
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from helpers import WAIT, eventually

TOKEN = "123456:TEST-token"
BOT_ID = 123456
BOT_USERNAME = "switchboard_test_bot"
MAX_TEXT = 4096
_JSON_FIELDS = {
    "reply_markup",
    "reply_parameters",
    "entities",
    "allowed_updates",
    "commands",
    "reaction",
    "link_preview_options",
    "scope",
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


@dataclass
class StoredMessage:
    chat_id: int
    message_id: int
    text: str  # as sent (HTML source when parse_mode is HTML)
    visible: str
    parse_mode: str | None
    reply_markup: Any
    thread_id: int | None


class FakeTelegram:
    """A Bot API server for one bot; see the module docstring."""

    def __init__(self, token: str = TOKEN, *, bot_id: int = BOT_ID, username: str = BOT_USERNAME) -> None:
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
        self._failures: dict[str, list[int]] = defaultdict(list)  # method -> retry_after for each next call
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(5000)
        self._query_ids = itertools.count(1)
        self._new_updates = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port = 0
        # Like Telegram, answer 429 to sends beyond `max_per_second` (None: no limit); `rate_limited` counts them.
        # By the wall clock, so for bench/telegram.py only: a test on it would depend on the machine's speed.
        self.max_per_second: float | None = None
        self.rate_limited = 0
        self._recent_sends: collections.deque[float] = collections.deque()

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
        async with self._new_updates:
            self.updates.append(update)
            self._new_updates.notify_all()
        return update

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
        except (ValueError, json.JSONDecodeError):
            return self._error(400, "Bad Request: can't parse request body")
        self.requests.append(Call(method, params))
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
        return self._ok(True)

    async def _m_setwebhook(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

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
                await asyncio.wait_for(self._new_updates.wait_for(lambda: bool(ready())), timeout)
            found = ready()[: int(params.get("limit") or 100)]
            # an update without a numeric id can never be confirmed: hand it out once
            self.updates = [u for u in self.updates if isinstance(u.get("update_id"), int) or u not in found]
            return self._ok(found)

    def _check_text(self, params: dict[str, Any]) -> tuple[str, str] | web.Response:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            return self._error(400, "Bad Request: message text is empty")
        visible = text
        if str(params.get("parse_mode", "")).lower() == "html":
            try:
                visible = parse_html(text)
            except EntityError as error:
                return self._error(400, f"Bad Request: can't parse entities: {error}")
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

    async def __aenter__(self) -> FakeTelegram:
        app = web.Application(client_max_size=20 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server
