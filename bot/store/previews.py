"""Streamed answers still being written: the platform message each is shown in, to finish it after a restart."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

from bot.store.base import Record
from bot.store.database import Part, dumps, execute

__all__ = ["PreviewRecord", "PreviewStore", "SqlitePreviews", "delete_previews", "preview_record"]


class PreviewRecord(Record):
    """A streamed answer still being written: the platform message showing it, kept so that a turn cut short by
    a restart finishes its answer in that same message instead of leaving it half written beside a new one."""

    inbound_id: int
    channel: str
    account: str
    target: dict[str, Any]
    message_id: str
    created: float


class PreviewStore(Protocol):
    """What streaming needs: remember the message an answer streams into; on start, find the unfinished ones."""

    async def set_preview(
        self, inbound_id: int, channel: str, account: str, target: dict[str, Any], message_id: str
    ) -> None:
        """Remember the message a turn is streaming its answer into (one per message answered)."""

    async def clear_previews(self, inbound_ids: list[int]) -> None:
        """The answers to these messages are complete (or were taken back): forget their streamed messages."""

    async def previews(self) -> list[PreviewRecord]:
        """Every streamed message whose answer was not completed, oldest first."""


class SqlitePreviews(Part):
    """Streamed messages in the `previews` table, one per journaled message; they go when it is finished."""

    async def set_preview(
        self, inbound_id: int, channel: str, account: str, target: dict[str, Any], message_id: str
    ) -> None:
        sql = "INSERT OR REPLACE INTO previews VALUES (?, ?, ?, ?, ?, ?)"
        await self._call(execute, sql, (inbound_id, channel, account, dumps(target), message_id, self._db.clock()))

    async def clear_previews(self, inbound_ids: list[int]) -> None:
        if inbound_ids:
            await self._call(delete_previews, inbound_ids)

    async def previews(self) -> list[PreviewRecord]:
        return await self._call(_preview_rows)


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[PreviewStore] = SqlitePreviews


def preview_record(row: Row) -> PreviewRecord:
    """A `previews` row (either backend's) as its record."""
    return PreviewRecord.model_validate({**dict(row), "target": json.loads(row["target"])})


# --- on the worker thread -----------------------------------------------------------------------------------------


def delete_previews(connection: sqlite3.Connection, inbound_ids: list[int]) -> None:
    if inbound_ids:
        placeholders = ", ".join("?" for _ in inbound_ids)
        connection.execute(f"DELETE FROM previews WHERE inbound_id IN ({placeholders})", inbound_ids)


def _preview_rows(connection: sqlite3.Connection) -> list[PreviewRecord]:
    rows = connection.execute("SELECT * FROM previews ORDER BY created").fetchall()
    return [preview_record(row) for row in rows]
