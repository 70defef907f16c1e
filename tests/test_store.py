"""The SQLite state store, on a real file: sessions, the inbound journal, the outbox, crashes and concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import WAIT, FakeClock, eventually

from agent.messages import Usage
from bot.store import SCHEMA_VERSION, InboundRecord, OutboxEntry, SqliteStore, Store, StoreError


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(tmp_path, clock=clock)
    yield opened
    await opened.close()


TARGET = {"chat_id": "42", "thread_id": None}


async def inbound(store: Store, message_id: str, chat: str = "42", account: str = "default") -> InboundRecord:
    record = await store.record_inbound("telegram", account, chat, message_id, {"text": f"message {message_id}"})
    assert record is not None
    return record


# --- opening ---------------------------------------------------------------------------------------------------


async def test_open_creates_state_db_in_wal_mode_with_the_schema_version(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"  # does not exist yet
    async with await SqliteStore.open(state_dir) as store:
        assert store.path == state_dir / "state.db"
        await inbound(store, "1")
    with sqlite3.connect(state_dir / "state.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 1
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "inbound", "outbox"} <= tables


async def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    await (await SqliteStore.open(tmp_path)).close()
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer"):
        await SqliteStore.open(tmp_path)


async def test_a_new_database_can_give_the_space_of_deleted_rows_back(tmp_path: Path) -> None:
    await (await SqliteStore.open(tmp_path)).close()
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db")) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental


async def test_a_database_from_before_incremental_vacuum_is_converted_once_when_opened(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path) as store:
        await inbound(store, "1")
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db", isolation_level=None)) as db:
        db.execute("PRAGMA auto_vacuum = NONE")  # as earlier versions made it
        db.execute("VACUUM")
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    async with await SqliteStore.open(tmp_path) as store:
        assert [record.message_id for record in await store.unfinished_inbound()] == ["1"]
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db")) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_closed_store_refuses_calls_and_closing_twice_is_fine(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path)
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.count_sessions()


# --- sessions --------------------------------------------------------------------------------------------------


async def test_ensure_session_creates_once_then_returns_the_same_session(store: SqliteStore, clock: FakeClock) -> None:
    assert await store.get_session("agent:main:telegram:direct:7") is None
    created = await store.ensure_session("agent:main:telegram:direct:7", "main")
    assert created.agent == "main"
    assert created.created == created.updated == clock.now
    assert len(created.session_id) >= 16
    assert (created.input_tokens, created.output_tokens, created.model, created.last_target) == (0, 0, None, None)

    clock.advance(5)
    again = await store.ensure_session("agent:main:telegram:direct:7", "main")
    assert again == created
    assert await store.get_session("agent:main:telegram:direct:7") == created
    other = await store.ensure_session("agent:main:telegram:direct:8", "main")
    assert other.session_id != created.session_id
    assert await store.count_sessions() == 2


async def test_touch_session_adds_token_totals_and_keeps_fields_not_given(store: SqliteStore, clock: FakeClock) -> None:
    await store.ensure_session("k", "main")
    clock.advance(10)
    first = await store.touch_session(
        "k",
        model="openai/gpt-x",
        usage=Usage(input_tokens=100, output_tokens=20),
        channel="telegram",
        account="default",
        target=TARGET,
    )
    assert (first.input_tokens, first.output_tokens) == (100, 20)
    assert first.updated == clock.now
    clock.advance(10)
    await store.touch_session("k", usage=Usage(input_tokens=50, output_tokens=5))
    cached = Usage(input_tokens=1000, output_tokens=2, cache_read_tokens=900, cache_write_tokens=90)
    await store.touch_session("k", usage=cached, model="anthropic/claude-y")

    record = await store.get_session("k")
    assert record is not None
    assert (record.input_tokens, record.output_tokens) == (1150, 27)
    assert (record.cache_read_tokens, record.cache_write_tokens) == (900, 90)
    assert record.model == "anthropic/claude-y"
    assert (record.last_channel, record.last_account, record.last_target) == ("telegram", "default", TARGET)
    assert record.updated == clock.now > record.created


async def test_touching_a_missing_session_or_negative_usage_is_an_error(store: SqliteStore) -> None:
    with pytest.raises(KeyError):
        await store.touch_session("nobody", usage=Usage(input_tokens=1, output_tokens=1))
    await store.ensure_session("k", "main")
    with pytest.raises(ValueError, match="negative"):
        await store.touch_session("k", usage=Usage(input_tokens=-1, output_tokens=0))


async def test_reset_gives_a_new_session_id_and_zeroes_tokens(store: SqliteStore, clock: FakeClock) -> None:
    old = await store.ensure_session("k", "main")
    used = Usage(input_tokens=500, output_tokens=60, cache_read_tokens=400, cache_write_tokens=50)
    await store.touch_session("k", usage=used, channel="telegram", target=TARGET)
    clock.advance(60)
    new = await store.reset_session("k")
    assert new.session_id != old.session_id
    assert (new.input_tokens, new.output_tokens, new.cache_read_tokens, new.cache_write_tokens) == (0, 0, 0, 0)
    assert (new.session_key, new.agent, new.last_channel, new.last_target) == ("k", "main", "telegram", TARGET)
    assert new.created == clock.now
    assert await store.get_session("k") == new
    assert await store.count_sessions() == 1
    with pytest.raises(KeyError):
        await store.reset_session("nobody")


async def test_sessions_survive_a_reopen(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path) as store:
        created = await store.ensure_session("k", "main")
        touched = await store.touch_session("k", usage=Usage(input_tokens=3, output_tokens=4), target=TARGET)
    async with await SqliteStore.open(tmp_path) as store:
        assert await store.get_session("k") == touched
        assert touched.session_id == created.session_id


# --- inbound journal -------------------------------------------------------------------------------------------


async def test_the_same_message_twice_is_a_duplicate(store: SqliteStore, clock: FakeClock) -> None:
    first = await store.record_inbound("telegram", "default", "42", "1001", {"text": "hi", "from": {"id": 7}})
    assert first is not None
    assert (first.status, first.received, first.payload) == ("pending", clock.now, {"text": "hi", "from": {"id": 7}})
    assert await store.record_inbound("telegram", "default", "42", "1001", {"text": "hi again"}) is None
    assert [record.id for record in await store.unfinished_inbound()] == [first.id]


async def test_same_message_id_elsewhere_is_not_a_duplicate(store: SqliteStore) -> None:
    base = await inbound(store, "1001")
    others = [
        await store.record_inbound("telegram", "second-bot", "42", "1001", {}),  # another account
        await store.record_inbound("telegram", "default", "43", "1001", {}),  # another chat
        await store.record_inbound("discord", "default", "42", "1001", {}),  # another channel
    ]
    assert all(record is not None for record in others)
    assert len({base.id, *(record.id for record in others if record)}) == 4


async def test_inbound_status_moves_forward_and_finished_is_final(store: SqliteStore, clock: FakeClock) -> None:
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


def reply(inbound_id: int | None, text: str) -> OutboxEntry:
    return OutboxEntry(inbound_id=inbound_id, channel="telegram", account="default", target=TARGET, payload={"t": text})


async def test_finishing_messages_records_their_replies_in_the_same_step(store: SqliteStore) -> None:
    first, second = await inbound(store, "1"), await inbound(store, "2")
    recorded = await store.finish_inbound(
        [first.id, second.id], "done", session_key="s-1", replies=[reply(second.id, "a"), reply(second.id, "b")]
    )
    assert [(entry.inbound_id, entry.payload, entry.status) for entry in recorded] == [
        (second.id, {"t": "a"}, "pending"),
        (second.id, {"t": "b"}, "pending"),
    ]
    assert [entry.id for entry in await store.unsent_outbox()] == [entry.id for entry in recorded]
    assert await store.unfinished_inbound() == []
    with sqlite3.connect(store.path) as db:
        rows = db.execute("SELECT status, session_key FROM inbound ORDER BY id").fetchall()
    assert rows == [("done", "s-1"), ("done", "s-1")]
    await store.finish_inbound([], "done", replies=[reply(None, "a notice")])  # a reply that answers nothing
    assert len(await store.unsent_outbox()) == 3


async def test_finishing_is_all_or_nothing(store: SqliteStore) -> None:
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.mark_inbound(second.id, "done")
    with pytest.raises(ValueError, match="already done"):
        await store.finish_inbound([first.id, second.id], "failed", "boom", replies=[reply(first.id, "sorry")])
    with pytest.raises(KeyError):
        await store.finish_inbound([first.id, 9999], "done", replies=[reply(first.id, "hello")])
    assert await store.unsent_outbox() == []  # neither attempt left a reply behind
    assert [record.id for record in await store.unfinished_inbound()] == [first.id]


async def test_unfinished_inbound_comes_back_in_order_after_reopen(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path) as store:
        records = [await inbound(store, str(number)) for number in range(1, 6)]
        await store.mark_inbound(records[0].id, "running")
        await store.mark_inbound(records[0].id, "done")
        await store.mark_inbound(records[1].id, "running")
        await store.mark_inbound(records[2].id, "running")
        await store.mark_inbound(records[2].id, "failed", error="boom")
        await store.mark_inbound(records[4].id, "running")
    async with await SqliteStore.open(tmp_path) as store:
        unfinished = await store.unfinished_inbound()
    assert [(record.message_id, record.status) for record in unfinished] == [
        ("2", "running"),
        ("4", "pending"),
        ("5", "running"),
    ]
    assert unfinished[1].payload == {"text": "message 4"}


CRASHING_CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from bot.store import SqliteStore

    async def main() -> None:
        store = await SqliteStore.open(Path(sys.argv[1]))
        done, running, pending = [
            await store.record_inbound("telegram", "default", "42", str(n), {"n": n}) for n in (1, 2, 3)
        ]
        await store.mark_inbound(done.id, "running")
        await store.mark_inbound(done.id, "done")
        await store.mark_inbound(running.id, "running")
        await store.enqueue_outbox(
            inbound_id=running.id, channel="telegram", account="default", target={}, payload={"text": "half"}
        )
        os.kill(os.getpid(), signal.SIGKILL)  # no close(), no checkpoint: the process just dies

    asyncio.run(main())
    """
)


