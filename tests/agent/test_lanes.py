"""Lanes: per-session order, the global limit, each queue mode, the cap, failures, /stop, shutdown and memory."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

import pytest
from helpers import WAIT, FakeClock, eventually
from pydantic import ValidationError

from agent.lanes import Lanes, QueueMode, QueueSettings, RunControl, per_sender_notice
from channels.base import OWNERS, Principal

GUARD = WAIT  # seconds: only a hang reaches it, and it fails the test instead of blocking the suite
Handler = Callable[[str, list[str], RunControl[str]], Awaitable[None]]


class ManualClock(FakeClock):
    """A FakeClock whose `sleep` lasts until the test has moved the clock past its end, so that the test can act
    in the middle of a wait; `sleepers` counts the waits in progress."""

    def __init__(self) -> None:
        super().__init__()
        self.sleepers = 0
        self._moved = asyncio.Event()

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        self._moved.set()
        self._moved = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        end = self.now + seconds
        self.sleepers += 1
        try:
            while self.now < end:
                await self._moved.wait()
        finally:
            self.sleepers -= 1


async def shuffle(rng: random.Random, most: int) -> None:
    """Give way to the other tasks a random number of times (fewer than `most`): arrivals and turns interleave
    differently with each seed, and the same way on every run."""
    for _ in range(rng.randrange(most)):
        await asyncio.sleep(0)


def join(items: list[str]) -> str:
    return "+".join(items)


class Notices:
    """Collects what the lanes tell users."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    async def __call__(self, key: str, item: str, text: str) -> None:
        self.sent.append((key, item, text))


def everyone_an_owner(item: str) -> Principal:
    """Every item acts for the owners: one principal, so batches join as the queue modes say."""
    return OWNERS


def lanes_for(
    handler: Handler,
    mode: QueueMode = "collect",
    *,
    debounce_ms: int = 50,
    cap: int = 20,
    max_concurrent: int = 4,
    notify: Notices | None = None,
    clock: FakeClock | None = None,
) -> Lanes[str]:
    """Lanes on `handler`; with `clock`, its time and its sleep (debounce waits) instead of the real ones."""
    settings = QueueSettings(mode=mode, debounce_ms=debounce_ms, cap=cap)
    return Lanes(
        handler,
        fold=join,
        notify=notify or Notices(),
        principal=everyone_an_owner,
        max_concurrent=max_concurrent,
        settings=settings,
        clock=clock or time.monotonic,
        sleep=clock.sleep if clock else asyncio.sleep,
    )


