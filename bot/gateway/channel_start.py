"""Starting the channel accounts: each tried once, and one that cannot start tried again in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable

from channels.base import ChannelAdapter, OnAction, OnMessage
from channels.health import ChannelHealth
from channels.start_errors import StartError, StartErrorKind, start_error

__all__ = ["FIRST_DELAY", "JITTER", "MAX_DELAY", "ChannelStarter", "retry_delay"]

log = logging.getLogger(__name__)

FIRST_DELAY = 1.0  # seconds before the first retry, doubling with each failed one
MAX_DELAY = 300.0  # the longest wait between two tries; a refused token waits this long every time
JITTER = 0.2  # each wait is shortened by up to this share at random: accounts that failed together retry apart

Key = tuple[str, str]  # (channel, account)


def retry_delay(attempt: int, kind: StartErrorKind, draw: Callable[[], float] = random.random) -> float:
    """The wait after the `attempt`-th failed start (1, 2, …): FIRST_DELAY doubling up to MAX_DELAY, minus up to
    JITTER of it. A refused token (401) waits MAX_DELAY from the start: retrying it sooner would hammer the
    platform with a token it already said no to, and it is retried at all in case the platform changes its mind."""
    base = MAX_DELAY if kind == "refused" else min(FIRST_DELAY * 2 ** max(attempt - 1, 0), MAX_DELAY)
    return base * (1 - JITTER * draw())


def _name(adapter: ChannelAdapter) -> str:
    return f"{adapter.channel}/{adapter.account}"


class ChannelStarter:
    """Starts each adapter given to `start`; one that fails is `degraded` in its health, with its one-line error in
    `failures`, and is tried again in the background with `retry_delay` until it starts, `current` says it no longer
    serves its account, or `stop` is called. `started` hears of each adapter that started (the ChannelBoard);
    `sleep` and `draw` are for tests."""

    def __init__(
        self,
        on_message: OnMessage,
        on_action: OnAction,
        *,
        started: Callable[[ChannelAdapter], None] = lambda adapter: None,
        current: Callable[[ChannelAdapter], bool] = lambda adapter: True,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._on_message = on_message
        self._on_action = on_action
        self._started = started
        self._current = current  # whether the adapter still serves its account (a reload may have replaced it)
        self._sleep = sleep
        self._draw = draw
        self.serving: list[Key] = []  # the accounts started, in the order they did
        self.failures: dict[Key, StartError] = {}  # the accounts not started (yet), with their last error
        self.attempts: dict[Key, int] = {}  # failed starts per account not started yet
        self._retries: dict[Key, asyncio.Task[None]] = {}

    async def start(self, adapter: ChannelAdapter) -> None:
        """Try `adapter` once; if it fails it goes on trying in the background (in place of any earlier adapter of
        the same account)."""
        key = (adapter.channel, adapter.account)
        earlier = self._retries.pop(key, None)
        if earlier is not None:
            earlier.cancel()
        self.failures.pop(key, None)
        self.attempts.pop(key, None)
        if await self._try(adapter) is not None:
            self._retries[key] = asyncio.create_task(self._retry(adapter), name=f"start {_name(adapter)}")

    def all_refused(self) -> bool:
        """Nothing started, and every account failed on a refused token: nothing will change by waiting."""
        return not self.serving and bool(self.failures) and all(e.kind == "refused" for e in self.failures.values())

    async def stop(self) -> None:
        """Stop retrying (a start under way is cancelled; the gateway stops every adapter after)."""
        tasks, self._retries = list(self._retries.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _try(self, adapter: ChannelAdapter) -> StartError | None:
        key = (adapter.channel, adapter.account)
        health = getattr(adapter, "health", None)
        try:
            await adapter.start(self._on_message, self._on_action)
        except Exception as failure:  # whatever an adapter raises, the others keep running
            error = start_error(adapter.channel, adapter.account, failure)
            first = key not in self.failures
            if isinstance(health, ChannelHealth):
                health.set("degraded", error.reason)  # logs once per incident: the one line at INFO
                masked = health.snapshot().last_error  # the account's secrets masked, as the health keeps it
                if masked and masked != error.reason:
                    error = StartError(error.channel, error.account, error.kind, masked)
            self.failures[key] = error
            self.attempts[key] = self.attempts.get(key, 0) + 1
            if not isinstance(health, ChannelHealth) and first:
                log.warning("channel %s account %s cannot start: %s", adapter.channel, adapter.account, error.reason)
            log.debug("channel %s account %s: start failed", adapter.channel, adapter.account, exc_info=failure)
            return error
        attempts = self.attempts.pop(key, 0)
        self.failures.pop(key, None)
        if key not in self.serving:
            self.serving.append(key)
        self._started(adapter)
        after = f" (after {attempts} failed attempts)" if attempts else ""
        log.info("channel %s account %s started%s", adapter.channel, adapter.account, after)
        return None

    async def _retry(self, adapter: ChannelAdapter) -> None:
        key = (adapter.channel, adapter.account)
        while key in self.failures:
            error = self.failures[key]
            delay = retry_delay(self.attempts.get(key, 1), error.kind, self._draw)
            log.debug("channel %s account %s: next start in %.1fs", adapter.channel, adapter.account, delay)
            await self._sleep(delay)
            if not self._current(adapter):  # replaced or removed by a reload meanwhile
                self.failures.pop(key, None)
                self.attempts.pop(key, None)
                return
            await self._try(adapter)
        if self._retries.get(key) is asyncio.current_task():
            del self._retries[key]
