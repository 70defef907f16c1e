"""The state store on each backend, for the tests of its roles (a pytest plugin): `store` is parametrized
["sqlite", "postgres"], so every test that takes it runs on both, named `...[sqlite]` and `...[postgres]`.

`backend` is the test's one database on that backend: `backend.open()` opens another store on it (as another process
would), `backend.reopen(store)` closes a store and opens it again, and `backend.query` / `backend.execute` read and
write the database behind the stores' back. Every store opened through it is closed at the end of the test."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import FakeClock

from bot.store import SqliteStore
from bot.store.database import DB_FILE
from bot.store.postgres import PostgresStore

__all__ = ["BACKENDS", "NOW", "AnyStore", "Backend", "backend", "clock", "store"]

BACKENDS = ["sqlite", "postgres"]
NOW = 1_000_000.0  # where the `clock` fixture starts
AnyStore = SqliteStore | PostgresStore  # each has every role (bot.store.Store) and the admin commands' methods


class Backend:
    """One test's database: a state folder for SQLite, a fresh database's URL for PostgreSQL."""

    def __init__(self, name: str, state_dir: Path, url: str | None, clock: FakeClock) -> None:
        self.name = name
        self.state_dir = state_dir
        self.url = url
        self.clock = clock
        self._opened: list[AnyStore] = []

    async def open(self) -> AnyStore:
        """A new store on this database, on the test's clock: another process's store, as far as the data goes."""
        opened: AnyStore
        if self.url is not None:
            opened = await PostgresStore.open(self.url, clock=self.clock)
        else:
            opened = await SqliteStore.open(self.state_dir, clock=self.clock)
        self._opened.append(opened)
        return opened

    async def reopen(self, store: AnyStore) -> AnyStore:
        """Close `store` and open the same database again, as a restarted process does."""
        await store.close()
        return await self.open()

    async def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """The rows of `sql` (placeholders `%s` on both backends), read behind the stores' back."""
        if self.url is None:
            with sqlite3.connect(self.state_dir / DB_FILE) as db:
                return [tuple(row) for row in db.execute(sql.replace("%s", "?"), params)]
        async with await psycopg.AsyncConnection.connect(self.url) as connection:
            cursor = await connection.execute(sql, params)
            return [tuple(row) for row in await cursor.fetchall()]

    async def execute(self, sql: str, *params: object) -> None:
        """Run `sql` (placeholders `%s` on both backends) behind the stores' back, committed at once: what a command
        with access to the database could do."""
        if self.url is None:
            with sqlite3.connect(self.state_dir / DB_FILE) as db:
                db.execute(sql.replace("%s", "?"), params)
            return
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as connection:
            await connection.execute(sql, params)

    async def close_all(self) -> None:
        """Close every store opened here (closing one twice is fine)."""
        while self._opened:
            await self._opened.pop().close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Backend]:
    """The test's one database on each backend in turn; the stores opened on it are closed at the end."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    opened = Backend(request.param, tmp_path, url, clock)
    try:
        yield opened
    finally:
        await opened.close_all()


@pytest.fixture
async def store(backend: Backend) -> AnyStore:
    """A store on the test's database, on each backend in turn."""
    return await backend.open()
