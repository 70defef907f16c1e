"""Subagent runs on PostgreSQL: each child journaled with its task and ended together with its announcement's journal
row, so that a child is announced to its parent exactly once, across restarts and processes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.store.database import dumps
from bot.store.journal import InboundRecord, JournalEntry
from bot.store.postgres.database import PgPart
from bot.store.postgres.journal import journal_entry
from bot.store.subagents import Announcement, SubagentRecord, SubagentStatus, subagent_record

if TYPE_CHECKING:
    from bot.store.subagents import SubagentStore

__all__ = ["PgSubagents"]


class PgSubagents(PgPart):
    """Children in the `subagent_runs` table; their tasks and announcements in `inbound`."""

    async def start_subagent(
        self, run_id: str, parent_key: str, child_key: str, agent: str, label: str | None, task: str,
        origin: dict[str, Any], entry: JournalEntry,
    ) -> InboundRecord:  # fmt: skip
        now = self._db.clock()
        async with self._db.transaction() as tx:
            record = await journal_entry(tx, entry, now)
            if record is None:
                raise ValueError(f"the journal already holds {entry.message_id}")
            await tx.execute(
                "INSERT INTO subagent_runs (id, parent_key, child_key, agent, label, task, payload, status, inbound_id,"
                " created) VALUES (%s, %s, %s, %s, %s, %s, %s, 'running', %s, %s)",
                run_id,
                parent_key,
                child_key,
                agent,
                label,
                task,
                dumps(origin),
                record.id,
                now,
            )
        return record

    async def kill_subagent(self, run_id: str) -> SubagentRecord | None:
        row = await self._db.fetchone(
            "UPDATE subagent_runs SET status = 'killed' WHERE id = %s AND ended IS NULL RETURNING *", run_id
        )
        return None if row is None else subagent_record(row)

    async def end_subagent(
        self,
        run_id: str,
        status: SubagentStatus,
        result: str,
        inbound_ids: Sequence[int],
        announcement: Announcement,
    ) -> InboundRecord | None:
        now = self._db.clock()
        async with self._db.transaction() as tx:
            # One statement ends it: of two processes ending the child at once, the second waits, then finds it ended.
            row = await tx.fetchone(
                "UPDATE subagent_runs SET status = CASE status WHEN 'killed' THEN 'killed' ELSE %s END, result = %s,"
                " ended = %s WHERE id = %s AND ended IS NULL RETURNING *",
                status,
                result,
                now,
                run_id,
            )
            if row is None:
                return None
            ids = list(inbound_ids)
            if ids:  # the rows still open are done; finished ones keep how they ended
                await tx.execute(
                    "UPDATE inbound SET status = 'done', error = NULL, updated = %s"
                    " WHERE id = ANY(%s) AND status IN ('pending', 'running')",
                    now,
                    ids,
                )
            return await journal_entry(tx, announcement(subagent_record(row)), now)

    async def subagent(self, run_id: str) -> SubagentRecord | None:
        row = await self._db.fetchone("SELECT * FROM subagent_runs WHERE id = %s", run_id)
        return None if row is None else subagent_record(row)

    async def subagents(self, parent_key: str | None = None, *, open_only: bool = False) -> list[SubagentRecord]:
        where = ["ended IS NULL"] if open_only else []
        params: tuple[object, ...] = ()
        if parent_key is not None:
            where.append("parent_key = %s")
            params = (parent_key,)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(f"SELECT * FROM subagent_runs {clause}ORDER BY created, id", *params)
        return [subagent_record(row) for row in rows]

    async def prune_subagents(self, older_than_seconds: float) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._db.execute("DELETE FROM subagent_runs WHERE ended IS NOT NULL AND ended < %s", cutoff)


if TYPE_CHECKING:
    _checked: type[SubagentStore] = PgSubagents
