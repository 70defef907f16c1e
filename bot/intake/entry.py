"""Intake: every message and button click is journaled first (duplicates dropped), then access control, chat
commands and routing decide whether it reaches an agent, and which session's lane it joins."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agent.lanes import Lanes
from bot.approvals.gate import Approvals
from bot.delivery.outbox import Delivery
from bot.intake.access import check_access
from bot.intake.commands import BY_NAME, parse_command
from bot.intake.handlers import Command, CommandParts, SubagentsCommand
from bot.intake.ownerless import OwnerlessHint, ownerless_hint
from bot.intake.welcome import PairingWatch
from bot.intake.whoami import asks_whoami_in_dm, stranger_whoami
from bot.observe.metrics import Metrics
from bot.runs.principal import principal_of
from bot.store import InboundRecord, IntakeStore
from bot.store.journal import JournalEntry
from bot.turns.turn import Job
from channels.base import AccountSettings, ActionEvent, InboundMessage
from tools.clock import envelope, zone

if TYPE_CHECKING:
    from bot.config.settings import Config
    from bot.runs.decisions import Decisions
    from channels.health import HealthSnapshot
    from routing import Router

log = logging.getLogger(__name__)

# A cluster's offer (bot.gateway.cluster): a journaled message, by its id, to whichever process holds its lane.
Offer = Callable[[int, str], Awaitable[None]]

_ADDRESSED = re.compile(r"^/[A-Za-z_]+@")  # `/cmd@somebot`


def journal_entry_of(message: InboundMessage) -> JournalEntry:
    """The journal row of `message`: unique on its channel, account, chat (`<kind>:<id>[:thread:<id>]`) and id."""
    thread = f":thread:{message.thread_id}" if message.thread_id else ""
    return JournalEntry(
        channel=message.channel,
        account=message.account,
        chat=f"{message.peer.kind}:{message.peer.id}{thread}",
        message_id=message.message_id,
        payload=message.model_dump(mode="json"),
    )


class Intake:
    """What happens to a message before a turn: the journal, access, commands, routing; `accepting` is off while
    the gateway starts and stops (a message is then only journaled, for the next start)."""

    def __init__(
        self,
        decisions: Decisions,
        store: IntakeStore,
        delivery: Delivery,
        lanes: Lanes[Job],
        approvals: Approvals,
        clock: Callable[[], float],
        *,
        metrics: Metrics | None = None,
        health: Callable[[], list[HealthSnapshot]] = list,
        subagents: SubagentsCommand | None = None,
        offer: Offer | None = None,
    ) -> None:
        """`health` gives the channels' lines of the owners' /status, `subagents` answers /subagents, and `offer`
        (a cluster's, bot.gateway.cluster) takes each journaled message to the process holding its lane."""
        self.decisions = decisions
        self.store = store
        self.delivery = delivery
        self.lanes = lanes
        self.approvals = approvals
        self.clock = clock
        self.accepting = False
        self.metrics = metrics or Metrics()  # each message received is counted (a gateway's, shared)
        self.offer = offer
        self.commands = CommandParts(decisions, store, delivery, lanes, approvals, clock, health, subagents)
        self.ownerless = OwnerlessHint()  # while no owner is set: each person's first DM says how to become one
        self.pairing = PairingWatch(store, delivery)  # runs in the gateway: welcomes whom an owner let in elsewhere

    @property
    def config(self) -> Config:
        return self.decisions.config  # read at each use: a live reload replaces it

    @property
    def router(self) -> Router:
        return self.decisions.router

    async def on_message(self, message: InboundMessage) -> None:
        """Called by adapters: journal first (the adapter acknowledges the platform after this returns). A message
        an adapter marks `scheduled` is dropped: only the scheduler starts such turns, which skip access checks."""
        if message.scheduled is not None:
            log.warning("%s/%s delivered a message marked scheduled: dropped", message.channel, message.account)
            return
        entry = journal_entry_of(message)
        record = await self.store.record_inbound(
            entry.channel, entry.account, entry.chat, entry.message_id, entry.payload
        )
        if record is None:
            log.info("dropped a second delivery of message %s in %s", message.message_id, entry.chat)
            return
        self.metrics.received(message.channel, message.account)
        if not self.accepting:  # the adapter acknowledges it anyway, so the journal keeps it for the next start
            log.info("shutting down: message %s is kept for the next start", message.message_id)
            return
        try:
            await self.accept(record, message)
        except Exception:  # one bad message must not take the adapter down
            log.exception("message %s could not be handled", message.message_id)
            await self.store.mark_inbound(record.id, "failed", "internal error")

    async def on_action(self, event: ActionEvent) -> str | None:
        """A button click: an approval decision, or a button the agent sent, which comes back to the chat's
        session as a message from the person who clicked, carrying the button's value (and passes the same
        access checks as any message). Returns a notice only the clicker sees."""
        if self.approvals.is_click(event):
            return await self.approvals.on_click(event)
        await self.on_message(
            InboundMessage(
                channel=event.channel,
                account=event.account,
                peer=event.peer,
                sender_id=event.sender_id,
                sender_name=event.sender_name,
                text=event.value,
                # each click is its own message; a redelivered click (same platform id) is dropped by the journal
                message_id=f"click:{event.message_id}:{event.click_id or secrets.token_hex(4)}",
                reply_to=event.message_id,
                reply_to_bot=True,  # a click on the bot's button is addressed to the bot
                thread_id=event.thread_id,
                button=True,
            )
        )
        return None

    async def accept(self, record: InboundRecord, message: InboundMessage) -> None:
        """Run a journaled message here, or, in a cluster, offer it to the process that holds its session."""
        if self.offer is not None:
            await self.offer(record.id, self.lane_of(message))
            return
        await self.take(record, message)

    def lane_of(self, message: InboundMessage) -> str:
        """The session key a message goes to: the one a scheduled turn names, else the one routing gives it."""
        if message.scheduled is not None:
            return message.scheduled.session_key
        return self.router.resolve(message.routing_input()).session_key

    async def take(self, record: InboundRecord, message: InboundMessage) -> None:
        """Run a journaled message in this process: access, commands, routing, then its session's lane."""
        if message.scheduled is not None:
            await self._take_scheduled(record.id, record.received, message)
            return
        adapter = self.delivery.adapter_for(message.channel, message.account)
        settings = adapter.settings if adapter is not None else AccountSettings()
        command = self._parse_command(message)
        # `/whoami` in a DM is answered even to strangers: their id, and no pairing code
        asks_id = asks_whoami_in_dm(message, command.name if command else None)
        verdict = await check_access(message, settings, self.store, self.decisions.owners, pair=not asks_id)
        if not verdict.allowed and asks_id:
            verdict = stranger_whoami(message, settings, verdict)
        if verdict.pairing is not None:
            self.pairing.watch(verdict.pairing)  # approved from the CLI, they are told they may talk now
        if not verdict.allowed:  # strangers reach nothing: no typing, no agent, at most a pairing code
            replies = self.delivery.replies(record.id, message, verdict.reply or "")
            await self.delivery.close([record.id], "done", verdict.reason, replies=replies)
            return
        if self.ownerless.due(message, self.decisions.owners, self.config.file, command.name if command else None):
            hint = ownerless_hint(message)  # before the answer, in the chat's order: how to become the owner
            await self.delivery.reply(message, hint, key=OwnerlessHint.key(message))
        route = self.router.resolve(message.routing_input())
        job = self._job(record.id, record.received, message, route.agent, route.session_key)
        if command is not None:
            rewritten = await self._command(job, command)
            if rewritten is None:
                return
            job = rewritten  # `/skill`: the request, asking for the skill, goes to the agent like any message
        await self._submit(job)

    async def accept_scheduled(self, inbound_id: int, received: float, message: InboundMessage) -> None:
        """A turn the bot started itself, journaled by the scheduler or the subagents: no access check, command or
        routing (it names its agent and session); it joins that session's lane like any message."""
        if self.offer is not None:
            await self.offer(inbound_id, self.lane_of(message))
            return
        await self._take_scheduled(inbound_id, received, message)

    async def _take_scheduled(self, inbound_id: int, received: float, message: InboundMessage) -> None:
        scheduled = message.scheduled
        assert scheduled is not None
        job = self._job(inbound_id, received, message, scheduled.agent, scheduled.session_key)
        await self._submit(job)

    def _job(self, inbound_id: int, received: float, message: InboundMessage, agent: str, session_key: str) -> Job:
        """A message on its way to `agent`, stamped with when the journal received it, in the agent's zone, acting
        for whom bot.runs.principal says."""
        stamp = envelope(received, zone(self.decisions.config.timezone_for(agent)))
        principal = principal_of(message, self.decisions.owners)
        return Job(inbound_id, message, agent, session_key, principal, envelope=stamp, received=received)

    async def _submit(self, job: Job) -> None:
        if self.lanes.closed:
            return  # shutting down: the journal keeps it pending for the next start
        await self.lanes.submit(job.session_key, job)

    def _parse_command(self, message: InboundMessage) -> Command | None:
        if message.button:
            return None  # a button's value is what the agent wrote: `/approve …` in it is text, not a command
        adapter = self.delivery.adapter_for(message.channel, message.account)
        username: str | None = getattr(adapter, "bot_username", None)
        command = parse_command(message.text, username)
        if command is not None and username is None and _ADDRESSED.match(message.text.strip()):
            return None  # addressed to a bot by name, and this adapter cannot tell whether that name is ours
        return command

    # --- chat commands: the table (bot.intake.commands) says who may use each, and its handler answers ---------

    async def _command(self, job: Job, command: Command) -> Job | None:
        """Answer a chat command; for `/skill`, the job to run instead (its text asking for the skill)."""
        entry = BY_NAME[command.name]
        if entry.who == "owners" and not job.owner:
            answer: str | Job = f"Only the bot's owners can use /{command.name}."
        else:
            answer = await entry.handler(self.commands, job, command)
        if isinstance(answer, Job):
            return answer
        await self._reply(job, answer)
        return None

    async def _reply(self, job: Job, text: str) -> None:
        """Answer a command with `text`, closing its journal row."""
        replies = self.delivery.replies(job.inbound_id, job.message, text)
        replies += self.delivery.turn_end(job.inbound_id, job.message, [job.message.message_id])
        await self.delivery.close([job.inbound_id], replies=replies, session_key=job.session_key)

    async def notice(self, key: str, job: Job, text: str) -> None:
        """A lane's notice about a queued message (dropped, folded, busy), to its chat."""
        await self.delivery.reply(job.message, text)