async def test_a_killed_process_leaves_its_unfinished_work_to_the_next_start(tmp_path: Path) -> None:
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", CRASHING_CHILD, str(tmp_path))
    try:
        assert await asyncio.wait_for(child.wait(), timeout=60) == -signal.SIGKILL
    finally:
        if child.returncode is None:  # only when it hung: the test does not leave it running
            child.kill()
            await child.wait()
    assert (tmp_path / "state.db-wal").stat().st_size > 0  # the rows live only in the write-ahead log

    async with await SqliteStore.open(tmp_path) as store:
        unfinished = await store.unfinished_inbound()
        assert [(record.message_id, record.status) for record in unfinished] == [("2", "running"), ("3", "pending")]
        assert await store.inbound_has_replies(unfinished[0].id)
        assert not await store.inbound_has_replies(unfinished[1].id)
        assert [entry.payload for entry in await store.unsent_outbox()] == [{"text": "half"}]
        assert await store.record_inbound("telegram", "default", "42", "1", {}) is None  # dedupe survived too


async def test_prune_drops_only_old_finished_messages_and_frees_their_keys(
    store: SqliteStore, clock: FakeClock
) -> None:
    old_done, old_failed, old_pending, new_done = [await inbound(store, str(number)) for number in range(4)]
    await store.mark_inbound(old_done.id, "done")
    await store.mark_inbound(old_failed.id, "failed", error="x")
    clock.advance(23 * 3600)
    await store.mark_inbound(new_done.id, "done")
    assert await store.prune_inbound() == 0  # nothing finished a whole day ago yet
    clock.advance(2 * 3600)
    assert await store.prune_inbound() == 2
    again = await store.record_inbound("telegram", "default", "42", "0", {})  # its key was freed
    assert again is not None
    assert again.id > new_done.id  # ids are never reused, so nothing old can point at the new row
    assert await store.record_inbound("telegram", "default", "42", "3", {}) is None  # still deduplicated
    assert [record.id for record in await store.unfinished_inbound()] == [old_pending.id, again.id]
    with pytest.raises(ValueError):
        await store.prune_inbound(-1)


