"""The rate limiter: Telegram's call limits kept, and a 429's `retry_after` waited out."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from telegram.error import RetryAfter
from telegram.ext import BaseRateLimiter

from channels.telegram.client import _seconds

log = logging.getLogger("channels.telegram")  # the package's one logger: filters on channels.telegram keep working

_NO_THROTTLE = frozenset({"getMe", "deleteWebhook", "setWebhook", "setMyCommands", "answerCallbackQuery"})


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
