"""What each chat command does: one handler per command (the table in bot.intake.commands names them), each given
the parts it reads, the command's job and its arguments, and answering with a reply, or, for `/skill`, the job
to run instead."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from agent.lanes import Lanes
from agent.prompt import one_line
from bot.approvals.gate import Approvals
from bot.config.owners_file import owner_key
from bot.delivery.outbox import Delivery
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
from bot.intake.welcome import welcome
from bot.intake.whoami import whoami
from bot.store import IntakeStore
from bot.turns.turn import Job

if TYPE_CHECKING:
    from bot.config.settings import Config
    from bot.runs.decisions import Decisions
    from channels.health import HealthSnapshot
    from tools.skills import Skill

PAIR_MAX_MISSES = 5
PAIR_MISS_WINDOW_SECONDS = 600.0


@dataclass(frozen=True)
class Command:
    """A chat command as a message gave it: its name (an alias as typed) and the rest of the line."""

    name: str
    args: str


class SubagentsCommand(Protocol):
    """`/subagents` (bot.scheduled's Subagents answer it): a conversation's children listed, or one stopped."""

    async def command(self, job: Job, args: str) -> str: ...


@dataclass(frozen=True)
class CommandParts:
    """What the handlers read and act on: the live decisions, the state, the outbox, the lanes, the approvals, the
    clock, the channels' health (for the owners' /status), the children (/subagents; None where none run)."""

    decisions: Decisions
    store: IntakeStore
    delivery: Delivery
    lanes: Lanes[Job]
    approvals: Approvals
    clock: Callable[[], float]
    health: Callable[[], list[HealthSnapshot]]
    subagents: SubagentsCommand | None
    pair_misses: dict[str, list[float]] = field(default_factory=dict)  # who -> when their wrong /pair codes came

    @property
    def config(self) -> Config:
        return self.decisions.config  # read at each use: a live reload replaces it


CommandHandler = Callable[[CommandParts, Job, Command], Awaitable["str | Job"]]


async def new(parts: CommandParts, job: Job, command: Command) -> str:
    """`/new` (`/reset`): the conversation starts over, its queued messages dropped (agents[].commands.new)."""
    store, lanes = parts.store, parts.lanes
    session = await store.get_session(job.session_key)
    active = active_in(lanes, job.session_key)
    refused = refusal(command.name, parts.config.agent(job.agent).commands.new, job, session, active)
    if refused is not None:
        return refused
    queued = lanes.pending_items().get(job.session_key, [])
    dropped = await lanes.stop(job.session_key)
    await _drop(store, queued, f"dropped by /{command.name}")
    if session is not None:
        await store.reset_session(job.session_key)
    return "Started a new conversation." + (f" ({_messages(dropped)} dropped.)" if dropped else "")


async def stop(parts: CommandParts, job: Job, command: Command) -> str:
    """`/stop`: the running answer stopped and the queued messages dropped; under `own` (agents[].commands.stop)
    someone who is not an owner stops only their own answer and their own messages."""
    access = parts.config.agent(job.agent).commands.stop
    refused = refusal("stop", access, job, None)
    if refused is not None:
        return refused
    key, lanes = job.session_key, parts.lanes
    only = None if job.owner or access == "everyone" else job.principal
    busy = lanes.busy(key) and (only is None or lanes.running_for(key) == only.key)
    pending = lanes.pending_items().get(key, [])
    queued = [item for item in pending if only is None or item.principal.key == only.key]
    dropped = await lanes.stop(key, only)
    await _drop(parts.store, queued, "dropped by /stop")
    return ("Stopped." if busy else "Nothing was running.") + (f" {_messages(dropped)} dropped." if dropped else "")


async def status(parts: CommandParts, job: Job, command: Command) -> str:
    """`/status`: the agent, model, session, tokens and queue; for owners, the channels' health too."""
    key, lanes = job.session_key, parts.lanes
    busy = ", answering now" if lanes.busy(key) else ""
    queue = f"{lanes.depth(key)} waiting{busy} (mode {lanes.mode(key)})"
    lines = status_lines(parts.config, job, await parts.store.get_session(key), queue)
    if job.owner:  # how the bot's channels are doing: the owners' business only
        lines += ["Channels:", *health_lines(parts.health())]
    return "\n".join(lines)


