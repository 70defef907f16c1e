"""The PostgreSQL database under the store: a pool of psycopg connections, migrations, the decision key, SQL helpers."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bot.store.base import Clock, FencedOut, StoreError, current_fence, cutoff
from bot.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "CONNECT_TIMEOUT", "LANE_LOCK", "MIGRATION_LOCK", "PgDatabase", "PgPart", "PgTx", "check_fence", "lock_granted",
]  # fmt: skip

CONNECT_TIMEOUT = 30.0  # seconds `open` waits for the first connection
# pg_advisory_xact_lock key held while migrating: two processes opening one database cannot both migrate it.
MIGRATION_LOCK = 0x5357_4244  # "SWBD"

# TCP keepalives on a connection of its own: a process notices within about 10 s that the server vanished (no FIN ever
# comes). The server's side of a cluster member's lock connection gets the same (bot.store.postgres.cluster), so that
# the locks of a vanished machine are released as soon, and another process takes over.
KEEPALIVE: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 4, "keepalives_interval": 2, "keepalives_count": 3}

_Connection = AsyncConnection[DictRow]


class PgDatabase:
    """An open PostgreSQL database shared by every part of a store (and by other processes using the same database).

    Outside `transaction()` every statement runs alone, in a transaction of its own (autocommit), on any free
    connection of the pool. SQL uses psycopg's placeholders: `%s` for a parameter, and `%%` for a literal `%`
    (only when parameters are given). JSON payloads are TEXT written with `bot.store.database.dumps`; times are
    DOUBLE PRECISION seconds from `clock()`.
    """

    def __init__(self, pool: AsyncConnectionPool[_Connection], clock: Clock, key: bytes, url: str = "") -> None:
        self.clock = clock
        self.url = url  # for connections of their own (a cluster member's locks and notifications)
        self.key = key  # seals approval decisions (the `store_keys` row 'decision')
        self._pool: AsyncConnectionPool[_Connection] | None = pool

    @classmethod
    async def open(cls, url: str, *, clock: Clock = time.time, min_size: int = 1, max_size: int = 10) -> PgDatabase:
        """Connect to the database at `url` (a libpq URL or key=value string) and bring its schema up to date."""
        # One connection first, for the migrations: a wrong URL or password fails at once, with libpq's reason.
        try:
            first = await AsyncConnection.connect(url, row_factory=dict_row, autocommit=True)
        except psycopg.OperationalError as error:
            raise StoreError(f"cannot connect to PostgreSQL: {error}".strip()) from error
        async with first:
            await _migrate(first)
            key = await _decision_key(first)
        pool: AsyncConnectionPool[_Connection] = AsyncConnectionPool(
            url,
            connection_class=AsyncConnection[DictRow],
            kwargs={"row_factory": dict_row, "autocommit": True},
            min_size=min_size,
            max_size=max_size,
            open=False,
            name="switchboard-store",
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except BaseException as error:
            await pool.close()
            if isinstance(error, PoolTimeout):
                raise StoreError(f"cannot connect to PostgreSQL within {CONNECT_TIMEOUT:g} s") from error
            raise
        return cls(pool, clock, key, url)

    async def close(self) -> None:
        """Close the pool (waiting for connections in use to come back). Closing twice is fine."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        await pool.close()

    @property
    def closed(self) -> bool:
        return self._pool is None

    async def connect(self) -> _Connection:
        """A connection of its own, outside the pool (autocommit, rows as dicts): for session-level advisory locks
        and LISTEN, which live as long as it does. The caller closes it."""
        if self._pool is None:
            raise StoreError("the store is closed")
        return await AsyncConnection.connect(self.url, row_factory=dict_row, autocommit=True, **KEEPALIVE)

    def _connection(self) -> AbstractAsyncContextManager[_Connection]:
        if self._pool is None:
            raise StoreError("the store is closed")
        return self._pool.connection()

    async def fetch(self, sql: str, *params: object) -> list[dict[str, Any]]:
        """Every row `sql` returns (none for a statement that returns no rows)."""
        async with self._connection() as connection:
            return await _fetch(connection, sql, params)

    async def fetchone(self, sql: str, *params: object) -> dict[str, Any] | None:
        """The first row `sql` returns, or None (the rest are read and dropped)."""
        rows = await self.fetch(sql, *params)
        return rows[0] if rows else None

    async def execute(self, sql: str, *params: object) -> int:
        """Run `sql`; how many rows it touched (-1 when that does not apply)."""
        async with self._connection() as connection:
            return await _execute(connection, sql, params)

    def transaction(self) -> AbstractAsyncContextManager[PgTx]:
        """One connection, one transaction: committed when the block ends, rolled back when it raises."""
        return self._transaction()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[PgTx]:
        async with self._connection() as connection, connection.transaction():
            yield PgTx(connection)

    def cutoff(self, older_than_seconds: float) -> float:
        return cutoff(self.clock, older_than_seconds)


