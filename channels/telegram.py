"""The Telegram channel on python-telegram-bot: long polling (or a webhook) in, Bot API calls out. An update is
acknowledged (the next getUpdates offset, or the webhook's HTTP answer) only after the gateway has recorded it; the
parts of a media group (an album) are recorded as one message, and acknowledged together. A poller that hears
nothing for `stall_seconds` gets a new HTTP session (the watchdog); a webhook that hears nothing for `stall_seconds`
while Telegram holds updates for it is set again. The account's health is kept in `health`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import mimetypes
import os
import re
import warnings
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, Any, Literal, TypeVar

from aiohttp import web
from telegram import (
    BotCommand,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    InputMediaAudio,
    InputMediaDocument,
    InputMediaPhoto,
    InputMediaVideo,
    Message,
    MessageEntity,
    ReactionTypeEmoji,
    ReplyParameters,
    Sticker,
    Update,
)
from telegram.constants import ChatAction, ParseMode, PollLimit
from telegram.error import BadRequest, ChatMigrated, Conflict, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import BaseRateLimiter, ExtBot

from channels.accounts import TelegramAccount
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
from channels.health import ChannelHealth
from channels.markup_telegram import markdown_to_html
from channels.start_errors import StartError, mask, not_found, refused, unreachable, why_unreachable
from channels.telegram_request import AiohttpRequest
from routing import Peer
from routing.errors import ChannelError

log = logging.getLogger(__name__)


def _quiet_bad_json(record: logging.LogRecord) -> bool:
    """PTB logs every answer that is not JSON (a wrong api_base_url's 404 page) as an ERROR with a traceback; the
    error it raises says the same, so the record is shown only at DEBUG."""
    if not record.getMessage().startswith("Can not load invalid JSON data"):
        return True
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger().isEnabledFor(logging.DEBUG)


logging.getLogger("telegram.request.BaseRequest").addFilter(_quiet_bad_json)

CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,  # forum topics (create_thread makes one)
    polls=True,
    files=True,
    max_upload_bytes=50 * 1024 * 1024,  # the cloud Bot API's limit for a bot's upload
    max_caption_length=1024,
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
MEDIA_GROUP_WAIT = 1.0  # seconds to let an album's later parts reach the server before its first ones are delivered
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # the cloud Bot API's getFile limit
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # sendPhoto's limit: a larger image goes as a document
MAX_ALBUM = 10  # files in one sendMediaGroup
MAX_TOPIC_NAME = 128  # characters of a forum topic's name
_TOPIC = ":topic:"
_T = TypeVar("_T")
_NO_THROTTLE = frozenset({"getMe", "deleteWebhook", "setWebhook", "setMyCommands", "answerCallbackQuery"})


class TelegramSendError(ChannelError, ValueError):
    """A message Telegram would refuse, caught before it is sent (e.g. a button value over 64 bytes)."""


def _seconds(owner: object, attribute: str) -> float | None:
    """A PTB time period (a retry_after, a duration) in seconds, whichever type this PTB gives it as."""
    with warnings.catch_warnings():  # PTB 22 warns about int vs timedelta on access; both are handled
        warnings.simplefilter("ignore")
        value = getattr(owner, attribute, None)
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _retry_seconds(error: RetryAfter) -> float:
    return _seconds(error, "retry_after") or 0.0


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


class PollWatchdog:
    """Says how long the poller may still wait for a getUpdates before it counts as stalled. The silence runs from
    the start of the first getUpdates after a completed one (the time spent handing updates to the gateway is not
    silence) through failed attempts and their pauses, until one completes; `reset` after a completed getUpdates or
    a new session starts it over, so a server that stays silent costs one new session per `stall_seconds`."""

    def __init__(self, stall_seconds: float, clock: Callable[[], float] = _loop_time) -> None:
        self.stall_seconds = stall_seconds
        self._clock = clock
        self._since: float | None = None  # when the current silence began; None: none is running

    def polling(self) -> float:
        """A getUpdates starts: the seconds left before the poller is stalled (0 when it is already)."""
        if self._since is None:
            self._since = self._clock()
        return max(0.0, self._since + self.stall_seconds - self._clock())

    def reset(self) -> None:
        """A getUpdates completed, or the session was replaced: the next one has a full `stall_seconds`."""
        self._since = None


_TOKEN_SHAPE = re.compile(r"\d+:[\w-]+")  # what BotFather hands out: the bot's id, a colon, the secret


class _StatusRequest(AiohttpRequest):
    """An AiohttpRequest that remembers the HTTP status of its last answer: PTB raises InvalidToken for 401 and 404
    alike, and a start tells a refused token from a wrong URL by it."""

    last_status: int | None = None

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        status, body = await super().do_request(*args, **kwargs)
        self.last_status = status
        return status, body


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


def _media_group(raw: dict[str, Any]) -> str | None:
    """The media group (album) a raw message update is a part of, if it is one."""
    for key in ("message", "channel_post"):
        body = raw.get(key)
        if isinstance(body, dict) and isinstance(body.get("media_group_id"), str):
            return str(body["media_group_id"])
    return None


Batch = list[tuple[int, dict[str, Any]]]  # (update id, raw update) in the order Telegram sent them


def _messages(updates: Batch) -> list[Batch]:
    """One chat's updates as the messages they make: each update alone, but an album's parts together, in the place
    of its first part."""
    found: list[Batch] = []
    albums: dict[str, Batch] = {}
    for update_id, raw in updates:
        group = _media_group(raw)
        if group is None:
            found.append([(update_id, raw)])
        elif group in albums:
            albums[group].append((update_id, raw))
        else:
            albums[group] = [(update_id, raw)]
            found.append(albums[group])
    return found


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


UploadAs = Literal["photo", "voice", "audio", "video", "document"]  # the Bot API method a file goes with
# The methods whose files Telegram puts together in one album (sendMediaGroup): photos with videos, documents with
# documents, audio with audio. A voice note is never part of an album.
_ALBUMS: dict[UploadAs, str] = {"photo": "visual", "video": "visual", "document": "document", "audio": "audio"}
_PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})
_VOICE_TYPES = frozenset({"audio/ogg", "audio/opus"})
_AUDIO_TYPES = frozenset({"audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/m4a"})  # what sendAudio plays: MP3, M4A


@dataclass(frozen=True)
class _Upload:
    """A file the bot sends, its type and the method it goes with."""

    file: OutboundFile
    mime_type: str
    method: UploadAs


def _upload(file: OutboundFile) -> _Upload:
    """How a file goes, checked against the upload limit before anything is sent."""
    try:
        size = os.stat(file.path).st_size
    except OSError as error:
        raise TelegramSendError(f"{file.name}: cannot be read ({error.strerror})") from None
    limit = CAPABILITIES.max_upload_bytes
    if size > limit:
        raise TelegramSendError(f"{file.name} is {size:,} bytes; Telegram takes files of up to {limit:,} from a bot")
    mime = file.mime_type or mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return _Upload(file, mime, _method(file.kind, mime, size))


def _method(kind: AttachmentKind, mime: str, size: int) -> UploadAs:
    """A photo, a voice note, or audio or video Telegram's apps play, as such; anything else (a photo over
    sendPhoto's 10 MB too) as a document."""
    if kind == "image" and mime in _PHOTO_TYPES and size <= MAX_PHOTO_BYTES:
        return "photo"
    if kind == "voice" and mime in _VOICE_TYPES:
        return "voice"
    if kind in ("audio", "voice") and mime in _AUDIO_TYPES:
        return "audio"
    if kind == "video" and mime == "video/mp4":
        return "video"
    return "document"


def _batches(uploads: list[_Upload]) -> list[list[_Upload]]:
    """The files in order, as the messages Telegram can send them in: albums of up to MAX_ALBUM files that may go
    together, and files that go alone."""
    batches: list[list[_Upload]] = []
    for upload in uploads:
        album = _ALBUMS.get(upload.method)
        last = batches[-1] if batches else []
        if album and last and _ALBUMS.get(last[0].method) == album and len(last) < MAX_ALBUM:
            last.append(upload)
        else:
            batches.append([upload])
    return batches


def _caption(message: OutboundMessage, batches: list[list[_Upload]]) -> str | None:
    """The text as the first files' caption, when there are files and it fits (an album cannot carry buttons: then
    the text goes before it, with them); None when the text goes as a message of its own."""
    text = message.text
    if not batches or not text.strip() or len(text) > CAPABILITIES.max_caption_length:
        return None
    if message.buttons and len(batches[0]) > 1:
        return None
    return text


def _input_file(handle: IO[bytes], upload: _Upload, attach: bool = False) -> InputFile:
    """The file as an open handle the transport streams from disk (PTB would read it into memory otherwise)."""
    data = InputFile(handle, filename=upload.file.name, attach=attach, read_file_handle=False)
    data.mimetype = upload.mime_type
    return data


def _input_media(
    upload: _Upload, handle: IO[bytes], caption: str | None, mode: str | None
) -> InputMediaPhoto | InputMediaVideo | InputMediaAudio | InputMediaDocument:
    media = _input_file(handle, upload, attach=True)
    if upload.method == "photo":
        return InputMediaPhoto(media, caption=caption, parse_mode=mode)
    if upload.method == "video":
        return InputMediaVideo(media, caption=caption, parse_mode=mode)
    if upload.method == "audio":
        return InputMediaAudio(media, caption=caption, parse_mode=mode)
    return InputMediaDocument(media, caption=caption, parse_mode=mode)


def _check_poll(poll: Poll) -> None:
    """Telegram's limits on a poll, checked before anything is sent."""
    question, options = len(poll.question), len(poll.options)
    if not PollLimit.MIN_QUESTION_LENGTH <= question <= PollLimit.MAX_QUESTION_LENGTH:
        raise TelegramSendError(f"a poll's question is 1 to {PollLimit.MAX_QUESTION_LENGTH} characters, not {question}")
    if options > PollLimit.MAX_OPTION_NUMBER:
        raise TelegramSendError(f"a poll has at most {PollLimit.MAX_OPTION_NUMBER} options, not {options}")
    if any(not PollLimit.MIN_OPTION_LENGTH <= len(option) <= PollLimit.MAX_OPTION_LENGTH for option in poll.options):
        raise TelegramSendError(f"a poll's options are 1 to {PollLimit.MAX_OPTION_LENGTH} characters each")


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
        album_wait: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`album_wait` is how long to let an album's later parts arrive (MEDIA_GROUP_WAIT seconds unless a test
        says otherwise)."""
        self.account = account
        self.settings = settings
        self.commands = list(commands)  # (name, description) shown in Telegram's command menu
        self.bot_username: str | None = None
        self.bot_id: int | None = None
        self.health = ChannelHealth("telegram", account, secrets=[settings.token])
        self._root = root = (settings.api_base_url or DEFAULT_ROOT).rstrip("/")
        reached, failed = self.health.reached, self.health.failed
        self._request = _StatusRequest(
            pool_size=16, read_timeout=20, write_timeout=20, connect_timeout=10, on_success=reached, on_failure=failed
        )
        self._updates_request = AiohttpRequest(pool_size=2, connect_timeout=10, on_success=reached, on_failure=failed)
        # Never shorter than a long poll: TelegramAccount refuses less than poll_timeout + STALL_MARGIN.
        self.watchdog = PollWatchdog(settings.stall_seconds)
        self.bot = _Bot(
            settings.token,
            base_url=f"{root}/bot",
            base_file_url=f"{root}/file/bot",
            request=self._request,
            get_updates_request=self._updates_request,
            rate_limiter=rate_limiter or (TelegramRateLimiter() if settings.rate_limit else None),
        )
        self._offset = 0
        self.ingress_deferred = False  # in a cluster: poll only once elected (open_ingress)
        self._failures: dict[int, int] = {}  # update id -> times on_message raised for it
        self._album_wait = album_wait or (lambda: asyncio.sleep(MEDIA_GROUP_WAIT))
        self._waited_album: str | None = None  # the media group the poller last waited for
        self._task: asyncio.Task[None] | None = None
        self._webhook: web.AppRunner | None = None
        self._webhook_watch: asyncio.Task[None] | None = None
        self._webhook_heard = 0.0  # when Telegram last posted to the webhook (or it was set), on the loop's clock
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None

    # --- start and stop -----------------------------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        self._on_message, self._on_action = on_message, on_action
        try:
            await self._connect()
        except TelegramError as error:
            self.health.failed(f"start: {error.message}")
            raise self._start_error(error) from error
        self.health.set("connected")
        log.info("telegram %s: @%s connected (%s)", self.account, self.bot_username, self.settings.mode)

    def _start_error(self, error: TelegramError) -> StartError:
        """A failed start told straight: a refused token (401), a wrong api_base_url (404), no answer at all."""
        account, token = self.account, self.settings.token
        call = "getMe" if self.bot_id is None else "the Bot API"
        if isinstance(error, InvalidToken):  # PTB's name for both 401 and 404
            fix = f"get a new one from @BotFather and set it as channels.telegram.accounts.{account}.token"
            if self._request.last_status == 401:
                return refused("telegram", account, "401", fix)
            if not _TOKEN_SHAPE.fullmatch(token):  # Telegram answers 404 to a token that is not one
                return refused("telegram", account, "404: it is not of the form 123456789:AA…", fix)
            return not_found("telegram", account, self._root, call)
        why = why_unreachable(error.message)
        if isinstance(error, NetworkError) and why is not None:
            return unreachable("telegram", account, self._root, why)
        return StartError("telegram", account, "failed", mask(f"{call}: {error.message}", [token]))

    async def _connect(self) -> None:
        """getMe, the command menu, then the webhook set or removed (and the poller started)."""
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
        elif not self.ingress_deferred:
            await self._start_polling()

    def ingress_keys(self) -> list[str]:
        """Long polling is one process's per token (Telegram answers two pollers with 409); webhooks reach anyone."""
        if self.settings.mode == "webhook":
            return []
        return [f"telegram:{hashlib.sha256(self.settings.token.encode()).hexdigest()[:16]}"]

    async def open_ingress(self, key: str) -> None:
        """Begin long polling (this process won the election for the token)."""
        if self._task is None:
            await self._start_polling()
            log.info("telegram %s: polling (elected)", self.account)

    async def close_ingress(self, key: str) -> None:
        """Stop long polling, confirming what was taken: another process polls from there."""
        await self._stop_polling()

    async def _start_polling(self) -> None:
        await self.bot.delete_webhook(drop_pending_updates=False)
        self._task = asyncio.create_task(self._poll(), name=f"telegram:{self.account}")

    async def stop(self) -> None:
        await self._stop_polling()
        if self._webhook_watch is not None:
            self._webhook_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._webhook_watch
            self._webhook_watch = None
        if self._webhook is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self._webhook.cleanup()
            self._webhook = None
        with contextlib.suppress(Exception):
            await self.bot.shutdown()
        self.health.set("stopped")

    async def _stop_polling(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            # As python-telegram-bot does: one last getUpdates, so Telegram learns the final offset.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self.bot.raw_updates(self._offset, 0)

    # --- receiving ----------------------------------------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 0.5
        while True:
            try:
                updates = await self._updates()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except RetryAfter as error:
                await asyncio.sleep(_retry_seconds(error))
                continue
            except InvalidToken:
                log.error("telegram %s: the bot token was refused; polling stops", self.account)
                self.health.set("degraded", "the bot token was refused; polling stopped")
                return
            except Exception as error:  # NetworkError, TimedOut, Conflict (another poller), a bad answer
                self.health.failed(f"getUpdates: {error}")
                level = logging.ERROR if isinstance(error, Conflict) else logging.WARNING
                log.log(level, "telegram %s: getUpdates failed (%s); retrying in %.1fs", self.account, error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)
                continue
            fresh = self._fresh(updates)
            if not fresh:
                continue
            # An album ending the batch may have parts still on their way: everything before it is delivered and
            # confirmed, the album is not; after a short wait the next getUpdates brings it again with its late
            # parts (Telegram makes an album's updates together, so one wait is enough).
            hold = self._album_to_hold(fresh)
            deliver = fresh if hold is None else fresh[:hold]
            confirm = max(uid for uid, _ in fresh) + 1 if hold is None else fresh[hold][0]
            failed = await self._record_batch(deliver)
            self._offset = max(self._offset, min(failed) if failed else confirm)
            self._failures = {uid: count for uid, count in self._failures.items() if uid >= self._offset}
            if failed:
                await asyncio.sleep(backoff * self._failures.get(min(failed), 1))
            elif hold is not None:
                await self._album_wait()

    async def _updates(self) -> Any:
        """The answer of a getUpdates from the stored offset. One that the watchdog finds stalled is given up, the
        poller's HTTP session replaced, and the same offset asked for again: nothing was confirmed, so nothing is
        lost, and nothing comes twice."""
        while True:
            deadline = asyncio.timeout(self.watchdog.polling())
            try:
                async with deadline:
                    updates = await self.bot.raw_updates(self._offset, self.settings.poll_timeout)
            except TimeoutError:
                if not deadline.expired():
                    raise
                await self._stalled()
                continue
            self.watchdog.reset()
            self.health.heard()
            self.health.set("connected")
            return updates

    async def _stalled(self) -> None:
        """No getUpdates completed for `stall_seconds`: a new HTTP session for the poller (the old connection may
        hang for good without an error), and a full `stall_seconds` before the next check."""
        self.health.set("stalled", f"no getUpdates completed in {self.watchdog.stall_seconds:g}s")
        await self._updates_request.reset()
        self.health.reconnected()
        self.watchdog.reset()
        log.debug("telegram %s: a new HTTP session for getUpdates, from offset %d", self.account, self._offset)

    def _fresh(self, updates: Any) -> Batch:
        """The updates of a getUpdates answer not handled yet, each with its id."""
        if not isinstance(updates, list):
            log.warning("telegram %s: getUpdates answered %s, not a list", self.account, type(updates).__name__)
            return []
        fresh: Batch = []
        for raw in updates:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            if not isinstance(update_id, int):
                log.warning("telegram %s: skipped an update without a numeric update_id", self.account)
            elif update_id >= self._offset:  # lower ones were handled already (a server repeating itself)
                fresh.append((update_id, raw))
        return fresh

    def _album_to_hold(self, fresh: Batch) -> int | None:
        """Where the album that ends the batch starts in it, unless there is none or it was waited for already."""
        album = _media_group(fresh[-1][1])
        if album is None or album == self._waited_album:
            return None
        self._waited_album = album
        return next(index for index, (_, raw) in enumerate(fresh) if _media_group(raw) == album)

    async def _record_batch(self, fresh: Batch) -> list[int]:
        """Hand a batch to the gateway; the ids of the updates that failed (the first of each chat that failed)."""
        # Chats are recorded side by side, each chat's updates in order: a batch of 100 DMs is not 100 journal
        # writes one after the other. A failed update stops its chat, and confirmation stops at the first failed
        # update: Telegram sends the rest again, and the journal drops the ones it has.
        chats: dict[object, Batch] = {}
        for update_id, raw in fresh:
            chats.setdefault(_chat_key(raw, update_id), []).append((update_id, raw))
        failures = await asyncio.gather(*(self._record(_messages(updates)) for updates in chats.values()))
        return [failure for failure in failures if failure is not None]

    async def _record(self, messages: list[Batch]) -> int | None:
        """Hand one chat's messages to the gateway in order; the id of the (first) update of the one that failed."""
        for updates in messages:
            update_id = updates[0][0]
            try:
                await self.handle_updates([raw for _, raw in updates])
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
        await self.handle_updates([raw])

    async def handle_updates(self, raws: list[dict[str, Any]]) -> None:
        """Hand the gateway one update, or an album's parts as one message; bad ones are logged and skipped."""
        parsed = [self._parse(raw) for raw in raws]
        for item in parsed:
            if isinstance(item, CallbackQuery):
                await self._action(item)
        parts = [item for item in parsed if isinstance(item, InboundMessage)]
        if parts and self._on_message is not None:
            await self._on_message(_merged(parts))

    def _parse(self, raw: dict[str, Any]) -> InboundMessage | CallbackQuery | None:
        """A raw update as a message or a button click; None (logged) for what is not handled or malformed."""
        update_id = raw.get("update_id")
        try:
            update = Update.de_json(raw, self.bot)
            if update.callback_query is not None:
                return update.callback_query
            message = update.message if update.message is not None else update.channel_post
            if message is None:
                kinds = ", ".join(sorted(key for key in raw if key != "update_id")) or "nothing"
                log.info("telegram %s: skipped update %s of a type not handled (%s)", self.account, update_id, kinds)
                return None
            inbound = self._inbound(message)
        except Exception as error:
            log.warning(
                "telegram %s: skipped malformed update %s: %s: %s", self.account, update_id, type(error).__name__, error
            )
            return None
        if inbound is None:
            log.debug("telegram %s: skipped update %s: a service message with no text", self.account, update_id)
        return inbound

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
            return None  # joins, leaves, pins, topic events: nothing for an agent to answer
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
        await self._set_webhook()
        self._webhook_heard = asyncio.get_running_loop().time()
        self._webhook_watch = asyncio.create_task(self._watch_webhook(), name=f"telegram:{self.account}:webhook")

    async def _set_webhook(self) -> None:
        settings = self.settings
        await self.bot.set_webhook(
            url=settings.webhook_url or "", secret_token=settings.webhook_secret, allowed_updates=ALLOWED_UPDATES
        )

    async def _watch_webhook(self) -> None:
        """The webhook's watchdog. Silence alone proves nothing here (nobody may be writing), so after `stall_seconds`
        without a post Telegram is asked (getWebhookInfo) whether it holds updates it has not delivered. If it does,
        the account is degraded and the webhook set again, which makes Telegram try at once instead of after its own
        ever longer retry delay (or at all, after something removed the webhook); the next post makes it connected
        again. With nothing pending, nothing is done."""
        loop = asyncio.get_running_loop()
        stall = self.settings.stall_seconds
        while True:
            await asyncio.sleep(max(0.0, self._webhook_heard + stall - loop.time()))
            if loop.time() - self._webhook_heard < stall:
                continue  # a post came meanwhile
            self._webhook_heard = loop.time()  # the next look a full stall_seconds on, whatever this one finds
            try:
                info = await self.bot.get_webhook_info()
                if not info.pending_update_count:
                    continue
                reason = f"no update for {stall:g}s while Telegram holds {info.pending_update_count} for the webhook"
                if info.last_error_message:
                    reason += f" (its last error: {info.last_error_message})"
                self.health.set("degraded", f"{reason}; setting the webhook again")
                await self._set_webhook()
                self.health.reconnected()
            except TelegramError as error:  # asked again after stall_seconds
                self.health.failed(f"webhook check: {error.message}")

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
        self.health.heard()
        self._webhook_heard = asyncio.get_running_loop().time()
        self.health.set("connected")  # Telegram reaches the webhook (again)
        if not (isinstance(raw, dict) and isinstance(raw.get("update_id"), int)):
            log.warning("telegram %s: skipped a webhook body that is not an update", self.account)
            return web.Response(status=200)
        # An album's parts come as posts of their own, each answered once recorded: holding one post open for the
        # others could stall them behind it, and answering before recording could lose it. So in webhook mode each
        # part arrives as a message of its own (same media_group_id); polling merges them.
        try:
            await self.handle_update(raw)
        except Exception:  # not recorded: a 500 makes Telegram deliver it again later
            log.exception("telegram %s: webhook update not recorded", self.account)
            return web.Response(status=500)
        return web.Response(status=200)

    # --- sending ------------------------------------------------------------------------------------------------

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Send one message as Telegram HTML (plain text if Telegram cannot parse it); the gateway's delivery has
        split the text to `max_text_length`. Files go with the text as their caption when it fits, else after it;
        a poll goes after the text. Returns the id of the last message sent."""
        chat_id, thread = chat_and_thread(target)
        if message.thread_id:
            thread = int(message.thread_id)
        batches = _batches([_upload(file) for file in message.media])
        if message.poll is not None:
            _check_poll(message.poll)
        if message.buttons and not message.text.strip() and batches and len(batches[0]) > 1:
            raise TelegramSendError("buttons cannot go on an album: send a text with them")
        try:
            sent = await self._deliver(chat_id, thread, message, batches)
        except ChatMigrated as error:
            log.warning("telegram %s: chat %s moved to %s", self.account, chat_id, error.new_chat_id)
            sent = await self._deliver(error.new_chat_id, thread, message, batches)
        return str(sent.message_id)

    async def _deliver(
        self, chat_id: int | str, thread: int | None, message: OutboundMessage, batches: list[list[_Upload]]
    ) -> Message:
        """The text, the files and the poll, in this order; the first message sent replies and carries the buttons.
        Returns the last message sent."""
        reply = ReplyParameters(int(message.reply_to), allow_sending_without_reply=True) if message.reply_to else None
        head: dict[str, Any] = {
            "message_thread_id": thread,
            "reply_markup": _check_buttons(message),
            "reply_parameters": reply,
        }
        rest: dict[str, Any] = {"message_thread_id": thread}
        caption = _caption(message, batches)
        sent: Message | None = None
        if caption is None and (message.text.strip() or not (batches or message.poll)):
            sent = await self._send_text(chat_id, message.text, head)
            head = rest
        for batch in batches:
            sent = await self._send_files(chat_id, batch, caption or "", head)
            head, caption = rest, None
        if message.poll is not None:
            sent = await self.bot.send_poll(chat_id, message.poll.question, message.poll.options, **head)
        if sent is None:
            raise AssertionError("nothing was sent")  # not reached: a message has a text, files or a poll
        return sent

    async def _send_text(self, chat_id: int | str, text: str, kwargs: dict[str, Any]) -> Message:
        async def attempt(body: str | None, mode: str | None) -> Message:
            return await self.bot.send_message(chat_id, body or "", parse_mode=mode, **kwargs)

        return await self._html_or_plain(attempt, text)

    async def _send_files(
        self, chat_id: int | str, batch: list[_Upload], caption: str, head: dict[str, Any]
    ) -> Message:
        """One file by its own method, or an album (its caption is its first file's); returns the last message.
        Each file is streamed from disk by the transport, opened anew for each attempt."""
        if len(batch) == 1:
            upload = batch[0]
            send = self._senders()[upload.method]

            async def one(text: str | None, mode: str | None) -> Message:
                with open(upload.file.path, "rb") as handle:
                    return await send(chat_id, _input_file(handle, upload), caption=text, parse_mode=mode, **head)

            return await self._html_or_plain(one, caption)
        album_kwargs = {key: value for key, value in head.items() if key != "reply_markup"}

        async def album(text: str | None, mode: str | None) -> Message:
            with contextlib.ExitStack() as files:
                handles = [files.enter_context(open(upload.file.path, "rb")) for upload in batch]
                media = [
                    _input_media(upload, handle, *((text, mode) if index == 0 else (None, None)))
                    for index, (upload, handle) in enumerate(zip(batch, handles, strict=True))
                ]
                sent = await self.bot.send_media_group(chat_id, media, **album_kwargs)
            return sent[-1]

        return await self._html_or_plain(album, caption)

    def _senders(self) -> dict[UploadAs, Callable[..., Awaitable[Message]]]:
        bot = self.bot
        return {
            "photo": bot.send_photo,
            "voice": bot.send_voice,
            "audio": bot.send_audio,
            "video": bot.send_video,
            "document": bot.send_document,
        }

    async def _html_or_plain(self, send: Callable[[str | None, str | None], Awaitable[_T]], text: str) -> _T:
        """`send(text, parse_mode)` with the text as Telegram HTML, or as plain text when Telegram cannot parse the
        HTML; `send(None, None)` when there is no text."""
        if not text:
            return await send(None, None)
        try:
            return await send(markdown_to_html(text), ParseMode.HTML)
        except BadRequest as error:
            if not _entity_error(error):
                raise
            log.info("telegram %s: Telegram could not parse the HTML (%s); sending plain text", self.account, error)
            return await send(text, None)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        """Replace a message's text (and buttons); an edit that changes nothing is not an error."""
        markup = _check_buttons(message)
        chat_id, _ = chat_and_thread(target)
        text = message.text
        if len(text) > CAPABILITIES.max_text_length:  # a streaming preview: the final send chunks properly
            text = text[: CAPABILITIES.max_text_length - 1] + "…"

        async def attempt(body: str | None, mode: str | None) -> None:
            await self.bot.edit_message_text(
                body or "", chat_id=chat_id, message_id=int(message_id), parse_mode=mode, reply_markup=markup
            )

        try:
            await self._html_or_plain(attempt, text)
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

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """A forum topic named `name` in the target's supergroup (Telegram starts a topic on its own, not from a
        message: `message_id` is not used); its message_thread_id is the thread id, as in `chat_and_thread`."""
        chat_id, _ = chat_and_thread(target)
        try:
            topic = await self.bot.create_forum_topic(chat_id, name[:MAX_TOPIC_NAME] or "Topic")
        except TelegramError as error:
            raise ChannelError(f"telegram: could not create the topic: {error.message}") from None
        return str(topic.message_thread_id)

    # --- files that came with messages --------------------------------------------------------------------------

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The file's bytes from the Bot API's file server (getFile, then its file URL), in 64 KiB chunks."""
        url = await self._file_url(attachment.ref)
        try:
            async for chunk in self._request.stream(url):
                yield chunk
        except TelegramError as error:  # the transport's errors never hold the token-bearing URL
            raise ChannelError(f"telegram: could not download the file: {error.message}") from None

    async def _file_url(self, file_id: str) -> str:
        """Where the file server serves the file; ChannelError when Telegram will not give it (over 20 MB)."""
        try:
            found = await self.bot.get_file(file_id)
        except BadRequest as error:
            if "file is too big" in error.message.lower():
                raise ChannelError(
                    f"telegram: the file is larger than the {MAX_DOWNLOAD_BYTES // (1024 * 1024)} MB that Telegram's "
                    "Bot API lets a bot download"
                ) from None
            raise ChannelError(f"telegram: Telegram will not give the file: {error.message}") from None
        except TelegramError as error:
            raise ChannelError(f"telegram: could not look the file up: {error.message}") from None
        if not found.file_path:
            raise ChannelError("telegram: Telegram gave no path for the file")
        # PTB makes the path a URL under base_file_url, unless the path names a file on this machine
        root = self.bot.base_file_url
        return found.file_path if found.file_path.startswith(root) else f"{root}/{found.file_path.lstrip('/')}"


# Message fields holding one file, with the kind each is and the type Telegram omits for it. An animation comes with
# a `document` copy of itself (for old clients): it is looked at first, and the copy is not a second file.
_FILE_FIELDS: tuple[tuple[str, AttachmentKind, str | None], ...] = (
    ("animation", "video", "video/mp4"),
    ("voice", "voice", "audio/ogg"),
    ("audio", "audio", None),
    ("video", "video", "video/mp4"),
    ("video_note", "video", "video/mp4"),
    ("document", "document", None),
)


def _attachments(message: Message) -> list[Attachment]:
    """The file a message carries (Telegram's messages carry one; an album is several messages)."""
    if message.photo:  # the sizes Telegram made of one photo: the largest is the photo
        largest = max(message.photo, key=lambda size: (size.width * size.height, size.file_size or 0))
        return [Attachment(kind="image", ref=largest.file_id, mime_type="image/jpeg", size=largest.file_size)]
    if message.sticker is not None:
        return [_sticker(message.sticker)]
    for field, kind, usual_type in _FILE_FIELDS:
        item = getattr(message, field)
        if item is not None:
            return [
                Attachment(
                    kind=kind,
                    ref=item.file_id,
                    name=getattr(item, "file_name", None),
                    mime_type=getattr(item, "mime_type", None) or usual_type,
                    size=item.file_size,
                    duration=_seconds(item, "duration"),
                )
            ]
    return []


def _sticker(sticker: Sticker) -> Attachment:
    """A sticker: a WebP image, a WebM video, or an animated (Lottie) `.tgs` sticker."""
    if sticker.is_animated:
        mime = "application/x-tgsticker"
    elif sticker.is_video:
        mime = "video/webm"
    else:
        mime = "image/webp"
    return Attachment(kind="sticker", ref=sticker.file_id, mime_type=mime, size=sticker.file_size)


def _merged(parts: list[InboundMessage]) -> InboundMessage:
    """An album's parts as one message: the first part's ids, the caption there is as its text (any other part's
    caption on that part's file), and every file in order."""
    if len(parts) == 1:
        return parts[0]
    captioned = next((part for part in parts if part.text), parts[0])
    files = [
        file.model_copy(update={"caption": part.text}) if part.text and part is not captioned else file
        for part in parts
        for file in part.attachments
    ]
    update = {
        "text": captioned.text,
        "attachments": files,
        "was_mentioned": any(part.was_mentioned for part in parts),
        "reply_to_bot": any(part.reply_to_bot for part in parts),
    }
    return parts[0].model_copy(update=update)


__all__ = ["CAPABILITIES", "TelegramAccount", "TelegramAdapter", "TelegramRateLimiter", "TelegramSendError"]
