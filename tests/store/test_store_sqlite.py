"""What only the SQLite store has, on a real file: WAL mode and its schema version, incremental vacuum and the space
on disk, a killed process's files, its worker thread and the quick calls the event loop runs itself. The roles
themselves are tested on both backends in tests/store/test_store.py."""

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

from bot.store import SCHEMA_VERSION, SqliteStore, StoreError, database as database_module


@pytest.fixture
async def sqlite_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    async with await SqliteStore.open(tmp_path, clock=clock) as opened:
        yield opened


async def journal(store: SqliteStore, message_id: str) -> None:
    assert await store.record_inbound("telegram", "default", "42", message_id, {"text": f"message {message_id}"})


# --- opening ---------------------------------------------------------------------------------------------------


async def test_sqlite_open_creates_state_db_in_wal_mode_with_the_schema_version(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"  # does not exist yet
    async with await SqliteStore.open(state_dir) as store:
        assert store.path == state_dir / "state.db"
        await journal(store, "1")
    with sqlite3.connect(state_dir / "state.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 1
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "inbound", "outbox"} <= tables


async def test_sqlite_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    await (await SqliteStore.open(tmp_path)).close()
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer"):
        await SqliteStore.open(tmp_path)


async def test_sqlite_new_database_can_give_the_space_of_deleted_rows_back(tmp_path: Path) -> None:
    await (await SqliteStore.open(tmp_path)).close()
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db")) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental


async def test_sqlite_database_from_before_incremental_vacuum_is_converted_once_when_opened(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path) as store:
        await journal(store, "1")
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db", isolation_level=None)) as db:
        db.execute("PRAGMA auto_vacuum = NONE")  # as earlier versions made it
        db.execute("VACUUM")
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    async with await SqliteStore.open(tmp_path) as store:
        assert [record.message_id for record in await store.unfinished_inbound()] == ["1"]
    with contextlib.closing(sqlite3.connect(tmp_path / "state.db")) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# --- a killed process ------------------------------------------------------------------------------------------


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


async def test_sqlite_killed_process_leaves_its_unfinished_work_in_the_wal_to_the_next_start(tmp_path: Path) -> None:
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


# --- space on disk ---------------------------------------------------------------------------------------------


def size_on_disk(state_dir: Path) -> int:
    """state.db and its write-ahead log, in bytes."""
    files = (state_dir / "state.db", state_dir / "state.db-wal")
    return sum(path.stat().st_size for path in files if path.exists())


async def test_sqlite_released_space_leaves_the_files_at_once_after_a_prune(
    sqlite_store: SqliteStore, clock: FakeClock
) -> None:
    store = sqlite_store
    for number in range(300):
        recorded = await store.record_inbound("telegram", "default", "42", str(number), {"text": "x" * 2000})
        assert recorded is not None
        await store.mark_inbound(recorded.id, "done")
    full = size_on_disk(store.path.parent)
    assert full > 600_000
    clock.advance(25 * 3600)
    assert await store.prune_inbound() == 300
    assert await store.release_space() > 100  # pages
    assert size_on_disk(store.path.parent) < full / 10  # while the store is still open
    assert await store.release_space() == 0  # nothing more to give back
    assert await store.record_inbound("telegram", "default", "42", "300", {}) is not None  # and it goes on working


# --- the worker thread and the event loop ------------------------------------------------------------------------


def where_statements_run(store: SqliteStore) -> list[tuple[str, str]]:
    """A list that fills with (the statement's first words, "loop" or "worker") as the store's statements execute,
    leaving out the busy timeout's own. Private parts: only the connection can say where its statements run."""
    loop_thread = threading.get_ident()
    seen: list[tuple[str, str]] = []

    def trace(statement: str) -> None:
        if "busy_timeout" not in statement:
            seen.append((" ".join(statement.split()[:2]), "loop" if threading.get_ident() == loop_thread else "worker"))

    assert store._connection is not None
    store._connection.set_trace_callback(trace)  # while the worker has nothing to do, as the loop's quick calls
    return seen


async def test_sqlite_runs_the_statements_every_message_makes_on_the_loop_while_its_worker_has_nothing_to_do(
    sqlite_store: SqliteStore,
) -> None:
    store = sqlite_store
    ran = where_statements_run(store)
    await journal(store, "1")  # quick: the worker has nothing to do
    await store.ensure_session("k", "main")  # quick: a transaction, as it creates the session
    assert {where for _, where in ran} == {"loop"} and ("BEGIN IMMEDIATE", "loop") in ran
    ran.clear()
    assert await store.get_session("k") is not None  # not quick: on the worker
    assert ran and {where for _, where in ran} == {"worker"}
    ran.clear()

    # A quick call made while the worker has calls to run waits behind them, on the worker: calls keep their order.
    holding, release = threading.Event(), threading.Event()

    def hold(connection: sqlite3.Connection) -> None:
        holding.set()
        assert release.wait(WAIT)
        connection.execute("SELECT 'held'")

    held = asyncio.create_task(store._call(hold))
    await eventually(holding.is_set, "the worker to take the call")
    quick = asyncio.create_task(journal(store, "2"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not quick.done()  # not run on the loop meanwhile
    release.set()
    await asyncio.wait_for(asyncio.gather(held, quick), timeout=WAIT)
    assert ran[0] == ("SELECT 'held'", "worker") and {where for _, where in ran} == {"worker"}
    assert any(statement.startswith("INSERT INTO") for statement, _ in ran[1:])
    ran.clear()
    await journal(store, "3")  # and once it is done, on the loop again
    assert {where for _, where in ran} == {"loop"}


async def test_sqlite_checkpoints_its_log_on_the_worker_never_as_the_loop_commits(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store
    monkeypatch.setattr(database_module, "CHECKPOINT_EVERY", 10)
    checkpoints: list[tuple[bool, tuple[int, int, int] | None]] = []
    checkpoint = database_module._checkpoint

    def watched(connection: sqlite3.Connection) -> tuple[int, int, int] | None:
        done = checkpoint(connection)
        checkpoints.append((threading.current_thread().name == "switchboard-store", done))
        return done

    monkeypatch.setattr(database_module, "_checkpoint", watched)
    assert store._connection is not None
    assert store._connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # it never checkpoints itself
    ran = where_statements_run(store)
    for number in range(9):
        await journal(store, str(number))
    await store.get_session("nine calls")  # the tenth call, on the worker: the checkpoint is run after it
    await store.get_session("the worker is done")
    [(on_the_worker, done)] = checkpoints
    assert on_the_worker and done is not None
    busy, frames, copied = done
    assert busy == 0 and frames == copied > 0  # the whole log copied into the database: it starts over
    assert not any(statement.startswith("PRAGMA wal_checkpoint") for statement, _ in ran)  # not on this connection
    for number in range(9, 19):
        await journal(store, str(number))  # ten quick calls on the loop: a checkpoint after the tenth
    await store.get_session("the worker is done")
    assert len(checkpoints) == 2 and checkpoints[1][0]


async def test_sqlite_quick_call_that_wrote_before_meeting_the_lock_fails_rather_than_runs_twice(
    sqlite_store: SqliteStore,
) -> None:
    store = sqlite_store
    other = sqlite3.connect(store.path, isolation_level=None)
    calls = 0

    def two_writes_outside_a_transaction(connection: sqlite3.Connection) -> None:  # what a quick call must not be
        nonlocal calls
        calls += 1
        connection.execute("INSERT INTO inbound (channel, account, chat, message_id, payload, status, received,"
                            " updated) VALUES ('t', 'a', 'c', 'first', '{}', 'pending', 0, 0)")  # fmt: skip
        other.execute("BEGIN IMMEDIATE")  # another process takes the write lock between the two
        connection.execute("UPDATE inbound SET updated = 1 WHERE message_id = 'first'")

    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await store._db.call_quick(two_writes_outside_a_transaction)
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert calls == 1
    rows = await store._call(lambda connection: connection.execute("SELECT updated FROM inbound").fetchall())
    assert [tuple(row) for row in rows] == [(0,)]


async def test_sqlite_write_waiting_on_a_locked_database_does_not_block_the_loop(sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    loop = asyncio.get_running_loop()
    executing = asyncio.Event()

    def trace(statement: str) -> None:  # called where the store's statements execute
        loop.call_soon_threadsafe(executing.set)

    await store._call(sqlite3.Connection.set_trace_callback, trace)  # private: see where_statements_run
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock; the store waits (busy timeout)
        # A quick call: tried on the loop, it meets the lock at once, writes nothing and goes to the worker.
        write = asyncio.create_task(store.record_inbound("telegram", "default", "42", "1", {}))
        await eventually(executing.is_set, "the write to start")
        # The write has started and cannot finish while the lock is held (the busy timeout is 5 s, far longer than
        # this step). That this test runs meanwhile shows it waits off the loop: on the loop, it would have blocked
        # the loop until the busy timeout gave up, and be done (failed) by now.
        for _ in range(5):
            await asyncio.sleep(0)
        assert not write.done()
        other.execute("COMMIT")
    finally:
        other.close()
    assert await asyncio.wait_for(write, timeout=WAIT) is not None
    await store._call(sqlite3.Connection.set_trace_callback, None)
    assert len(await store.unfinished_inbound()) == 1  # journaled once