class Held:
    """A handler that records each turn (and when, by `clock`) and keeps chosen turns open until released."""

    def __init__(self, hold: set[int] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold = {0} if hold is None else hold
        self.clock = clock
        self.batches: list[tuple[str, list[str]]] = []
        self.controls: list[RunControl[str]] = []
        self.started: list[float] = []
        self.release = asyncio.Event()
        self.finished = 0

    async def __call__(self, key: str, batch: list[str], control: RunControl[str]) -> None:
        index = len(self.batches)
        self.batches.append((key, batch))
        self.controls.append(control)
        self.started.append(self.clock())
        if index in self.hold:
            await asyncio.wait_for(self.release.wait(), GUARD)
        self.finished += 1

    def items(self, key: str = "k") -> list[list[str]]:
        return [batch for batch_key, batch in self.batches if batch_key == key]


# --- settings -----------------------------------------------------------------------------------------------------


def test_settings_defaults_and_yaml_strings() -> None:
    assert QueueSettings() == QueueSettings(mode="collect", debounce_ms=1000, cap=20)
    settings = QueueSettings.model_validate({"mode": "steer", "debounce_ms": "250", "cap": "5"})
    assert (settings.mode, settings.debounce_ms, settings.cap) == ("steer", 250, 5)


@pytest.mark.parametrize(
    "raw", [{"mode": "later"}, {"debounce_ms": -1}, {"cap": 0}, {"cap": "many"}, {"queue_size": 3}]
)
def test_settings_reject_bad_values(raw: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        QueueSettings.model_validate(raw)


def test_max_concurrent_must_be_positive() -> None:
    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        pass

    with pytest.raises(ValueError, match="max_concurrent"):
        lanes_for(handler, max_concurrent=0)


# --- order and concurrency ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["collect", "followup", "steer"])
async def test_order_within_a_session_under_concurrent_arrivals(mode: QueueMode) -> None:
    rng = random.Random(7)
    arrived: list[str] = []
    batches: list[list[str]] = []
    active = 0
    overlapped = False
    half_arrived = asyncio.Event()

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        nonlocal active, overlapped
        active += 1
        overlapped |= active > 1
        batches.append(batch)
        if len(batches) == 1:
            await asyncio.wait_for(half_arrived.wait(), GUARD)  # later arrivals really meet a busy session
        await shuffle(rng, 5)
        active -= 1

    lanes = lanes_for(handler, mode, debounce_ms=0, cap=1000)

    async def send(number: int) -> None:
        await shuffle(rng, 40)
        arrived.append(f"m{number}")
        await lanes.submit("k", f"m{number}")  # no await inside submit: arrival order is `arrived`
        if len(arrived) == 30:
            half_arrived.set()

    await asyncio.gather(*(send(number) for number in range(60)))
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert [item for batch in batches for item in batch] == arrived
    assert not overlapped
    assert len(batches) >= 2
    if mode == "followup":
        assert all(len(batch) == 1 for batch in batches)


async def test_parallel_across_sessions_up_to_the_limit_and_never_above() -> None:
    active = 0
    most = 0
    two_running = asyncio.Event()
    release = asyncio.Event()
    started: list[str] = []

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        started.append(key)
        if active == 2:
            two_running.set()
        await asyncio.wait_for(release.wait(), GUARD)
        active -= 1

    lanes = lanes_for(handler, max_concurrent=2)
    sessions = [f"s{number}" for number in range(5)]
    for key in sessions:
        await lanes.submit(key, "hello")
    await eventually(two_running.is_set, "two turns")
    await eventually(lambda: lanes.waiting_count() == 3, "the other three sessions to wait for a slot")
    assert lanes.running_count() == 2
    assert started == ["s0", "s1"]
    assert [lanes.busy(key) for key in sessions] == [True, True, False, False, False]
    release.set()
    await eventually(lambda: lanes.lane_count() == 0, "all sessions to finish")
    assert most == 2
    assert started == sessions  # sessions waiting for a slot get one in the order they asked
    assert lanes.running_count() == 0


@pytest.mark.parametrize(
    ("mode", "expected"), [("followup", [["b1"], ["b2"], ["b3"]]), ("collect", [["b1", "b2", "b3"]])]
)
async def test_a_session_waiting_for_a_slot_keeps_its_order(mode: QueueMode, expected: list[list[str]]) -> None:
    held = Held()
    lanes = lanes_for(held, mode, max_concurrent=1)
    await lanes.submit("a", "a1")
    await eventually(lambda: lanes.busy("a"), "a's turn to start")
    for item in ["b1", "b2", "b3"]:
        await lanes.submit("b", item)
    assert lanes.depth("b") == 3 and not lanes.busy("b")
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "both sessions to finish")
    assert held.items("a") == [["a1"]]
    assert held.items("b") == expected  # nothing of b started before it had a slot, so collect takes all of it


# --- queue modes --------------------------------------------------------------------------------------------------


async def test_idle_session_starts_at_once_and_collect_gathers_a_burst_after_the_debounce() -> None:
    clock = FakeClock(1000.0)
    held = Held(clock=clock)
    lanes = lanes_for(held, "collect", debounce_ms=250, clock=clock)
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    assert held.items() == [["m1"]]
    assert clock.slept == []  # an idle session's first turn waits for nothing
    for item in ["m2", "m3", "m4", "m5"]:
        clock.advance(0.125)
        await lanes.submit("k", item)  # the last one at 1000.5
    assert lanes.depth("k") == 4
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["m2", "m3", "m4", "m5"]]
    assert clock.slept == [0.25]  # it waited for quiet once, counted from the last arrival
    assert held.started[1] == 1000.75


