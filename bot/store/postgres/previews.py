"""Streamed answers still being written, on PostgreSQL: the platform message each is shown in, for after a restart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.store.database import dumps
from bot.store.postgres.database import PgDatabase, PgPart, PgTx
from bot.store.previews import PreviewRecord, preview_record

if TYPE_CHECKING:
    from bot.store.previews import PreviewStore

__all__ = ["PgPreviews", "delete_previews"]


class PgPreviews(PgPart):
    """Streamed messages in the `previews` table, one per journaled message; they go when it is finished."""

    async def set_preview(
        self, inbound_id: int, channel: str, account: str, target: dict[str, Any], message_id: str
    ) -> None:
        await self._db.execute(
            "INSERT INTO previews (inbound_id, channel, account, target, message_id, created)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (inbound_id) DO UPDATE SET channel = excluded.channel,"
            " account = excluded.account, target = excluded.target, message_id = excluded.message_id,"
            " created = excluded.created",
            inbound_id,
            channel,
            account,
            dumps(target),
            message_id,
            self._db.clock(),
        )

    async def clear_previews(self, inbound_ids: list[int]) -> None:
        await delete_previews(self._db, inbound_ids)

    async def previews(self) -> list[PreviewRecord]:
        rows = await self._db.fetch("SELECT * FROM previews ORDER BY created, inbound_id")
        return [preview_record(row) for row in rows]


if TYPE_CHECKING:
    _checked: type[PreviewStore] = PgPreviews


async def delete_previews(sql: PgDatabase | PgTx, inbound_ids: list[int]) -> None:
    """Forget the streamed messages of these journal rows (inside the caller's transaction, when given one)."""
    if inbound_ids:
        await sql.execute("DELETE FROM previews WHERE inbound_id = ANY(%s)", list(inbound_ids))