def size_on_disk(state_dir: Path) -> int:
    """state.db and its write-ahead log, in bytes."""
    files = (state_dir / "state.db", state_dir / "state.db-wal")
    return sum(path.stat().st_size for path in files if path.exists())


async def test_released_space_leaves_the_files_at_once_after_a_prune(store: SqliteStore, clock: FakeClock) -> None:
    for number in range(300):
        record = await store.record_inbound("telegram", "default", "42", str(number), {"text": "x" * 2000})
        assert record is not None
        await store.mark_inbound(record.id, "done")
    full = size_on_disk(store.path.parent)
    assert full > 600_000
    clock.advance(25 * 3600)
    assert await store.prune_inbound() == 300
    assert await store.release_space() > 100  # pages
    assert size_on_disk(store.path.parent) < full / 10  # while the store is still open
    assert await store.release_space() == 0  # nothing more to give back
    assert await store.record_inbound("telegram", "default", "42", "300", {}) is not None  # and it goes on working


# --- outbox ----------------------------------------------------------------------------------------------------


async def test_outbox_lifecycle_with_a_retry_in_the_future(store: SqliteStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    assert not await store.inbound_has_replies(message.id)
    entry = await store.enqueue_outbox(
        inbound_id=message.id, channel="telegram", account="default", target=TARGET, payload={"text": "hello"}
    )
    assert (entry.status, entry.kind, entry.attempts, entry.retry_at) == ("pending", "send", 0, clock.now)
    assert await store.inbound_has_replies(message.id)
    assert await store.due_outbox() == [entry]

    await store.mark_send_failed(entry.id, "429 Too Many Requests", retry_at=clock.now + 30)
    assert await store.due_outbox() == []
    clock.advance(29)
    assert await store.due_outbox() == []
    assert await store.due_outbox(now=clock.now + 1) != []  # an explicit `now` wins over the clock
    clock.advance(1)
    (due,) = await store.due_outbox()
    assert (due.id, due.attempts, due.error) == (entry.id, 1, "429 Too Many Requests")

    await store.mark_sent(entry.id, "msg-555")
    assert await store.due_outbox(now=clock.now + 10_000) == []
    assert await store.unsent_outbox() == []
    (sent,) = await store.outbox_for_inbound(message.id)
    assert (sent.status, sent.platform_message_id, sent.target, sent.payload) == (
        "sent",
        "msg-555",
        TARGET,
        {"text": "hello"},
    )
    with pytest.raises(ValueError, match="already sent"):
        await store.mark_send_failed(entry.id, "late", retry_at=clock.now)


async def test_dead_entries_are_never_due_and_unknown_ids_are_errors(store: SqliteStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    entry = await store.enqueue_outbox(
        inbound_id=message.id, channel="slack", account="T1", target={"channel": "C1"}, payload={}, kind="edit"
    )
    assert entry.kind == "edit"
    await store.mark_dead(entry.id, "channel_not_found")
    assert await store.due_outbox(now=clock.now + 10_000) == []
    assert await store.unsent_outbox() == []
    (dead,) = await store.outbox_for_inbound(message.id)
    assert (dead.status, dead.error, dead.attempts) == ("dead", "channel_not_found", 0)
    with pytest.raises(ValueError, match="already dead"):
        await store.mark_sent(entry.id, None)
    with pytest.raises(KeyError):
        await store.mark_sent(9999, None)
    with pytest.raises(KeyError):
        await store.enqueue_outbox(inbound_id=9999, channel="slack", account="T1", target={}, payload={})


async def test_due_and_unsent_outbox_keep_creation_order_across_a_reopen(tmp_path: Path, clock: FakeClock) -> None:
    async with await SqliteStore.open(tmp_path, clock=clock) as store:
        message = await inbound(store, "1")
        entries = [
            await store.enqueue_outbox(
                inbound_id=message.id, channel="telegram", account="default", target=TARGET, payload={"part": part}
            )
            for part in range(4)
        ]
        await store.mark_sent(entries[0].id, "m0")
        await store.mark_send_failed(entries[1].id, "timeout", retry_at=clock.now + 60)
    async with await SqliteStore.open(tmp_path, clock=clock) as store:
        assert [entry.payload["part"] for entry in await store.unsent_outbox()] == [1, 2, 3]
        assert [entry.payload["part"] for entry in await store.due_outbox()] == [2, 3]
        assert [entry.payload["part"] for entry in await store.outbox_for_inbound(message.id)] == [0, 1, 2, 3]


async def test_prune_outbox_drops_old_sent_and_dead_entries(store: SqliteStore, clock: FakeClock) -> None:
    def send(text: str) -> dict[str, str]:
        return {"text": text}

    sent, dead, pending = [
        await store.enqueue_outbox(inbound_id=None, channel="t", account="a", target={}, payload=send(text))
        for text in ("sent", "dead", "pending")
    ]
    await store.mark_sent(sent.id, "1")
    await store.mark_dead(dead.id, "gone")
    clock.advance(25 * 3600)
    assert await store.prune_outbox() == 2
    assert [entry.id for entry in await store.unsent_outbox()] == [pending.id]


async def test_pruned_messages_leave_their_outbox_entries_unlinked(store: SqliteStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    entry = await store.enqueue_outbox(inbound_id=message.id, channel="t", account="a", target={}, payload={})
    await store.mark_inbound(message.id, "done")
    clock.advance(25 * 3600)
    assert await store.prune_inbound() == 1
    (still_pending,) = await store.unsent_outbox()
    assert (still_pending.id, still_pending.inbound_id) == (entry.id, None)


# --- streamed answers still being written ------------------------------------------------------------------------


async def test_previews_are_kept_across_a_reopen_until_cleared(tmp_path: Path, clock: FakeClock) -> None:
    async with await SqliteStore.open(tmp_path, clock=clock) as store:
        first, second, third = [await inbound(store, str(number)) for number in (1, 2, 3)]
        await store.set_preview(first.id, "telegram", "main", TARGET, "501")
        clock.advance(1)
        await store.set_preview(second.id, "telegram", "main", TARGET, "502")
        await store.set_preview(second.id, "telegram", "main", TARGET, "503")  # one per message: the latest
    async with await SqliteStore.open(tmp_path, clock=clock) as store:
        kept = await store.previews()
        assert [(p.inbound_id, p.message_id, p.target) for p in kept] == [
            (first.id, "501", TARGET),
            (second.id, "503", TARGET),
        ]
        await store.clear_previews([first.id, third.id])  # a message without one is fine
        await store.clear_previews([])
        assert [p.inbound_id for p in await store.previews()] == [second.id]


async def test_finishing_a_message_forgets_its_preview(store: SqliteStore) -> None:
    answered, other = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(answered.id, "telegram", "main", TARGET, "501")
    await store.set_preview(other.id, "telegram", "main", TARGET, "502")
    await store.finish_inbound([answered.id], "done")
    assert [p.inbound_id for p in await store.previews()] == [other.id]


async def test_a_pruned_message_takes_its_preview_with_it(store: SqliteStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    await store.set_preview(message.id, "telegram", "main", TARGET, "501")
    await store.mark_inbound(message.id, "done")
    clock.advance(25 * 3600)
    assert await store.prune_inbound() == 1
    assert await store.previews() == []


# --- concurrency and the event loop ----------------------------------------------------------------------------


async def test_many_concurrent_calls_all_land_once(store: SqliteStore) -> None:
    # 200 distinct messages, each delivered twice, all at once.
    calls = [
        store.record_inbound("telegram", "default", str(number % 7), str(number), {"n": number})
        for number in range(200)
        for _ in range(2)
    ]
    results = await asyncio.gather(*calls)
    recorded = [record for record in results if record is not None]
    assert len(recorded) == 200
    assert sorted(int(record.message_id) for record in recorded) == list(range(200))
    assert len({record.id for record in recorded}) == 200
    assert len(await store.unfinished_inbound()) == 200

    touches = [store.touch_session("k", usage=Usage(input_tokens=1, output_tokens=2)) for _ in range(100)]
    await store.ensure_session("k", "main")
    await asyncio.gather(*touches)
    record = await store.get_session("k")
    assert record is not None
    assert (record.input_tokens, record.output_tokens) == (100, 200)


async def test_sqlite_runs_on_one_worker_thread_never_the_loops(store: SqliteStore) -> None:
    threads: set[int] = set()

    def trace(statement: str) -> None:
        threads.add(threading.get_ident())

    # Private parts, because only the connection can say where its statements execute. It belongs to the worker:
    assert store._connection is not None
    with pytest.raises(sqlite3.ProgrammingError, match="same thread"):
        store._connection.execute("SELECT 1")
    await store._call(sqlite3.Connection.set_trace_callback, trace)
    await asyncio.gather(*(inbound(store, str(number)) for number in range(50)))
    await store.ensure_session("k", "main")
    assert len(threads) == 1
    assert threading.get_ident() not in threads


async def test_a_write_waiting_on_a_locked_database_does_not_block_the_loop(store: SqliteStore) -> None:
    loop = asyncio.get_running_loop()
    executing = asyncio.Event()

    def trace(statement: str) -> None:  # called where the store's statements execute
        loop.call_soon_threadsafe(executing.set)

    await store._call(sqlite3.Connection.set_trace_callback, trace)  # private: see the test above
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock; the store waits (busy timeout)
        write = asyncio.create_task(store.record_inbound("telegram", "default", "42", "1", {}))
        await eventually(executing.is_set, "the write to start")
        # The write has started and cannot finish while the lock is held (the busy timeout is 5 s, far longer than
        # this step). That this test runs meanwhile shows it waits off the loop: on the loop, it would have blocked
        # the loop until the busy timeout gave up, and be done (failed) by now.
        assert not write.done()
        other.execute("COMMIT")
    finally:
        other.close()
    assert await asyncio.wait_for(write, timeout=WAIT) is not None
    await store._call(sqlite3.Connection.set_trace_callback, None)


async def test_a_ticker_keeps_ticking_during_500_writes(store: SqliteStore) -> None:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    for number in range(500):
        await inbound(store, str(number))
    stop.set()
    await task
    # Were the writes run on the loop, the ticker could not run between them; off the loop it runs during each.
    assert ticks >= 500
    assert len(await store.unfinished_inbound()) == 500


# --- pairing ------------------------------------------------------------------------------------------------------


async def test_a_sender_keeps_one_pairing_code_and_new_senders_always_get_one(
    store: SqliteStore, clock: FakeClock
) -> None:
    async def ask(sender: str) -> str:
        return (await store.request_pairing("telegram", "main", sender, None, ttl=3600, max_pending=3)).code

    first = await ask("stranger1")
    assert await ask("stranger1") == first  # asking again is the same request
    for number in (2, 3):
        clock.advance(1)
        await ask(f"stranger{number}")
    clock.advance(1)
    newcomer = await ask("newcomer")  # three are waiting: the oldest makes room, nobody is turned away
    waiting = {record.sender_id: record.code for record in await store.pending_pairings("telegram")}
    assert waiting == {"stranger2": waiting["stranger2"], "stranger3": waiting["stranger3"], "newcomer": newcomer}
    assert await store.approve_pairing("telegram", first, "telegram:1") is None  # the dropped code is void
    assert await store.approve_pairing("telegram", newcomer, "telegram:1") is not None