async def test_collect_debounce_restarts_with_each_arrival() -> None:
    clock = ManualClock()
    held = Held(clock=clock)
    lanes = lanes_for(held, "collect", debounce_ms=250, clock=clock)
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "m2")  # at 1000.0: quiet until 1000.25
    held.release.set()
    await eventually(lambda: clock.sleepers == 1, "the first turn to end and the lane to wait for quiet")
    clock.advance(0.125)
    await lanes.submit("k", "m3")  # at 1000.125, during the quiet period that m2 began: quiet until 1000.375
    clock.advance(0.125)  # m2's quiet period is over, m3's is not
    await eventually(lambda: len(clock.slept) == 2, "the lane to wait on for m3's quiet period")
    assert clock.slept == [0.25, 0.125]
    assert held.items() == [["m1"]]
    clock.advance(0.125)
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["m2", "m3"]]
    assert held.started[1] == 1000.375


async def test_followup_runs_each_queued_item_as_its_own_turn() -> None:
    held = Held()
    lanes = lanes_for(held, "followup")
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    for item in ["m2", "m3", "m4"]:
        await lanes.submit("k", item)
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["m2"], ["m3"], ["m4"]]


async def test_steer_hands_arrivals_to_the_running_turn_and_runs_the_rest_next() -> None:
    took: list[list[str]] = []
    at_boundary = asyncio.Event()
    finish = asyncio.Event()
    batches: list[list[str]] = []
    first_control: list[RunControl[str]] = []

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        batches.append(batch)
        if len(batches) > 1:
            return
        first_control.append(control)
        await asyncio.wait_for(at_boundary.wait(), GUARD)
        took.append(control.take_steered())  # a tool boundary
        took.append(control.take_steered())  # nothing new since
        await asyncio.wait_for(finish.wait(), GUARD)

    lanes = lanes_for(handler, "steer")
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "m2")
    await lanes.submit("k", "m3")
    at_boundary.set()
    await eventually(lambda: len(took) == 2, "the turn to take steered messages")
    assert took == [["m2", "m3"], []]
    assert lanes.depth("k") == 0
    await lanes.submit("k", "m4")
    await lanes.submit("k", "m5")
    finish.set()  # ends without taking m4 and m5
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert batches == [["m1"], ["m4", "m5"]]
    assert first_control[0].take_steered() == []  # after its run, nothing more goes to the old turn


async def test_take_steered_is_empty_outside_steer_mode() -> None:
    assert RunControl[str]().take_steered() == []
    held = Held()
    lanes = lanes_for(held, "collect")
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "m2")
    assert held.controls[0].take_steered() == []
    assert lanes.depth("k") == 1
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["m2"]]


async def test_interrupt_cancels_the_running_turn_and_restarts_with_the_new_items() -> None:
    log: list[str] = []
    batches: list[list[str]] = []

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        batches.append(batch)
        log.append(f"start {batch}")
        if len(batches) == 1:
            await asyncio.wait_for(control.cancel.wait(), GUARD)
            for _ in range(10):
                await asyncio.sleep(0)  # cleanup gives way to the loop; the next turn must still wait for it
            log.append("cancelled")
        log.append(f"end {batch}")

    clock = FakeClock()
    lanes = lanes_for(handler, "interrupt", debounce_ms=5000, clock=clock)
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "m2")
    await lanes.submit("k", "m3")
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert batches == [["m1"], ["m2", "m3"]]
    assert log == ["start ['m1']", "cancelled", "end ['m1']", "start ['m2', 'm3']", "end ['m2', 'm3']"]
    assert clock.slept == []  # no debounce applies to an interrupt


# --- the cap ------------------------------------------------------------------------------------------------------


async def test_cap_folds_the_oldest_into_one_summary_and_tells_the_user() -> None:
    held = Held()
    notices = Notices()
    lanes = lanes_for(held, "collect", cap=3, notify=notices)
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    for item in ["a", "b", "c"]:
        await lanes.submit("k", item)
    assert lanes.pending_items() == {"k": ["a", "b", "c"]}
    await lanes.submit("k", "d")
    assert lanes.pending_items() == {"k": ["a+b", "c", "d"]}
    await lanes.submit("k", "e")
    assert lanes.pending_items() == {"k": ["a+b+c", "d", "e"]}
    assert lanes.depth("k") == 3
    await eventually(lambda: len(notices.sent) == 2, "two notices")
    assert [(key, item) for key, item, _ in notices.sent] == [("k", "d"), ("k", "e")]
    assert "2" in notices.sent[0][2] and "3" in notices.sent[1][2]  # messages combined so far, not entries
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["a+b+c", "d", "e"]]


