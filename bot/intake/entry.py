"""Intake: every message and button click is journaled first (duplicates dropped), then access control, chat
commands and routing decide whether it reaches an agent, and which session's lane it joins."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import secrets
from typing import TYPE_CHECKING, Protocol

from agent.lanes import Lanes
from bot.approvals.gate import Approvals
from bot.config.owners_file import owner_key
from bot.delivery.outbox import Delivery
from bot.intake.access import check_access
from bot.intake.commands import HELP, Command, parse_command, use_skill
from bot.intake.session_commands import (
    active_in,
    health_lines,
    model_command,
    queue_command,
    refusal,
    status_lines,
    think_command,
    usage_command,
)
from bot.intake.whoami import asks_whoami_in_dm, stranger_whoami, whoami
from bot.observe.metrics import Metrics
from bot.runs.principal import principal_of
from bot.store import InboundRecord, IntakeStore
from bot.store.journal import JournalEntry
from bot.turns.turn import Job
from channels.base import AccountSettings, ActionEvent, InboundMessage
from routing import Peer
from tools.clock import envelope, zone

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bot.config.settings import Config
    from bot.runs.decisions import Decisions
    from channels.health import HealthSnapshot
    from routing import Router

log = logging.getLogger(__name__)

PAIR_MAX_MISSES = 5
PAIR_MISS_WINDOW_SECONDS = 600.0
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



class SubagentsCommand(Protocol):
    """`/subagents` (bot.scheduled's Subagents answer it): a conversation's children listed, or one stopped."""

    async def command(self, job: Job, args: str) -> str: ...


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
    ) -> None:
        self.decisions = decisions
        self.store = store
        self.delivery = delivery
        self.lanes = lanes
        self.approvals = approvals
        self.clock = clock
        self.accepting = False
        self.subagents: SubagentsCommand | None = None  # set by the gateway: `/subagents`
        self.metrics = metrics or Metrics()  # each message received is counted (a gateway's, shared)
        self.health = health  # /status's channel lines
        # Set by the gateway of a cluster (gateway.cluster): a journaled message is offered under its lane, and `take`
        # runs in whichever process holds that lane.
        self.offer: Callable[[int, str], Awaitable[None]] | None = None
        self._pair_misses: dict[str, list[float]] = {}

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
        asks_id = asks_whoami_in_dm(message, command)  # answered even to strangers: their id, and no pairing code
        verdict = await check_access(message, settings, self.store, self.decisions.owners, pair=not asks_id)
        if not verdict.allowed and asks_id:
            verdict = stranger_whoami(message, settings, verdict)
        if not verdict.allowed:  # strangers reach nothing: no typing, no agent, at most a pairing code
            replies = self.delivery.replies(record.id, message, verdict.reply or "")
            await self.delivery.close([record.id], "done", verdict.reason, replies=replies)
            return
        route = self.router.resolve(message.routing_input())
        job = self._job(record.id, record.received, message, route.agent, route.session_key)
        if command is not None and command.name == "skill":
            used = await self._skill(job, command.args)
            if isinstance(used, str):
                await self._reply(job, used)
                return
            job = used  # the request, asking for the skill, goes to the agent like any message
        elif command is not None:
            await self._command(job, command)
            return
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

    # --- chat commands --------------------------------------------------------------------------------------------

    async def _command(self, job: Job, command: Command) -> None:
        if command.name in ("new", "reset"):
            text = await self._new(job, command.name)
        elif command.name == "pair":
            text = await self._pair(job, command.args)
        elif command.name == "stop":
            text = await self._stop(job)
        elif command.name == "status":
            text = await self._status(job)
        elif command.name == "approve":
            who = owner_key(job.message.channel, job.message.sender_id)
            text = await self.approvals.on_command(command.args, who, job.message.sender_name)
        elif command.name == "subagents" and self.subagents is not None:
            text = await self.subagents.command(job, command.args)
        elif command.name in ("model", "think", "queue", "usage"):
            text = await self._session_command(job, command)
        elif command.name == "whoami":
            text = whoami(job.message, self.decisions.owners)
        else:
            text = HELP
        await self._reply(job, text)

    async def _new(self, job: Job, name: str) -> str:
        """`/new` (`/reset`): the conversation starts over, its queued messages dropped (agents[].commands.new)."""
        session = await self.store.get_session(job.session_key)
        active = active_in(self.lanes, job.session_key)
        refused = refusal(name, self.config.agent(job.agent).commands.new, job, session, active)
        if refused is not None:
            return refused
        queued = self.lanes.pending_items().get(job.session_key, [])
        dropped = await self.lanes.stop(job.session_key)
        await self._drop(queued, f"dropped by /{name}")
        if session is not None:
            await self.store.reset_session(job.session_key)
        return "Started a new conversation." + (f" ({_messages(dropped)} dropped.)" if dropped else "")

    async def _stop(self, job: Job) -> str:
        """`/stop`: the running answer stopped and the queued messages dropped; under `own` (agents[].commands.stop)
        someone who is not an owner stops only their own answer and their own messages."""
        access = self.config.agent(job.agent).commands.stop
        refused = refusal("stop", access, job, None)
        if refused is not None:
            return refused
        key = job.session_key
        only = None if job.owner or access == "everyone" else job.principal
        busy = self.lanes.busy(key) and (only is None or self.lanes.running_for(key) == only.key)
        pending = self.lanes.pending_items().get(key, [])
        queued = [item for item in pending if only is None or item.principal.key == only.key]
        dropped = await self.lanes.stop(key, only)
        await self._drop(queued, "dropped by /stop")
        return ("Stopped." if busy else "Nothing was running.") + (f" {_messages(dropped)} dropped." if dropped else "")

    async def _session_command(self, job: Job, command: Command) -> str:
        """/model, /think, /queue and /usage (bot.intake.session_commands): one session's own settings and costs."""
        if command.name == "model":
            return await model_command(self.store, self.config, job, command.args)
        if command.name == "think":
            return await think_command(self.store, self.config, job, command.args)
        if command.name == "queue":
            return await queue_command(self.store, self.config, self.lanes, job, command.args)
        return await usage_command(self.store, self.config, job, self.clock())

    async def _reply(self, job: Job, text: str) -> None:
        """Answer a command with `text`, closing its journal row."""
        replies = self.delivery.replies(job.inbound_id, job.message, text)
        await self.delivery.close([job.inbound_id], replies=replies, session_key=job.session_key)

    async def _skill(self, job: Job, args: str) -> Job | str:
        """`/skill NAME [request]`: the job with its text rewritten to ask for that skill (its SKILL.md named, to be
        read first); for a missing or unknown name, the reply listing the skills offered. The journal keeps the
        command as sent, so a restart rewrites it the same way."""
        report = await asyncio.to_thread(self.decisions.skills, job.agent)
        text, reply = use_skill(report.eligible, args)
        if text is None:
            return reply
        return dataclasses.replace(job, message=job.message.model_copy(update={"text": text}))

    async def _drop(self, jobs: list[Job], reason: str) -> None:
        """Close the journal rows of queued messages that will never run, so that no restart runs them."""
        for job in jobs:
            for inbound_id in job.inbound_ids:
                with contextlib.suppress(KeyError, ValueError):
                    await self.store.mark_inbound(inbound_id, "done", reason)

    async def _pair(self, job: Job, code: str) -> str:
        message = job.message
        if not self.decisions.owns(message.channel, message.sender_id):
            return "Only the bot's owners can approve pairing codes."
        if not code:
            return "Usage: /pair CODE"
        who = owner_key(message.channel, message.sender_id)
        now = self.clock()
        misses = [at for at in self._pair_misses.get(who, []) if now - at < PAIR_MISS_WINDOW_SECONDS]
        if len(misses) >= PAIR_MAX_MISSES:  # guessing codes is slow: a few wrong tries, then a pause
            return "Too many wrong codes; try again in a few minutes."
        approved = await self.store.approve_pairing(message.channel, code, message.sender_id)
        if approved is None:
            self._pair_misses[who] = [*misses, now]
            return "No pending request has that code (it may have expired)."
        stranger = InboundMessage(
            channel=approved.channel,
            account=approved.account,
            peer=Peer("direct", approved.sender_id),
            sender_id=approved.sender_id,
            message_id=f"pairing-{approved.code}",
        )
        await self.delivery.reply(stranger, "You're approved: I'm listening now.")
        return f"Approved {approved.sender_name or approved.sender_id}."

    async def _status(self, job: Job) -> str:
        key = job.session_key
        busy = ", answering now" if self.lanes.busy(key) else ""
        queue = f"{self.lanes.depth(key)} waiting{busy} (mode {self.lanes.mode(key)})"
        lines = status_lines(self.config, job, await self.store.get_session(key), queue)
        if job.owner:  # how the bot's channels are doing: the owners' business only
            lines += ["Channels:", *health_lines(self.health())]
        return "\n".join(lines)

    async def notice(self, key: str, job: Job, text: str) -> None:
        """A lane's notice about a queued message (dropped, folded, busy), to its chat."""
        await self.delivery.reply(job.message, text)


def _messages(count: int) -> str:
    return f"{count} queued message{'s' if count != 1 else ''}"
