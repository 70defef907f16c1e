"""The SQLite database under the store: `state.db` in WAL mode with incremental vacuum, its worker thread, migrations
and SQL helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import pydantic_core

from bot.store.base import Clock, StoreError, cutoff
from bot.store.schema import MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from _typeshed import SupportsKeysAndGetItem

    # A stored row as either backend hands it out: sqlite3.Row, or psycopg's dict. The readers that turn one into
    # its Record (`session_record`, `approval_record` …) are shared by both backends.
    Row = SupportsKeysAndGetItem[str, Any]

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DB_FILE",
    "KEY_FILE",
    "Database",
    "Part",
    "delete",
    "dumps",
    "execute",
    "first",
    "loads",
    "release_free_pages",
    "scalar",
    "write_transaction",
]

DB_FILE = "state.db"
KEY_FILE = "decision.key"  # beside the database, readable by the bot's user only; no command can see it
BUSY_TIMEOUT_MS = 5_000  # how long a call on the worker thread waits for another process's write lock
CHECKPOINT_EVERY = 500  # calls between two checkpoints of the write-ahead log, on the worker thread
QUICK_TURN = 16  # quick calls run on the event loop, after which the caller gives the other tasks a turn
AUTO_VACUUM_INCREMENTAL = 2  # PRAGMA auto_vacuum: 0 none, 1 full, 2 incremental

log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_T = TypeVar("_T")


class Database:
    """The open `state.db` and the worker thread that owns its connection.

    `call` hands a call to that thread, so the event loop never waits on it; calls run one at a time, in the order
    they were made. `call_quick` is for the few statements every message makes: it runs them on the event loop
    itself while the worker has nothing to do, because a trip to a thread and back (a wake-up each way, the
    interpreter lock handed over twice) costs more than such a statement, several times more on a virtual machine.
    What would make the event loop wait stays on the worker: a quick call that meets another process's write lock
    goes there (and waits for it), the log's checkpoints run there, and so does every other call. A call whose
    caller is cancelled may still complete.
    """

    def __init__(
        self,
        path: Path,
        worker: _Worker,
        connection: sqlite3.Connection,
        checkpointer: sqlite3.Connection,
        clock: Clock,
        key: bytes = b"",
    ):
        self.path = path
        self.key = key  # seals approval decisions
        self.clock = clock
        self.connection: sqlite3.Connection | None = connection
        self._worker = worker
        self._checkpointer = checkpointer  # a connection of the worker's own, for the log's checkpoints
        self._calls = 0  # since the last checkpoint
        self._quick = 0  # quick calls run on the event loop

    @classmethod
    async def open(cls, state_dir: Path, *, clock: Clock = time.time) -> Database:
        """Open (creating or migrating) `state_dir/state.db`."""
        path = state_dir / DB_FILE
        worker = _Worker()
        try:
            connection = await worker.call(partial(_connect, path))
            checkpointer = await worker.call(partial(sqlite3.connect, path, isolation_level=None))
            key = await worker.call(partial(_decision_key, state_dir / KEY_FILE))
        except BaseException:
            worker.stop()
            raise
        return cls(path, worker, connection, checkpointer, clock, key)

    async def close(self) -> None:
        """Finish the calls already made, then close the database. Closing twice is fine."""
        if self.connection is None:
            return
        connection, self.connection = self.connection, None
        try:
            await self._worker.call(partial(_close, connection, self._checkpointer))
        finally:
            self._worker.stop()

    async def call(
        self, function: Callable[Concatenate[sqlite3.Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run `function(connection, ...)` on the worker thread; StoreError once the database is closed."""
        called = self._worker.call(partial(_patiently, function, self._open(), *args, **kwargs))
        self._count()
        return await called

    async def call_quick(
        self, function: Callable[Concatenate[sqlite3.Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Like `call`, for `function` of a statement or a transaction (`write_transaction`) whose time does not
        grow with the data: run on the event loop while the worker thread has no call to run, otherwise there. Run
        on the event loop, it returns without giving other tasks a turn (as any call whose answer is ready), except
        every QUICK_TURN-th: a task making such calls back to back holds the loop for no more than that many.

        On the event loop nothing waits for a lock: when another process holds the write lock, `function` fails
        with nothing written and is handed to the worker, which waits for it. Should it fail so after writing (a
        function of several statements outside a transaction: a bug), the error is raised, not the function run
        twice."""
        connection = self._open()
        if not self._worker.idle:
            return await self.call(function, *args, **kwargs)
        written = connection.total_changes
        try:
            done = function(connection, *args, **kwargs)
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or connection.total_changes != written:
                raise
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            return await self.call(function, *args, **kwargs)
        self._count()
        self._quick += 1
        if self._quick % QUICK_TURN == 0:
            await asyncio.sleep(0)  # a task making quick calls back to back lets the others have a turn
        return done

    def cutoff(self, older_than_seconds: float) -> float:
        return cutoff(self.clock, older_than_seconds)

    def _open(self) -> sqlite3.Connection:
        if self.connection is None:
            raise StoreError("the store is closed")
        return self.connection

    def _count(self) -> None:
        """A call made: every CHECKPOINT_EVERY, a checkpoint of the log after it. The connection never checkpoints
        as it commits (on the event loop, that would wait for the disk); the worker does, on a connection of its
        own, so that the event loop goes on using this one meanwhile."""
        self._calls += 1
        if self._calls >= CHECKPOINT_EVERY:
            self._calls = 0
            self._worker.aside(partial(_checkpoint, self._checkpointer))


class Part:
    """One domain's share of the SQLite store. Every part keeps its state in the one `Database` it is given
    (shared by all parts of a store), so the parts can be combined into one object without stepping on each other."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def _call(
        self, function: Callable[Concatenate[sqlite3.Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        return await self._db.call(function, *args, **kwargs)

    async def _call_quick(
        self, function: Callable[Concatenate[sqlite3.Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        return await self._db.call_quick(function, *args, **kwargs)


# --- on the worker thread: everything below runs there (and write_transaction in quick calls too) ---------------


class _Worker:
    """The one thread that owns the connection: runs calls in the order they were made and, when several are
    waiting, runs them all and wakes the event loop once for the lot (a wake-up per call costs more than most
    statements)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any] | None] | None] = queue.SimpleQueue()
        self._loop = asyncio.get_running_loop()
        self._unsettled = 0  # calls made and not settled on the event loop yet (counted there only)
        self._thread = threading.Thread(target=self._serve, name="switchboard-store", daemon=True)
        self._thread.start()

    @property
    def idle(self) -> bool:
        """No call is waiting, running or unsettled: the thread is not using the connection, nor will it until the
        event loop makes another call."""
        return self._unsettled == 0

    def call(self, job: Callable[[], _T]) -> asyncio.Future[_T]:
        future: asyncio.Future[_T] = self._loop.create_future()
        self._unsettled += 1
        self._jobs.put((job, future))
        return future

    def aside(self, job: Callable[[], object]) -> None:
        """Run `job` on the thread after the calls already made, with nobody waiting for it: a job that does not
        use the connection, which the event loop may use meanwhile. What it raises is logged."""
        self._jobs.put((job, None))

    def stop(self) -> None:
        """No more calls: the thread ends after the ones already made."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            batch = [self._jobs.get()]
            with contextlib.suppress(queue.Empty):
                while batch[-1] is not None:
                    batch.append(self._jobs.get_nowait())
            outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
            for item in batch:
                if item is not None:
                    job, future = item
                    if future is None:
                        _aside(job)
                        continue
                    try:
                        outcomes.append((future, job(), None))
                    except BaseException as error:  # handed to the caller, whatever it is
                        outcomes.append((future, None, error))
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
                self._loop.call_soon_threadsafe(self._settle, outcomes)
            if batch[-1] is None:
                return

    def _settle(self, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
        self._unsettled -= len(outcomes)
        _settle(outcomes)


def _aside(job: Callable[[], object]) -> None:
    try:
        job()
    except Exception:
        log.exception("state.db: a job on the store's thread failed")


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Autocommit mode: each statement commits alone unless an explicit BEGIN groups it with others.
    # Used from the worker thread and, between its calls, from the event loop's (Database.call_quick).
    connection = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    try:
        connection.row_factory = sqlite3.Row
        # Before anything writes the header (even WAL mode does): a new database takes it at once, so that pages
        # freed by deletes can be given back to the file system (`release_free_pages`).
        connection.execute(f"PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL}")
        mode = scalar(connection, "PRAGMA journal_mode = WAL")
        if mode != "wal":
            raise StoreError(f"{path}: cannot use write-ahead logging (journal mode stays {mode!r})")
        connection.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable across app crashes, not power loss
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("PRAGMA wal_autocheckpoint = 0")  # Database checkpoints on the worker thread
        _migrate(connection, path)
        _convert_to_incremental_vacuum(connection)  # after the version check: never rebuild a newer file
        connection.execute("PRAGMA busy_timeout = 0")  # between calls: see _patiently
    except BaseException:
        connection.close()
        raise
    return connection


def _convert_to_incremental_vacuum(connection: sqlite3.Connection) -> None:
    """A database made before incremental vacuum (`_connect` asks for it before anything is written, but a file
    that has tables keeps its mode) takes it when VACUUM rebuilds it: once, at open, outside any transaction, in
    the time of one copy of the file. Without it, the pages that pruning frees stay in the file for reuse."""
    if scalar(connection, "PRAGMA auto_vacuum") == AUTO_VACUUM_INCREMENTAL:
        return
    connection.execute(f"PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL}")  # full to incremental needs no more
    if scalar(connection, "PRAGMA auto_vacuum") == AUTO_VACUUM_INCREMENTAL:
        return
    connection.execute("VACUUM")  # like the migration, it waits (busy timeout) for a writer in another process


def release_free_pages(connection: sqlite3.Connection) -> int:
    """Give the database's free pages back to the file system (the file shrinks), then fold the write-ahead log
    into the database and empty it (it holds a copy of every page the deletes touched); how many pages were
    freed."""
    free = int(scalar(connection, "PRAGMA freelist_count"))
    # executescript steps the pragma to its end: execute() would free one page per call.
    connection.executescript("PRAGMA incremental_vacuum;")
    # TRUNCATE waits (up to the busy timeout) for readers in other processes; if they outlast it, the log keeps its
    # size until the next checkpoint, which is harmless.
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return free


def _patiently(
    function: Callable[Concatenate[sqlite3.Connection, _P], _T],
    connection: sqlite3.Connection,
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """`function` on the worker thread, waiting up to BUSY_TIMEOUT_MS for another process's write lock. Between
    calls the connection does not wait at all: the event loop uses it too (Database.call_quick)."""
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    try:
        return function(connection, *args, **kwargs)
    finally:
        connection.execute("PRAGMA busy_timeout = 0")


def _checkpoint(connection: sqlite3.Connection) -> tuple[int, int, int] | None:
    """Copy the write-ahead log's pages into the database as far as no reader needs them (PASSIVE: it waits for no
    one, and writers go on meanwhile), so that the log starts over rather than grows. Nobody waits for it: a
    failure is logged, and the next checkpoint tries again."""
    try:
        busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    except sqlite3.Error as error:
        log.warning("state.db: a checkpoint of the write-ahead log failed: %s", error)
        return None
    return busy, frames, copied  # what the pragma says: 1 if it could not run, the log's frames, those copied


@contextlib.contextmanager
def write_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (the write lock, taken before anything is read) ... COMMIT, or ROLLBACK on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _migrate(connection: sqlite3.Connection, path: Path) -> None:
    with write_transaction(connection):  # read the version under the write lock: two openers cannot both migrate
        version = scalar(connection, "PRAGMA user_version")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{path}: schema version {version} is newer than this Switchboard ({SCHEMA_VERSION})")
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _close(connection: sqlite3.Connection, checkpointer: sqlite3.Connection) -> None:
    checkpointer.close()
    try:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA optimize")
    finally:
        connection.close()


def _decision_key(path: Path) -> bytes:
    """The key that seals approval decisions: made once, 32 random bytes, readable by the bot's user only."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    key = secrets.token_bytes(32)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    return key


# --- SQL helpers shared by the domain modules ---------------------------------------------------------------------


def dumps(value: dict[str, Any] | list[Any]) -> str:
    """`value` as compact JSON text, UTF-8 as it is; a NaN or an infinity, which JSON has no word for, as null (as
    pydantic writes them). pydantic-core's encoder: the store writes several small objects per message, and
    json.dumps spends more on setting itself up for each than on the object."""
    return pydantic_core.to_json(value, inf_nan_mode="null").decode()


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def execute(connection: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    connection.execute(sql, params)


def scalar(connection: sqlite3.Connection, sql: str, *params: object) -> Any:
    row = first(connection, sql, params)
    assert row is not None
    return row[0]


def delete(connection: sqlite3.Connection, sql: str, *params: object) -> int:
    return connection.execute(sql, params).rowcount


def first(connection: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Row | None:
    # Step every statement to its end: in autocommit mode a half-read statement holds its transaction open.
    rows = connection.execute(sql, params).fetchall()
    return rows[0] if rows else None