async def test_cap_of_one_folds_the_new_item_too() -> None:
    held = Held()
    notices = Notices()
    lanes = lanes_for(held, "followup", cap=1, notify=notices)
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "a")
    await lanes.submit("k", "b")
    await lanes.submit("k", "c")
    assert lanes.pending_items() == {"k": ["a+b+c"]}
    assert await lanes.stop("k") == 3  # the summary stands for three messages
    await eventually(lambda: len(notices.sent) == 2, "two notices")


async def test_a_failing_notify_is_logged_and_the_queue_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(key: str, item: str, text: str) -> None:
        raise ConnectionError("chat is down")

    held = Held()
    settings = QueueSettings(cap=1, debounce_ms=0)
    lanes = Lanes(held, fold=join, notify=broken, principal=everyone_an_owner, settings=settings)
    with caplog.at_level(logging.ERROR, logger="agent.lanes"):
        await lanes.submit("k", "m1")
        await eventually(lambda: lanes.busy("k"), "the first turn")
        await lanes.submit("k", "a")
        await lanes.submit("k", "b")
        await eventually(lambda: "chat is down" in caplog.text, "the notify failure to be logged")
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["a+b"]]


# --- failures -----------------------------------------------------------------------------------------------------


async def test_a_failing_handler_does_not_stop_the_queue_or_other_sessions(caplog: pytest.LogCaptureFixture) -> None:
    entered = asyncio.Event()
    go_on = asyncio.Event()
    ran: list[tuple[str, list[str]]] = []

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        ran.append((key, batch))
        if batch == ["boom"]:
            entered.set()
            await asyncio.wait_for(go_on.wait(), GUARD)
            raise RuntimeError("model exploded")
        if batch == ["gave up"]:
            raise asyncio.CancelledError  # e.g. an inner timeout leaking out of the runner

    lanes = lanes_for(handler, "followup")
    with caplog.at_level(logging.WARNING, logger="agent.lanes"):
        await lanes.submit("a", "boom")
        await asyncio.wait_for(entered.wait(), GUARD)
        await lanes.submit("a", "gave up")
        await lanes.submit("a", "after")
        await lanes.submit("b", "other")
        await eventually(lambda: ("b", ["other"]) in ran, "the other session to run")
        go_on.set()
        await eventually(lambda: lanes.lane_count() == 0, "both sessions to go idle")
    assert [batch for key, batch in ran if key == "a"] == [["boom"], ["gave up"], ["after"]]
    assert "model exploded" in caplog.text
    assert "cancelled" in caplog.text
    assert lanes.running_count() == 0


# --- stop ---------------------------------------------------------------------------------------------------------


async def test_stop_cancels_the_turn_clears_the_queue_and_counts_what_it_dropped() -> None:
    batches: list[list[str]] = []

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        batches.append(batch)
        await asyncio.wait_for(control.cancel.wait(), GUARD)

    lanes = lanes_for(handler, "followup")
    assert await lanes.stop("nobody") == 0
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    for item in ["m2", "m3", "m4"]:
        await lanes.submit("k", item)
    assert lanes.depth("k") == 3
    assert await lanes.stop("k") == 3
    assert lanes.depth("k") == 0
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert batches == [["m1"]]
    await lanes.submit("k", "fresh")  # the session takes new messages after a stop
    await eventually(lambda: len(batches) == 2, "a new turn")
    assert batches[1] == ["fresh"]
    assert await lanes.stop("k") == 0


# --- shutdown -----------------------------------------------------------------------------------------------------


