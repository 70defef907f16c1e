"""Stopping work in progress when an event is set: the one mechanism behind /stop, interrupts and time limits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

_T = TypeVar("_T")


class Stopped(Exception):
    """The event was set while the work was in progress; the work was cancelled and has finished."""


async def unless_stopped(work: Awaitable[_T], stop: asyncio.Event) -> _T:
    """Await `work`, but cancel it (and wait for it to clean up) and raise Stopped as soon as `stop` is set."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the caller itself is being cancelled
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise Stopped


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to do) and wait until it has ended; its cancellation is not raised here."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
