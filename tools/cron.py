"""`cron`: the agent schedules work (add, list, update, remove, run now) through a job book the application hands
it; jobs run unattended with the agent's powers, so non-owners are denied it by default (`group:automation`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from tools.base import RunInfo, Tool, ToolContext, ToolResult, error_result, json_result

__all__ = ["CronArgs", "CronTool", "JobBook"]


class JobBook(Protocol):
    """The scheduled jobs as a tool may change them; each call raises ValueError (a bad job) or LookupError (no
    such job) with a message for the model. Jobs are the flat objects of `bot.config.schedules.CronJob`, as JSON."""

    async def add(self, fields: dict[str, Any], run: RunInfo) -> dict[str, Any]: ...
    async def list(self, run: RunInfo) -> list[dict[str, Any]]: ...
    async def update(self, job_id: str, fields: dict[str, Any], run: RunInfo) -> dict[str, Any]: ...
    async def remove(self, job_id: str, run: RunInfo) -> None: ...
    async def run_now(self, job_id: str, run: RunInfo) -> dict[str, Any]: ...


class CronArgs(BaseModel):
    """`action` and, for add and update, the job's fields (one of cron, every, at); `id` for update, remove, run."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["add", "list", "update", "remove", "run"]
    id: str | None = Field(default=None, description="The job's id (update, remove, run; optional for add)")
    name: str | None = None
    agent: str | None = Field(default=None, description="The agent that answers (default: this one)")
    cron: str | None = Field(default=None, description='Five-field cron expression, e.g. "0 9 * * 1-5"')
    every: str | None = Field(default=None, description="An interval of at least a minute: 30m, 2h, 1d")
    at: str | None = Field(default=None, description="One moment, ISO 8601 (2026-11-25T09:00); one-shot")
    tz: str | None = Field(default=None, description="IANA time zone of cron and of an at without offset")
    message: str | None = Field(default=None, description="What the agent is asked when the job runs")
    session: Literal["isolated", "main"] | None = Field(
        default=None, description="isolated (its own session, the default) or main (the target chat's session)"
    )
    deliver: str | None = Field(
        default=None, description="Where the answer goes: <channel>[/<account>]:<kind>:<id>; default this chat"
    )
    enabled: bool | None = None

    def fields(self) -> dict[str, Any]:
        return self.model_dump(exclude={"action"}, exclude_none=True)


class CronTool(Tool):
    name: ClassVar[str] = "cron"
    label: ClassVar[str] = "Scheduled jobs"
    description: ClassVar[str] = (
        "Schedule work that runs later as a turn of this agent, its answer sent to a chat (default: this one). "
        "action=add with message and exactly one of cron (five fields, with tz), every (30m, 2h) or at (ISO time, "
        "once); list; update (id and the fields to change); remove (id); run (id: run it now). Answering NO_REPLY "
        "in a job's run sends nothing."
    )
    parameters: ClassVar[type[BaseModel]] = CronArgs
    group: ClassVar[str | None] = "group:automation"

    def __init__(self, jobs: JobBook) -> None:
        self.jobs = jobs

    async def execute(self, call_id: str, args: CronArgs, ctx: ToolContext) -> ToolResult:
        run = ctx.run
        try:
            if args.action == "list":
                return json_result({"status": "ok", "jobs": await self.jobs.list(run)})
            if args.action == "add":
                return json_result({"status": "ok", "job": await self.jobs.add(args.fields(), run)})
            if args.id is None:
                return error_result(self.name, f"action {args.action} needs the job's id")
            if args.action == "update":
                fields = {key: value for key, value in args.fields().items() if key != "id"}
                return json_result({"status": "ok", "job": await self.jobs.update(args.id, fields, run)})
            if args.action == "remove":
                await self.jobs.remove(args.id, run)
                return json_result({"status": "ok", "removed": args.id})
            return json_result({"status": "ok", "run": await self.jobs.run_now(args.id, run)})
        except (ValueError, LookupError) as error:
            return error_result(self.name, str(error))
