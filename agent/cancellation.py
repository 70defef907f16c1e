"""Stopping work in progress when an event is set: the one mechanism behind /stop, interrupts and time limits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


class Stopped(Exception):
    """The event was set while the work was in progress; the work was cancelled and has finished."""


class Stop(asyncio.Event):
    """An asyncio.Event that also tells its watchers the moment it is set: `unless_stopped` watches one without a
    task of its own waiting on it. A run's stops (/stop, an interrupting message, its time limit) are these."""

    def __init__(self) -> None:
        super().__init__()
        self._watchers: list[Callable[[], None]] = []

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        for watcher in list(self._watchers):
            watcher()

    def watch(self, watcher: Callable[[], None]) -> Callable[[], None]:
        """Call `watcher` when the event is set; what to call to stop watching."""
        self._watchers.append(watcher)
        return lambda: self._watchers.remove(watcher)


async def unless_stopped(work: Awaitable[_T], stop: asyncio.Event) -> _T:
    """Await `work`, but cancel it (and wait for it to clean up) and raise Stopped as soon as `stop` is set.

    `work` runs in the caller's task, as asyncio.timeout runs what it limits: setting `stop` cancels that task,
    and the cancellation is taken back (Task.uncancel) once it has come out of `work`. A `Stop` calls back when it
    is set; for any other event one task waits on it. (A task for `work` too, and asyncio.wait over both, cost more
    than many an awaited call itself.)"""
    if stop.is_set():
        if asyncio.iscoroutine(work):
            work.close()  # never started: nothing to clean up
        elif asyncio.isfuture(work):
            work.cancel()  # a task or future given as the work is stopped as it would be once running
        raise Stopped
    task = asyncio.current_task()
    assert task is not None, "unless_stopped runs in a task"
    watching = True
    stopping = False

    def on_stop(_: object = None) -> None:
        nonlocal stopping
        if watching and stop.is_set():
            stopping = True
            task.cancel()

    unwatch: Callable[[], object]
    if isinstance(stop, Stop):
        unwatch = stop.watch(on_stop)
    else:
        waiter = asyncio.ensure_future(stop.wait())
        waiter.add_done_callback(on_stop)
        unwatch = waiter.cancel
    try:
        result = await work
    except asyncio.CancelledError:
        if stopping and task.uncancel() == 0:  # ours alone: the caller itself is not being cancelled
            raise Stopped from None
        raise
    finally:
        watching = False
        unwatch()
    if stopping:  # `work` caught the cancellation and returned anyway: it was still stopped
        task.uncancel()
        raise Stopped
    return result


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to do) and wait until it has ended; its cancellation is not raised here."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
