"""Lanes: one run at a time per session, run slots shared fairly between people, and queue modes for busy sessions.
Each item acts for a principal (channels.base.Principal): a batch, a steered message and a fold of waiting messages
only ever join items of the same principal, and a message interrupts only its own principal's turn (or an owner
does), so nobody's words run with somebody else's authority."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from agent.cancellation import Stop
from channels.base import Principal
from tools.base import Sleep

log = logging.getLogger(__name__)

T = TypeVar("T")
QueueMode = Literal["collect", "followup", "steer", "interrupt"]


class QueueSettings(BaseModel):
    """What happens to messages that arrive while their session is busy (`session.queue` in bindings.yaml)."""

    model_config = ConfigDict(extra="forbid")

    mode: QueueMode = Field(
        default="collect",
        description="`collect`: the waiting messages become one next turn, after `debounce_ms`; `followup`: each its "
        "own turn; `steer`: put into the running turn at its next tool boundary; `interrupt`: the running turn is "
        "cancelled and a new one starts (only by its own person or an owner). `/queue` changes it for one "
        "conversation.",
    )
    debounce_ms: int = Field(
        default=1000,
        ge=0,
        description="Under `collect`: milliseconds of quiet after the last arrival before the next turn starts.",
    )
    cap: int = Field(
        default=20,
        ge=1,
        description="Messages queued per session; beyond it the oldest of one person's are folded into one and the "
        "person is told.",
    )


class RunControl(Generic[T]):
    """What a running turn gets from its lane: a cancel event, and the messages steered into it."""

    def __init__(self, take: Callable[[], list[T]] | None = None, release: Callable[[], None] | None = None) -> None:
        self.cancel = Stop()  # set by stop(), an interrupting message, or shutdown
        self._take = take
        self._release = release

    def take_steered(self) -> list[T]:
        """Messages that arrived since the last call (steer mode only); call at each tool boundary."""
        return self._take() if self._take is not None else []

    def ran(self) -> None:
        """The agent's run is over and what is left is recording and sending its answer: its run slot goes to the
        next waiting turn now (the session stays busy until the handler returns). What is still queued belongs
        to the next turn. Once; the lane calls it when the handler returns, if the handler did not."""
        self._take = None
        release, self._release = self._release, None
        if release is not None:
            release()


def per_sender_notice(cap: int) -> str:
    """The text that tells a non-owner their message waits for one of their own runs to end."""
    return f"You already have {cap} requests running; this one starts when one of them ends."


@dataclass(eq=False)
class _Waiter:
    principal: Principal
    on_capped: Callable[[], None]  # called once if its sender's own share holds it back
    granted: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    capped: bool = False


class _Slots:
    """Run slots: owners first, one slot kept for owners when there are several, and at most `per_sender` at once
    for one non-owner across all chats. Waiters are served in arrival order within those rules: owners' and
    everyone else's wait in two queues (ordered dicts: arrival order, and a cancelled waiter leaves in O(1)), so
    handing out a slot looks only at the heads of the queues, not at every waiter."""

    def __init__(self, total: int, per_sender: int) -> None:
        self.total = total
        self.per_sender = per_sender
        self.running = 0
        self._by_sender: Counter[str] = Counter()
        self._owners: dict[_Waiter, None] = {}
        self._others: dict[_Waiter, None] = {}

    @property
    def waiting(self) -> int:
        return len(self._owners) + len(self._others)

    def _queue(self, principal: Principal) -> dict[_Waiter, None]:
        return self._owners if principal.owner else self._others

    async def acquire(self, principal: Principal, on_capped: Callable[[], None]) -> None:
        waiter = _Waiter(principal, on_capped)
        self._queue(principal)[waiter] = None
        self.dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            waited = self._queue(principal).pop(waiter, False) is None  # still queued: taken out now
            if not waited and waiter.granted.done() and not waiter.granted.cancelled():
                self.release(principal)  # granted as it was cancelled: give the slot back
            raise

    def release(self, principal: Principal) -> None:
        self.running -= 1
        self._by_sender[principal.key] -= 1
        self.dispatch()

    def dispatch(self) -> None:
        """Hand free slots to waiters, owners first, each queue in arrival order, within the rules; a queue is
        left as soon as there is no room for its kind."""
        kept = 1 if self.total > 1 else 0  # for owners
        for queue, room in ((self._owners, self.total), (self._others, self.total - kept)):
            granted = []
            for waiter in queue:
                if self.running >= room:
                    break
                if waiter.granted.cancelled():  # its turn is being cancelled; acquire() removes it
                    continue
                principal = waiter.principal
                if not principal.owner and self._by_sender[principal.key] >= self.per_sender:
                    if not waiter.capped:
                        waiter.capped = True
                        waiter.on_capped()
                    continue
                granted.append(waiter)
                self.running += 1
                self._by_sender[principal.key] += 1
                waiter.granted.set_result(None)
            for waiter in granted:
                del queue[waiter]


Handler = Callable[[str, list[T], RunControl[T]], Awaitable[None]]
Fold = Callable[[list[T]], T]
Notify = Callable[[str, T, str], Awaitable[None]]


def fold_notice(count: int) -> str:
    """The text that tells a user their waiting messages were combined."""
    return f"Too many messages waiting: the oldest {count} are combined into one summary."


class _Lane(Generic[T]):
    """One session's state; exists only while the session has a turn running or items waiting."""

    __slots__ = ("control", "last_arrival", "queue", "running_for", "worker")

    def __init__(self) -> None:
        self.queue: deque[tuple[T, int]] = deque()  # (item, how many messages it stands for)
        self.last_arrival = float("-inf")  # clock time of the newest item queued behind a turn
        self.control: RunControl[T] | None = None  # the running turn's, while one runs
        self.running_for: Principal | None = None  # whom the running turn acts for
        self.worker: asyncio.Task[None] | None = None


