"""The journal, outbox, previews, jobs and subagents roles behave alike on SQLite and PostgreSQL (a throwaway server),
and stay exactly-once when two stores (two processes) share one database."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest
from helpers import FakeClock

from bot.store import InboundRecord, OutboxEntry, SqliteStore
from bot.store.jobs import JobStore
from bot.store.journal import JournalEntry, JournalStore
from bot.store.outbox import OutboxStore
from bot.store.postgres.database import PgDatabase
from bot.store.postgres.jobs import PgJobs
from bot.store.postgres.journal import PgJournal
from bot.store.postgres.outbox import PgOutbox
from bot.store.postgres.previews import PgPreviews
from bot.store.postgres.subagents import PgSubagents
from bot.store.previews import PreviewStore
from bot.store.subagents import SubagentRecord, SubagentStore


class Roles(JournalStore, OutboxStore, PreviewStore, JobStore, SubagentStore, Protocol):
    """The roles under test, with their prune methods."""

    async def prune_inbound(self, older_than_seconds: float = ...) -> int: ...
    async def prune_outbox(self, older_than_seconds: float = ...) -> int: ...
    async def prune_job_runs(self, older_than_seconds: float) -> int: ...
    async def prune_subagents(self, older_than_seconds: float) -> int: ...
    async def close(self) -> None: ...


class PgRoles(PgJournal, PgOutbox, PgPreviews, PgJobs, PgSubagents):
    """These parts on one PostgreSQL database, as the whole PostgreSQL store will combine them."""

    async def close(self) -> None:
        await self._db.close()


Opener = Callable[[], Awaitable[Roles]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture(params=["sqlite", "postgres"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Opener]:
    """Opens a store on the test's one database (each call: another process's store); all closed at the end."""
    opened: list[Roles] = []
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""

    async def opener() -> Roles:
        store: Roles
        if url:
            store = PgRoles(await PgDatabase.open(url, clock=clock))
        else:
            store = await SqliteStore.open(tmp_path, clock=clock)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: Opener) -> Roles:
    return await open_store()


TARGET = {"chat_id": "42", "thread_id": None}


async def inbound(store: Roles, message_id: str, chat: str = "42") -> InboundRecord:
    record = await store.record_inbound("telegram", "default", chat, message_id, {"text": f"message {message_id}"})
    assert record is not None
    return record


def reply(inbound_id: int | None, text: str, key: str | None = None) -> OutboxEntry:
    return OutboxEntry(
        inbound_id=inbound_id, channel="telegram", account="default", target=TARGET, payload={"t": text}, key=key
    )


def entry(message_id: str, text: str = "task") -> JournalEntry:
    return JournalEntry(channel="internal", account="default", chat="c", message_id=message_id, payload={"t": text})


async def inbound_rows(store: Roles) -> list[tuple[str, str | None]]:
    """(status, session_key) of every journal row, in id order, read behind the store's back."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            return [(row[0], row[1]) for row in db.execute("SELECT status, session_key FROM inbound ORDER BY id")]
    assert isinstance(store, PgRoles)
    rows = await store._db.fetch("SELECT status, session_key FROM inbound ORDER BY id")
    return [(row["status"], row["session_key"]) for row in rows]


# --- journal -------------------------------------------------------------------------------------------------------


async def test_a_message_is_journaled_once_and_elsewhere_is_not_a_duplicate(store: Roles, clock: FakeClock) -> None:
    first = await store.record_inbound("telegram", "default", "42", "1001", {"text": "hi", "n": [1, "é"]})
    assert first is not None
    assert (first.status, first.received, first.updated) == ("pending", clock.now, clock.now)
    assert first.payload == {"text": "hi", "n": [1, "é"]}
    assert await store.record_inbound("telegram", "default", "42", "1001", {"text": "again"}) is None
    others = [
        await store.record_inbound("telegram", "second-bot", "42", "1001", {}),
        await store.record_inbound("telegram", "default", "43", "1001", {}),
        await store.record_inbound("discord", "default", "42", "1001", {}),
    ]
    assert all(record is not None for record in others)
    assert len({first.id, *(record.id for record in others if record)}) == 4