class PgTx:
    """The connection of one open transaction (`PgDatabase.transaction()`): its statements commit or roll back
    together. Use it only inside its `async with` block."""

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection

    async def fetch(self, sql: str, *params: object) -> list[dict[str, Any]]:
        return await _fetch(self.connection, sql, params)

    async def fetchone(self, sql: str, *params: object) -> dict[str, Any] | None:
        rows = await _fetch(self.connection, sql, params)
        return rows[0] if rows else None

    async def execute(self, sql: str, *params: object) -> int:
        return await _execute(self.connection, sql, params)


LANE_LOCK = 1  # the first key of a session's advisory lock (bot.store.postgres.cluster.LockKind.LANE)


def lock_granted(name: str) -> str:
    """SQL for "the lane lock of the session named by the SQL expression `name` is granted" (pg_locks shows the
    second key of a two-key lock, `hashtext` of the name, as an unsigned oid); a condition on `pid` may follow."""
    return (
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
        f" AND classid = {LANE_LOCK} AND objid = hashtext({name})::bigint::bit(32)::bigint::oid"
    )


# A lane's fence (share-locked), and whether the backend `pid` holds the lane's lock: one round trip.
FENCE_OF = (
    f"SELECT fence, EXISTS ({lock_granted('%s')} AND pid = %s) AS held"
    " FROM session_fences WHERE session_key = %s FOR SHARE"
)


async def check_fence(tx: PgTx) -> None:
    """Inside a transaction that finishes work of a session: FencedOut when the session was handed to another process
    since this one claimed it (the `fenced` claim the code runs under). The row stays share-locked until the
    transaction ends, so no hand-over can slip in between the check and the writes. Nothing to check outside a
    cluster's session."""
    fence = current_fence()
    if fence is None:
        return
    row = await tx.fetchone(FENCE_OF, fence.lane, fence.holder, fence.lane)
    if row is None or row["fence"] != fence.token:
        raise FencedOut(f"session {fence.lane} was taken over by another process; nothing was written")
    if fence.holder is not None and not row["held"]:
        raise FencedOut(f"this process lost its hold on session {fence.lane}; nothing was written")


class PgPart:
    """One domain's share of the PostgreSQL store. Every part keeps its state in the one `PgDatabase` it is given
    (shared by all parts of a store), so the parts can be combined into one object without stepping on each other."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db


# --- helpers --------------------------------------------------------------------------------------------------------


async def _fetch(connection: _Connection, sql: str, params: Sequence[object]) -> list[dict[str, Any]]:
    cursor = await connection.execute(sql, params or None)
    if cursor.description is None:  # INSERT/UPDATE/DELETE without RETURNING
        return []
    return await cursor.fetchall()


async def _execute(connection: _Connection, sql: str, params: Sequence[object]) -> int:
    cursor = await connection.execute(sql, params or None)
    return cursor.rowcount


async def _migrate(connection: _Connection) -> None:
    """Apply the migrations this database lacks, one transaction each, under an advisory lock (so that processes
    opening the database at once migrate it once); StoreError for a database newer than this Switchboard."""
    version = -1
    while version < SCHEMA_VERSION:
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (only_row BOOLEAN PRIMARY KEY DEFAULT TRUE"
                " CHECK (only_row), version INTEGER NOT NULL)"
            )
            await connection.execute(
                "INSERT INTO schema_version (version) VALUES (0) ON CONFLICT (only_row) DO NOTHING"
            )
            cursor = await connection.execute("SELECT version FROM schema_version")
            row = await cursor.fetchone()
            assert row is not None
            version = int(row["version"])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the PostgreSQL schema is at version {version}, newer than this Switchboard ({SCHEMA_VERSION})"
                )
            if version == SCHEMA_VERSION:
                return
            for statement in MIGRATIONS[version]:
                await connection.execute(statement)
            version += 1
            await connection.execute("UPDATE schema_version SET version = %s", (version,))


async def _decision_key(connection: _Connection) -> bytes:
    """The key that seals approval decisions: 32 random bytes made by the first process to open the database, kept
    in `store_keys` so that every process sharing the database seals (and checks) alike. Whoever can read that table
    can forge a seal: give commands run by agents no access to the database."""
    await connection.execute(
        "INSERT INTO store_keys (name, value) VALUES ('decision', %s) ON CONFLICT (name) DO NOTHING",
        (secrets.token_bytes(32),),
    )
    cursor = await connection.execute("SELECT value FROM store_keys WHERE name = 'decision'")
    row = await cursor.fetchone()
    assert row is not None
    return bytes(row["value"])
