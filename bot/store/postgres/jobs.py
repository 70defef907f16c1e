"""Scheduled jobs on PostgreSQL: the jobs made at run time, and one run record per tick, which keeps a tick once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.store.database import dumps
from bot.store.jobs import (
    JobRecord,
    JobRunRecord,
    RunStatus,
    check_final_status,
    job_record,
    request_run,
    run_outcome,
    run_record,
)
from bot.store.journal import JournalEntry
from bot.store.postgres.database import PgPart, PgTx
from bot.store.postgres.journal import journal_entry

if TYPE_CHECKING:
    from bot.store.jobs import JobStore

__all__ = ["PgJobs"]

_OPEN = "status IN ('requested', 'running')"


class PgJobs(PgPart):
    """Jobs in the `jobs` table, their runs in `job_runs`; a run's turn is journaled with it, in `inbound`."""

    async def save_job(
        self, job: dict[str, Any], created_by: str | None = None, creator_owner: bool | None = None
    ) -> JobRecord:
        now = self._db.clock()
        row = await self._db.fetchone(
            "INSERT INTO jobs (id, payload, created_by, creator_owner, created, updated)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, updated = excluded.updated RETURNING *",
            job["id"],
            dumps(job),
            created_by,
            creator_owner,
            now,
            now,
        )
        assert row is not None
        return job_record(row)

    async def get_job(self, job_id: str) -> JobRecord | None:
        row = await self._db.fetchone("SELECT * FROM jobs WHERE id = %s", job_id)
        return None if row is None else job_record(row)

    async def list_jobs(self) -> list[JobRecord]:
        return [job_record(row) for row in await self._db.fetch("SELECT * FROM jobs ORDER BY created, id")]

    async def remove_job(self, job_id: str) -> bool:
        return bool(await self._db.execute("DELETE FROM jobs WHERE id = %s", job_id))

    async def start_job_run(
        self,
        job_id: str,
        tick: float,
        status: RunStatus = "running",
        detail: str | None = None,
        inbound: JournalEntry | None = None,
    ) -> JobRunRecord | None:
        return await self._start_run(job_id, tick, status, detail, inbound, self._db.clock())

    async def request_job_run(self, job_id: str) -> JobRunRecord:
        return await request_run(
            lambda now: self._start_run(job_id, now, "requested", None, None, now), self._db.clock()
        )

    async def claim_job_run(self, run_id: int, inbound: JournalEntry) -> JobRunRecord | None:
        now = self._db.clock()
        async with self._db.transaction() as tx:
            # One statement: of two processes claiming the run at once, the second waits, then finds it running.
            claimed = await tx.fetchone(
                "UPDATE job_runs SET status = 'running', started = %s WHERE id = %s AND status = 'requested'"
                " RETURNING id",
                now,
                run_id,
            )
            if claimed is None:
                return None
            return await _journal(tx, run_id, inbound, now)

    async def finish_job_run(
        self, run_id: int, status: RunStatus, detail: str | None = None, message_ids: Sequence[str] = ()
    ) -> None:
        check_final_status(status)
        await self._db.execute(
            f"UPDATE job_runs SET status = %s, detail = %s, message_ids = %s, ended = %s WHERE id = %s AND {_OPEN}",
            status,
            detail,
            dumps(list(message_ids)),
            self._db.clock(),
            run_id,
        )

    async def settle_job_runs(self) -> list[JobRunRecord]:
        now = self._db.clock()
        settled: list[JobRunRecord] = []
        async with self._db.transaction() as tx:
            # FOR UPDATE OF r: a second process settling at once waits, then skips the runs this one ended.
            runs = await tx.fetch(
                "SELECT r.id, coalesce(i.answered_in, r.inbound_id) AS answered_in, i.status AS turn,"
                " i.error AS turn_error FROM job_runs r"
                " LEFT JOIN inbound i ON i.id = r.inbound_id WHERE r.status = 'running' AND r.inbound_id IS NOT NULL"
                " ORDER BY r.id FOR UPDATE OF r"
            )
            for run in runs:
                if run["turn"] in ("pending", "running"):
                    continue
                sends = await tx.fetch(  # the answer's entries, wherever the batch that carried the run hung them
                    "SELECT status, platform_message_id, error FROM outbox WHERE inbound_id = %s ORDER BY id",
                    run["answered_in"],
                )
                outcome = run_outcome(run["turn"], run["turn_error"], sends)
                if outcome is None:
                    continue
                status, detail, ids = outcome
                row = await tx.fetchone(
                    "UPDATE job_runs SET status = %s, detail = %s, message_ids = %s, ended = %s"
                    " WHERE id = %s AND status = 'running' RETURNING *",
                    status,
                    detail,
                    dumps(ids),
                    now,
                    run["id"],
                )
                if row is not None:
                    settled.append(run_record(row))
        return settled

    async def job_runs(self, job_id: str | None = None, limit: int = 20) -> list[JobRunRecord]:
        if job_id is None:
            rows = await self._db.fetch("SELECT * FROM job_runs ORDER BY id DESC LIMIT %s", limit)
        else:
            rows = await self._db.fetch(
                "SELECT * FROM job_runs WHERE job_id = %s ORDER BY id DESC LIMIT %s", job_id, limit
            )
        return [run_record(row) for row in rows]

    async def open_job_runs(self) -> list[JobRunRecord]:
        return [run_record(row) for row in await self._db.fetch(f"SELECT * FROM job_runs WHERE {_OPEN} ORDER BY id")]

    async def last_job_ticks(self) -> dict[str, float]:
        rows = await self._db.fetch("SELECT job_id, MAX(tick) AS tick FROM job_runs WHERE manual = 0 GROUP BY job_id")
        return {row["job_id"]: row["tick"] for row in rows}

    async def prune_job_runs(self, older_than_seconds: float) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._db.execute(
            f"DELETE FROM job_runs WHERE NOT {_OPEN} AND ended < %s"
            " AND id NOT IN (SELECT MAX(id) FROM job_runs GROUP BY job_id)",
            cutoff,
        )

    async def _start_run(
        self, job_id: str, tick: float, status: str, detail: str | None, inbound: JournalEntry | None, now: float
    ) -> JobRunRecord | None:
        ended = None if status in ("requested", "running") else now
        async with self._db.transaction() as tx:
            # UNIQUE (job_id, tick): of two processes recording one tick, the second waits, then records nothing.
            row = await tx.fetchone(
                "INSERT INTO job_runs (job_id, tick, started, ended, status, detail, manual)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (job_id, tick) DO NOTHING RETURNING *",
                job_id,
                tick,
                now,
                ended,
                status,
                detail,
                int(status == "requested"),
            )
            if row is None:
                return None
            if inbound is None:
                return run_record(row)
            return await _journal(tx, row["id"], inbound, now)


if TYPE_CHECKING:
    _checked: type[JobStore] = PgJobs


async def _journal(tx: PgTx, run_id: int, inbound: JournalEntry, now: float) -> JobRunRecord:
    """Journal the run's turn and point the run at it; ValueError (rolling the run back too) if already journaled."""
    record = await journal_entry(tx, inbound, now)
    if record is None:
        raise ValueError(f"the journal already holds {inbound.message_id}")
    row = await tx.fetchone("UPDATE job_runs SET inbound_id = %s WHERE id = %s RETURNING *", record.id, run_id)
    assert row is not None
    return run_record(row)