async def test_two_processes_journaling_one_message_keep_it_once(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(2)]
    results = await asyncio.gather(
        *(store.record_inbound("telegram", "default", "42", str(n), {}) for n in range(20) for store in stores)
    )
    assert sum(result is not None for result in results) == 20
    assert len(await stores[0].unfinished_inbound()) == 20


async def test_status_moves_forward_and_finished_is_final(store: Roles, clock: FakeClock) -> None:
    record = await inbound(store, "1")
    await store.mark_inbound(record.id, "running")
    clock.advance(3)
    await store.mark_inbound(record.id, "failed", error="provider timed out")
    assert await store.unfinished_inbound() == []
    with pytest.raises(ValueError, match="already failed"):
        await store.mark_inbound(record.id, "running")
    with pytest.raises(KeyError):
        await store.mark_inbound(9999, "done")
    with pytest.raises(ValueError, match="status"):
        await store.mark_inbound(record.id, "bogus")  # type: ignore[arg-type]


async def test_finishing_records_the_replies_and_forgets_previews_in_one_step(store: Roles) -> None:
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(second.id, "telegram", "default", TARGET, "m-7")
    recorded = await store.finish_inbound(
        [first.id, second.id], "done", session_key="s-1", replies=[reply(second.id, "a"), reply(second.id, "b")]
    )
    assert [(entry.inbound_id, entry.payload, entry.status) for entry in recorded] == [
        (second.id, {"t": "a"}, "pending"),
        (second.id, {"t": "b"}, "pending"),
    ]
    assert [entry.id for entry in await store.unsent_outbox()] == [entry.id for entry in recorded]
    assert await store.unfinished_inbound() == []
    assert await store.previews() == []
    assert await inbound_rows(store) == [("done", "s-1"), ("done", "s-1")]
    await store.finish_inbound([], "done", replies=[reply(None, "a notice")])  # a reply that answers nothing
    assert len(await store.unsent_outbox()) == 3


async def test_finishing_is_all_or_nothing(store: Roles) -> None:
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(first.id, "telegram", "default", TARGET, "m-1")
    await store.mark_inbound(second.id, "done")
    with pytest.raises(ValueError, match="already done"):
        await store.finish_inbound([first.id, second.id], "failed", "boom", replies=[reply(first.id, "sorry")])
    with pytest.raises(KeyError):
        await store.finish_inbound([first.id, 9999], "done", replies=[reply(first.id, "hello")])
    with pytest.raises(KeyError):  # a reply to an unknown message
        await store.finish_inbound([first.id], "done", replies=[reply(9999, "hello")])
    assert await store.unsent_outbox() == []  # no attempt left a reply behind
    assert [record.id for record in await store.unfinished_inbound()] == [first.id]
    assert [preview.inbound_id for preview in await store.previews()] == [first.id]


async def test_unfinished_messages_come_back_in_arrival_order(open_store: Opener) -> None:
    store = await open_store()
    records = [await inbound(store, str(number)) for number in range(1, 6)]
    await store.mark_inbound(records[0].id, "running")
    await store.mark_inbound(records[0].id, "done")
    await store.mark_inbound(records[1].id, "running")
    await store.mark_inbound(records[2].id, "failed", error="boom")
    await store.mark_inbound(records[4].id, "running")
    unfinished = await (await open_store()).unfinished_inbound()  # as another process sees them
    assert [(record.message_id, record.status) for record in unfinished] == [
        ("2", "running"),
        ("4", "pending"),
        ("5", "running"),
    ]
    assert unfinished[1].payload == {"text": "message 4"}


