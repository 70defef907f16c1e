"""The scheduler: on each pass (about once a second, on an injectable clock), due ticks of the config's and the state
DB's jobs, and runs people asked for, become turns through the journal and lanes; runs whose answer has left the
outbox are settled. What it has done lives in the state DB's run records, so a restart neither repeats nor bursts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.config.schedules import CronJob, previous_fire
from bot.scheduled.heartbeats import Heartbeat
from bot.store import JobRunRecord, JobStore
from bot.store.journal import JournalEntry

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # `bot cron add` and `bot cron run` beside a running bot are picked up within this


@dataclass(frozen=True)
class ScheduledJob:
    """A job as the scheduler sees it: where it comes from, when its intervals count from, since when its ticks are
    its own (before that, a tick was never this job's to run), and who made it (the config's and `bot cron add`'s:
    nobody in particular, an owner; the `cron` tool's: the person whose run made it, and whether that was an
    owner's run; None when that was not kept)."""

    job: CronJob
    origin: str  # "config", "db" or "heartbeat"
    anchor: float
    since: float
    heartbeat: Heartbeat | None = None
    made_by: str | None = None
    made_by_owner: bool | None = True


class Launcher(Protocol):
    """What the gateway does with a run: where its turn goes (or why it cannot go anywhere), then start it."""

    def prepare(self, scheduled: ScheduledJob, tick: float) -> JournalEntry | str: ...
    async def launch(self, run: JobRunRecord, inbound: JournalEntry) -> None: ...


class Scheduler:
    """Turns due ticks into runs. `tick()` is one pass (tests call it on an injected clock); `run()` loops."""

    def __init__(
        self,
        store: JobStore,
        config_jobs: Sequence[CronJob],
        launcher: Launcher,
        *,
        catch_up: float,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        poll: float = POLL_SECONDS,
        heartbeats: Sequence[Heartbeat] = (),
    ) -> None:
        self.store = store
        self.config_jobs = list(config_jobs)
        self.heartbeats = list(heartbeats)
        self.launcher = launcher
        self.catch_up = catch_up
        self.clock = clock
        self.sleep = sleep
        self.poll = poll
        self.started = clock()  # ticks before this were missed while the bot was down

    def configure(self, config_jobs: Sequence[CronJob], heartbeats: Sequence[Heartbeat], catch_up: float) -> None:
        """Schedule the config's jobs and heartbeats, and catch up, as a live reload's config says from now on."""
        self.config_jobs, self.heartbeats, self.catch_up = list(config_jobs), list(heartbeats), catch_up

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bad pass must not end scheduling; the next one tries again
                log.exception("the scheduler's pass failed")
            await self.sleep(self.poll)

    async def jobs(self) -> dict[str, ScheduledJob]:
        """Every job by id: the config's (not removable by the tool), then the state DB's."""
        found = {job.id: ScheduledJob(job, "config", 0.0, self.started) for job in self.config_jobs}
        for beat in self.heartbeats:
            found[beat.job.id] = ScheduledJob(beat.job, "heartbeat", 0.0, self.started, beat)
        for record in await self.store.list_jobs():
            if record.id in found:
                continue  # the config's job of that id wins (the tool refuses to make one)
            try:
                job = CronJob.model_validate(record.job)
            except ValueError:
                log.error("job %s in the state DB is not a valid job; skipped", record.id)
                continue
            found[job.id] = ScheduledJob(
                job, "db", record.created, record.created, made_by=record.created_by, made_by_owner=record.creator_owner
            )
        return found

    async def tick(self) -> None:
        """One pass: settle finished runs, start requested ones, then every due tick."""
        for run in await self.store.settle_job_runs():
            log.info("job %s run %d ended: %s%s", run.job_id, run.id, run.status, f" ({run.detail})" * bool(run.detail))
        jobs = await self.jobs()
        now = self.clock()
        open_runs = await self.store.open_job_runs()
        running = {run.job_id for run in open_runs if run.status == "running"}
        for run in open_runs:
            if run.status == "requested":
                await self._requested(run, jobs.get(run.job_id), running)
        last = await self.store.last_job_ticks()
        for scheduled in jobs.values():
            job = scheduled.job
            if not job.enabled:
                continue
            due = previous_fire(job, now, scheduled.anchor)
            if due is None or due <= last.get(job.id, scheduled.since):
                continue
            if scheduled.heartbeat is not None and not scheduled.heartbeat.active(due):
                continue  # outside the active hours nothing runs (and nothing is recorded)
            await self._due(scheduled, due, now, running)

    async def _requested(self, run: JobRunRecord, scheduled: ScheduledJob | None, running: set[str]) -> None:
        if scheduled is None:
            await self.store.finish_job_run(run.id, "error", "no such job")
            return
        if run.job_id in running:
            log.warning("job %s: a run is still going; the run asked for is skipped", run.job_id)
            await self.store.finish_job_run(run.id, "skipped", "a run of this job is still going")
            return
        prepared = self.launcher.prepare(scheduled, run.tick)
        if isinstance(prepared, str):
            log.warning("job %s cannot deliver: %s", run.job_id, prepared)
            await self.store.finish_job_run(run.id, "undeliverable", prepared)
            return
        claimed = await self.store.claim_job_run(run.id, prepared)
        if claimed is not None:
            running.add(run.job_id)
            await self.launcher.launch(claimed, prepared)

    async def _due(self, scheduled: ScheduledJob, due: float, now: float, running: set[str]) -> None:
        job = scheduled.job
        if due < self.started and now - due > self.catch_up:
            late = now - due
            log.warning(
                "job %s: the tick of %.0fs ago was missed while down (over cron.catch_up); skipped", job.id, late
            )
            await self.store.start_job_run(
                job.id, due, "skipped", f"missed while down, {late:.0f}s ago (over catch_up)"
            )
        elif job.id in running:
            log.warning("job %s: its previous run is still going; this tick is skipped", job.id)
            await self.store.start_job_run(job.id, due, "skipped", "the previous run is still going")
        else:
            prepared = self.launcher.prepare(scheduled, due)
            if isinstance(prepared, str):
                log.warning("job %s cannot deliver: %s", job.id, prepared)
                await self.store.start_job_run(job.id, due, "undeliverable", prepared)
            else:
                run = await self.store.start_job_run(job.id, due, inbound=prepared)
                if run is not None:
                    running.add(job.id)
                    await self.launcher.launch(run, prepared)
        if job.at is not None and scheduled.origin == "db":  # a one-shot job is done once its moment has passed
            await self.store.save_job(job.model_copy(update={"enabled": False}).model_dump(mode="json"))