async def model(parts: CommandParts, job: Job, command: Command) -> str:
    return await model_command(parts.store, parts.config, job, command.args)


async def think(parts: CommandParts, job: Job, command: Command) -> str:
    return await think_command(parts.store, parts.config, job, command.args)


async def queue(parts: CommandParts, job: Job, command: Command) -> str:
    return await queue_command(parts.store, parts.config, parts.lanes, job, command.args)


async def usage(parts: CommandParts, job: Job, command: Command) -> str:
    return await usage_command(parts.store, parts.config, job, parts.clock())


async def subagents(parts: CommandParts, job: Job, command: Command) -> str:
    if parts.subagents is None:
        return "Background tasks run in the chats `bot run` serves."
    return await parts.subagents.command(job, command.args)


async def skill(parts: CommandParts, job: Job, command: Command) -> Job | str:
    """`/skill NAME [request]`: the job with its text rewritten to ask for that skill (its SKILL.md named, to be
    read first); for a missing or unknown name, the reply listing the skills offered. The journal keeps the
    command as sent, so a restart rewrites it the same way."""
    report = await asyncio.to_thread(parts.decisions.skills, job.agent)
    text, reply = use_skill(report.eligible, command.args)
    if text is None:
        return reply
    return dataclasses.replace(job, message=job.message.model_copy(update={"text": text}))


def use_skill(skills: Sequence[Skill], args: str) -> tuple[str | None, str]:
    """`/skill NAME [request]` against the skills offered: (the message that asks the agent to use that skill,
    naming its SKILL.md to read first, ""), or (None, the reply listing the skills) for a missing or unknown name."""
    name, request = [*args.split(maxsplit=1), "", ""][:2]
    chosen = next((item for item in skills if item.name == name.lower()), None) if name else None
    if chosen is not None:
        return f"Use the skill {chosen.name} (read {chosen.file} first)" + (f": {request}" if request else "."), ""
    lead = f"No skill {one_line(name, 64)!r} here. " if name else ""
    if not skills:
        return None, lead + "This agent has no skills."
    listed = "\n".join(f"{item.name}: {one_line(item.description, 160)}" for item in skills)
    return None, f"{lead}Skills (/skill NAME request):\n{listed}"


async def whoami_command(parts: CommandParts, job: Job, command: Command) -> str:
    return whoami(job.message, parts.decisions.owners)


async def approve(parts: CommandParts, job: Job, command: Command) -> str:
    """`/approve ID DECISION`: the approvals decide whether the sender is one of that request's approvers."""
    who = owner_key(job.message.channel, job.message.sender_id)
    return await parts.approvals.on_command(command.args, who, job.message.sender_name)


async def pair(parts: CommandParts, job: Job, command: Command) -> str:
    """`/pair CODE` (owners: the table says so): the stranger who got that code may talk to the bot; a few wrong
    codes in a row, then a pause."""
    message, code = job.message, command.args
    if not code:
        return "Usage: /pair CODE"
    who = owner_key(message.channel, message.sender_id)
    now = parts.clock()
    misses = [at for at in parts.pair_misses.get(who, []) if now - at < PAIR_MISS_WINDOW_SECONDS]
    if len(misses) >= PAIR_MAX_MISSES:  # guessing codes is slow: a few wrong tries, then a pause
        return "Too many wrong codes; try again in a few minutes."
    approved = await parts.store.approve_pairing(message.channel, code, message.sender_id)
    if approved is None:
        parts.pair_misses[who] = [*misses, now]
        return "No pending request has that code (it may have expired)."
    await welcome(parts.delivery, approved)  # they are told they may talk now
    return f"Approved {approved.sender_name or approved.sender_id}."


async def _drop(store: IntakeStore, jobs: list[Job], reason: str) -> None:
    """Close the journal rows of queued messages that will never run, so that no restart runs them."""
    for job in jobs:
        for inbound_id in job.inbound_ids:
            with contextlib.suppress(KeyError, ValueError):
                await store.mark_inbound(inbound_id, "done", reason)


def _messages(count: int) -> str:
    return f"{count} queued message{'s' if count != 1 else ''}"
