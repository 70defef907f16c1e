"""The gateway processes sharing one PostgreSQL database, as `bot status` shows them: each process's row in
`processes` holds its host, pid, start time, when it last reported (`seen`) and its last status (JSON text: the
status report plus what it holds). A process rewrites its row every few seconds and removes it at a clean stop; a
row left behind belongs to a process that died, and goes after a day."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from bot.store.base import Record, StoreError
from bot.store.database import dumps, loads
from bot.store.postgres.database import PgDatabase, PgTx

__all__ = [
    "PROCESS_RETENTION",
    "READ_TIMEOUT",
    "ProcessRecord",
    "list_processes",
    "prune_processes",
    "publish_process",
    "read_processes",
    "remove_process",
]

PROCESS_RETENTION = 24 * 60 * 60.0  # seconds a row not rewritten is kept (for `bot status` to show it gone)
READ_TIMEOUT = 5.0  # seconds `read_processes` waits for the database


class ProcessRecord(Record):
    """One process's row: times in seconds since the epoch, by the writer's clock."""

    id: str
    host: str
    pid: int
    started: float
    seen: float
    status: dict[str, Any]


async def publish_process(
    db: PgDatabase, member_id: str, host: str, pid: int, started: float, status: dict[str, Any]
) -> None:
    """Write (or rewrite) the row of process `member_id`, seen now."""
    await db.execute(
        "INSERT INTO processes (id, host, pid, started, seen, status) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, started = excluded.started,"
        " seen = excluded.seen, status = excluded.status",
        member_id,
        host,
        pid,
        started,
        db.clock(),
        dumps(status),
    )


async def list_processes(db: PgDatabase | PgTx, *, seen_since: float | None = None) -> list[ProcessRecord]:
    """Every process's row (only those seen at or after `seen_since`, when given), the newest process first."""
    if seen_since is None:
        rows = await db.fetch("SELECT * FROM processes ORDER BY started DESC, id")
    else:
        rows = await db.fetch("SELECT * FROM processes WHERE seen >= %s ORDER BY started DESC, id", seen_since)
    return [ProcessRecord.model_validate({**row, "status": loads(row["status"])}) for row in rows]


async def remove_process(db: PgDatabase, member_id: str) -> None:
    """Remove the row of process `member_id` (it stops cleanly). Removing a row that is not there is fine."""
    await db.execute("DELETE FROM processes WHERE id = %s", member_id)


async def prune_processes(db: PgDatabase, older_than: float = PROCESS_RETENTION) -> int:
    """Remove the rows not rewritten for `older_than` seconds (processes long gone); how many went."""
    return await db.execute("DELETE FROM processes WHERE seen < %s", db.cutoff(older_than))


async def read_processes(
    url: str, *, seen_since: float | None = None, timeout: float = READ_TIMEOUT
) -> list[ProcessRecord]:
    """The rows of `list_processes`, read over one short-lived connection to the database at `url`, without migrating
    it (a look from outside, as `bot status` takes): none while no process of this schema has used the database.
    StoreError, in one line that never holds the URL's password, when the database cannot be reached or read."""
    try:
        async with asyncio.timeout(timeout + 1):
            connection = await AsyncConnection.connect(
                url, row_factory=dict_row, autocommit=True, connect_timeout=max(2, math.ceil(timeout))
            )
    except (psycopg.Error, OSError, TimeoutError) as error:
        reason = str(error) or f"no answer within {timeout:g} s"
        raise StoreError(f"cannot connect to PostgreSQL at {_where(url)}: {_scrubbed(reason, url)}") from None
    async with connection:
        try:
            return await list_processes(PgTx(connection), seen_since=seen_since)
        except psycopg.errors.UndefinedTable:
            return []  # a database from before the processes table: no process of this version has run on it
        except psycopg.Error as error:
            raise StoreError(
                f"cannot read the processes table at {_where(url)}: {_scrubbed(str(error), url)}"
            ) from None


def _where(url: str) -> str:
    """`host:port/database` of a libpq URL or key=value string, for messages (never its password)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return "the configured URL (which libpq cannot parse)"
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    database = f"/{parts['dbname']}" if parts.get("dbname") else ""
    return _scrubbed(f"{host}{port}{database}", url)


def _scrubbed(text: str, url: str) -> str:
    """`text` on one line, with the password of `url` (as written, and decoded) replaced by `***`."""
    passwords: set[str] = set()
    with contextlib.suppress(psycopg.Error):
        passwords.add(str(conninfo_to_dict(url).get("password") or ""))
    try:
        written = urlsplit(url).password or ""
    except ValueError:
        written = ""
    passwords |= {written, unquote(written)}
    for password in sorted(passwords - {""}, key=len, reverse=True):
        text = text.replace(password, "***")
    text = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", text)  # a key=value string quoted back
    text = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)  # a URL quoted back
    return " ".join(text.split())
