"""Small helpers the tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

WAIT = 30.0  # generous: only ever reached when something is broken


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = WAIT) -> None:
    """Wait until `condition()` (sync or async) holds; fail naming `what` after `timeout`, never on speed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcome = condition()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