async def test_close_lets_running_turns_finish_within_grace_and_keeps_the_queue() -> None:
    held = Held(hold={0, 1})
    lanes = lanes_for(held, "followup")
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "m2")
    await lanes.submit("other", "o1")
    await eventually(lambda: lanes.running_count() == 2, "both turns")
    closing = asyncio.create_task(lanes.close(grace_seconds=GUARD))
    finished_when_closed: list[int] = []
    closing.add_done_callback(lambda _: finished_when_closed.append(held.finished))
    await eventually(lambda: lanes.closed, "close to begin")
    held.release.set()  # both turns end on their own, well within the grace period
    await asyncio.wait_for(closing, GUARD)
    assert finished_when_closed == [2]  # close returned only after both running turns had ended
    assert not any(control.cancel.is_set() for control in held.controls)
    assert held.items() == [["m1"]] and held.items("other") == [
        ["o1"]
    ]  # m2 was queued, not started: the journal re-runs it on the next start
    assert lanes.pending_items() == {"k": ["m2"]}
    with pytest.raises(RuntimeError, match="closed"):
        await lanes.submit("k", "late")
    assert lanes.closed


async def test_close_cancels_turns_that_outlast_the_grace_period() -> None:
    saw_cancel: list[str] = []
    hard_cancelled: list[str] = []

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        if key == "polite":
            await asyncio.wait_for(control.cancel.wait(), GUARD)
            saw_cancel.append(key)
            return
        try:
            await asyncio.sleep(GUARD * 2)  # ignores the cancel event
        except asyncio.CancelledError:
            hard_cancelled.append(key)
            raise

    lanes = lanes_for(handler, "collect", debounce_ms=5000)
    await lanes.submit("polite", "p1")
    await lanes.submit("stubborn", "s1")
    await eventually(lambda: lanes.running_count() == 2, "both turns")
    await lanes.submit("polite", "p2")
    await asyncio.wait_for(lanes.close(grace_seconds=0.05, cancel_seconds=0.05), GUARD)
    assert saw_cancel == ["polite"]
    assert hard_cancelled == ["stubborn"]
    assert lanes.running_count() == 0
    assert lanes.pending_items() == {"polite": ["p2"]}
    assert lanes.lane_count() == 1


async def test_close_does_not_start_sessions_waiting_for_a_slot() -> None:
    held = Held()
    lanes = lanes_for(held, max_concurrent=1)
    await lanes.submit("a", "a1")
    await eventually(lambda: lanes.busy("a"), "a's turn")
    await lanes.submit("b", "b1")
    closing = asyncio.create_task(lanes.close(grace_seconds=GUARD))
    await eventually(lambda: lanes.closed, "close to begin")
    held.release.set()
    await asyncio.wait_for(closing, GUARD)
    assert held.batches == [("a", ["a1"])]
    assert lanes.pending_items() == {"b": ["b1"]}


# --- memory -------------------------------------------------------------------------------------------------------


async def test_idle_sessions_leave_no_lanes_behind() -> None:
    done = 0

    async def handler(key: str, batch: list[str], control: RunControl[str]) -> None:
        nonlocal done
        done += 1

    lanes = lanes_for(handler, "collect", debounce_ms=0)
    for number in range(2000):
        await lanes.submit(f"s{number}", "hi")
    await eventually(lambda: done == 2000, "every session's turn")
    await eventually(lambda: lanes.lane_count() == 0, "every lane to be removed")
    assert lanes.pending_items() == {}
    assert not lanes.busy("s0") and lanes.depth("s0") == 0


# --- fair share: owners first, a slot kept for them, and a cap per non-owner -------------------------------------


def by_sender(item: str) -> Principal:
    """Items are `sender:text`; the sender `owner` is an owner."""
    sender = item.split(":", 1)[0]
    return OWNERS if sender == "owner" else Principal(owner=False, person=sender)


