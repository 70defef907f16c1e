"""Scheduled jobs in the state DB: the jobs the `cron` tool and `bot cron add` made, and a run record per tick of
any job (config jobs included), which is also what keeps one tick from running twice."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import Field

from bot.store.base import Record
from bot.store.database import Part, delete, dumps, loads, write_transaction
from bot.store.journal import JournalEntry, journal_entry

__all__ = [
    "JobRecord", "JobRunRecord", "JobStore", "RunStatus", "SqliteJobs", "check_final_status", "job_record",
    "request_run", "run_outcome", "run_record",
]  # fmt: skip

RunStatus = Literal["requested", "running", "ok", "error", "skipped", "undeliverable"]
FINAL_STATUSES = ("ok", "error", "skipped", "undeliverable")


class JobRecord(Record):
    """A job made at run time (the flat `bot.config.schedules.CronJob`, as JSON), and who made it: `created_by` the
    person (`channel:id`; None for `bot cron add`), `creator_owner` whether that was an owner's run (None: made
    before this was kept)."""

    id: str
    job: dict[str, Any]
    created_by: str | None = None
    creator_owner: bool | None = None
    created: float
    updated: float


class JobRunRecord(Record):
    """One tick of a job: when it was due, ran and ended, how it went, and the ids of the messages it sent."""

    id: int
    job_id: str
    tick: float  # when it was due (seconds since the epoch)
    started: float
    ended: float | None = None
    status: RunStatus
    detail: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    inbound_id: int | None = None  # the journal row of its turn
    manual: bool = False  # asked for (`bot cron run`, the tool's `run`), not a tick of the schedule


class JobStore(Protocol):
    """What the scheduler, the `cron` tool and `bot cron` need: jobs kept, and each tick recorded once."""

    async def save_job(
        self, job: dict[str, Any], created_by: str | None = None, creator_owner: bool | None = None
    ) -> JobRecord:
        """Insert or replace the job with `job["id"]` (a replaced job keeps its maker and creation time)."""

    async def get_job(self, job_id: str) -> JobRecord | None: ...
    async def list_jobs(self) -> list[JobRecord]: ...

    async def remove_job(self, job_id: str) -> bool:
        """Delete a job (its run records stay, for `bot cron runs`); whether there was one."""

    async def start_job_run(
        self,
        job_id: str,
        tick: float,
        status: RunStatus = "running",
        detail: str | None = None,
        inbound: JournalEntry | None = None,
    ) -> JobRunRecord | None:
        """Record the tick due at `tick` as running, with the journal row its turn starts from (both or neither
        after a crash), or as already over (a final `status`); None when that tick was recorded before: it ran, or
        was skipped, already."""

    async def request_job_run(self, job_id: str) -> JobRunRecord:
        """Ask for a run now (`bot cron run`, the tool's `run`): the scheduler of the running bot picks it up."""

    async def claim_job_run(self, run_id: int, inbound: JournalEntry) -> JobRunRecord | None:
        """Start a requested run with its journal row, in one transaction; None if it is no longer requested."""

    async def finish_job_run(
        self, run_id: int, status: RunStatus, detail: str | None = None, message_ids: Sequence[str] = ()
    ) -> None:
        """End a requested or running run with its final status; a run already ended keeps its first ending."""

    async def settle_job_runs(self) -> list[JobRunRecord]:
        """End the running runs whose turn is over and whose answer has left the outbox (or died there): ok with
        the platform's message ids, undeliverable, or error; the runs ended now."""

    async def job_runs(self, job_id: str | None = None, limit: int = 20) -> list[JobRunRecord]:
        """The latest runs, newest first (of one job, or of all)."""

    async def open_job_runs(self) -> list[JobRunRecord]:
        """Runs requested or still running, oldest first."""

    async def last_job_ticks(self) -> dict[str, float]:
        """Each job's latest scheduled tick (requested runs aside): what the scheduler has done, across restarts."""


class SqliteJobs(Part):
    """Jobs in the `jobs` table, their runs in `job_runs`; a run's turn is journaled with it, in `inbound`."""

    async def save_job(
        self, job: dict[str, Any], created_by: str | None = None, creator_owner: bool | None = None
    ) -> JobRecord:
        return await self._call(_save_job, job, created_by, creator_owner, self._db.clock())

    async def get_job(self, job_id: str) -> JobRecord | None:
        rows = await self._call(_job_rows, "WHERE id = ?", (job_id,))
        return rows[0] if rows else None

    async def list_jobs(self) -> list[JobRecord]:
        return await self._call(_job_rows, "ORDER BY created, id", ())

    async def remove_job(self, job_id: str) -> bool:
        return bool(await self._call(delete, "DELETE FROM jobs WHERE id = ?", job_id))

    async def start_job_run(
        self,
        job_id: str,
        tick: float,
        status: RunStatus = "running",
        detail: str | None = None,
        inbound: JournalEntry | None = None,
    ) -> JobRunRecord | None:
        return await self._call(_start_run, job_id, tick, status, detail, inbound, self._db.clock())

    async def request_job_run(self, job_id: str) -> JobRunRecord:
        return await request_run(
            lambda now: self._call(_start_run, job_id, now, "requested", None, None, now), self._db.clock()
        )

    async def claim_job_run(self, run_id: int, inbound: JournalEntry) -> JobRunRecord | None:
        return await self._call(_claim_run, run_id, inbound, self._db.clock())

    async def finish_job_run(
        self, run_id: int, status: RunStatus, detail: str | None = None, message_ids: Sequence[str] = ()
    ) -> None:
        check_final_status(status)
        sql = (
            "UPDATE job_runs SET status = ?, detail = ?, message_ids = ?, ended = ?"
            " WHERE id = ? AND status IN ('requested', 'running')"
        )
        await self._call(_execute, sql, (status, detail, dumps(list(message_ids)), self._db.clock(), run_id))

    async def settle_job_runs(self) -> list[JobRunRecord]:
        return await self._call(_settle_runs, self._db.clock())

    async def job_runs(self, job_id: str | None = None, limit: int = 20) -> list[JobRunRecord]:
        if job_id is None:
            return await self._call(_run_rows, "ORDER BY id DESC LIMIT ?", (limit,))
        return await self._call(_run_rows, "WHERE job_id = ? ORDER BY id DESC LIMIT ?", (job_id, limit))

    async def open_job_runs(self) -> list[JobRunRecord]:
        return await self._call(_run_rows, "WHERE status IN ('requested', 'running') ORDER BY id", ())

    async def last_job_ticks(self) -> dict[str, float]:
        return await self._call(_last_ticks)

    async def prune_job_runs(self, older_than_seconds: float) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        sql = (
            "DELETE FROM job_runs WHERE status NOT IN ('requested', 'running') AND ended < ?"
            " AND id NOT IN (SELECT MAX(id) FROM job_runs GROUP BY job_id)"
        )
        return await self._call(delete, sql, cutoff)


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[JobStore] = SqliteJobs


async def request_run(start: Callable[[float], Awaitable[JobRunRecord | None]], now: float) -> JobRunRecord:
    """The run that `start(tick)` records as requested, at `now` or, when a request took that tick already (two
    requests in one clock reading), at the next representable moment after it."""
    while True:
        run = await start(now)
        if run is not None:
            return run
        now += 1e-6


def check_final_status(status: str) -> None:
    """ValueError unless `status` is one a run can end with."""
    if status not in FINAL_STATUSES:
        raise ValueError(f"not a final run status: {status!r}")


def job_record(row: Row) -> JobRecord:
    """A `jobs` row (either backend's) as its record."""
    return JobRecord(
        id=row["id"],
        job=loads(row["payload"]),
        created_by=row["created_by"],
        creator_owner=None if row["creator_owner"] is None else bool(row["creator_owner"]),
        created=row["created"],
        updated=row["updated"],
    )


def run_record(row: Row) -> JobRunRecord:
    """A `job_runs` row (either backend's) as its record."""
    return JobRunRecord.model_validate({**dict(row), "message_ids": loads(row["message_ids"])})


# --- on the worker thread -----------------------------------------------------------------------------------------


def _execute(connection: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    connection.execute(sql, params)


def _save_job(
    connection: sqlite3.Connection, job: dict[str, Any], created_by: str | None, creator_owner: bool | None, now: float
) -> JobRecord:
    with write_transaction(connection):
        connection.execute(
            "INSERT INTO jobs (id, payload, created_by, creator_owner, created, updated) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, updated = excluded.updated",
            (job["id"], dumps(job), created_by, creator_owner, now, now),
        )
        rows = _job_rows(connection, "WHERE id = ?", (job["id"],))
    return rows[0]


def _job_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[JobRecord]:
    rows = connection.execute(f"SELECT * FROM jobs {where}", params).fetchall()
    return [job_record(row) for row in rows]


def _start_run(
    connection: sqlite3.Connection,
    job_id: str,
    tick: float,
    status: str,
    detail: str | None,
    inbound: JournalEntry | None,
    now: float,
) -> JobRunRecord | None:
    ended = None if status in ("requested", "running") else now
    with write_transaction(connection):
        cursor = connection.execute(
            "INSERT INTO job_runs (job_id, tick, started, ended, status, detail, manual) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (job_id, tick) DO NOTHING",
            (job_id, tick, now, ended, status, detail, status == "requested"),
        )
        if cursor.rowcount == 0:
            return None
        run_id = cursor.lastrowid
        assert run_id is not None
        if inbound is not None:
            _journal(connection, run_id, inbound, now)
    return _run_rows(connection, "WHERE id = ?", (run_id,))[0]


def _claim_run(connection: sqlite3.Connection, run_id: int, inbound: JournalEntry, now: float) -> JobRunRecord | None:
    with write_transaction(connection):
        claimed = connection.execute(
            "UPDATE job_runs SET status = 'running', started = ? WHERE id = ? AND status = 'requested'", (now, run_id)
        ).rowcount
        if not claimed:
            return None
        _journal(connection, run_id, inbound, now)
    return _run_rows(connection, "WHERE id = ?", (run_id,))[0]


def _journal(connection: sqlite3.Connection, run_id: int, inbound: JournalEntry, now: float) -> None:
    record = journal_entry(connection, inbound, now)
    if record is None:
        raise ValueError(f"the journal already holds {inbound.message_id}")  # rolls the run back too
    connection.execute("UPDATE job_runs SET inbound_id = ? WHERE id = ?", (record.id, run_id))


def run_outcome(
    turn: str | None, turn_error: str | None, sends: Sequence[Row]
) -> tuple[RunStatus, str | None, list[str]] | None:
    """How a run whose turn is over (`turn`: its journal row's status, None when the row is gone) ended, from its
    answer's outbox entries (`sends`: status, platform_message_id, error): its status, detail and the platform's
    message ids; None while an entry is still to be sent."""
    if any(send["status"] == "pending" for send in sends):
        return None
    ids = [send["platform_message_id"] for send in sends if send["platform_message_id"] is not None]
    dead = [send["error"] or "not delivered" for send in sends if send["status"] == "dead"]
    if turn is None:
        return "error", "its journal row is gone", ids
    if dead:
        return "undeliverable", dead[0], ids
    if turn == "failed":
        return "error", turn_error or "the turn failed", ids
    return "ok", None if sends else "nothing sent (NO_REPLY or HEARTBEAT_OK)", ids


def _settle_runs(connection: sqlite3.Connection, now: float) -> list[JobRunRecord]:
    ended: list[int] = []
    with write_transaction(connection):
        runs = connection.execute(
            "SELECT r.id, coalesce(i.answered_in, r.inbound_id) AS answered_in, i.status AS turn,"
            " i.error AS turn_error FROM job_runs r"
            " LEFT JOIN inbound i ON i.id = r.inbound_id WHERE r.status = 'running' AND r.inbound_id IS NOT NULL"
        ).fetchall()
        for run in runs:
            if run["turn"] in ("pending", "running"):
                continue
            sends = connection.execute(  # the answer's entries, wherever the batch that carried the run hung them
                "SELECT status, platform_message_id, error FROM outbox WHERE inbound_id = ? ORDER BY id",
                (run["answered_in"],),
            ).fetchall()
            outcome = run_outcome(run["turn"], run["turn_error"], sends)
            if outcome is None:
                continue
            status, detail, ids = outcome
            connection.execute(
                "UPDATE job_runs SET status = ?, detail = ?, message_ids = ?, ended = ? WHERE id = ?",
                (status, detail, dumps(ids), now, run["id"]),
            )
            ended.append(run["id"])
    if not ended:
        return []
    marks = ", ".join("?" * len(ended))
    return _run_rows(connection, f"WHERE id IN ({marks}) ORDER BY id", tuple(ended))


def _run_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[JobRunRecord]:
    rows = connection.execute(f"SELECT * FROM job_runs {where}", params).fetchall()
    return [run_record(row) for row in rows]


def _last_ticks(connection: sqlite3.Connection) -> dict[str, float]:
    rows = connection.execute(
        "SELECT job_id, MAX(tick) AS tick FROM job_runs WHERE NOT manual GROUP BY job_id"
    ).fetchall()
    return {row["job_id"]: row["tick"] for row in rows}
