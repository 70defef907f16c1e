"""TelegramAdapter, one bot account: built from its parts, started and stopped (a failed start: StartError)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from telegram import BotCommand
from telegram.error import InvalidToken, NetworkError, TelegramError

from channels.accounts import TelegramAccount
from channels.base import OnAction, OnMessage
from channels.health import ChannelHealth
from channels.start_errors import StartError, mask, not_found, refused, unreachable, why_unreachable
from channels.telegram.client import _Bot, _StatusRequest
from channels.telegram.constants import CAPABILITIES, DEFAULT_ROOT, MEDIA_GROUP_WAIT
from channels.telegram.files import FilesMixin
from channels.telegram.ingress import IngressMixin, PollWatchdog
from channels.telegram.limits import TelegramRateLimiter
from channels.telegram.sending import SendingMixin
from channels.telegram_request import AiohttpRequest

if TYPE_CHECKING:
    from aiohttp import web  # the webhook's server: imported when a webhook starts

log = logging.getLogger("channels.telegram")  # the package's one logger: filters on channels.telegram keep working

_TOKEN_SHAPE = re.compile(r"\d+:[\w-]+")  # what BotFather hands out: the bot's id, a colon, the secret


class TelegramAdapter(IngressMixin, SendingMixin, FilesMixin):
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
