"""The scheduler on an injected clock and a real state DB: due ticks become runs once, a run still going makes the
next tick a skip, missed ticks after downtime run once within `cron.catch_up` and are skipped beyond it, one-shot
jobs are disabled, unreachable targets are recorded as undeliverable, runs settle from the journal and outbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from helpers import FakeClock

from bot.config.schedules import CronJob
from bot.scheduled.scheduler import ScheduledJob, Scheduler
from bot.store import JobRunRecord, OutboxEntry, SqliteStore
from bot.store.journal import JournalEntry

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 3, 27, 8, 59, 30, tzinfo=BERLIN).timestamp()  # a Friday, before 9 in Berlin


class Launcher:
    """Records what the scheduler starts; `unreachable` makes every target unreachable."""

    def __init__(self) -> None:
        self.launched: list[tuple[str, float]] = []
        self.unreachable: str | None = None

    def prepare(self, scheduled: ScheduledJob, tick: float) -> JournalEntry | str:
        if self.unreachable is not None:
            return self.unreachable
        return JournalEntry(
            channel="telegram", account="default", chat="direct:1", message_id=f"cron:{scheduled.job.id}:{tick}",
            payload={},
        )  # fmt: skip

    async def launch(self, run: JobRunRecord, inbound: JournalEntry) -> None:
        self.launched.append((run.job_id, run.tick))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    async with await SqliteStore.open(tmp_path, clock=clock) as opened:
        yield opened


def scheduler(
    store: SqliteStore, clock: FakeClock, launcher: Launcher, *jobs: CronJob, catch_up: float = 3600
) -> Scheduler:
    return Scheduler(store, jobs, launcher, catch_up=catch_up, clock=clock, sleep=clock.sleep)


async def finish_turn(store: SqliteStore, run_id: int, sent: bool = True) -> None:
    """The turn of a run ends (with one reply, or none) and its reply leaves the outbox."""
    run = next(r for r in await store.job_runs() if r.id == run_id)
    assert run.inbound_id is not None
    target = {"channel": "telegram", "account": "default", "peer": {"kind": "direct", "id": "1"}}
    entry = OutboxEntry(
        inbound_id=run.inbound_id, channel="telegram", account="default", target=target, payload={"text": "hi"}
    )
    records = await store.finish_inbound([run.inbound_id], "done", replies=[entry] if sent else [])
    for record in records:
        await store.mark_sent(record.id, "777")


async def test_weekday_nine_in_berlin_fires_once_at_nine_and_settles_with_its_message_id(
    store: SqliteStore, clock: FakeClock
) -> None:
    launcher = Launcher()
    job = CronJob(id="standup", cron="0 9 * * 1-5", tz="Europe/Berlin", message="standup", deliver="telegram:direct:1")
    cron = scheduler(store, clock, launcher, job)
    await cron.tick()
    assert launcher.launched == []
    clock.advance(31)  # 09:00:01
    await cron.tick()
    await cron.tick()  # the same tick again: nothing more
    nine = datetime(2026, 3, 27, 9, 0, tzinfo=BERLIN).timestamp()
    assert launcher.launched == [("standup", nine)]
    [run] = await store.job_runs("standup")
    assert run.status == "running"
    await finish_turn(store, run.id)
    await cron.tick()
    [run] = await store.job_runs("standup")
    assert (run.status, run.message_ids, run.ended) == ("ok", ["777"], clock.now)
    # Next: Monday at 9, after the change to summer time (CEST).
    clock.now = datetime(2026, 3, 30, 8, 59, tzinfo=BERLIN).timestamp()
    await cron.tick()
    assert len(launcher.launched) == 1
    clock.now = datetime(2026, 3, 30, 9, 0, 5, tzinfo=BERLIN).timestamp()
    await cron.tick()
    assert launcher.launched[-1] == ("standup", datetime(2026, 3, 30, 9, 0, tzinfo=BERLIN).timestamp())
    assert datetime.fromtimestamp(launcher.launched[-1][1], BERLIN).utcoffset().total_seconds() == 7200  # type: ignore[union-attr]


async def test_a_tick_while_the_previous_run_is_still_going_is_skipped_and_recorded(
    store: SqliteStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    launcher = Launcher()
    job = CronJob(id="slow", every="1m", message="m", deliver="telegram:direct:1")
    await store.save_job(job.model_dump(mode="json"))
    cron = scheduler(store, clock, launcher)
    clock.advance(61 + 30)
    await cron.tick()
    assert len(launcher.launched) == 1
    clock.advance(60)  # the next tick, the first run still going
    await cron.tick()
    assert len(launcher.launched) == 1
    skipped, first = await store.job_runs("slow")
    assert (skipped.status, skipped.detail) == ("skipped", "the previous run is still going")
    assert first.status == "running"
    assert "still going" in caplog.text
    await finish_turn(store, first.id, sent=False)  # NO_REPLY: nothing sent, recorded as such
    clock.advance(60)
    await cron.tick()
    assert len(launcher.launched) == 2
    runs = await store.job_runs("slow")
    assert (runs[-1].status, runs[-1].detail, runs[-1].message_ids) == (
        "ok",
        "nothing sent (NO_REPLY or HEARTBEAT_OK)",
        [],
    )


async def test_after_downtime_a_missed_tick_runs_once_within_catch_up(store: SqliteStore, clock: FakeClock) -> None:
    job = CronJob(id="often", every="1m", message="m", deliver="telegram:direct:1")
    await store.save_job(job.model_dump(mode="json"))
    clock.advance(10 * 60)  # down for ten minutes: ten ticks missed
    launcher = Launcher()
    await scheduler(store, clock, launcher, catch_up=120).tick()
    assert len(launcher.launched) == 1  # the latest one, once: never a burst
    assert clock.now - launcher.launched[0][1] < 60


async def test_after_downtime_a_tick_older_than_catch_up_is_skipped_and_logged(
    store: SqliteStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    job = CronJob(
        id="once", at=datetime.fromtimestamp(START + 60, BERLIN).isoformat(), message="m", deliver="telegram:direct:1"
    )
    await store.save_job(job.model_dump(mode="json"))
    clock.advance(60 + 30)  # due 30 s ago, while down
    launcher = Launcher()
    await scheduler(store, clock, launcher, catch_up=10).tick()
    assert launcher.launched == []
    [run] = await store.job_runs("once")
    assert run.status == "skipped" and "over catch_up" in (run.detail or "")
    assert "missed while down" in caplog.text
    record = await store.get_job("once")
    assert record is not None and record.job["enabled"] is False


async def test_a_one_shot_job_fires_once_and_is_disabled(store: SqliteStore, clock: FakeClock) -> None:
    job = CronJob(
        id="remind", at=datetime.fromtimestamp(START + 5, BERLIN).isoformat(), message="m", deliver="telegram:direct:1"
    )
    await store.save_job(job.model_dump(mode="json"))
    launcher = Launcher()
    cron = scheduler(store, clock, launcher)
    await cron.tick()
    clock.advance(6)
    await cron.tick()
    clock.advance(600)
    await cron.tick()
    assert launcher.launched == [("remind", START + 5)]
    record = await store.get_job("remind")
    assert record is not None and record.job["enabled"] is False


async def test_an_unreachable_target_makes_the_run_undeliverable(store: SqliteStore, clock: FakeClock) -> None:
    launcher = Launcher()
    launcher.unreachable = "no running telegram account 'gone'"
    job = CronJob(id="lost", every="1m", message="m", deliver="telegram/gone:direct:1")
    cron = scheduler(store, clock, launcher, job)
    clock.now = (int(START) // 60 + 2) * 60 + 31.0
    await cron.tick()
    [run] = await store.job_runs("lost")
    assert (run.status, run.detail) == ("undeliverable", "no running telegram account 'gone'")
    assert launcher.launched == []


async def test_a_dead_reply_makes_the_run_undeliverable(store: SqliteStore, clock: FakeClock) -> None:
    launcher = Launcher()
    job = CronJob(id="refused", every="1m", message="m", deliver="telegram:direct:1")
    cron = scheduler(store, clock, launcher, job)
    clock.now = (int(START) // 60 + 2) * 60 + 31.0
    await cron.tick()
    [run] = await store.job_runs("refused")
    assert run.inbound_id is not None
    target = {"channel": "telegram", "account": "default", "peer": {"kind": "direct", "id": "1"}}
    entry = OutboxEntry(inbound_id=run.inbound_id, channel="telegram", account="default", target=target, payload={})
    [record] = await store.finish_inbound([run.inbound_id], "done", replies=[entry])
    await store.mark_dead(record.id, "Forbidden: bot was blocked by the user")
    await cron.tick()
    [run] = await store.job_runs("refused")
    assert (run.status, run.detail) == ("undeliverable", "Forbidden: bot was blocked by the user")


async def test_runs_asked_for_start_once_and_overlapping_requests_are_skipped(
    store: SqliteStore, clock: FakeClock
) -> None:
    launcher = Launcher()
    job = CronJob(id="manual", cron="0 0 1 1 *", message="m", deliver="telegram:direct:1")
    cron = scheduler(store, clock, launcher, job)
    first = await store.request_job_run("manual")
    second = await store.request_job_run("manual")  # asked twice before the bot looked: the second overlaps
    await cron.tick()
    assert len(launcher.launched) == 1
    runs = {run.id: run for run in await store.job_runs("manual")}
    assert runs[first.id].status == "running"
    assert (runs[second.id].status, runs[second.id].detail) == ("skipped", "a run of this job is still going")
    missing = await store.request_job_run("nothing")
    await cron.tick()
    assert next(r for r in await store.job_runs("nothing") if r.id == missing.id).status == "error"
    assert await store.last_job_ticks() == {}  # runs asked for are not ticks of the schedule


async def test_a_tick_is_recorded_once_even_by_two_schedulers(store: SqliteStore, clock: FakeClock) -> None:
    job = CronJob(id="shared", every="1m", message="m", deliver="telegram:direct:1")
    await store.save_job(job.model_dump(mode="json"))
    one, two = Launcher(), Launcher()
    clock.advance(91)
    await scheduler(store, clock, one).tick()
    await scheduler(store, clock, two).tick()
    assert len(one.launched) + len(two.launched) == 1


async def test_a_heartbeat_runs_only_within_its_active_hours(store: SqliteStore, clock: FakeClock) -> None:
    from bot.scheduled.heartbeats import Heartbeat

    job = CronJob(
        id="heartbeat-main", agent="main", every="1h", message="beat", session="main", deliver="telegram:direct:1"
    )
    beat = Heartbeat(job, (8 * 60, 22 * 60), "Europe/Berlin")
    launcher = Launcher()
    clock.now = datetime(2026, 3, 27, 22, 30, tzinfo=BERLIN).timestamp()
    cron = Scheduler(store, [], launcher, catch_up=3600, clock=clock, sleep=clock.sleep, heartbeats=[beat])
    for _ in range(9):  # through the night: nothing runs, nothing is recorded
        clock.advance(3600)
        await cron.tick()
    assert launcher.launched == [] and await store.job_runs("heartbeat-main") == []
    clock.now = datetime(2026, 3, 28, 8, 1, tzinfo=BERLIN).timestamp()
    await cron.tick()
    assert len(launcher.launched) == 1
    assert datetime.fromtimestamp(launcher.launched[0][1], BERLIN).hour == 8
