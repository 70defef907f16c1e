"""What only the PostgreSQL store has (a throwaway server, tests/postgres.py): its migrations and schema version
table, its shared decision key made once, its transactions, a database it cannot reach; and the throwaway server
itself. The roles themselves, and several stores (processes) on one database, are tested on both backends in
tests/store/test_store.py."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import postgres as postgres_plugin
import psycopg
import pytest
from postgres import MISSING, PostgresServer, start_postgres

from bot.store import SqliteStore, StoreError
from bot.store.database import DB_FILE
from bot.store.postgres import PgDatabase, PostgresStore
from bot.store.postgres.schema import SCHEMA_VERSION

# --- its database -----------------------------------------------------------------------------------------------


async def version(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute("SELECT version FROM schema_version")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def test_postgres_opening_twice_keeps_the_version_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    first = await PgDatabase.open(postgres_url)
    await first.close()
    await first.close()  # closing twice is fine
    with pytest.raises(StoreError, match="closed"):
        await first.fetch("SELECT 1")
    again, concurrent = await asyncio.gather(PgDatabase.open(postgres_url), PgDatabase.open(postgres_url))
    assert again.key == concurrent.key == first.key and len(first.key) == 32  # one key, made once
    await again.close()
    await concurrent.close()
    assert await version(postgres_url) == SCHEMA_VERSION
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
        await connection.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this Switchboard"):
        await PostgresStore.open(postgres_url)


async def test_postgres_database_that_cannot_be_reached_is_a_store_error_at_once(
    postgres_server: PostgresServer,
) -> None:
    with pytest.raises(StoreError, match=r'cannot connect to PostgreSQL: .*"missing" does not exist'):
        await PostgresStore.open(postgres_server.url("missing"))


# What only PostgreSQL has: its bookkeeping, and what several processes on one database share (bot/gateway/cluster.py).
POSTGRES_ONLY_TABLES = {
    "schema_version",
    "store_keys",
    "session_fences",
    "processes",
    "transcript_lines",
}
POSTGRES_ONLY_COLUMNS = {"inbound": {"lane", "claimed_by"}}


async def test_postgres_schema_has_every_sqlite_table_with_the_same_columns(tmp_path: Path, postgres_url: str) -> None:
    await (await SqliteStore.open(tmp_path)).close()
    with sqlite3.connect(tmp_path / DB_FILE) as lite:
        tables = [row[0] for row in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        expected = {
            table: sorted(row[1] for row in lite.execute(f"PRAGMA table_info({table})"))
            for table in tables
            if not table.startswith("sqlite_")
        }
    await (await PgDatabase.open(postgres_url)).close()
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        )
        found: dict[str, list[str]] = {}
        for table, column in await cursor.fetchall():
            found.setdefault(table, []).append(column)
    shared = {table: sorted(set(columns) - POSTGRES_ONLY_COLUMNS.get(table, set())) for table, columns in found.items()}
    assert {table: columns for table, columns in shared.items() if table in expected} == expected
    for table, columns in POSTGRES_ONLY_COLUMNS.items():
        assert columns <= set(found[table])
    assert set(found) - set(expected) == POSTGRES_ONLY_TABLES


async def test_postgres_transaction_commits_together_or_not_at_all(postgres_url: str) -> None:
    db = await PgDatabase.open(postgres_url)
    try:
        sql = "INSERT INTO jobs (id, payload, created, updated) VALUES (%s, '{}', 1, 1)"
        with pytest.raises(RuntimeError, match="midway"):
            async with db.transaction() as tx:
                assert await tx.execute(sql, "a") == 1
                raise RuntimeError("midway")
        assert await db.fetch("SELECT id FROM jobs") == []
        async with db.transaction() as tx:
            await tx.execute(sql, "a")
            await tx.execute(sql, "b")
            assert await tx.fetchone("SELECT count(*) AS n FROM jobs") == {"n": 2}
        assert await db.fetch("SELECT id FROM jobs ORDER BY id") == [{"id": "a"}, {"id": "b"}]
        assert await db.execute("DELETE FROM jobs") == 2
        assert await db.fetchone("SELECT id FROM jobs") is None
    finally:
        await db.close()


# --- the throwaway server -----------------------------------------------------------------------------------------


def test_without_postgresql_the_tests_fail_and_name_make_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_plugin, "find_postgres_bin", lambda: None)
    with pytest.raises(pytest.fail.Exception, match="make test"):
        start_postgres()
    assert "make test" in MISSING


def test_the_server_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.url()) as connection:
        row = connection.execute("SHOW listen_addresses").fetchone()
    assert row == ("127.0.0.1",)