class Lanes(Generic[T]):
    """Schedules turns: items submitted for a session key become batches handed to `handler`, one turn at a time.
    `principal(item)` says whom an item acts for (there is no default)."""

    def __init__(
        self,
        handler: Handler[T],
        *,
        fold: Fold[T],
        notify: Notify[T],
        principal: Callable[[T], Principal],
        max_concurrent: int = 4,
        per_sender: int = 2,
        settings: QueueSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        on_idle: Callable[[str], None] | None = None,
    ) -> None:
        """`on_idle` is told each session key whose lane has emptied (a cluster gives such lanes back)."""
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.settings = settings or QueueSettings()
        self._modes: dict[str, QueueMode] = {}  # sessions whose queue mode is not `settings.mode` (/queue)
        self._handler = handler
        self._fold = fold
        self._notify = notify
        self._principal = principal
        self._slots = _Slots(max_concurrent, per_sender)
        self._lanes: dict[str, _Lane[T]] = {}
        self._clock = clock
        self._sleep = sleep
        self._running = 0
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()
        self.on_idle = on_idle

    # --- intake -------------------------------------------------------------------------------------------------

    async def submit(self, key: str, item: T) -> None:
        """Queue an item for its session and return at once; the turn runs in the background."""
        if self._closed:
            raise RuntimeError("lanes are closed: no new messages are accepted during shutdown")
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
            lane.queue.append((item, 1))
            lane.worker = asyncio.create_task(self._drive(key, lane), name=f"lane {key}")
            return
        self._enqueue(key, lane, item)
        lane.last_arrival = self._clock()
        if self.mode(key) == "interrupt" and lane.control is not None and self._may_interrupt(lane, item):
            lane.control.cancel.set()

    def _may_interrupt(self, lane: _Lane[T], item: T) -> bool:
        """A message interrupts the running turn when it acts for the same principal, or for the owners."""
        principal = self._principal(item)
        return principal.owner or (lane.running_for is not None and principal.key == lane.running_for.key)

    def _enqueue(self, key: str, lane: _Lane[T], item: T) -> None:
        """Queue `item`; past the cap, the oldest neighbours acting for the same principal are folded into one, no
        more than bring the queue back to `cap` (nothing is dropped; when no neighbours share a principal the queue
        stays over the cap rather than combine people's messages)."""
        queue = [*lane.queue, (item, 1)]
        keys = [self._principal(entry).key for entry, _ in queue]
        count = 0
        while len(queue) > self.settings.cap:
            start = next((i for i in range(len(queue) - 1) if keys[i] == keys[i + 1]), None)
            if start is None:
                break
            end = start + 1
            while end < len(queue) and keys[end] == keys[start]:
                end += 1
            end = min(end, start + len(queue) - self.settings.cap + 1)  # fold no more than the cap asks
            folded = queue[start:end]
            summary = self._fold([entry for entry, _ in folded])  # if this raises, the queue is left as it was
            weight = sum(weight for _, weight in folded)
            count += weight
            queue[start:end] = [(summary, weight)]
            keys[start:end] = [keys[start]]
        lane.queue.clear()
        lane.queue.extend(queue)
        if count:
            self._spawn(self._notify(key, item, fold_notice(count)), f"notify {key}")

    # --- running ------------------------------------------------------------------------------------------------

    async def _drive(self, key: str, lane: _Lane[T]) -> None:
        """The session's worker: run turns until its queue is empty, then remove the lane."""
        first = True
        try:
            while lane.queue and not self._closed:
                if not first and self.mode(key) == "collect":
                    await self._quiet(lane)
                first = False
                principal = self._principal(lane.queue[0][0])  # the next batch's: its items all share it
                await self._slots.acquire(principal, lambda: self._capped(key, lane))
                steer = self.mode(key) == "steer"
                take = functools.partial(self._take_batch, key, lane, principal) if steer else None
                control = RunControl(take, functools.partial(self._slots.release, principal))
                try:
                    if not lane.queue or self._closed:
                        break
                    await self._run(key, lane, principal, self._take_batch(key, lane, principal), control)
                finally:
                    control.ran()
        finally:
            # Queued items stay on close (pending_items); otherwise an idle session leaves nothing behind.
            if not lane.queue and self._lanes.get(key) is lane:
                del self._lanes[key]
                if self.on_idle is not None:
                    self.on_idle(key)

    async def _quiet(self, lane: _Lane[T]) -> None:
        """Wait until `debounce_ms` has passed since the newest arrival (later arrivals extend the wait)."""
        delay = self.settings.debounce_ms / 1000
        while lane.queue:
            remaining = lane.last_arrival + delay - self._clock()
            if remaining <= 0:
                return
            await self._sleep(remaining)

    def _take_batch(self, key: str, lane: _Lane[T], principal: Principal) -> list[T]:
        """The next batch: the oldest item (followup), or the oldest items that act for `principal` (the others wait
        for turns of their own)."""
        batch: list[T] = []
        while lane.queue and self._principal(lane.queue[0][0]).key == principal.key:
            batch.append(lane.queue.popleft()[0])
            if self.mode(key) == "followup":
                break
        return batch

    async def _run(
        self, key: str, lane: _Lane[T], principal: Principal, batch: list[T], control: RunControl[T]
    ) -> None:
        lane.control = control
        lane.running_for = principal
        self._running += 1
        try:
            await self._handler(key, batch, control)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this lane is being shut down, not the handler giving up
            log.warning("turn for session %s was cancelled from inside; moving on", key)
        except Exception:
            log.exception("turn for session %s failed; moving on", key)
        finally:
            self._running -= 1
            control.ran()
            lane.control = None
            lane.running_for = None

    def _spawn(self, work: Awaitable[None], name: str) -> None:
        task = asyncio.create_task(_awaited(work), name=name)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    # --- control and inspection ---------------------------------------------------------------------------------

    def configure(self, settings: QueueSettings, *, max_concurrent: int, per_sender: int) -> None:
        """New queue settings and run slots (a live reload): for what arrives and starts from now on."""
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.settings = settings
        self._slots.total, self._slots.per_sender = max_concurrent, per_sender
        self._slots.dispatch()

    def mode(self, key: str) -> QueueMode:
        """The session's queue mode: its own (`set_mode`), else `settings.mode`."""
        return self._modes.get(key, self.settings.mode)

    def set_mode(self, key: str, mode: QueueMode | None) -> None:
        """Give the session its own queue mode (None: back to `settings.mode`). It applies to what arrives next;
        a turn already running in steer mode keeps taking steered messages until it ends."""
        if mode is None:
            self._modes.pop(key, None)
        else:
            self._modes[key] = mode

    async def stop(self, key: str, principal: Principal | None = None) -> int:
        """Cancel the session's running turn and clear its queue; with `principal`, only a turn acting for it and
        its queued items. Returns how many queued messages were dropped (a folded summary counts as the messages it
        stands for). Does not wait for the turn to return."""
        lane = self._lanes.get(key)
        if lane is None:
            return 0
        dropped, kept = 0, []
        for item, weight in lane.queue:
            if principal is None or self._principal(item).key == principal.key:
                dropped += weight
            else:
                kept.append((item, weight))
        lane.queue.clear()
        lane.queue.extend(kept)
        if lane.control is not None and (principal is None or self.running_for(key) == principal.key):
            lane.control.cancel.set()
        return dropped

    def running_for(self, key: str) -> str | None:
        """The key of the principal the session's running turn acts for (None when none runs)."""
        lane = self._lanes.get(key)
        return lane.running_for.key if lane is not None and lane.running_for is not None else None

    def depth(self, key: str) -> int:
        """Items waiting for the session's next turn (a folded summary is one item)."""
        lane = self._lanes.get(key)
        return len(lane.queue) if lane else 0

    def active(self, key: str) -> bool:
        """Whether the session has a turn running or items waiting."""
        return key in self._lanes

    def busy(self, key: str) -> bool:
        """Whether a turn is running for the session right now."""
        lane = self._lanes.get(key)
        return lane is not None and lane.control is not None

    def running_count(self) -> int:
        """Turns running right now, across all sessions."""
        return self._running

    def waiting_count(self) -> int:
        """Sessions whose next turn is waiting for a run slot (all taken, or its sender has their share)."""
        return self._slots.waiting

    def _capped(self, key: str, lane: _Lane[T]) -> None:
        """Tell a person, once per waiting turn, that it waits for one of their own runs to end."""
        if lane.queue:
            text = per_sender_notice(self._slots.per_sender)
            self._spawn(self._notify(key, lane.queue[-1][0], text), f"notify {key}")

    def lane_count(self) -> int:
        """Sessions holding any state: a turn running or items waiting."""
        return len(self._lanes)

    def pending_items(self) -> dict[str, list[T]]:
        """Queued items that no turn has taken yet, by session key (after close: what the next start must re-run)."""
        return {key: [item for item, _ in lane.queue] for key, lane in self._lanes.items() if lane.queue}

    @property
    def closed(self) -> bool:
        return self._closed

    # --- shutdown -----------------------------------------------------------------------------------------------

    async def close(self, grace_seconds: float, *, cancel_seconds: float = 5.0) -> None:
        """Shut down: refuse new items, let running turns finish within `grace_seconds`, then cancel them.

        Cancelling first sets each turn's cancel event and waits up to `cancel_seconds`; what is still
        running after that is cancelled as a task. Queued items are not started; see `pending_items`.
        """
        self._closed = True
        lanes = list(self._lanes.values())
        for lane in lanes:
            if lane.control is None and lane.worker is not None:
                lane.worker.cancel()  # waiting for a slot or for quiet: nothing to finish
        tasks = {lane.worker for lane in lanes if lane.worker is not None} | self._background
        try:
            pending = await _wait(tasks, grace_seconds)
            if not pending:
                return
            for lane in lanes:
                if lane.control is not None:
                    lane.control.cancel.set()
            pending = await _wait(pending, cancel_seconds)
            for task in pending:
                task.cancel()
            stuck = await _wait(pending, cancel_seconds)
            if stuck:
                names = [task.get_name() for task in stuck]
                log.warning("%d task(s) ignored cancellation at shutdown: %s", len(stuck), names)
        finally:
            # A worker cancelled before it ever ran leaves its lane behind; keep only lanes with pending items.
            for key in [key for key, lane in self._lanes.items() if not lane.queue]:
                del self._lanes[key]


async def _awaited(work: Awaitable[None]) -> None:
    await work


async def _wait(tasks: set[asyncio.Task[None]], timeout: float) -> set[asyncio.Task[None]]:
    """Wait up to `timeout` seconds for the tasks; returns those still running."""
    live = {task for task in tasks if not task.done()}
    if not live:
        return set()
    _, pending = await asyncio.wait(live, timeout=timeout)
    return pending
