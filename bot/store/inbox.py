"""Where the files that came with a message went in the agent's workspace: a turn run again after a crash takes them
from there instead of fetching them a second time."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from bot.store.base import Record
from bot.store.database import Part, execute

__all__ = ["InboxFileRecord", "InboxStore", "SqliteInbox"]


class InboxFileRecord(Record):
    """A file of a journaled message (`ref`: the platform's handle for it) and its place in the workspace, recorded
    before it is fetched; `complete` once all of it is there."""

    inbound_id: int
    ref: str
    path: str  # relative to the workspace
    complete: bool


class InboxStore(Protocol):
    """What fetching a message's files needs: record where each goes, and find it again."""

    async def inbox_file(self, inbound_ids: Sequence[int], ref: str) -> InboxFileRecord | None:
        """Where the file `ref` of one of these messages went (a batch folds several into one turn), if anywhere."""

    async def set_inbox_file(self, inbound_id: int, ref: str, path: str, *, complete: bool) -> None:
        """Record where the file `ref` of message `inbound_id` goes (before fetching it) or went (`complete`)."""


class SqliteInbox(Part):
    """The files in the `inbox_files` table, one per journaled message and platform file; they go with the message's
    journal row."""

    async def inbox_file(self, inbound_ids: Sequence[int], ref: str) -> InboxFileRecord | None:
        return await self._call(_inbox_file, list(inbound_ids), ref)

    async def set_inbox_file(self, inbound_id: int, ref: str, path: str, *, complete: bool) -> None:
        sql = "INSERT OR REPLACE INTO inbox_files (inbound_id, ref, path, complete) VALUES (?, ?, ?, ?)"
        await self._call(execute, sql, (inbound_id, ref, path, complete))


if TYPE_CHECKING:
    _checked: type[InboxStore] = SqliteInbox


# --- on the worker thread -----------------------------------------------------------------------------------------


def _inbox_file(connection: sqlite3.Connection, inbound_ids: list[int], ref: str) -> InboxFileRecord | None:
    if not inbound_ids:
        return None
    placeholders = ", ".join("?" for _ in inbound_ids)
    sql = f"SELECT * FROM inbox_files WHERE ref = ? AND inbound_id IN ({placeholders}) ORDER BY inbound_id DESC"
    rows = connection.execute(sql, (ref, *inbound_ids)).fetchall()
    return InboxFileRecord.model_validate(dict(rows[0])) if rows else None
