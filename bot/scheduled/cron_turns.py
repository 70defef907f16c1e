"""How a scheduled run becomes a turn: its target chat and session, the journal row it starts from, then the lanes
(through intake, like a message), so its answer leaves through the outbox to that chat."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.config.schedules import CronJob, parse_deliver
from bot.delivery.outbox import Delivery
from bot.intake.entry import journal_entry_of
from bot.runs.principal import job_maker
from bot.store import JobRunRecord
from bot.store.journal import JournalEntry
from channels.base import InboundMessage, Scheduled
from routing import RoutingInput

if TYPE_CHECKING:
    from bot.intake.entry import Intake
    from bot.runs.decisions import Decisions
    from bot.scheduled.scheduler import ScheduledJob


def isolated_session(agent: str, job_id: str) -> str:
    """The session of a job that runs on its own: `agent:<a>:cron:<id>`."""
    return f"agent:{agent}:cron:{job_id}"


def job_text(job: CronJob) -> str:
    """What the agent is asked: the job's message, marked as a scheduled job's (the answer goes to the chat)."""
    name = f"{job.name!r} " if job.name else ""
    return (
        f"[scheduled job {name}(id {job.id}); your answer is sent to the chat, NO_REPLY sends nothing]\n{job.message}"
    )


class CronTurns:
    """The scheduler's launcher in a running gateway."""

    def __init__(self, decisions: Decisions, delivery: Delivery, intake: Intake) -> None:
        self.decisions = decisions
        self.delivery = delivery
        self.intake = intake

    def prepare(self, scheduled: ScheduledJob, tick: float) -> JournalEntry | str:
        """The journal row of the run's turn, acting for the job's maker (runs.principal.job_maker), or why it cannot
        reach its chat (the run is then undeliverable)."""
        job, heartbeat = scheduled.job, scheduled.heartbeat is not None
        maker = job_maker(scheduled.made_by, scheduled.made_by_owner, self.decisions.owners)
        if job.deliver is None:
            return "the job names no chat to deliver to"
        channel, account, peer, thread = parse_deliver(job.deliver)
        if account is None:
            running = [name for kind, name in self.delivery.accounts() if kind == channel]
            account = "default" if "default" in running or not running else running[0]
        if self.delivery.adapter_for(channel, account) is None:
            return f"no running {channel} account {account!r}"
        sender_id: str = f"cron:{job.id}"
        sender_name: str | None = job.name or f"cron job {job.id}"
        if not maker.owner:  # it acts for its maker, as a message of theirs would, on their own channel only
            maker_channel, _, sender_id = (maker.person or ":").partition(":")
            if maker_channel != channel.strip().lower():
                return f"it was made by {maker.person}, who is not an owner, and may only answer on {maker_channel}"
            sender_name = None
        agent = job.agent or self.decisions.router.default_agent
        if job.session == "main":
            source = RoutingInput(channel=channel, account=account, peer=peer, thread=thread)
            session_key = self.decisions.router.session_key(agent, source)
        else:
            session_key = isolated_session(agent, job.id)
        message = InboundMessage(
            channel=channel,
            account=account,
            peer=peer,
            sender_id=sender_id,
            sender_name=sender_name,
            text=job.message if heartbeat else job_text(job),
            message_id=f"cron:{job.id}:{tick:.6f}",
            thread_id=thread,
            scheduled=Scheduled(
                kind="heartbeat" if heartbeat else "cron",
                job=job.id,
                agent=agent,
                session_key=session_key,
                owner=maker.owner,
            ),
        )
        return journal_entry_of(message)

    async def launch(self, run: JobRunRecord, inbound: JournalEntry) -> None:
        assert run.inbound_id is not None
        message = InboundMessage.model_validate(inbound.payload)
        await self.intake.accept_scheduled(run.inbound_id, run.started, message)
