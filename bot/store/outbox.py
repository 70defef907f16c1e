"""The outbox: everything the bot says, recorded before it is sent, then sent exactly once and in order."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bot.store.base import DEDUPE_SECONDS, Record
from bot.store.database import Part, delete, dumps, first, loads, scalar, write_transaction

__all__ = [
    "BACKLOG",
    "NOTHING_AHEAD",
    "OutboxEntry",
    "OutboxRecord",
    "OutboxStatus",
    "OutboxStore",
    "SqliteOutbox",
    "insert_outbox",
    "outbox_record",
    "outbox_row",
]

OutboxStatus = Literal["pending", "sent", "dead"]


class OutboxEntry(Record):
    """Something to send, before it is recorded."""

    inbound_id: int | None
    channel: str
    account: str
    target: dict[str, Any]
    payload: dict[str, Any]
    kind: str = "send"
    key: str | None = None  # unique: an entry recorded again under the same key is the one already recorded


class OutboxRecord(Record):
    """Something to send, recorded before the send. `attempts` counts failed sends."""

    id: int
    inbound_id: int | None
    channel: str
    account: str
    target: dict[str, Any]
    payload: dict[str, Any]
    kind: str
    status: OutboxStatus
    attempts: int = 0
    retry_at: float
    error: str | None = None
    platform_message_id: str | None = None
    dedupe_key: str | None = None
    created: float
    updated: float
    # Set as a message's replies are recorded (`finish_inbound`): nothing recorded before this entry is pending for its
    # chat, so it can be sent at once, without a look at the outbox. False from every other read: not known.
    nothing_ahead: bool = False


# What `nothing_ahead` is, computed as an entry is inserted (`RETURNING *, ...`), in the same statement.
NOTHING_AHEAD = (
    "NOT EXISTS (SELECT 1 FROM outbox AS older WHERE older.status = 'pending' AND older.id < outbox.id"
    " AND older.channel = outbox.channel AND older.account = outbox.account AND older.target = outbox.target)"
    " AS nothing_ahead"
)

# How many outbox entries are pending, and the oldest one's creation time.
BACKLOG = "SELECT count(*), min(created) FROM outbox WHERE status = 'pending'"


class OutboxStore(Protocol):
    """What delivery needs: record before sending, then mark each entry sent, failed (to retry) or dead."""

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
        """Record something to send, due now; do this before sending. KeyError if `inbound_id` is unknown."""

    async def enqueue_once(self, entries: list[OutboxEntry]) -> list[OutboxRecord]:
        """Record entries in one step, due now; an entry whose `key` was recorded before is not recorded again: the
        earlier record stands in its place (sent, pending or dead)."""

    async def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        """The platform accepted it. Only a pending entry can be marked: ValueError otherwise; KeyError if unknown."""

    async def mark_send_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        """A send failed and will be tried again at `retry_at`; counts an attempt."""

    async def mark_dead(self, outbox_id: int, error: str) -> None:
        """Give up on it: it is never due again."""

    async def due_outbox(self, now: float | None = None) -> list[OutboxRecord]:
        """Pending entries whose retry time has come (`now` defaults to the clock), in creation order."""

    async def unsent_outbox(self) -> list[OutboxRecord]:
        """Every pending entry, due or not, in creation order: what to send again on start."""

    async def outbox_backlog(self) -> tuple[int, float | None]:
        """How many entries are pending, and when the oldest was recorded (None: none): what status.json and the
        metrics show, without reading the entries."""

    async def outbox_for_inbound(self, inbound_id: int) -> list[OutboxRecord]:
        """Everything recorded in reply to one message, in creation order, whatever its status."""

    async def inbound_has_replies(self, inbound_id: int) -> bool:
        """Whether any reply to the message was recorded: after a restart, do not answer it twice."""


def outbox_row(entry: OutboxEntry) -> tuple[object, ...]:
    """An entry as the values `insert_outbox` takes."""
    target, payload = dumps(entry.target), dumps(entry.payload)
    return (entry.inbound_id, entry.channel, entry.account, target, payload, entry.kind, entry.key)


class SqliteOutbox(Part):
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
        return await self._call(insert_outbox, outbox_row(entry), self._db.clock())

    async def enqueue_once(self, entries: list[OutboxEntry]) -> list[OutboxRecord]:
        return await self._call(_insert_once, [outbox_row(entry) for entry in entries], self._db.clock())

    async def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        sql = "UPDATE outbox SET status = 'sent', platform_message_id = ?, updated = ?"
        await self._call_quick(_finish_outbox, outbox_id, sql, (platform_message_id, self._db.clock()))

    async def mark_send_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        sql = "UPDATE outbox SET attempts = attempts + 1, error = ?, retry_at = ?, updated = ?"
        await self._call(_finish_outbox, outbox_id, sql, (error, retry_at, self._db.clock()))

    async def mark_dead(self, outbox_id: int, error: str) -> None:
        sql = "UPDATE outbox SET status = 'dead', error = ?, updated = ?"
        await self._call(_finish_outbox, outbox_id, sql, (error, self._db.clock()))

    async def due_outbox(self, now: float | None = None) -> list[OutboxRecord]:
        at = self._db.clock() if now is None else now
        return await self._call(_outbox_rows, "WHERE status = 'pending' AND retry_at <= ? ORDER BY id", (at,))

    async def unsent_outbox(self) -> list[OutboxRecord]:
        return await self._call(_outbox_rows, "WHERE status = 'pending' ORDER BY id", ())

    async def outbox_backlog(self) -> tuple[int, float | None]:
        row = await self._call(first, BACKLOG)
        assert row is not None
        return int(row[0]), row[1]

    async def outbox_for_inbound(self, inbound_id: int) -> list[OutboxRecord]:
        return await self._call(_outbox_rows, "WHERE inbound_id = ? ORDER BY id", (inbound_id,))

    async def inbound_has_replies(self, inbound_id: int) -> bool:
        sql = "SELECT EXISTS (SELECT 1 FROM outbox WHERE inbound_id = ?)"
        return bool(await self._call(scalar, sql, inbound_id))

    async def prune_outbox(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        sql = "DELETE FROM outbox WHERE status IN ('sent', 'dead') AND updated < ?"
        return await self._call(delete, sql, cutoff)


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[OutboxStore] = SqliteOutbox


def outbox_record(row: Row) -> OutboxRecord:
    """An `outbox` row (either backend's) as its record."""
    return OutboxRecord.model_validate({**dict(row), "target": loads(row["target"]), "payload": loads(row["payload"])})


# --- on the worker thread -----------------------------------------------------------------------------------------


def insert_outbox(
    connection: sqlite3.Connection, row: tuple[object, ...], now: float, *, ahead: bool = False
) -> OutboxRecord:
    """Insert one `outbox_row`, due now (with `ahead`, saying whether `nothing_ahead` of it); KeyError if it answers
    an unknown message."""
    returning = f"*, {NOTHING_AHEAD}" if ahead else "*"
    try:
        created = first(
            connection,
            "INSERT INTO outbox (inbound_id, channel, account, target, payload, kind, dedupe_key, status, retry_at,"
            f" created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?) RETURNING {returning}",
            (*row, now, now, now),
        )
    except sqlite3.IntegrityError as error:
        raise KeyError(f"no inbound message {row[0]}") from error
    assert created is not None
    return outbox_record(created)


def _insert_once(connection: sqlite3.Connection, rows: list[tuple[object, ...]], now: float) -> list[OutboxRecord]:
    records = []
    with write_transaction(connection):
        for row in rows:
            key = row[-1]
            known = first(connection, "SELECT * FROM outbox WHERE dedupe_key = ?", (key,)) if key else None
            records.append(outbox_record(known) if known is not None else insert_outbox(connection, row, now))
    return records


def _finish_outbox(connection: sqlite3.Connection, outbox_id: int, update: str, params: tuple[object, ...]) -> None:
    if connection.execute(f"{update} WHERE id = ? AND status = 'pending'", (*params, outbox_id)).rowcount:
        return
    current = first(connection, "SELECT status FROM outbox WHERE id = ?", (outbox_id,))
    if current is None:
        raise KeyError(f"no outbox entry {outbox_id}")
    raise ValueError(f"outbox entry {outbox_id} is already {current[0]}")


def _outbox_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[OutboxRecord]:
    return [outbox_record(row) for row in connection.execute(f"SELECT * FROM outbox {where}", params)]