async def test_prune_drops_only_old_finished_messages_unlinking_their_replies(store: Roles, clock: FakeClock) -> None:
    old_done, old_failed, old_pending, new_done = [await inbound(store, str(number)) for number in range(4)]
    await store.set_preview(old_done.id, "telegram", "default", TARGET, "m-0")
    [sent] = await store.finish_inbound([old_done.id], "done", replies=[reply(old_done.id, "hi")])
    await store.mark_inbound(old_failed.id, "failed", error="x")
    clock.advance(23 * 3600)
    await store.mark_inbound(new_done.id, "done")
    assert await store.prune_inbound() == 0
    clock.advance(2 * 3600)
    assert await store.prune_inbound() == 2
    again = await store.record_inbound("telegram", "default", "42", "0", {})  # its key was freed
    assert again is not None and again.id > new_done.id  # ids are never reused
    assert await store.record_inbound("telegram", "default", "42", "3", {}) is None
    assert [record.id for record in await store.unfinished_inbound()] == [old_pending.id, again.id]
    [kept] = await store.unsent_outbox()
    assert (kept.id, kept.inbound_id) == (sent.id, None)  # the reply stays, pointing at nothing
    assert await store.previews() == []
    assert await store.outbox_for_inbound(again.id) == []


# --- outbox --------------------------------------------------------------------------------------------------------


