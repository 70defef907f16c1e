"""The inbound journal on PostgreSQL: every received message recorded once (duplicates dropped) before any work."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from bot.store.base import DEDUPE_SECONDS
from bot.store.database import dumps
from bot.store.journal import (
    InboundRecord,
    InboundStatus,
    JournalEntry,
    answered_in,
    check_inbound_status,
    inbound_record,
)
from bot.store.outbox import OutboxEntry, OutboxRecord, outbox_row
from bot.store.postgres.database import PgDatabase, PgPart, PgTx, check_fence
from bot.store.postgres.outbox import insert_outbox
from bot.store.postgres.previews import delete_previews
from bot.store.postgres.sessions import touched
from bot.store.sessions import SessionTouch

if TYPE_CHECKING:
    from bot.store.journal import JournalStore

__all__ = ["PgJournal", "journal_entry", "mark_inbound"]

log = logging.getLogger(__name__)

_UNFINISHED = "status IN ('pending', 'running')"


class PgJournal(PgPart):
    """The journal in the `inbound` table; finishing a message also writes the outbox and previews tables."""

    async def record_inbound(
        self, channel: str, account: str, chat: str, message_id: str, payload: dict[str, Any]
    ) -> InboundRecord | None:
        return await _record_inbound(self._db, channel, account, chat, message_id, dumps(payload), self._db.clock())

    async def mark_inbound(self, inbound_id: int, status: InboundStatus, error: str | None = None) -> None:
        check_inbound_status(status)
        if status not in ("done", "failed"):  # an overtaken process marking a row running changes nothing
            await mark_inbound(self._db, inbound_id, status, error, self._db.clock())
            return
        async with self._db.transaction() as tx:
            await check_fence(tx)  # but it may not finish one
            await mark_inbound(tx, inbound_id, status, error, self._db.clock())

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
        ids = list(inbound_ids)
        answered = answered_in(replies)
        now = self._db.clock()
        async with self._db.transaction() as tx:
            await check_fence(tx)  # a process whose session was taken over writes nothing more for it
            if ids:  # lock the messages in one order, so that two processes finishing overlapping sets cannot deadlock
                await tx.fetch("SELECT id FROM inbound WHERE id = ANY(%s) ORDER BY id FOR UPDATE", ids)
            if touch is not None and await touched(tx, touch, now) is None:
                log.warning("no session %r to record its run in; the replies are recorded", touch.session_key)
            records = [await insert_outbox(tx, row, now, ahead=True) for row in rows]
            for inbound_id in ids:
                await mark_inbound(tx, inbound_id, status, error, now, session_key)
            if answered is not None and ids:
                await tx.execute("UPDATE inbound SET answered_in = %s WHERE id = ANY(%s)", answered, ids)
            await delete_previews(tx, ids)
        return records

    async def unfinished_inbound(self) -> list[InboundRecord]:
        rows = await self._db.fetch(f"SELECT * FROM inbound WHERE {_UNFINISHED} ORDER BY id")
        return [inbound_record(row) for row in rows]

    async def prune_inbound(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._db.execute("DELETE FROM inbound WHERE status IN ('done', 'failed') AND updated < %s", cutoff)


if TYPE_CHECKING:
    _checked: type[JournalStore] = PgJournal


async def _record_inbound(
    sql: PgDatabase | PgTx, channel: str, account: str, chat: str, message_id: str, payload: str, now: float
) -> InboundRecord | None:
    row = await sql.fetchone(
        "INSERT INTO inbound (channel, account, chat, message_id, payload, status, received, updated)"
        " VALUES (%s, %s, %s, %s, %s, 'pending', %s, %s)"
        " ON CONFLICT (channel, account, chat, message_id) DO NOTHING RETURNING *",
        channel,
        account,
        chat,
        message_id,
        payload,
        now,
        now,
    )
    return None if row is None else inbound_record(row)


async def journal_entry(tx: PgDatabase | PgTx, entry: JournalEntry, now: float) -> InboundRecord | None:
    """`bot.store.journal.journal_entry` on PostgreSQL, in `tx` (the caller's transaction)."""
    payload = dumps(entry.payload)
    return await _record_inbound(tx, entry.channel, entry.account, entry.chat, entry.message_id, payload, now)


async def mark_inbound(
    sql: PgDatabase | PgTx,
    inbound_id: int,
    status: InboundStatus,
    error: str | None,
    now: float,
    session_key: str | None = None,
) -> None:
    """Move one message to `status` in a single statement; KeyError if unknown, ValueError if already finished."""
    updated = await sql.execute(
        "UPDATE inbound SET status = %s, error = %s, session_key = coalesce(%s, session_key), updated = %s"
        f" WHERE id = %s AND {_UNFINISHED}",
        status,
        error,
        session_key,
        now,
        inbound_id,
    )
    if updated:
        return
    current = await sql.fetchone("SELECT status FROM inbound WHERE id = %s", inbound_id)
    if current is None:
        raise KeyError(f"no inbound message {inbound_id}")
    raise ValueError(f"inbound message {inbound_id} is already {current['status']}")
