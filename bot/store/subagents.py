"""Subagent runs: the children `sessions_spawn` started, each journaled with its task and ended together with the
journal row of its announcement, so that a child is announced to its parent exactly once, across restarts too."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bot.store.base import Record
from bot.store.database import Part, delete, dumps, first, loads, scalar, write_transaction
from bot.store.journal import InboundRecord, JournalEntry, _mark_inbound, journal_entry

__all__ = [
    "Announcement", "SqliteSubagents", "SubagentRecord", "SubagentStatus", "SubagentStore", "subagent_record",
]  # fmt: skip

SubagentStatus = Literal["running", "done", "failed", "timed_out", "killed"]


class SubagentRecord(Record):
    """One child: whose it is (`parent_key`), where it runs (`child_key`, `agent`), what it was asked, and how it
    ended. `ended` is None until its announcement is journaled; `status` may say `killed` before that (a kill asked
    for while it still runs). `origin` is what its runs act for: the parent's chat, who started it, its depth."""

    id: str
    parent_key: str
    child_key: str
    agent: str
    label: str | None = None
    task: str
    status: SubagentStatus
    result: str | None = None
    origin: dict[str, Any]
    inbound_id: int | None = None
    created: float
    ended: float | None = None


# The journal row that tells the parent how a child ended, made from the child's record as it ends.
Announcement = Callable[[SubagentRecord], JournalEntry]


class SubagentStore(Protocol):
    """What the subagents need: a child and its task journaled together, a kill kept, its end and announcement
    journaled together, and the children of a session (or all those still running) to count and list."""

    async def start_subagent(
        self, run_id: str, parent_key: str, child_key: str, agent: str, label: str | None, task: str,
        origin: dict[str, Any], entry: JournalEntry,
    ) -> InboundRecord:  # fmt: skip
        """Record a running child and journal its task (both or neither after a crash)."""

    async def kill_subagent(self, run_id: str) -> SubagentRecord | None:
        """Mark a child that has not ended as killed (its end, when it comes, is announced as killed, even after a
        restart); None when it has ended already or there is no such child."""

    async def end_subagent(
        self,
        run_id: str,
        status: SubagentStatus,
        result: str,
        inbound_ids: Sequence[int],
        announcement: Announcement,
    ) -> InboundRecord | None:
        """End a child: its journal rows done, its result kept, its announcement (made for the status it ends with)
        journaled, in one transaction. A kill asked for before wins over `status`. None when it had ended already
        (nothing is written then)."""

    async def subagent(self, run_id: str) -> SubagentRecord | None: ...

    async def subagents(self, parent_key: str | None = None, *, open_only: bool = False) -> list[SubagentRecord]:
        """A session's children (every child without `parent_key`), oldest first; `open_only`: those not ended."""

    async def prune_subagents(self, older_than_seconds: float) -> int: ...


class SqliteSubagents(Part):
    """Children in the `subagent_runs` table; their tasks and announcements in `inbound`."""

    async def start_subagent(
        self, run_id: str, parent_key: str, child_key: str, agent: str, label: str | None, task: str,
        origin: dict[str, Any], entry: JournalEntry,
    ) -> InboundRecord:  # fmt: skip
        row = (run_id, parent_key, child_key, agent, label, task, dumps(origin))
        return await self._call(_start, row, entry, self._db.clock())

    async def kill_subagent(self, run_id: str) -> SubagentRecord | None:
        return await self._call(_kill, run_id)

    async def end_subagent(
        self,
        run_id: str,
        status: SubagentStatus,
        result: str,
        inbound_ids: Sequence[int],
        announcement: Announcement,
    ) -> InboundRecord | None:
        now = self._db.clock()
        return await self._call(_end, run_id, status, result, list(inbound_ids), announcement, now)

    async def subagent(self, run_id: str) -> SubagentRecord | None:
        rows = await self._call(_rows, "WHERE id = ?", (run_id,))
        return rows[0] if rows else None

    async def subagents(self, parent_key: str | None = None, *, open_only: bool = False) -> list[SubagentRecord]:
        where = ["ended IS NULL"] if open_only else []
        params: tuple[object, ...] = ()
        if parent_key is not None:
            where.append("parent_key = ?")
            params = (parent_key,)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        return await self._call(_rows, clause + "ORDER BY created, id", params)

    async def prune_subagents(self, older_than_seconds: float) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._call(delete, "DELETE FROM subagent_runs WHERE ended IS NOT NULL AND ended < ?", cutoff)


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[SubagentStore] = SqliteSubagents


# --- on the worker thread -----------------------------------------------------------------------------------------


def subagent_record(row: Row) -> SubagentRecord:
    """A `subagent_runs` row (either backend's) as its record."""
    fields = dict(row)
    fields["origin"] = loads(fields.pop("payload"))
    return SubagentRecord.model_validate(fields)


def _rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[SubagentRecord]:
    return [subagent_record(row) for row in connection.execute(f"SELECT * FROM subagent_runs {where}", params)]


def _start(connection: sqlite3.Connection, row: tuple[object, ...], entry: JournalEntry, now: float) -> InboundRecord:
    with write_transaction(connection):
        record = journal_entry(connection, entry, now)
        if record is None:
            raise ValueError(f"the journal already holds {entry.message_id}")
        connection.execute(
            "INSERT INTO subagent_runs (id, parent_key, child_key, agent, label, task, payload, status, inbound_id,"
            " created) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?)",
            (*row, record.id, now),
        )
    return record


def _kill(connection: sqlite3.Connection, run_id: str) -> SubagentRecord | None:
    row = first(
        connection,
        "UPDATE subagent_runs SET status = 'killed' WHERE id = ? AND ended IS NULL RETURNING *",
        (run_id,),
    )
    return None if row is None else subagent_record(row)


def _end(
    connection: sqlite3.Connection,
    run_id: str,
    status: SubagentStatus,
    result: str,
    inbound_ids: list[int],
    announcement: Announcement,
    now: float,
) -> InboundRecord | None:
    with write_transaction(connection):
        row = first(
            connection,
            "UPDATE subagent_runs SET status = CASE status WHEN 'killed' THEN 'killed' ELSE ? END, result = ?,"
            " ended = ? WHERE id = ? AND ended IS NULL RETURNING *",
            (status, result, now, run_id),
        )
        if row is None:
            return None
        for inbound_id in inbound_ids:
            if scalar(connection, "SELECT status FROM inbound WHERE id = ?", inbound_id) in ("pending", "running"):
                _mark_inbound(connection, inbound_id, "done", None, now)
        return journal_entry(connection, announcement(subagent_record(row)), now)
