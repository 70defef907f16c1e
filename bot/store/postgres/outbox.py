"""The outbox on PostgreSQL: everything the bot says, recorded before it is sent, then sent exactly once, in order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from bot.store.base import DEDUPE_SECONDS
from bot.store.outbox import BACKLOG, NOTHING_AHEAD, OutboxEntry, OutboxRecord, outbox_record, outbox_row
from bot.store.postgres.database import PgDatabase, PgPart, PgTx

if TYPE_CHECKING:
    from bot.store.outbox import OutboxStore

__all__ = ["PgOutbox", "insert_outbox"]

_COLUMNS = "inbound_id, channel, account, target, payload, kind, dedupe_key, status, retry_at, created, updated"
_VALUES = "%s, %s, %s, %s, %s, %s, %s, 'pending', %s, %s, %s"
_UNLESS_KEY_TAKEN = " ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING"


class PgOutbox(PgPart):
    """The outbox in the `outbox` table; entries that answer a message point at its journal row."""

    async def enqueue_outbox(
        self,
        *,
        inbound_id: int | None,
        channel: str,
        account: str,
        target: dict[str, Any],
        payload: dict[str, Any],
        kind: str = "send",
    ) -> OutboxRecord:
        entry = OutboxEntry(
            inbound_id=inbound_id, channel=channel, account=account, target=target, payload=payload, kind=kind
        )
        return await insert_outbox(self._db, outbox_row(entry), self._db.clock())

    async def enqueue_once(self, entries: list[OutboxEntry]) -> list[OutboxRecord]:
        rows = [outbox_row(entry) for entry in entries]
        now = self._db.clock()
        records = []
        async with self._db.transaction() as tx:
            for row in rows:
                if not row[-1]:
                    records.append(await insert_outbox(tx, row, now))
                    continue
                # Insert unless the key is taken (a process recording the same key at once is waited for), else
                # read the row that holds it: two processes cannot both record it. Again if that row went meanwhile.
                created = None
                while created is None:
                    created = await _insert(tx, row, now, _UNLESS_KEY_TAKEN)
                    if created is None:
                        created = await tx.fetchone("SELECT * FROM outbox WHERE dedupe_key = %s", row[-1])
                records.append(outbox_record(created))
        return records

    async def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        sql = "UPDATE outbox SET status = 'sent', platform_message_id = %s, updated = %s"
        await _finish_outbox(self._db, outbox_id, sql, platform_message_id, self._db.clock())

    async def mark_send_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        sql = "UPDATE outbox SET attempts = attempts + 1, error = %s, retry_at = %s, updated = %s"
        await _finish_outbox(self._db, outbox_id, sql, error, retry_at, self._db.clock())

    async def mark_dead(self, outbox_id: int, error: str) -> None:
        sql = "UPDATE outbox SET status = 'dead', error = %s, updated = %s"
        await _finish_outbox(self._db, outbox_id, sql, error, self._db.clock())

    async def due_outbox(self, now: float | None = None) -> list[OutboxRecord]:
        at = self._db.clock() if now is None else now
        return await self._rows("WHERE status = 'pending' AND retry_at <= %s ORDER BY id", at)

    async def unsent_outbox(self) -> list[OutboxRecord]:
        return await self._rows("WHERE status = 'pending' ORDER BY id")

    async def outbox_backlog(self) -> tuple[int, float | None]:
        row = await self._db.fetchone(BACKLOG)
        assert row is not None
        count, oldest = row.values()
        return int(count), oldest

    async def outbox_for_inbound(self, inbound_id: int) -> list[OutboxRecord]:
        return await self._rows("WHERE inbound_id = %s ORDER BY id", inbound_id)

    async def inbound_has_replies(self, inbound_id: int) -> bool:
        row = await self._db.fetchone("SELECT EXISTS (SELECT 1 FROM outbox WHERE inbound_id = %s) AS found", inbound_id)
        return bool(row and row["found"])

    async def prune_outbox(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._db.execute("DELETE FROM outbox WHERE status IN ('sent', 'dead') AND updated < %s", cutoff)

    async def _rows(self, where: str, *params: object) -> list[OutboxRecord]:
        return [outbox_record(row) for row in await self._db.fetch(f"SELECT * FROM outbox {where}", *params)]


if TYPE_CHECKING:
    _checked: type[OutboxStore] = PgOutbox


async def insert_outbox(
    sql: PgDatabase | PgTx, row: tuple[object, ...], now: float, *, ahead: bool = False
) -> OutboxRecord:
    """`bot.store.outbox.insert_outbox` on PostgreSQL: the KeyError comes from the foreign-key violation."""
    created = await _insert(sql, row, now, "", f"*, {NOTHING_AHEAD}" if ahead else "*")
    assert created is not None
    return outbox_record(created)


async def _insert(
    sql: PgDatabase | PgTx, row: tuple[object, ...], now: float, conflict: str, returning: str = "*"
) -> dict[str, Any] | None:
    try:
        return await sql.fetchone(
            f"INSERT INTO outbox ({_COLUMNS}) VALUES ({_VALUES}){conflict} RETURNING {returning}", *row, now, now, now
        )
    except psycopg.errors.ForeignKeyViolation as error:
        raise KeyError(f"no inbound message {row[0]}") from error


async def _finish_outbox(db: PgDatabase, outbox_id: int, update: str, *params: object) -> None:
    if await db.execute(f"{update} WHERE id = %s AND status = 'pending'", *params, outbox_id):
        return
    current = await db.fetchone("SELECT status FROM outbox WHERE id = %s", outbox_id)
    if current is None:
        raise KeyError(f"no outbox entry {outbox_id}")
    raise ValueError(f"outbox entry {outbox_id} is already {current['status']}")
