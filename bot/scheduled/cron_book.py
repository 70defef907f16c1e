"""The scheduled jobs as the `cron` tool and `bot cron` change them: the config's (read-only) and the state DB's,
checked as one flat `CronJob` each; a run asked for is left in the state DB for the running bot's scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.config.live import LiveConfig, ReadsLiveConfig, live
from bot.config.schedules import CronJob, previous_fire
from bot.scheduled.heartbeats import heartbeats
from bot.store import JobRecord, JobStore
from tools.base import RunInfo
from tools.message import format_target

if TYPE_CHECKING:
    from bot.config.settings import Config


def described(job: CronJob, origin: str, record: JobRecord | None = None) -> dict[str, Any]:
    """A job as `list` and `--json` show it: its flat fields, then where it comes from."""
    shown = job.model_dump(mode="json")
    shown["origin"] = origin
    if record is not None:
        shown["created_by"] = record.created_by
    return shown


class CronBook(ReadsLiveConfig):
    """The job book (tools.cron.JobBook) on the state DB and the config; `clock` says when "now" is (an `at` in the
    past is refused). A run acting for the owners sees and changes every job; anyone else's run only the jobs it
    made (the config's and the heartbeats are not theirs), and a job keeps whom it was made for (cron_turns)."""

    def __init__(self, store: JobStore, config: Config | LiveConfig, clock: Any) -> None:
        self.store = store
        self.live = live(config)
        self.clock = clock

    def _config_job(self, job_id: str) -> CronJob | None:
        """A job of the config file: one of `cron.jobs`, or an agent's heartbeat (`heartbeat-<agent>`)."""
        jobs = [*self.config.cron.jobs, *(beat.job for beat in heartbeats(self.config))]
        return next((job for job in jobs if job.id == job_id), None)

    def check(self, job: CronJob) -> CronJob:
        """ValueError for a job that names an unknown agent or a moment already past."""
        known = [agent.id for agent in self.config.agents]
        if job.agent is not None and known and job.agent not in known:
            raise ValueError(f"no agent {job.agent!r}; agents are {', '.join(known)}")
        if job.at is not None and job.enabled and previous_fire(job, self.clock(), 0.0) is not None:
            raise ValueError(f"at {job.at!r} is already past")
        return job

    async def add_job(
        self, fields: dict[str, Any], created_by: str | None, creator_owner: bool | None = True
    ) -> dict[str, Any]:
        job = self.check(CronJob.model_validate(fields))
        if job.id.startswith("heartbeat-"):
            raise ValueError("ids starting with heartbeat- are the agents' heartbeats'")
        if self._config_job(job.id) is not None or await self.store.get_job(job.id) is not None:
            raise ValueError(f"a job with id {job.id!r} exists already")
        if job.deliver is None:
            raise ValueError("the job needs `deliver`: the chat its answer goes to, e.g. telegram:direct:12345")
        record = await self.store.save_job(job.model_dump(mode="json"), created_by, creator_owner)
        return described(job, "db", record)

    # --- tools.cron.JobBook ---------------------------------------------------------------------------------------

    async def add(self, fields: dict[str, Any], run: RunInfo) -> dict[str, Any]:
        fields = dict(fields)
        fields.setdefault("agent", run.agent)
        _own_chat(fields.setdefault("deliver", _here(run)), run)
        return await self.add_job(fields, run.person, run.sender_is_owner)

    async def list(self, run: RunInfo | None = None) -> list[dict[str, Any]]:
        """Every job (`bot cron list`, an owner's run); a non-owner's run sees only the jobs it made."""
        shown: list[dict[str, Any]] = []
        if _sees_all(run):
            shown += [described(job, "config") for job in self.config.cron.jobs]
            shown += [described(beat.job, "heartbeat") for beat in heartbeats(self.config)]
        for record in await self.store.list_jobs():
            if not _made(record, run):
                continue
            try:
                shown.append(described(CronJob.model_validate(record.job), "db", record))
            except ValueError:
                continue
        return shown

    async def update(self, job_id: str, fields: dict[str, Any], run: RunInfo | None = None) -> dict[str, Any]:
        """Change a job the state DB holds, held to the rules `add` is (a run may only point a job at its own chat
        unless it may act anywhere)."""
        record = await self._own(job_id, run, "change")
        if "deliver" in fields and run is not None:
            _own_chat(fields["deliver"], run)
        merged = {**record.job, **fields, "id": job_id}
        if {"cron", "every", "at"} & set(fields):  # a new schedule replaces the old one
            for key in {"cron", "every", "at"} - set(fields):
                merged.pop(key, None)
        job = self.check(CronJob.model_validate(merged))
        saved = await self.store.save_job(job.model_dump(mode="json"))
        return described(job, "db", saved)

    async def remove(self, job_id: str, run: RunInfo | None = None) -> None:
        await self._own(job_id, run, "remove")
        if not await self.store.remove_job(job_id):
            raise LookupError(f"no job {job_id!r}")

    async def run_now(self, job_id: str, run: RunInfo | None = None) -> dict[str, Any]:
        if self._config_job(job_id) is None or not _sees_all(run):
            await self._own(job_id, run, "run", config_too=True)
        requested = await self.store.request_job_run(job_id)
        return {"job": job_id, "run": requested.id, "status": requested.status}

    async def _own(self, job_id: str, run: RunInfo | None, action: str, *, config_too: bool = False) -> JobRecord:
        """The state DB's job `job_id`, if `run` may `action` it: LookupError for a job it may not see (the same as
        for none), ValueError for one the config file holds."""
        if not config_too and self._config_job(job_id) is not None and _sees_all(run):
            raise ValueError(f"job {job_id!r} is written in the config file; {action} it there")
        record = await self.store.get_job(job_id)
        if record is None or not _made(record, run):
            raise LookupError(f"no job {job_id!r}")
        return record


def _sees_all(run: RunInfo | None) -> bool:
    """Whether every job is the business of whoever asks: the CLI (no run), or a run acting for the owners."""
    return run is None or run.sender_is_owner


def _made(record: JobRecord, run: RunInfo | None) -> bool:
    """Whether the job is one `run` may see: all of them for the owners, else the ones it made."""
    return _sees_all(run) or (run is not None and run.person is not None and record.created_by == run.person)


def _own_chat(deliver: str | None, run: RunInfo) -> None:
    """ValueError unless a job of `run` may answer in `deliver`: its own chat, or anywhere when it may act there."""
    here = _here(run)
    if deliver is not None and deliver.strip() != here and not run.acts_anywhere:
        raise ValueError("this run may only schedule answers to its own chat")


def _here(run: RunInfo) -> str | None:
    """The run's own chat in `deliver` form (with its thread)."""
    if run.target is None:
        return None
    thread = f":thread:{run.target.thread_id}" if run.target.thread_id else ""
    return format_target(run.target) + thread
