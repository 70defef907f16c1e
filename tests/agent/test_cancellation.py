"""unless_stopped: the work runs in the caller's task and a set event stops it; the caller's own cancellation, the
result of work that finished, and a task used again afterwards are left as they would be without it."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from helpers import WAIT

from agent.cancellation import Stop, Stopped, unless_stopped

Kind = type[asyncio.Event]


@pytest.fixture(params=[Stop, asyncio.Event], ids=["Stop", "Event"])
def kind(request: pytest.FixtureRequest) -> Kind:
    """Each test with a Stop (watched by a callback) and with any other event (watched by a task)."""
    kind: Kind = request.param
    return kind


class Work:
    """Work that waits on `go` and records how it ended."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.started = asyncio.Event()
        self.ended: str | None = None

    async def run(self, *, swallow: bool = False) -> str:
        self.started.set()
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            self.ended = "cancelled"
            if swallow:
                return "swallowed"
            raise
        self.ended = "finished"
        return "done"


async def test_the_work_s_result_comes_back_and_the_task_is_not_left_cancelling(kind: Kind) -> None:
    work, stop = Work(), kind()
    work.go.set()
    assert await unless_stopped(work.run(), stop) == "done"
    stop.set()  # set afterwards: nothing is cancelled any more
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert work.ended == "finished"


async def test_setting_the_event_cancels_the_work_which_cleans_up_before_stopped_is_raised(kind: Kind) -> None:
    work, stop = Work(), kind()

    async def caller() -> tuple[str, int]:
        try:
            await unless_stopped(work.run(), stop)
        except Stopped:
            task = asyncio.current_task()
            assert task is not None
            await asyncio.sleep(0)  # the task goes on unharmed: no cancellation is left pending in it
            return f"stopped after the work was {work.ended}", task.cancelling()
        return "not stopped", -1

    running = asyncio.create_task(caller())
    await work.started.wait()
    stop.set()
    assert await running == ("stopped after the work was cancelled", 0)


async def test_an_event_already_set_stops_before_the_work_starts(kind: Kind) -> None:
    work, stop = Work(), kind()
    stop.set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine left unawaited would warn when collected
        with pytest.raises(Stopped):
            await unless_stopped(work.run(), stop)
    assert not work.started.is_set()


async def test_a_task_given_as_the_work_is_cancelled_whenever_the_stop_comes(kind: Kind) -> None:
    stop = kind()
    stop.set()
    already = asyncio.create_task(Work().run())
    with pytest.raises(Stopped):
        await unless_stopped(already, stop)
    await asyncio.wait([already], timeout=WAIT)  # at once when cancelled; a task left running fails below
    assert already.cancelled()
    stop.clear()
    work = Work()
    later = asyncio.create_task(work.run())
    running = asyncio.create_task(unless_stopped(later, stop))
    await work.started.wait()
    stop.set()
    with pytest.raises(Stopped):
        await running
    assert later.cancelled() and work.ended == "cancelled"


async def test_the_caller_s_own_cancellation_is_a_cancellation_not_a_stop(kind: Kind) -> None:
    work, stop = Work(), kind()
    running = asyncio.create_task(unless_stopped(work.run(), stop))
    await work.started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert work.ended == "cancelled"
    stop.set()  # after the end: it reaches nothing


async def test_a_stop_and_the_caller_s_cancellation_at_once_is_a_cancellation(kind: Kind) -> None:
    work, stop = Work(), kind()
    running = asyncio.create_task(unless_stopped(work.run(), stop))
    await work.started.wait()
    stop.set()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert work.ended == "cancelled"


async def test_work_that_swallows_the_cancellation_is_still_stopped(kind: Kind) -> None:
    work, stop = Work(), kind()

    async def caller() -> int:
        with pytest.raises(Stopped):
            await unless_stopped(work.run(swallow=True), stop)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    running = asyncio.create_task(caller())
    await work.started.wait()
    stop.set()
    assert await running == 0
    assert work.ended == "cancelled"


async def test_a_timeout_inside_the_work_is_the_work_s_own(kind: Kind) -> None:
    stop = kind()

    async def limited() -> str:
        try:
            async with asyncio.timeout(0):
                await asyncio.Event().wait()
        except TimeoutError:
            return "its own timeout"
        return "no timeout"

    assert await unless_stopped(limited(), stop) == "its own timeout"


async def test_a_stop_is_watched_without_a_task_and_forgotten_once_the_work_is_over() -> None:
    work, stop = Work(), Stop()
    before = len(asyncio.all_tasks())
    running = asyncio.create_task(unless_stopped(work.run(), stop))
    await work.started.wait()
    assert len(asyncio.all_tasks()) == before + 1  # the caller's task, and nothing waiting on the stop
    work.go.set()
    assert await running == "done"

    async def later() -> str:
        await unless_stopped(asyncio.sleep(0), stop)
        stop.set()  # the work is over: this reaches nobody
        await asyncio.sleep(0)
        return "not cancelled"

    assert await later() == "not cancelled"
    told: list[str] = []
    other = Stop()
    unwatch = other.watch(lambda: told.append("first"))
    other.watch(lambda: told.append("second"))
    unwatch()
    other.set()
    other.set()
    assert told == ["second"]