async def test_outbox_lifecycle_with_a_retry_in_the_future(store: Roles, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    assert not await store.inbound_has_replies(message.id)
    first = await store.enqueue_outbox(
        inbound_id=message.id, channel="telegram", account="default", target=TARGET, payload={"text": "one"}
    )
    second = await store.enqueue_outbox(
        inbound_id=None, channel="telegram", account="default", target=TARGET, payload={"text": "two"}, kind="edit"
    )
    assert (first.status, first.attempts, first.retry_at, first.kind, second.kind) == (
        "pending", 0, clock.now, "send", "edit"
    )  # fmt: skip
    assert await store.inbound_has_replies(message.id)
    assert [entry.id for entry in await store.due_outbox()] == [first.id, second.id]
    await store.mark_send_failed(first.id, "429 too many requests", retry_at=clock.now + 30)
    assert [entry.id for entry in await store.due_outbox()] == [second.id]
    assert [entry.id for entry in await store.due_outbox(clock.now + 30)] == [first.id, second.id]
    await store.mark_sent(second.id, "m-2")
    clock.advance(31)
    [due] = await store.due_outbox()
    assert (due.id, due.attempts, due.error) == (first.id, 1, "429 too many requests")
    await store.mark_sent(first.id, None)
    assert await store.unsent_outbox() == []
    [answer] = await store.outbox_for_inbound(message.id)
    assert (answer.status, answer.payload, answer.target) == ("sent", {"text": "one"}, TARGET)
    with pytest.raises(ValueError, match="already sent"):
        await store.mark_dead(first.id, "late")
    with pytest.raises(KeyError):
        await store.mark_sent(9999, None)
    with pytest.raises(KeyError):
        await store.enqueue_outbox(inbound_id=9999, channel="telegram", account="d", target={}, payload={})


async def test_dead_entries_are_never_due_and_old_finished_ones_are_pruned(store: Roles, clock: FakeClock) -> None:
    sent, dead, pending = [
        await store.enqueue_outbox(inbound_id=None, channel="telegram", account="d", target={}, payload={"n": n})
        for n in range(3)
    ]
    await store.mark_sent(sent.id, "m")
    await store.mark_dead(dead.id, "403 blocked")
    assert [entry.id for entry in await store.due_outbox(clock.now + 10**6)] == [pending.id]
    clock.advance(25 * 3600)
    assert await store.prune_outbox() == 2
    assert [entry.id for entry in await store.unsent_outbox()] == [pending.id]


async def test_enqueue_once_records_a_key_once_and_hands_back_the_first_record(store: Roles) -> None:
    first = await store.enqueue_once([reply(None, "card", key="k-1"), reply(None, "plain"), reply(None, "x", "k-1")])
    assert [entry.dedupe_key for entry in first] == ["k-1", None, "k-1"]
    assert first[0] == first[2]
    await store.mark_sent(first[0].id, "m-1")
    again = await store.enqueue_once([reply(None, "card again", key="k-1"), reply(None, "new", key="k-2")])
    assert (again[0].id, again[0].status, again[0].payload) == (first[0].id, "sent", {"t": "card"})
    assert [entry.payload for entry in await store.unsent_outbox()] == [{"t": "plain"}, {"t": "new"}]


async def test_two_processes_enqueueing_one_key_record_it_once(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(2)]
    batches = await asyncio.gather(
        *(store.enqueue_once([reply(None, f"{n}", key=f"k-{n}")]) for n in range(10) for store in stores)
    )
    assert len({batch[0].id for batch in batches}) == 10
    assert len(await stores[0].unsent_outbox()) == 10


# --- previews ------------------------------------------------------------------------------------------------------


async def test_previews_are_kept_replaced_and_cleared(open_store: Opener, clock: FakeClock) -> None:
    store = await open_store()
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(first.id, "telegram", "default", TARGET, "m-1")
    clock.advance(1)
    await store.set_preview(second.id, "telegram", "default", {"chat_id": "43"}, "m-2")
    clock.advance(1)
    await store.set_preview(first.id, "telegram", "default", TARGET, "m-1b")  # one per message: replaced
    previews = await (await open_store()).previews()
    assert [(p.inbound_id, p.message_id, p.target) for p in previews] == [
        (second.id, "m-2", {"chat_id": "43"}),
        (first.id, "m-1b", TARGET),
    ]
    await store.clear_previews([])
    await store.clear_previews([second.id, 9999])
    assert [p.inbound_id for p in await store.previews()] == [first.id]


# --- jobs ----------------------------------------------------------------------------------------------------------


async def test_jobs_are_saved_replaced_listed_and_removed(store: Roles, clock: FakeClock) -> None:
    saved = await store.save_job({"id": "daily", "cron": "0 9 * * *"}, created_by="owner")
    clock.advance(5)
    await store.save_job({"id": "hourly", "every": "1h"})
    replaced = await store.save_job({"id": "daily", "cron": "0 10 * * *"}, created_by="someone else")
    assert (replaced.created_by, replaced.created, replaced.updated) == ("owner", saved.created, clock.now)
    assert replaced.job == {"id": "daily", "cron": "0 10 * * *"}
    assert [job.id for job in await store.list_jobs()] == ["daily", "hourly"]
    assert await store.get_job("daily") == replaced
    assert await store.remove_job("daily")
    assert not await store.remove_job("daily")
    assert await store.get_job("daily") is None


async def test_a_tick_is_recorded_once_with_its_journal_row(store: Roles, clock: FakeClock) -> None:
    run = await store.start_job_run("daily", 5000.0, inbound=entry("cron:daily:5000"))
    assert run is not None and run.inbound_id is not None
    assert (run.status, run.tick, run.started, run.ended, run.manual) == ("running", 5000.0, clock.now, None, False)
    assert [record.id for record in await store.unfinished_inbound()] == [run.inbound_id]
    assert await store.start_job_run("daily", 5000.0, inbound=entry("cron:daily:5000b")) is None
    skipped = await store.start_job_run("daily", 6000.0, "skipped", "the bot was down")
    assert skipped is not None and (skipped.status, skipped.ended, skipped.detail) == (
        "skipped", clock.now, "the bot was down"
    )  # fmt: skip
    with pytest.raises(ValueError, match="already holds"):  # its journal row exists: the run is rolled back too
        await store.start_job_run("daily", 7000.0, inbound=entry("cron:daily:5000"))
    assert await store.last_job_ticks() == {"daily": 6000.0}
    assert [r.tick for r in await store.job_runs("daily")] == [6000.0, 5000.0]
    assert [r.id for r in await store.open_job_runs()] == [run.id]


async def test_two_processes_starting_one_tick_run_it_once(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(3)]
    runs = await asyncio.gather(
        *(store.start_job_run("daily", 5000.0, inbound=entry(f"cron:{n}")) for n, store in enumerate(stores))
    )
    assert sum(run is not None for run in runs) == 1
    assert len(await stores[0].unfinished_inbound()) == 1  # the losers journaled nothing


async def test_a_requested_run_is_claimed_once_and_keeps_its_first_ending(open_store: Opener) -> None:
    store, other = await open_store(), await open_store()
    first, second = await store.request_job_run("daily"), await store.request_job_run("daily")  # one clock reading
    assert first.id != second.id and first.manual and first.status == "requested"
    claims = await asyncio.gather(
        store.claim_job_run(first.id, entry("run:1")), other.claim_job_run(first.id, entry("run:1b"))
    )
    [claimed] = [claim for claim in claims if claim is not None]
    assert claimed.status == "running" and claimed.inbound_id is not None
    assert len(await store.unfinished_inbound()) == 1
    await store.finish_job_run(first.id, "ok", message_ids=["m-1"])
    await store.finish_job_run(first.id, "error", "too late")
    await store.finish_job_run(second.id, "skipped", "asked twice")
    with pytest.raises(ValueError, match="final"):
        await store.finish_job_run(second.id, "running")
    runs = {run.id: run for run in await store.job_runs()}
    assert (runs[first.id].status, runs[first.id].message_ids) == ("ok", ["m-1"])
    assert runs[second.id].status == "skipped"
    assert await store.claim_job_run(second.id, entry("run:2")) is None
    assert await store.open_job_runs() == []
    assert await store.last_job_ticks() == {}  # requested runs are not ticks of the schedule


async def test_settling_ends_runs_whose_answer_has_left_the_outbox(open_store: Opener, clock: FakeClock) -> None:
    store, other = await open_store(), await open_store()
    runs = [await store.start_job_run(f"job-{n}", 100.0, inbound=entry(f"cron:{n}")) for n in range(5)]
    ids = [run.inbound_id for run in runs if run is not None and run.inbound_id is not None]
    assert len(ids) == 5
    ok, quiet, dead, failed, waiting = ids
    [sent] = await store.finish_inbound([ok], "done", replies=[reply(ok, "hello")])
    await store.mark_sent(sent.id, "m-9")
    await store.finish_inbound([quiet], "done")
    [lost] = await store.finish_inbound([dead], "done", replies=[reply(dead, "hello")])
    await store.mark_dead(lost.id, "403 blocked")
    await store.finish_inbound([failed], "failed", "provider down")
    await store.finish_inbound([waiting], "done", replies=[reply(waiting, "hello")])  # still pending in the outbox
    clock.advance(7)
    settled = [*(await asyncio.gather(store.settle_job_runs(), other.settle_job_runs()))]
    ended = sorted((run for batch in settled for run in batch), key=lambda run: run.id)
    assert [(run.job_id, run.status, run.detail, run.message_ids, run.ended) for run in ended] == [
        ("job-0", "ok", None, ["m-9"], clock.now),
        ("job-1", "ok", "nothing sent (NO_REPLY or HEARTBEAT_OK)", [], clock.now),
        ("job-2", "undeliverable", "403 blocked", [], clock.now),
        ("job-3", "error", "provider down", [], clock.now),
    ]  # each ended by one process only
    assert [run.job_id for run in await store.open_job_runs()] == ["job-4"]
    assert await store.settle_job_runs() == []


async def test_prune_job_runs_keeps_open_runs_and_each_jobs_latest(store: Roles, clock: FakeClock) -> None:
    for tick in (1.0, 2.0, 3.0):
        await store.start_job_run("daily", tick, "ok")
    await store.start_job_run("other", 1.0, "error", "x")
    running = await store.start_job_run("daily", 4.0)
    clock.advance(100)
    assert await store.prune_job_runs(50) == 3  # daily's latest is the one running; other's only run stays
    assert [run.tick for run in await store.job_runs("daily")] == [4.0]
    assert running is not None and [run.id for run in await store.open_job_runs()] == [running.id]
    assert await store.last_job_ticks() == {"daily": 4.0, "other": 1.0}


# --- subagents -----------------------------------------------------------------------------------------------------


def announce(calls: list[SubagentRecord]) -> Callable[[SubagentRecord], JournalEntry]:
    def announcement(record: SubagentRecord) -> JournalEntry:
        calls.append(record)
        return entry(f"announce:{record.id}", f"{record.status}: {record.result}")

    return announcement


async def start(store: Roles, run_id: str, parent: str = "parent") -> InboundRecord:
    origin: dict[str, Any] = {"chat": "42", "depth": 1}
    return await store.start_subagent(run_id, parent, f"child:{run_id}", "main", None, "do it", origin, entry(run_id))


async def test_a_child_is_journaled_with_its_task_and_announced_once(store: Roles, clock: FakeClock) -> None:
    task = await start(store, "r1")
    [child] = await store.subagents("parent", open_only=True)
    assert (child.id, child.status, child.inbound_id, child.origin, child.ended) == (
        "r1", "running", task.id, {"chat": "42", "depth": 1}, None
    )  # fmt: skip
    with pytest.raises(ValueError, match="already holds"):  # its task is journaled already: no second child either
        await store.start_subagent("r2", "parent", "child:r2", "main", "label", "t", {}, entry("r1"))
    assert await store.subagent("r2") is None
    clock.advance(5)
    calls: list[SubagentRecord] = []
    announced = await store.end_subagent("r1", "done", "all good", [task.id], announce(calls))
    assert announced is not None and announced.payload == {"t": "done: all good"}
    assert [(call.status, call.result, call.ended) for call in calls] == [("done", "all good", clock.now)]
    assert [record.id for record in await store.unfinished_inbound()] == [announced.id]  # the task row is done
    assert await store.end_subagent("r1", "failed", "again", [task.id], announce(calls)) is None
    assert len(calls) == 1
    assert await store.kill_subagent("r1") is None
    assert await store.subagents("parent", open_only=True) == []
    assert [child.id for child in await store.subagents()] == ["r1"]


async def test_a_kill_wins_over_the_status_the_child_ends_with(store: Roles) -> None:
    task = await start(store, "r1")
    await store.mark_inbound(task.id, "failed", error="cut short")
    killed = await store.kill_subagent("r1")
    assert killed is not None and (killed.status, killed.ended) == ("killed", None)
    calls: list[SubagentRecord] = []
    assert await store.end_subagent("r1", "done", "partial", [task.id], announce(calls)) is not None
    assert [call.status for call in calls] == ["killed"]
    assert await inbound_rows(store) == [("failed", None), ("pending", None)]  # a finished row keeps its ending
    assert await store.kill_subagent("nobody") is None


async def test_two_processes_ending_one_child_announce_it_once(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(3)]
    task = await start(stores[0], "r1")
    calls: list[SubagentRecord] = []
    ends = await asyncio.gather(
        *(store.end_subagent("r1", "done", f"by {n}", [task.id], announce(calls)) for n, store in enumerate(stores))
    )
    assert sum(end is not None for end in ends) == 1
    assert len(await stores[0].unfinished_inbound()) == 1  # the one announcement


async def test_children_are_listed_per_parent_and_pruned_once_ended(store: Roles, clock: FakeClock) -> None:
    for run_id, parent in (("a", "p1"), ("b", "p2"), ("c", "p1")):
        await start(store, run_id, parent)
        clock.advance(1)
    assert [child.id for child in await store.subagents("p1")] == ["a", "c"]
    await store.end_subagent("a", "timed_out", "slow", [], announce([]))
    assert [child.id for child in await store.subagents("p1", open_only=True)] == ["c"]
    clock.advance(100)
    assert await store.prune_subagents(50) == 1
    assert [child.id for child in await store.subagents()] == ["b", "c"]
