"""The inbound journal: every received message, recorded (duplicates dropped) before any work is done for it."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bot.store.base import DEDUPE_SECONDS, Record
from bot.store.database import Part, delete, dumps, first, loads, write_transaction
from bot.store.outbox import OutboxEntry, OutboxRecord, insert_outbox, outbox_row
from bot.store.previews import delete_previews
from bot.store.sessions import SessionTouch, touched

__all__ = [
    "InboundRecord", "InboundStatus", "JournalEntry", "JournalStore", "SqliteJournal", "check_inbound_status",
    "inbound_record", "journal_entry",
]  # fmt: skip

log = logging.getLogger(__name__)

InboundStatus = Literal["pending", "running", "done", "failed"]


class InboundRecord(Record):
    """A message received from a platform, journaled before any work is done for it."""

    id: int
    channel: str
    account: str
    chat: str
    message_id: str
    payload: dict[str, Any]
    status: InboundStatus
    error: str | None = None
    session_key: str | None = None
    received: float
    updated: float


class JournalEntry(Record):
    """A journal row that the bot itself writes (a scheduled run's turn, a subagent's task or announcement), in the
    same transaction as the record that explains it."""

    channel: str
    account: str
    chat: str
    message_id: str
    payload: dict[str, Any]


class JournalStore(Protocol):
    """What intake needs: journal a message once, move it along, finish it together with its replies, and on
    start find the work a crash left unfinished."""

    async def record_inbound(
        self, channel: str, account: str, chat: str, message_id: str, payload: dict[str, Any]
    ) -> InboundRecord | None:
        """Journal a received message as pending; None if this message was recorded before (a redelivery)."""

    async def mark_inbound(self, inbound_id: int, status: InboundStatus, error: str | None = None) -> None:
        """Move a message to `status`. Done and failed are final: ValueError after them; KeyError if unknown."""

    async def finish_inbound(
        self,
        inbound_ids: Sequence[int],
        status: Literal["done", "failed"],
        error: str | None = None,
        *,
        session_key: str | None = None,
        replies: Sequence[OutboxEntry] = (),
        touch: SessionTouch | None = None,
    ) -> list[OutboxRecord]:
        """Record `replies` in the outbox and move the messages to their final `status` (noting the session that
        answered them, the row whose replies hold their answer, and forgetting their streamed previews), and write
        `touch` (what the run that answered them adds to its session's row), in one transaction: after a crash all
        of it happened or none did. KeyError for an unknown message, ValueError for one already finished; nothing
        is written then. A touch whose session is gone is logged and left out: it never costs the replies."""

    async def unfinished_inbound(self) -> list[InboundRecord]:
        """Pending and running messages in arrival order: after a crash, the work to run again."""


class SqliteJournal(Part):
    """The journal in the `inbound` table; finishing a message also writes the outbox and previews tables."""

    async def record_inbound(
        self, channel: str, account: str, chat: str, message_id: str, payload: dict[str, Any]
    ) -> InboundRecord | None:
        payload_text, now = dumps(payload), self._db.clock()
        return await self._call_quick(_record_inbound, channel, account, chat, message_id, payload_text, now)

    async def mark_inbound(self, inbound_id: int, status: InboundStatus, error: str | None = None) -> None:
        check_inbound_status(status)
        await self._call(_mark_inbound, inbound_id, status, error, self._db.clock())

    async def finish_inbound(
        self,
        inbound_ids: Sequence[int],
        status: Literal["done", "failed"],
        error: str | None = None,
        *,
        session_key: str | None = None,
        replies: Sequence[OutboxEntry] = (),
        touch: SessionTouch | None = None,
    ) -> list[OutboxRecord]:
        rows = [outbox_row(reply) for reply in replies]
        answered = answered_in(replies)
        return await self._call_quick(
            _finish_inbound, list(inbound_ids), status, error, session_key, answered, rows, touch, self._db.clock()
        )

    async def unfinished_inbound(self) -> list[InboundRecord]:
        return await self._call(_inbound_rows, "WHERE status IN ('pending', 'running') ORDER BY id", ())

    async def prune_inbound(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._call(
            delete, "DELETE FROM inbound WHERE status IN ('done', 'failed') AND updated < ?", cutoff
        )


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[JournalStore] = SqliteJournal


def check_inbound_status(status: str) -> None:
    """ValueError unless `status` is one an inbound message can be moved to."""
    if status not in ("pending", "running", "done", "failed"):
        raise ValueError(f"not an inbound status: {status!r}")


def inbound_record(row: Row) -> InboundRecord:
    """An `inbound` row (either backend's) as its record."""
    return InboundRecord.model_validate({**dict(row), "payload": loads(row["payload"])})


# --- on the worker thread -----------------------------------------------------------------------------------------


def _record_inbound(
    connection: sqlite3.Connection, channel: str, account: str, chat: str, message_id: str, payload: str, now: float
) -> InboundRecord | None:
    row = first(
        connection,
        "INSERT INTO inbound (channel, account, chat, message_id, payload, status, received, updated)"
        " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)"
        " ON CONFLICT (channel, account, chat, message_id) DO NOTHING RETURNING *",
        (channel, account, chat, message_id, payload, now, now),
    )
    return None if row is None else inbound_record(row)


def journal_entry(connection: sqlite3.Connection, entry: JournalEntry, now: float) -> InboundRecord | None:
    """Journal `entry` as pending, inside the caller's transaction; None when its message id is journaled already."""
    payload = dumps(entry.payload)
    return _record_inbound(connection, entry.channel, entry.account, entry.chat, entry.message_id, payload, now)


def _mark_inbound(
    connection: sqlite3.Connection,
    inbound_id: int,
    status: InboundStatus,
    error: str | None,
    now: float,
    session_key: str | None = None,
    answered: int | None = None,
) -> None:
    updated = connection.execute(
        "UPDATE inbound SET status = ?, error = ?, session_key = coalesce(?, session_key), updated = ?,"
        " answered_in = coalesce(?, answered_in) WHERE id = ? AND status IN ('pending', 'running')",
        (status, error, session_key, now, answered, inbound_id),
    ).rowcount
    if not updated:
        current = first(connection, "SELECT status FROM inbound WHERE id = ?", (inbound_id,))
        if current is None:
            raise KeyError(f"no inbound message {inbound_id}")
        raise ValueError(f"inbound message {inbound_id} is already {current[0]}")


def _finish_inbound(
    connection: sqlite3.Connection,
    inbound_ids: list[int],
    status: InboundStatus,
    error: str | None,
    session_key: str | None,
    answered: int | None,
    rows: list[tuple[object, ...]],
    touch: SessionTouch | None,
    now: float,
) -> list[OutboxRecord]:
    with write_transaction(connection):
        if touch is not None and touched(connection, touch, now) is None:
            log.warning("no session %r to record its run in; the replies are recorded", touch.session_key)
        records = [insert_outbox(connection, row, now, ahead=True) for row in rows]
        for inbound_id in inbound_ids:
            _mark_inbound(connection, inbound_id, status, error, now, session_key, answered)
        delete_previews(connection, inbound_ids)
    return records


def answered_in(replies: Sequence[OutboxEntry]) -> int | None:
    """The journal row a batch's replies hang off (its newest message's), or None when it said nothing."""
    return next((reply.inbound_id for reply in replies if reply.inbound_id is not None), None)


def _inbound_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[InboundRecord]:
    return [inbound_record(row) for row in connection.execute(f"SELECT * FROM inbound {where}", params)]