class Gates:
    """A handler that keeps each session's turn open until the test opens that session's gate."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def open(self, key: str) -> None:
        self.gates.setdefault(key, asyncio.Event()).set()

    async def __call__(self, key: str, batch: list[str], control: RunControl[str]) -> None:
        self.started.append(key)
        await asyncio.wait_for(self.gates.setdefault(key, asyncio.Event()).wait(), GUARD)


def fair_lanes(handler: Gates, notices: Notices, *, max_concurrent: int = 4, per_sender: int = 2) -> Lanes[str]:
    return Lanes(
        handler,
        fold=join,
        notify=notices,
        max_concurrent=max_concurrent,
        per_sender=per_sender,
        principal=by_sender,
        settings=QueueSettings(mode="followup"),
    )


async def test_one_stranger_runs_at_most_per_sender_at_once_and_is_told_once() -> None:
    gates, notices = Gates(), Notices()
    lanes = fair_lanes(gates, notices)
    for group in ("g1", "g2", "g3", "g4"):
        await lanes.submit(group, "bo:slow job")
    await eventually(lambda: len(gates.started) == 2 and len(notices.sent) == 2, "two runs and two notices")
    assert gates.started == ["g1", "g2"]
    assert lanes.waiting_count() == 2
    assert [(key, text) for key, _, text in notices.sent] == [
        ("g3", per_sender_notice(2)),
        ("g4", per_sender_notice(2)),
    ]
    gates.open("g1")
    await eventually(lambda: gates.started == ["g1", "g2", "g3"], "the third once the first ended")
    assert len(notices.sent) == 2  # each waiting turn was told once, not again on every change
    for group in ("g2", "g3", "g4"):
        gates.open(group)
    await eventually(lambda: lanes.lane_count() == 0, "every run to end")


async def test_strangers_together_leave_a_slot_for_the_owner() -> None:
    gates, notices = Gates(), Notices()
    lanes = fair_lanes(gates, notices, max_concurrent=4)
    for number, sender in enumerate(("ann", "bo", "cy", "di", "ed")):
        await lanes.submit(f"g{number}", f"{sender}:slow")
    await eventually(lambda: len(gates.started) == 3 and lanes.waiting_count() == 2, "three strangers running")
    await lanes.submit("dm", "owner:hello")
    await eventually(lambda: "dm" in gates.started, "the owner's turn to start at once")
    assert lanes.running_count() == 4
    assert notices.sent == []  # nobody hit their own cap: the strangers wait for the shared slots
    for key in ("dm", "g0", "g1", "g2", "g3", "g4"):
        gates.open(key)
    await eventually(lambda: lanes.lane_count() == 0, "every run to end")


async def test_a_waiting_owner_gets_the_next_slot_before_strangers_who_came_first() -> None:
    gates, notices = Gates(), Notices()
    lanes = fair_lanes(gates, notices, max_concurrent=3)
    await lanes.submit("dm1", "owner:first")
    await lanes.submit("g1", "bo:slow")
    await lanes.submit("dm2", "owner:second")
    await eventually(lambda: gates.started == ["dm1", "g1", "dm2"], "every slot taken")
    await lanes.submit("g2", "cy:slow")
    await lanes.submit("dm3", "owner:third")
    await eventually(lambda: lanes.waiting_count() == 2, "both to wait")
    gates.open("dm1")
    await eventually(lambda: len(gates.started) == 4, "the next turn")
    assert gates.started[3] == "dm3"
    for key in ("g1", "dm2", "dm3"):
        gates.open(key)
    await eventually(lambda: len(gates.started) == 5, "the stranger's turn at last")
    assert gates.started[4] == "g2"
    gates.open("g2")
    await eventually(lambda: lanes.lane_count() == 0, "every run to end")


async def test_a_stranger_never_takes_the_last_free_slot() -> None:
    gates, notices = Gates(), Notices()
    lanes = fair_lanes(gates, notices, max_concurrent=2)
    await lanes.submit("dm", "owner:working")
    await lanes.submit("g1", "bo:slow")
    await eventually(lambda: gates.started == ["dm"] and lanes.waiting_count() == 1, "the stranger to wait")
    gates.open("dm")
    await eventually(lambda: gates.started == ["dm", "g1"], "the stranger once the owner's turn ended")
    gates.open("g1")
    await eventually(lambda: lanes.lane_count() == 0, "every run to end")


async def test_owners_alone_may_use_every_slot() -> None:
    gates, notices = Gates(), Notices()
    lanes = fair_lanes(gates, notices, max_concurrent=3, per_sender=1)
    for key in ("a", "b", "c"):
        await lanes.submit(key, "owner:work")
    await eventually(lambda: len(gates.started) == 3, "three owner turns at once")
    assert notices.sent == []
    for key in ("a", "b", "c"):
        gates.open(key)
    await eventually(lambda: lanes.lane_count() == 0, "every run to end")


async def test_a_stopped_session_waiting_for_a_slot_gives_up_its_place() -> None:
    gates, notices = Gates(), Notices()
    lanes = fair_lanes(gates, notices, max_concurrent=4, per_sender=1)
    await lanes.submit("g1", "bo:one")
    await lanes.submit("g2", "bo:two")
    await eventually(lambda: lanes.waiting_count() == 1, "the second to wait")
    assert await lanes.stop("g2") == 1
    gates.open("g1")
    await eventually(lambda: lanes.lane_count() == 0, "every lane to be gone")
    assert gates.started == ["g1"]
    assert lanes.waiting_count() == 0 and lanes.running_count() == 0


# --- per-session queue modes (/queue) -----------------------------------------------------------------------------


async def test_each_session_may_have_its_own_queue_mode() -> None:
    held = Held(hold={0, 1})
    lanes = lanes_for(held, "collect", debounce_ms=0)
    lanes.set_mode("b", "followup")
    assert (lanes.mode("a"), lanes.mode("b")) == ("collect", "followup")
    await lanes.submit("a", "a1")
    await lanes.submit("b", "b1")
    await eventually(lambda: lanes.busy("a") and lanes.busy("b"), "both first turns")
    for item in ["2", "3"]:
        await lanes.submit("a", f"a{item}")
        await lanes.submit("b", f"b{item}")
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "both sessions to go idle")
    assert held.items("a") == [["a1"], ["a2", "a3"]]  # the default, collect: gathered into one turn
    assert held.items("b") == [["b1"], ["b2"], ["b3"]]  # its own, followup: one turn each


async def test_interrupt_set_for_one_session_cancels_only_its_turn() -> None:
    held = Held(hold={0, 1})
    lanes = lanes_for(held, "followup")
    lanes.set_mode("k", "interrupt")
    await lanes.submit("k", "k1")
    await lanes.submit("j", "j1")
    await eventually(lambda: lanes.busy("k") and lanes.busy("j"), "both first turns")
    await lanes.submit("k", "k2")
    await lanes.submit("j", "j2")
    assert held.controls[0].cancel.is_set()  # k's turn was interrupted
    assert not held.controls[1].cancel.is_set()  # j follows the default: its turn goes on
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "both sessions to go idle")
    assert held.items("k") == [["k1"], ["k2"]] and held.items("j") == [["j1"], ["j2"]]


async def test_steer_set_for_one_session_hands_it_arrivals_and_clearing_it_restores_the_default() -> None:
    held = Held()
    lanes = lanes_for(held, "followup")
    lanes.set_mode("k", "steer")
    await lanes.submit("k", "m1")
    await eventually(lambda: lanes.busy("k"), "the first turn")
    await lanes.submit("k", "m2")
    assert held.controls[0].take_steered() == ["m2"]
    lanes.set_mode("k", None)
    assert lanes.mode("k") == "followup"
    await lanes.submit("k", "m3")
    await lanes.submit("k", "m4")
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the session to go idle")
    assert held.items() == [["m1"], ["m3"], ["m4"]]  # back to followup: one turn each


# --- principals: a batch, a steer, an interrupt, a fold and /stop never mix people ----------------------------------


def by_people(handler: Held, mode: QueueMode, *, cap: int = 20) -> Lanes[str]:
    """Lanes whose items are `sender:text` (bo and cy are strangers, owner is an owner), with no debounce."""
    settings = QueueSettings(mode=mode, debounce_ms=0, cap=cap)
    return Lanes(handler, fold=join, notify=Notices(), principal=by_sender, settings=settings)


async def test_a_batch_joins_only_messages_that_act_for_the_same_principal() -> None:
    held = Held()
    lanes = by_people(held, "collect")
    await lanes.submit("k", "owner:first")
    await eventually(lambda: len(held.batches) == 1, "the first turn to run")
    for item in ("bo:rewrite AGENTS.md", "bo:now", "owner:hi", "cy:me too", "owner:and"):
        await lanes.submit("k", item)
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "every turn to run")
    # in order, each run of one principal's messages a turn of its own: never a stranger's words in an owner's turn
    assert held.items() == [["owner:first"], ["bo:rewrite AGENTS.md", "bo:now"], ["owner:hi"], ["cy:me too"],
                            ["owner:and"]]  # fmt: skip


async def test_steering_takes_only_the_running_principals_messages() -> None:
    held = Held()
    lanes = by_people(held, "steer")
    await lanes.submit("k", "owner:long job")
    await eventually(lambda: len(held.controls) == 1, "the owner's turn to run")
    await lanes.submit("k", "bo:do my thing instead")
    await lanes.submit("k", "owner:also this")
    assert held.controls[0].take_steered() == []  # the stranger's message comes first: nothing passes it
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "every turn to run")
    assert held.items() == [["owner:long job"], ["bo:do my thing instead"], ["owner:also this"]]

    held2 = Held()
    lanes = by_people(held2, "steer")
    await lanes.submit("k", "owner:long job")
    await eventually(lambda: len(held2.controls) == 1, "the owner's turn to run")
    await lanes.submit("k", "owner:and this")
    assert held2.controls[0].take_steered() == ["owner:and this"]  # the control: the same principal's message
    held2.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the turn to end")


async def test_a_message_interrupts_only_its_own_principals_turn_unless_an_owner_sends_it() -> None:
    for running, arriving, interrupts in [
        ("owner:answer me", "bo:stop that", False),  # a stranger cannot cut the owner's answer short
        ("bo:long", "bo:no, this", True),  # her own turn she may
        ("bo:long", "owner:enough", True),  # an owner may interrupt anyone's
    ]:
        held = Held()
        lanes = by_people(held, "interrupt")
        await lanes.submit("k", running)
        await eventually(lambda held=held: len(held.controls) == 1, "the first turn to run")
        await lanes.submit("k", arriving)
        assert held.controls[0].cancel.is_set() == interrupts, (running, arriving)
        held.release.set()
        await eventually(lambda lanes=lanes: lanes.lane_count() == 0, "every turn to run")


async def test_past_the_cap_only_neighbours_of_one_principal_are_folded() -> None:
    held = Held()
    lanes = by_people(held, "followup", cap=2)
    await lanes.submit("k", "owner:first")
    await eventually(lambda: len(held.batches) == 1, "the first turn to run")
    for item in ("bo:a", "bo:b", "bo:c"):
        await lanes.submit("k", item)
    assert lanes.pending_items()["k"] == ["bo:a+bo:b", "bo:c"]  # her own folded, within the cap
    await lanes.submit("k", "owner:x")
    await lanes.submit("k", "cy:y")
    # over the cap, but the owner's and cy's messages are never folded into bo's nor into each other
    assert lanes.pending_items()["k"] == ["bo:a+bo:b+bo:c", "owner:x", "cy:y"]
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "every turn to run")
    assert held.items()[1:] == [["bo:a+bo:b+bo:c"], ["owner:x"], ["cy:y"]]


async def test_stop_for_one_principal_stops_only_its_turn_and_drops_only_its_messages() -> None:
    held = Held()
    lanes = by_people(held, "followup")
    await lanes.submit("k", "owner:answer")
    await eventually(lambda: len(held.controls) == 1, "the owner's turn to run")
    await lanes.submit("k", "bo:one")
    await lanes.submit("k", "owner:two")
    assert lanes.running_for("k") == "owners"
    assert await lanes.stop("k", by_sender("bo:")) == 1
    assert not held.controls[0].cancel.is_set()  # the owner's answer goes on
    assert lanes.pending_items()["k"] == ["owner:two"]
    assert await lanes.stop("k") == 1  # everything (an owner's /stop)
    assert held.controls[0].cancel.is_set()
    held.release.set()
    await eventually(lambda: lanes.lane_count() == 0, "the lane to empty")
