"""The hang guard (a pytest plugin): a test still running after HANG_SECONDS is hung, not slow (every wait in the
suite has a bound far below it). It fails with what each of its asyncio tasks and threads was doing, instead of
holding its worker, and CI, until CI's own time runs out."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import FrameType

import pytest

HANG_SECONDS = 240.0
# Not SIGINT: a process started in the background by a non-interactive shell (as CI may start the suite) ignores it,
# and so does everything it starts. This one gets a handler of ours that raises KeyboardInterrupt in the main thread.
INTERRUPT = signal.SIGUSR1


class HangGuard:
    """One watcher thread per process; `pytest_runtest_call` tells it which test runs since when."""

    def __init__(self) -> None:
        self.test: tuple[float, pytest.Item] | None = None
        self.main = threading.main_thread().ident
        threading.Thread(target=self._watch, name="hang-guard", daemon=True).start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        self.test = (time.monotonic(), item)
        try:
            return (yield)
        finally:
            self.test = None

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            running = self.test
            if running is None or time.monotonic() - running[0] < HANG_SECONDS:
                continue
            item = running[1]
            loop = self._loop()
            item.add_report_section("call", "hang", self._stacks(loop))
            if loop is not None:  # the test's tasks get CancelledError: the test fails, its teardown runs
                loop.call_soon_threadsafe(_cancel_all, loop)
            elif self.main is not None:  # stuck outside any event loop: interrupt it (pytest stops, naming the line)
                signal.pthread_kill(self.main, INTERRUPT)
            while self.test is running:  # one verdict per test
                time.sleep(1.0)

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the main thread is running, found on its stack."""
        frame: FrameType | None = sys._current_frames().get(self.main or 0)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, asyncio.AbstractEventLoop):
                return candidate
            frame = frame.f_back
        return None

    def _stacks(self, loop: asyncio.AbstractEventLoop | None) -> str:
        lines = [f"HUNG: still running after {HANG_SECONDS:g} s; what it was doing:"]
        for task in asyncio.all_tasks(loop) if loop is not None else ():
            lines.append(f"\n--- task {task.get_name()}")
            lines += [f"  {where}" for where in _awaiting(task.get_coro())]
        for ident, frame in sys._current_frames().items():
            if ident != threading.get_ident():
                lines.append(f"\n--- thread {ident}")
                lines += traceback.format_stack(frame)
        return "\n".join(lines)


def _awaiting(coroutine: object) -> Iterator[str]:
    """Where a suspended coroutine waits, outermost first, following what each awaits."""
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            yield f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        else:
            yield repr(coroutine)  # a future or another awaitable: the end of the chain
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel("the hang guard: the test ran past HANG_SECONDS")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    where = f"; it was at {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}" if frame else ""
    raise KeyboardInterrupt(f"the hang guard: the test ran past {HANG_SECONDS:g} s{where}")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(INTERRUPT, _interrupt)
    config.pluginmanager.register(HangGuard(), "hang-guard")
