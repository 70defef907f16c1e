"""How long a channel adapter waits before its next reconnect: a step doubling up to a cap, each wait a random share
of its step, and where the adapter takes its time from (a test gives a fake clock and fixed draws)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["CAP_SECONDS", "FIRST_SECONDS", "REAL_TIME", "Backoff", "Timing", "pause"]

FIRST_SECONDS = 1.0
# Five minutes: a platform down for hours still gets a try every few minutes, and never a hot loop.
CAP_SECONDS = 300.0


@dataclass(frozen=True)
class Timing:
    """Where a reconnecting adapter takes its time: the clock it counts by, how it waits, and its random draws
    (uniform in [0, 1)). The defaults are the real ones."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    draw: Callable[[], float] = random.random


REAL_TIME = Timing()


class Backoff:
    """The waits before successive reconnects: `first` seconds, doubling with each one up to `cap`, each between half
    and all of its step. Half at least, so a storm is always spaced; not all of it, so accounts (or processes) that
    lost their connection together do not all come back in the same instant. `reset` once a connection held."""

    def __init__(
        self, first: float = FIRST_SECONDS, cap: float = CAP_SECONDS, *, draw: Callable[[], float] = random.random
    ) -> None:
        self.first = first
        self.cap = cap
        self._draw = draw
        self.waits = 0  # waits handed out since the last reset

    def step(self) -> float:
        """The step the next wait is drawn from."""
        return min(self.cap, self.first * 2.0 ** min(self.waits, 32))

    def next(self) -> float:
        """The next wait, in seconds; each call doubles the step after it (up to `cap`)."""
        wait = self.step() * (0.5 + 0.5 * self._draw())
        self.waits += 1
        return wait

    def reset(self) -> None:
        self.waits = 0


async def pause(sleep: Callable[[float], Awaitable[None]], seconds: float, stopping: asyncio.Event) -> None:
    """`sleep(seconds)`, cut short when `stopping` is set."""
    waiting = asyncio.ensure_future(sleep(seconds))
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiting, stopped):
            task.cancel()
        await asyncio.gather(waiting, stopped, return_exceptions=True)
