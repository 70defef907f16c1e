"""Transcripts on PostgreSQL: `PgTranscripts`, one `transcript_lines` row per line of what would be the JSONL file."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from agent.messages import Message
from agent.sessions import Compaction, as_messages, decode_line, encode_line
from bot.store.postgres.database import PgDatabase, check_fence

__all__ = ["PgTranscripts"]

log = logging.getLogger(__name__)

_READ = "SELECT id, line FROM transcript_lines WHERE session_id = %s ORDER BY id"
# The latest compaction row (found on the partial index of compaction rows) and every row after it; all without one.
_HISTORY = (
    "SELECT id, line FROM transcript_lines WHERE session_id = %s AND id >= coalesce("
    "(SELECT max(id) FROM transcript_lines WHERE session_id = %s AND compaction), 0) ORDER BY id"
)


class PgTranscripts:
    """The transcripts (agent.transcripts.Transcripts) in the `transcript_lines` table of a database that several
    gateway processes share. A line holds the same JSON as a line of the file; `compaction` marks a compaction
    record. An append is one transaction, fenced: a process that lost its claim on the session writes nothing."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        await self._append(session_id, messages)

    async def append_compaction(self, session_id: str, summary: str, kept: Sequence[Message]) -> None:
        await self._append(session_id, [Compaction(summary=summary), *kept])

    async def history(self, session_id: str) -> list[Message]:
        return await self._messages(session_id, await self._db.fetch(_HISTORY, session_id, session_id))

    async def read(self, session_id: str) -> list[Message]:
        return await self._messages(session_id, await self._db.fetch(_READ, session_id))

    async def _append(self, session_id: str, records: Sequence[Message | Compaction]) -> None:
        """The records as rows in one statement (ids follow their order), after the fence check, in one transaction."""
        if not records:
            return
        params: list[object] = []
        for record in records:
            params += [session_id, isinstance(record, Compaction), encode_line(record).decode()]
        values = ", ".join(["(%s, %s, %s)"] * len(records))
        async with self._db.transaction() as tx:
            await check_fence(tx)
            await tx.execute(f"INSERT INTO transcript_lines (session_id, compaction, line) VALUES {values}", *params)

    async def _messages(self, session_id: str, rows: list[dict[str, Any]]) -> list[Message]:
        """The rows as the model is shown them, parsed off the event loop."""
        return await asyncio.to_thread(_parse, session_id, rows)


def _parse(session_id: str, rows: list[dict[str, Any]]) -> list[Message]:
    """The records of `rows`, skipping (with a warning naming the row) a line that is not one."""
    records: list[Message | Compaction] = []
    for row in rows:
        try:
            records.append(decode_line(row["line"]))
        except ValidationError:
            log.warning("transcript of session %s, row %s: skipped a line that is not a record", session_id, row["id"])
    return as_messages(records)
