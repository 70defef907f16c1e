"""The Control UI's pages: Sessions (and each one's transcript), Approvals (pending, decided, and the buttons), Jobs
(next fire, last outcome; run now, pause, resume, remove), Channels (each account's health), Usage (tokens and cost
per day, agent and model) and Config (the effective config, secrets masked, and the file's validation). An owner's
login sees everything; anyone else's only their own sessions and jobs, and no page of the owners'."""

from __future__ import annotations

import time
import urllib.parse
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agent.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from bot.approvals.gate import card
from bot.config.schedules import CronJob, next_fire
from bot.config.shown import masked, masked_config
from bot.gateway.web.pages import Site, see_other
from bot.gateway.web.render import bar_chart
from bot.intake.session_commands import dollars, price_of, total_usage
from bot.runs.principal import session_principal
from bot.store.approvals import ApprovalDecision, ApprovalRecord
from tools.base import RunInfo

if TYPE_CHECKING:
    from bot.gateway.web.auth import Login

__all__ = ["ControlPages"]

USAGE_DAYS = 30
HISTORY = 50  # decided approvals shown
SESSIONS = 200
DECISIONS: dict[str, ApprovalDecision] = {"allow-once": "allow-once", "allow-always": "allow-always", "deny": "deny"}


class ControlPages:
    """The Control UI routes of `server`."""

    def __init__(self, server: Site) -> None:
        self.server = server
        self.parts = server.parts

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/sessions", self.sessions)
        router.add_get("/sessions/{key:.+}", self.transcript)
        router.add_get("/approvals", self.approvals)
        router.add_post("/approvals/{id}", self.decide)
        router.add_get("/jobs", self.jobs)
        router.add_post("/jobs/{id}/{action}", self.job_action)
        router.add_get("/channels", self.channels)
        router.add_get("/usage", self.usage)
        router.add_get("/config", self.config)

    def _owner(self, request: web.Request) -> Login:
        """The login, when it is an owner's: 403 for anyone else (the page is the owners')."""
        login: Login = request["login"]
        if not self.server.owner(login):
            raise web.HTTPForbidden(text="This page is the owners'.")
        return login

    def _sees(self, login: Login, people: list[str]) -> bool:
        """Whether `login` may see a session whose turns acted for `people`: an owner any, anyone else their own."""
        if self.server.owner(login):
            return True
        alone = session_principal(people)
        return alone is not None and alone.key == login.identity

    # --- Sessions ----------------------------------------------------------------------------------------------------

    async def sessions(self, request: web.Request) -> web.StreamResponse:
        login: Login = request["login"]
        price = price_of(self.parts.decisions.config)
        rows = []
        for record in await self.parts.store.list_sessions(limit=SESSIONS):
            if not self._sees(login, record.people):
                continue
            priced = price(record.model) if record.model else None  # the session's tokens at its model's price
            tokens = (record.input_tokens, record.output_tokens, record.cache_read_tokens, record.cache_write_tokens)
            rows.append({"record": record, "cost": dollars(priced.cost(*tokens)) if priced else "—"})
        return self.server.page(request, "sessions.html", title="Sessions", rows=rows)

    async def transcript(self, request: web.Request) -> web.StreamResponse:
        login: Login = request["login"]
        key = request.match_info["key"]
        record = await self.parts.store.get_session(key)
        if record is None or not self._sees(login, record.people):
            raise web.HTTPNotFound(text="No such session.")
        messages = await self.parts.transcripts.read(record.session_id)
        return self.server.page(
            request, "transcript.html", title=f"Session {key}", record=record, entries=_entries(messages)
        )

    # --- Approvals ---------------------------------------------------------------------------------------------------

    async def approvals(self, request: web.Request) -> web.StreamResponse:
        login = self._owner(request)
        pending = await self.parts.store.pending_approvals()
        decided = [
            record
            for record in await self.parts.store.find_approvals("", pending_only=False)
            if record.status != "pending"
        ]
        decided.sort(key=lambda record: record.created, reverse=True)
        cards = [(record, *card(record)) for record in pending]
        return self.server.page(
            request, "approvals.html", title="Approvals", cards=cards, decided=decided[:HISTORY],
            may_decide=lambda record: login.identity in record.approvers, notice=request.query.get("notice"),
        )  # fmt: skip

    async def decide(self, request: web.Request) -> web.StreamResponse:
        login = self._owner(request)
        form = await request.post()
        decision = DECISIONS.get(str(form.get("decision", "")))
        record: ApprovalRecord | None = await self.parts.store.get_approval(request.match_info["id"])
        if decision is None or record is None:
            raise web.HTTPBadRequest(text="A decision names a pending request and allow-once, allow-always or deny.")
        refusal = await self.parts.approvals.decide(record, decision, login.identity, login.name)
        return see_other(f"/approvals?{urllib.parse.urlencode({'notice': refusal})}" if refusal else "/approvals")

    # --- Jobs --------------------------------------------------------------------------------------------------------

    def _job_run(self, login: Login) -> RunInfo | None:
        """Whom the job book sees the login as: nobody in particular for an owner (every job), else the person."""
        if self.server.owner(login):
            return None
        return RunInfo(agent="-", session_key="-", channel="web", sender_id=login.name, person=login.identity)

    async def jobs(self, request: web.Request) -> web.StreamResponse:
        login: Login = request["login"]
        now = time.time()
        rows = []
        runs = await self.parts.store.job_runs(limit=500)
        for shown in await self.parts.jobs.list(self._job_run(login)):
            job = CronJob.model_validate({key: value for key, value in shown.items() if key in CronJob.model_fields})
            last = next((run for run in runs if run.job_id == job.id), None)
            upcoming = next_fire(job, now, now) if job.enabled else None
            rows.append({"job": job, "origin": shown.get("origin"), "next": upcoming, "last": last})
        return self.server.page(
            request, "jobs.html", title="Jobs", rows=rows, notice=request.query.get("notice"), now=now
        )

    async def job_action(self, request: web.Request) -> web.StreamResponse:
        login: Login = request["login"]
        job_id, action = request.match_info["id"], request.match_info["action"]
        run = self._job_run(login)
        try:
            if action == "run":
                await self.parts.jobs.run_now(job_id, run)
                notice = f"{job_id}: asked to run now"
            elif action in ("pause", "resume"):
                await self.parts.jobs.update(job_id, {"enabled": action == "resume"}, run)
                notice = f"{job_id}: {'resumed' if action == 'resume' else 'paused'}"
            elif action == "remove":
                await self.parts.jobs.remove(job_id, run)
                notice = f"{job_id}: removed"
            else:
                raise web.HTTPNotFound(text="No such action.")
        except (LookupError, ValueError) as error:
            notice = str(error)
        return see_other(f"/jobs?{urllib.parse.urlencode({'notice': notice})}")

    # --- Channels, Usage, Config -------------------------------------------------------------------------------------

    async def channels(self, request: web.Request) -> web.StreamResponse:
        self._owner(request)
        return self.server.page(request, "channels.html", title="Channels", health=self.parts.health())

    async def usage(self, request: web.Request) -> web.StreamResponse:
        self._owner(request)
        since = time.time() - USAGE_DAYS * 86400
        rows = await self.parts.store.usage_since(since)
        price = price_of(self.parts.decisions.config)
        days: dict[str, list[Any]] = defaultdict(list)
        agents: dict[str, list[Any]] = defaultdict(list)
        models: dict[str, list[Any]] = defaultdict(list)
        for row in rows:
            days[time.strftime("%Y-%m-%d", time.localtime(row.at))].append(row)
            agents[row.agent].append(row)
            models[row.model or "unknown"].append(row)

        def table(groups: dict[str, list[Any]]) -> list[tuple[str, Any, str]]:
            totals = [(name, total_usage(group, price)) for name, group in sorted(groups.items())]
            return [(name, total, dollars(total.cost) if total.priced else "—") for name, total in totals]

        by_day = table(days)
        chart = bar_chart([(name, total.input_tokens + total.output_tokens) for name, total, _ in by_day])
        return self.server.page(
            request, "usage.html", title="Usage", by_day=by_day, by_agent=table(agents), by_model=table(models),
            chart=chart, since=USAGE_DAYS,
        )  # fmt: skip

    async def config(self, request: web.Request) -> web.StreamResponse:
        self._owner(request)
        import yaml

        config = self.parts.decisions.config
        text = yaml.safe_dump(masked_config(config), sort_keys=False, allow_unicode=True)  # as `bot config show`
        problems = masked(await self.parts.validate(), config)
        return self.server.page(
            request, "config.html", title="Config", text=text, problems=problems, file=str(config.file or "")
        )


def _entries(messages: list[Message]) -> list[dict[str, Any]]:
    """A transcript as the page shows it: each person's and the agent's text, each tool call one line (its
    arguments and result behind it)."""
    results = {message.call_id: message for message in messages if isinstance(message, ToolResultMessage)}
    entries: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            text = "\n".join(getattr(block, "text", "") for block in message.content).strip()
            if text and not text.startswith("<tool_result "):
                entries.append({"kind": "person", "text": text})
        elif isinstance(message, AssistantMessage):
            if message.text.strip():
                entries.append({"kind": "agent", "text": message.text})
            for call in message.tool_calls:
                result = results.get(call.id)
                output = "\n".join(getattr(block, "text", "") for block in result.content) if result else ""
                entries.append({"kind": "tool", "name": call.name, "arguments": call.arguments, "result": output,
                                "error": bool(result and result.is_error)})  # fmt: skip
    return entries
