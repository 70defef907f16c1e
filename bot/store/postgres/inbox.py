"""Where the files that came with a message went in the workspace, on PostgreSQL (bot.store.inbox)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.store.inbox import InboxFileRecord
from bot.store.postgres.database import PgPart

if TYPE_CHECKING:
    from bot.store.inbox import InboxStore

__all__ = ["PgInbox"]


class PgInbox(PgPart):
    """The files in the `inbox_files` table, one per journaled message and platform file; they go with the message's
    journal row."""

    async def inbox_file(self, inbound_ids: Sequence[int], ref: str) -> InboxFileRecord | None:
        row = await self._db.fetchone(
            "SELECT * FROM inbox_files WHERE ref = %s AND inbound_id = ANY(%s) ORDER BY inbound_id DESC LIMIT 1",
            ref,
            list(inbound_ids),
        )
        return InboxFileRecord.model_validate(row) if row is not None else None

    async def set_inbox_file(self, inbound_id: int, ref: str, path: str, *, complete: bool) -> None:
        await self._db.execute(
            "INSERT INTO inbox_files (inbound_id, ref, path, complete) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (inbound_id, ref) DO UPDATE SET path = excluded.path, complete = excluded.complete",
            inbound_id,
            ref,
            path,
            complete,
        )


if TYPE_CHECKING:
    _checked: type[InboxStore] = PgInbox
