"""The Telegram channel on python-telegram-bot: long polling (or a webhook) in, Bot API calls out. An update is
acknowledged (the next getUpdates offset, or the webhook's HTTP answer) only after the gateway has recorded it."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, Literal

from aiohttp import web
from telegram import (
    BotCommand,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    ReactionTypeEmoji,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, ChatMigrated, Conflict, InvalidToken, RetryAfter, TelegramError
from telegram.ext import BaseRateLimiter, ExtBot

from channels.accounts import TelegramAccount
from channels.base import (
    NOTICE_BUDGET_SECONDS,
    ActionEvent,
    Attachment,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
    within,
)
from channels.markup_telegram import markdown_to_html
from channels.telegram_request import AiohttpRequest
from routing import Peer
from routing.errors import ChannelError

log = logging.getLogger(__name__)

CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,
    max_text_length=4096,
    markup="telegram-html",
    streaming=True,
    edit_interval_seconds=1.0,
)
DEFAULT_ROOT = "https://api.telegram.org"
MAX_CALLBACK_DATA_BYTES = 64
MAX_DELIVERY_ATTEMPTS = 3
MAX_WEBHOOK_BODY = 10_000_000  # bytes of one webhook post; an update is a few kilobytes
WEBHOOK_READ_SECONDS = 30  # a post whose body trickles in slower than this is dropped
ALLOWED_UPDATES = ["message", "channel_post", "callback_query"]
_TOPIC = ":topic:"
_NO_THROTTLE = frozenset({"getMe", "deleteWebhook", "setWebhook", "setMyCommands", "answerCallbackQuery"})


class TelegramSendError(ChannelError, ValueError):
    """A message Telegram would refuse, caught before it is sent (e.g. a button value over 64 bytes)."""


def _retry_seconds(error: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 warns about int vs timedelta on access; both are handled
        warnings.simplefilter("ignore")
        value = error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


class _Window:
    """At most `limit` requests in any `period` seconds (a sliding window) by `clock`."""

    def __init__(
        self,
        limit: int,
        period: float,
        clock: Callable[[], float] = _loop_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.limit, self.period = limit, period
        self.clock, self.sleep = clock, sleep
        self.times: deque[float] = deque()

    async def acquire(self) -> None:
        while True:
            now = self.clock()
            while self.times and now - self.times[0] >= self.period:
                self.times.popleft()
            if len(self.times) < self.limit:
                self.times.append(now)
                return
            await self.sleep(self.period - (now - self.times[0]) + 0.001)


class TelegramRateLimiter(BaseRateLimiter[None]):
    """Throttles to Telegram's limits (30 calls/s overall, 20/min per group) and waits out a 429's `retry_after`,
    pausing every call meanwhile, then tries again (up to `max_retries` times). Time is the event loop's unless
    `clock` and `sleep` say otherwise (a test's fake clock)."""

    def __init__(
        self,
        overall_per_second: int = 30,
        group_per_minute: int = 20,
        max_retries: int = 3,
        *,
        clock: Callable[[], float] = _loop_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.clock, self.sleep = clock, sleep
        # A little over a second per window: network jitter must not push two windows' worth into one.
        self.overall = _Window(overall_per_second, 1.05, clock, sleep)
        self.group_per_minute = group_per_minute
        self.groups: dict[str, _Window] = {}
        self.max_retries = max_retries
        self._paused_until = 0.0

    def _group(self, chat: str) -> _Window:
        """The chat's per-minute window; making one forgets every group quiet for a whole window, so a bot in many
        groups keeps only the ones it wrote to in the last minute."""
        window = self.groups.get(chat)
        if window is None:
            now = self.clock()
            idle = [key for key, w in self.groups.items() if not w.times or now - w.times[-1] >= w.period]
            for key in idle:
                del self.groups[key]
            window = self.groups[chat] = _Window(self.group_per_minute, 60.0, self.clock, self.sleep)
        return window

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        chat = str(data.get("chat_id", ""))
        attempt = 0
        while True:
            while (pause := self._paused_until - self.clock()) > 0:
                await self.sleep(pause)
            if endpoint not in _NO_THROTTLE:
                await self.overall.acquire()
                if chat.startswith("-") and endpoint != "sendChatAction":
                    await self._group(chat).acquire()
            try:
                return await callback(*args, **kwargs)
            except RetryAfter as error:
                attempt += 1
                if attempt > self.max_retries:
                    raise
                seconds = _retry_seconds(error)
                log.warning("telegram: %s rate-limited; waiting %.1fs (attempt %d)", endpoint, seconds, attempt)
                self._paused_until = max(self._paused_until, self.clock() + seconds)


class _Bot(ExtBot[None]):
    async def raw_updates(self, offset: int, timeout: int) -> Any:
        """getUpdates without parsing: one malformed update must not hide the others (or block the offset)."""
        # The one private PTB call (`Bot._post`): the public `do_api_request` warns when asked for a method the Bot
        # has, and `get_updates` parses every update. tests/test_private_apis.py fails if PTB changes `_post`.
        data = {"offset": offset, "timeout": timeout, "allowed_updates": ALLOWED_UPDATES}
        return await self._post("getUpdates", data, read_timeout=timeout + 10)


def _chat_key(raw: dict[str, Any], update_id: int) -> object:
    """The chat an update belongs to, read from the raw JSON; an update without one stands alone."""
    query = raw.get("callback_query")
    for body in (*raw.values(), query.get("message") if isinstance(query, dict) else None):
        if isinstance(body, dict) and isinstance(body.get("chat"), dict):
            return body["chat"].get("id")
    return ("update", update_id)


def chat_and_thread(target: ChatTarget) -> tuple[int | str, int | None]:
    """The Bot API chat id and topic id for a target (`group:-100…:topic:7` names the topic in the peer)."""
    peer_id = target.peer.id or ""
    chat, _, topic = peer_id.partition(_TOPIC)
    thread = target.thread_id or topic or None
    try:
        chat_id: int | str = int(chat)
    except ValueError:
        chat_id = chat  # an @channelusername
    return chat_id, int(thread) if thread else None


def _check_buttons(message: OutboundMessage) -> InlineKeyboardMarkup | None:
    if not message.buttons:
        return None
    rows = []
    for row in message.buttons:
        for button in row:
            size = len(button.value.encode())
            if not 1 <= size <= MAX_CALLBACK_DATA_BYTES:
                raise TelegramSendError(
                    f"button {button.label!r}: its value is {size} bytes; Telegram allows 1 to "
                    f"{MAX_CALLBACK_DATA_BYTES} bytes of callback data"
                )
        rows.append([InlineKeyboardButton(button.label, callback_data=button.value) for button in row])
    return InlineKeyboardMarkup(rows)


def _entity_error(error: BadRequest) -> bool:
    return "can't parse entities" in error.message.lower() or "can't find end tag" in error.message.lower()


class TelegramAdapter:
    """One Telegram bot account. Build it, `await start(on_message, on_action)`, and `await stop()` at the end."""

    channel = "telegram"
    capabilities = CAPABILITIES

    def __init__(
        self,
        account: str,
        settings: TelegramAccount,
        *,
        commands: Sequence[tuple[str, str]] = (),
        rate_limiter: TelegramRateLimiter | None = None,
    ) -> None:
        self.account = account
        self.settings = settings
        self.commands = list(commands)  # (name, description) shown in Telegram's command menu
        self.bot_username: str | None = None
        self.bot_id: int | None = None
        root = (settings.api_base_url or DEFAULT_ROOT).rstrip("/")
        self.bot = _Bot(
            settings.token,
            base_url=f"{root}/bot",
            base_file_url=f"{root}/file/bot",
            request=AiohttpRequest(pool_size=16, read_timeout=20, write_timeout=20, connect_timeout=10),
            get_updates_request=AiohttpRequest(pool_size=2, connect_timeout=10),
            rate_limiter=rate_limiter or (TelegramRateLimiter() if settings.rate_limit else None),
        )
        self._offset = 0
        self._failures: dict[int, int] = {}  # update id -> times on_message raised for it
        self._task: asyncio.Task[None] | None = None
        self._webhook: web.AppRunner | None = None
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None

    # --- start and stop -----------------------------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        self._on_message, self._on_action = on_message, on_action
        await self.bot.initialize()  # getMe: who we are, for mentions and /cmd@name
        me = self.bot.bot
        self.bot_username, self.bot_id = me.username, me.id
        if self.commands:
            try:
                await self.bot.set_my_commands([BotCommand(name, text) for name, text in self.commands])
            except TelegramError as error:
                log.warning("telegram %s: could not set the command menu: %s", self.account, error)
        if self.settings.mode == "webhook":
            await self._start_webhook()
        else:
            await self.bot.delete_webhook(drop_pending_updates=False)
            self._task = asyncio.create_task(self._poll(), name=f"telegram:{self.account}")
        log.info("telegram %s: @%s connected (%s)", self.account, self.bot_username, self.settings.mode)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            # As python-telegram-bot does: one last getUpdates, so Telegram learns the final offset.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.bot.raw_updates(self._offset, 0), 5)
        if self._webhook is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._webhook.cleanup(), 5)
            self._webhook = None
        with contextlib.suppress(Exception):
            await self.bot.shutdown()

    # --- receiving ----------------------------------------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 0.5
        while True:
            try:
                updates = await self.bot.raw_updates(self._offset, self.settings.poll_timeout)
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except RetryAfter as error:
                await asyncio.sleep(_retry_seconds(error))
                continue
            except InvalidToken:
                log.error("telegram %s: the bot token was refused; polling stops", self.account)
                return
            except Exception as error:  # NetworkError, TimedOut, Conflict (another poller), a bad answer
                level = logging.ERROR if isinstance(error, Conflict) else logging.WARNING
                log.log(level, "telegram %s: getUpdates failed (%s); retrying in %.1fs", self.account, error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)
                continue
            if not isinstance(updates, list):
                log.warning("telegram %s: getUpdates answered %s, not a list", self.account, type(updates).__name__)
                continue
            fresh: list[tuple[int, dict[str, Any]]] = []
            for raw in updates:
                update_id = raw.get("update_id") if isinstance(raw, dict) else None
                if not isinstance(update_id, int):
                    log.warning("telegram %s: skipped an update without a numeric update_id", self.account)
                elif update_id >= self._offset:  # lower ones were handled already (a server repeating itself)
                    fresh.append((update_id, raw))
            if not fresh:
                continue
            # Chats are recorded side by side, each chat's updates in order: a batch of 100 DMs is not 100
            # journal writes one after the other. A failed update stops its chat, and confirmation stops at
            # the first failed update: Telegram sends the rest again, and the journal drops the ones it has.
            chats: dict[object, list[tuple[int, dict[str, Any]]]] = {}
            for update_id, raw in fresh:
                chats.setdefault(_chat_key(raw, update_id), []).append((update_id, raw))
            failed = [failure for failure in await asyncio.gather(*map(self._record, chats.values())) if failure]
            self._offset = max(self._offset, min(failed) if failed else max(uid for uid, _ in fresh) + 1)
            self._failures = {uid: count for uid, count in self._failures.items() if uid >= self._offset}
            if failed:
                await asyncio.sleep(backoff * self._failures.get(min(failed), 1))

    async def _record(self, updates: list[tuple[int, dict[str, Any]]]) -> int | None:
        """Hand one chat's updates to the gateway in order; the id of the one that failed, if one did."""
        for update_id, raw in updates:
            try:
                await self.handle_update(raw)
            except Exception:
                failures = self._failures.get(update_id, 0) + 1
                self._failures[update_id] = failures
                if failures < MAX_DELIVERY_ATTEMPTS:
                    log.exception("telegram %s: update %d not recorded; retrying", self.account, update_id)
                    return update_id
                # never let one update block the rest for good
                log.exception("telegram %s: update %d failed %d times; skipped", self.account, update_id, failures)
        return None

    async def handle_update(self, raw: dict[str, Any]) -> None:
        """Hand one raw update to the gateway; a bad one is logged and skipped, never fatal."""
        update_id = raw.get("update_id")
        try:
            update = Update.de_json(raw, self.bot)
            inbound, query = None, None
            if update.callback_query is not None:
                query = update.callback_query
            elif update.message is not None:
                inbound = self._inbound(update.message)
            elif update.channel_post is not None:
                inbound = self._inbound(update.channel_post)
            else:
                kinds = ", ".join(sorted(key for key in raw if key != "update_id")) or "nothing"
                log.info("telegram %s: skipped update %s of a type not handled (%s)", self.account, update_id, kinds)
                return
        except Exception as error:
            log.warning(
                "telegram %s: skipped malformed update %s: %s: %s", self.account, update_id, type(error).__name__, error
            )
            return
        if query is not None:
            await self._action(query)
        elif inbound is None:
            log.debug("telegram %s: skipped update %s: a service message with no text", self.account, update_id)
        elif self._on_message is not None:
            await self._on_message(inbound)

    def _peer(self, message: Message) -> tuple[Peer, Peer | None, str | None]:
        chat = message.chat
        if chat.type == "private":
            return Peer("direct", chat.id), None, None
        if chat.type == "channel":
            return Peer("channel", chat.id), None, None
        if message.is_topic_message and message.message_thread_id is not None:
            thread = str(message.message_thread_id)
            return Peer("group", f"{chat.id}{_TOPIC}{thread}"), Peer("group", chat.id), thread
        return Peer("group", chat.id), None, None

    def _inbound(self, message: Message) -> InboundMessage | None:
        peer, parent, thread = self._peer(message)
        user = message.from_user
        if user is not None:
            sender_id, sender_is_bot = str(user.id), user.is_bot
            sender_name = user.full_name or user.username
        elif message.sender_chat is not None:
            sender_id, sender_is_bot = str(message.sender_chat.id), False
            sender_name = message.sender_chat.title or message.sender_chat.username
        else:
            raise ValueError("a message with neither from nor sender_chat")
        if user is not None and self.bot_id is not None and user.id == self.bot_id:
            sender_is_bot = True
        text = message.text or message.caption or ""
        attachments = _attachments(message)
        if not text and not attachments:
            return None  # joins, leaves, pins, topic events, stickers: nothing for an agent to answer
        reply = message.reply_to_message
        if reply is not None and reply.forum_topic_created is not None:
            reply = None  # in a topic every message "replies" to the topic's first message: not a real reply
        reply_to_bot = bool(
            reply is not None and reply.from_user is not None and self.bot_id and reply.from_user.id == self.bot_id
        )
        return InboundMessage(
            channel=self.channel,
            account=self.account,
            peer=peer,
            parent_peer=parent,
            sender_id=sender_id,
            sender_name=sender_name,
            sender_is_bot=sender_is_bot,
            text=text,
            message_id=str(message.message_id),
            reply_to=str(reply.message_id) if reply is not None else None,
            reply_to_bot=reply_to_bot,
            thread_id=thread,
            was_mentioned=reply_to_bot or self._mentions_bot(message, text),
            attachments=attachments,
        )

    def _mentions_bot(self, message: Message, text: str) -> bool:
        if not self.bot_username:
            return False
        handle = f"@{self.bot_username}".lower()
        entities = message.entities or message.caption_entities or ()
        for entity in entities:
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == self.bot_id:
                return True
            if entity.type in (MessageEntity.MENTION, MessageEntity.BOT_COMMAND):
                # offsets count UTF-16 units; parse_entity gets that right
                piece = (message.parse_entity(entity) if message.text else message.parse_caption_entity(entity)).lower()
                if piece == handle or piece.endswith(handle):
                    return True
        # Without an entity: the whole handle, not a prefix of a longer one (`@fake_botnet` is not `@fake_bot`).
        return re.search(rf"(?<![\w@]){re.escape(handle)}(?!\w)", text, re.IGNORECASE) is not None

    async def _action(self, query: CallbackQuery) -> None:
        notice = None
        try:
            event = self._action_event(query)
            if event is not None and self._on_action is not None:
                notice = await within(
                    self._on_action(event), NOTICE_BUDGET_SECONDS, f"telegram {self.account}: a click"
                )
        finally:
            try:  # always answered, so the client's spinner stops; a notice shows as an alert
                await query.answer(text=notice, show_alert=bool(notice))
            except TelegramError as error:
                log.warning("telegram %s: could not answer callback query %s: %s", self.account, query.id, error)

    def _action_event(self, query: CallbackQuery) -> ActionEvent | None:
        message = query.message
        if message is None or not query.data:
            log.info("telegram %s: skipped a button click without a message or data", self.account)
            return None
        if not isinstance(message, Message):  # an inaccessible (too old) message
            peer, thread = Peer("direct" if message.chat.type == "private" else "group", message.chat.id), None
        else:
            peer, _, thread = self._peer(message)
        return ActionEvent(
            channel=self.channel,
            account=self.account,
            peer=peer,
            sender_id=str(query.from_user.id),
            sender_name=query.from_user.full_name or query.from_user.username,
            message_id=str(message.message_id),
            value=query.data,
            thread_id=thread,
            click_id=query.id,
        )

    # --- webhook ------------------------------------------------------------------------------------------------

    async def _start_webhook(self) -> None:
        settings = self.settings
        # Any path: a reverse proxy may map the public URL's path to another one; the secret is what admits a post.
        app = web.Application(client_max_size=MAX_WEBHOOK_BODY)
        app.router.add_post("/{path:.*}", self._webhook_request)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._webhook = runner
        await web.TCPSite(runner, settings.webhook_listen, settings.webhook_port).start()
        await self.bot.set_webhook(
            url=settings.webhook_url or "", secret_token=settings.webhook_secret, allowed_updates=ALLOWED_UPDATES
        )

    @property
    def webhook_port(self) -> int | None:
        """The port the webhook listens on (useful with webhook_port 0)."""
        if self._webhook is None or not self._webhook.addresses:
            return None
        return int(self._webhook.addresses[0][1])

    async def _webhook_request(self, request: web.Request) -> web.Response:
        """One POST from Telegram: the secret header, then a JSON update, answered after the gateway returned."""
        secret = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(secret.encode(), (self.settings.webhook_secret or "").encode()):
            return web.Response(status=403)
        if request.content_type != "application/json" or not request.body_exists:
            return web.Response(status=400)
        try:
            async with asyncio.timeout(WEBHOOK_READ_SECONDS):
                body = await request.read()  # more than client_max_size: aiohttp answers 413
            raw = json.loads(body)
        except (ValueError, TimeoutError) as error:
            log.warning("telegram %s: bad webhook request: %s", self.account, type(error).__name__)
            return web.Response(status=400)
        if not (isinstance(raw, dict) and isinstance(raw.get("update_id"), int)):
            log.warning("telegram %s: skipped a webhook body that is not an update", self.account)
            return web.Response(status=200)
        try:
            await self.handle_update(raw)
        except Exception:  # not recorded: a 500 makes Telegram deliver it again later
            log.exception("telegram %s: webhook update not recorded", self.account)
            return web.Response(status=500)
        return web.Response(status=200)

    # --- sending ------------------------------------------------------------------------------------------------

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Send one message as Telegram HTML (plain text if Telegram cannot parse it); the gateway's delivery has
        split the text to `max_text_length`. Returns its id."""
        chat_id, thread = chat_and_thread(target)
        if message.thread_id:
            thread = int(message.thread_id)
        reply = ReplyParameters(int(message.reply_to), allow_sending_without_reply=True) if message.reply_to else None
        kwargs: dict[str, Any] = {
            "message_thread_id": thread,
            "reply_markup": _check_buttons(message),
            "reply_parameters": reply,
        }
        try:
            sent = await self._send_text(chat_id, message.text, kwargs)
        except ChatMigrated as error:
            log.warning("telegram %s: chat %s moved to %s", self.account, chat_id, error.new_chat_id)
            sent = await self._send_text(error.new_chat_id, message.text, kwargs)
        return str(sent.message_id)

    async def _send_text(self, chat_id: int | str, text: str, kwargs: dict[str, Any]) -> Message:
        try:
            return await self.bot.send_message(chat_id, markdown_to_html(text), parse_mode=ParseMode.HTML, **kwargs)
        except BadRequest as error:
            if not _entity_error(error):
                raise
            log.info("telegram %s: Telegram could not parse the HTML (%s); sending plain text", self.account, error)
            return await self.bot.send_message(chat_id, text, **kwargs)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        """Replace a message's text (and buttons); an edit that changes nothing is not an error."""
        markup = _check_buttons(message)
        chat_id, _ = chat_and_thread(target)
        text = message.text
        if len(text) > CAPABILITIES.max_text_length:  # a streaming preview: the final send chunks properly
            text = text[: CAPABILITIES.max_text_length - 1] + "…"
        try:
            try:
                await self.bot.edit_message_text(
                    markdown_to_html(text),
                    chat_id=chat_id,
                    message_id=int(message_id),
                    parse_mode=ParseMode.HTML,
                    reply_markup=markup,
                )
            except BadRequest as error:
                if not _entity_error(error):
                    raise
                await self.bot.edit_message_text(text, chat_id=chat_id, message_id=int(message_id), reply_markup=markup)
        except BadRequest as error:
            if "message is not modified" not in error.message.lower():
                raise

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        chat_id, _ = chat_and_thread(target)
        await self.bot.delete_message(chat_id, int(message_id))

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        """Set the bot's reaction; Telegram accepts only its own list of emoji (others are a BadRequest)."""
        chat_id, _ = chat_and_thread(target)
        await self.bot.set_message_reaction(chat_id, int(message_id), [ReactionTypeEmoji(emoji)] if emoji else [])

    async def typing(self, target: ChatTarget) -> None:
        chat_id, thread = chat_and_thread(target)
        await self.bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=thread)


def _attachments(message: Message) -> list[Attachment]:
    found: list[Attachment] = []
    if message.photo:
        largest = message.photo[-1]
        found.append(Attachment(kind="image", size=largest.file_size, mime_type="image/jpeg"))
    kinds: tuple[tuple[Any, Literal["file", "audio", "video"]], ...] = (
        (message.document, "file"),
        (message.audio, "audio"),
        (message.voice, "audio"),
        (message.video, "video"),
    )
    for item, kind in kinds:
        if item is not None:
            found.append(
                Attachment(
                    kind=kind,
                    name=getattr(item, "file_name", None),
                    mime_type=getattr(item, "mime_type", None),
                    size=item.file_size,
                )
            )
    return found


__all__ = ["CAPABILITIES", "TelegramAccount", "TelegramAdapter", "TelegramRateLimiter", "TelegramSendError"]
