"""Turns: a batch of one session's messages answered by its agent: the run, its streamed reply, the record of
what it said, and the journal rows it answers closed with the replies in one step."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agent.events import discard
from agent.lanes import RunControl
from agent.log_context import log_context
from agent.messages import TextBlock, UserMessage
from agent.prompt import quoted_name
from agent.runner import RunOutcome
from bot.config.schedules import quiet
from bot.delivery.outbox import Delivery, quoted
from bot.runs.assemble import SetupError
from bot.runs.conversation import Conversations
from bot.store import (
    InboundRecord,
    InboxStore,
    PreviewStore,
    SessionTouch,
    SubagentRecord,
    SubagentStatus,
    SubagentStore,
)
from bot.turns.media import InboxBook, Received, describe, images, receive, refusal
from bot.turns.streaming import StreamingReply
from channels.base import ChatTarget, InboundMessage, Principal
from tools.base import RunInfo
from tools.clock import zone

if TYPE_CHECKING:
    from bot.runs.decisions import Decisions
    from bot.store import PreviewRecord

log = logging.getLogger(__name__)

TYPING_EVERY_SECONDS = 4.0
TYPING_DELAY_SECONDS = 0.5


class _Interrupted(Exception):
    """The turn was cancelled by shutdown: its messages stay unfinished in the journal for the next start."""


@dataclass(frozen=True)
class Job:
    """One inbound message on its way to an agent: its journal row, the message, where it routes, and whom its turn
    acts for (bot.runs.principal decides)."""

    inbound_id: int
    message: InboundMessage
    agent: str
    session_key: str
    principal: Principal
    folded_ids: tuple[int, ...] = ()  # journal rows of earlier messages folded into this one
    # When the journal received it, in the agent's zone (`[Wed 2026-11-25 14:03 UTC]`, tools.clock): the same
    # bytes when the turn runs again after a restart.
    envelope: str = ""
    received: float = 0.0  # when the journal received it (seconds since the epoch)

    @property
    def owner(self) -> bool:
        """Whether the turn acts for the bot's owners."""
        return self.principal.owner

    @property
    def inbound_ids(self) -> tuple[int, ...]:
        """Every journal row this job answers for."""
        return (*self.folded_ids, self.inbound_id)


def _said(message: InboundMessage, files: Sequence[Received] = ()) -> str:
    """What the person said, then a line for each file they sent; a click on one of the agent's buttons is marked
    as that button's value."""
    text = f"[tapped the button with the value: {message.text}]" if message.button else message.text
    return "\n".join(line for line in (text, *(describe(file) for file in files)) if line)


def _line(job: Job, said: str) -> str:
    """One person's message in a batch: when it came, their name quoted as data (marked when they are an owner),
    then what they `said` with every further line indented, so neither a name nor a text can start a line that
    looks like another speaker's."""
    message = job.message
    who = quoted_name(message.sender_name, message.sender_id) + (" (owner)" if job.owner else "")
    indented = said.replace("\n", "\n  ")
    return f"{job.envelope} {who}: {indented}".lstrip()


def fold(jobs: list[Job]) -> Job:
    """Many queued messages of one principal (agent.lanes folds no others) folded into one: the newest message's
    place, every text kept in order."""
    newest = jobs[-1]
    lines = [f"[{len(jobs)} earlier messages, combined because they arrived while I was busy]"]
    lines += [_line(job, _said(job.message)) for job in jobs]
    attachments = [attachment for job in jobs for attachment in job.message.attachments]
    update = {"text": "\n".join(lines), "button": False, "attachments": attachments}
    message = newest.message.model_copy(update=update)
    folded = tuple(inbound_id for job in jobs for inbound_id in job.inbound_ids if inbound_id != newest.inbound_id)
    return dataclasses.replace(newest, message=message, folded_ids=folded)


@dataclass(frozen=True)
class _Answer:
    text: str
    state: str  # how the run ended: "ok", "error" or "timeout" (agent.runner.RunState)


_ENDS: dict[str, SubagentStatus] = {"ok": "done", "timeout": "timed_out"}  # how a child's run ended, as its status


def _destination(job: Job) -> str:
    """Where a job's answer goes: its chat, the subagent whose task it is, or the session that sent it."""
    scheduled = job.message.scheduled
    if scheduled is None or scheduled.kind in ("cron", "heartbeat", "announce"):
        return "chat"
    return f"{'agent' if scheduled.kind == 'agent' else 'subagent'}:{scheduled.job}"


def _starts_child(job: Job) -> bool:
    return job.message.scheduled is not None and job.message.scheduled.kind == "subagent"


def _message_ids(jobs: Sequence[Job]) -> list[str]:
    """The platform ids of the jobs' messages: what a turn that answers them answered."""
    return [job.message.message_id for job in jobs]


def _ids(jobs: list[Job]) -> list[int]:
    return [inbound_id for job in jobs for inbound_id in job.inbound_ids]


class TurnStore(PreviewStore, InboxStore, Protocol):
    """What turns keep beyond the journal: the messages answers stream into, and where messages' files went."""


class DerivedEnds(Protocol):
    """What ends a turn nobody typed, a subagent's or one another session's message started (bot.scheduled's
    Subagents): the child's record, its end announced, an answer taken back to the session that asked."""

    @property
    def store(self) -> SubagentStore: ...

    async def end(
        self, record: SubagentRecord, status: SubagentStatus, result: str, inbound_ids: list[int]
    ) -> None: ...

    async def answered(self, job: Job, answer: str, inbound_ids: list[int]) -> None: ...


class Turns:
    """Runs the lanes' batches (`handle`); `closing()` says whether the gateway is shutting down."""

    def __init__(
        self,
        decisions: Decisions,
        conversations: Conversations,
        delivery: Delivery,
        store: TurnStore,
        closing: Callable[[], bool],
        subagents: DerivedEnds | None = None,
    ) -> None:
        """`subagents` ends the turns of subagents and of messages between sessions (None where none run)."""
        self.decisions = decisions
        self.conversations = conversations
        self.delivery = delivery
        self.store = store
        self.closing = closing
        self.unfinished_previews: dict[int, PreviewRecord] = {}  # inbound id -> its half-written streamed answer
        self.subagents = subagents
        self.sent = delivery.sent  # what the sessions' runs sent: forgotten as each turn starts, answers remembered

    async def keep_previews(self, leftovers: list[InboundRecord]) -> None:
        """Streamed messages of turns that run again are kept, for the new answer to be written into them; the
        others belong to turns that finished (or failed) and are forgotten."""
        unfinished = {record.id for record in leftovers}
        previews = await self.store.previews()
        self.unfinished_previews = {p.inbound_id: p for p in previews if p.inbound_id in unfinished}
        await self.store.clear_previews([p.inbound_id for p in previews if p.inbound_id not in unfinished])

    async def adopt_previews(self, records: list[InboundRecord]) -> None:
        """The streamed messages of turns taken over from another process, for their new answers to be written into
        (the others' previews stay theirs)."""
        ids = {record.id for record in records}
        for preview in await self.store.previews():
            if preview.inbound_id in ids:
                self.unfinished_previews[preview.inbound_id] = preview

    async def handle(self, key: str, jobs: list[Job], control: RunControl[Job]) -> None:
        """Answer a batch of messages for one session. A turn's answer goes to one place (the chat, a session that
        messaged this one, the parent of a subagent): a batch whose messages answer to different places runs as
        one turn per place, in order."""
        for _, group in itertools.groupby(jobs, key=_destination):
            batch = list(group)
            scheduled = batch[-1].message.scheduled
            source = batch[-1].message
            # every line the turn writes names its session and chat (the runner adds the run id)
            with log_context(run_id=None, session_key=key, channel=source.channel, account=source.account):
                if scheduled is not None and scheduled.kind in ("subagent", "steer") and self.subagents is not None:
                    await self._child(key, batch, control, self.subagents)
                elif scheduled is not None and scheduled.kind == "agent" and self.subagents is not None:
                    await self._for_agent(key, batch, control, self.subagents)
                else:
                    await self._for_chat(key, batch, control)

    async def _for_chat(self, key: str, jobs: list[Job], control: RunControl[Job]) -> None:
        """Run the agent on messages from a chat (or a schedule's, or a subagent's announcement): deliver the
        answer there, record it, mark the journal."""
        newest = jobs[-1]
        inbound_ids = _ids(jobs)
        stream = self._streaming_reply(newest, inbound_ids)
        self.sent.forget(key)
        self.delivery.note_answer(newest.inbound_id, key)
        steered: list[Job] = []
        touches: list[SessionTouch] = []  # the run's addition to its session's row, written with the journal's close
        try:
            answer = await self._answer(key, jobs, control, steered, stream, touches=touches)
            text = answer.text
            scheduled = newest.message.scheduled
            if scheduled is not None and scheduled.kind == "heartbeat" and quiet(text):
                text = ""  # all is well: a heartbeat speaks only when something needs a person
                if stream is not None:
                    await stream.retract()
            if self._delivered_by_tool(key, newest.message.target(), text):
                text = ""  # the agent already sent this answer with the message tool: not twice
                if stream is not None:
                    await stream.retract()
            chunks = await stream.finish(text) if stream is not None else None
            quote = stream is None or not stream.shown  # a streamed answer's first message quoted already
            replies = self.delivery.replies(newest.inbound_id, newest.message, text, chunks, quote=quote)
            replies += self.delivery.turn_end(newest.inbound_id, newest.message, _message_ids(jobs + steered))
            touch = touches[0] if touches else None
            await self.delivery.close(inbound_ids + _ids(steered), replies=replies, session_key=key, touch=touch)
        except asyncio.CancelledError:
            raise  # shutdown: the journal keeps them unfinished, so the next start runs them again
        except _Interrupted:
            # unfinished, its streamed message stays recorded too: the next start writes the answer into it
            log.info("turn for %s interrupted by shutdown; the next start runs it again", key)
        except Exception as error:
            log.exception("turn for %s failed", key)
            if stream is not None:
                await stream.abandon()
            sorry = "Sorry, something went wrong on my side."
            replies = self.delivery.replies(newest.inbound_id, newest.message, sorry)
            replies += self.delivery.turn_end(newest.inbound_id, newest.message, _message_ids(jobs + steered))
            failed, touch = inbound_ids + _ids(steered), touches[0] if touches else None
            await self.delivery.close(
                failed, "failed", type(error).__name__, replies=replies, session_key=key, touch=touch
            )

    async def _child(self, key: str, jobs: list[Job], control: RunControl[Job], subagents: DerivedEnds) -> None:
        """A subagent's turn: its task (and what was steered to it) answered in its own session, nothing sent to a
        chat; its end, however it came, announced to the parent's session."""
        scheduled = jobs[-1].message.scheduled
        assert scheduled is not None
        inbound_ids = _ids(jobs)
        record = await subagents.store.subagent(scheduled.job)
        if record is None or record.ended is not None or not any(_starts_child(job) for job in jobs):
            await self.delivery.close(inbound_ids, session_key=key)  # a steer after its end: nobody to read it
            return
        if record.status == "killed":  # killed while the bot was down: not run again
            await subagents.end(record, "killed", "", inbound_ids)
            return
        steered: list[Job] = []
        try:
            answer = await self._answer(key, jobs, control, steered, timeout=scheduled.timeout_seconds)
            status = _ENDS.get(answer.state, "failed")
            text = answer.text
        except _Interrupted:
            log.info("subagent %s interrupted by shutdown; the next start runs it again", record.id)
            return
        except Exception as error:
            log.exception("subagent %s failed", record.id)
            status, text = "failed", f"it failed on the bot's side ({type(error).__name__})"
        await subagents.end(record, status, text, inbound_ids + _ids(steered))

    async def _for_agent(self, key: str, jobs: list[Job], control: RunControl[Job], subagents: DerivedEnds) -> None:
        """A turn another session's message started: the answer goes back to that session, not to a chat."""
        inbound_ids = _ids(jobs)
        steered: list[Job] = []
        try:
            text = (await self._answer(key, jobs, control, steered)).text
        except _Interrupted:
            log.info("turn for %s interrupted by shutdown; the next start runs it again", key)
            return
        except Exception:
            log.exception("turn for %s failed", key)
            text = ""
        await subagents.answered(jobs[-1], text, inbound_ids + _ids(steered))

    def _streaming_reply(self, newest: Job, inbound_ids: list[int]) -> StreamingReply | None:
        """The reply that streams this turn's answer, if its account streams (or an earlier run of the same turn
        left a half-written answer, which this one finishes in place); None to send the answer whole."""
        message = newest.message
        adapter = self.delivery.adapter_for(message.channel, message.account)
        earlier = [self.unfinished_previews.pop(i) for i in inbound_ids if i in self.unfinished_previews]
        if adapter is None or not adapter.capabilities.edit:
            return None
        if adapter.settings.streaming != "partial" and not earlier:
            return None
        target = message.target()

        async def shown(message_id: str) -> None:
            where = target.model_dump(mode="json")
            await self.store.set_preview(newest.inbound_id, message.channel, message.account, where, message_id)
            self.sent.remember(newest.session_key, target, message_id)

        return StreamingReply(
            self.delivery,
            target,
            adapter.capabilities,
            thread_id=message.thread_id,
            message_id=earlier[-1].message_id if earlier else None,
            reply_to=quoted(message),
            key=f"preview:{newest.inbound_id}",
            on_shown=shown,
        )

    def _delivered_by_tool(self, key: str, target: ChatTarget, text: str) -> bool:
        if not text.strip():
            return False
        sent = self.sent.sent_in(key)
        self.sent.forget(key)
        chat = (target.channel, target.account, target.peer)
        return any(
            (s.target.channel, s.target.account, s.target.peer) == chat and s.text.strip() == text.strip() for s in sent
        )

    async def _answer(
        self,
        key: str,
        jobs: list[Job],
        control: RunControl[Job],
        steered: list[Job],
        stream: StreamingReply | None = None,
        *,
        timeout: float | None = None,
        touches: list[SessionTouch] | None = None,
    ) -> _Answer:
        """Run the agent on the batch: the text to send ("" for none) and how the run ended. The messages steered
        into the run are added to `steered` (their journal rows close with the batch's); with `touches`, the run's
        addition to its session's row too (Conversations.answer)."""
        sender = jobs[-1].message
        scheduled = sender.scheduled
        adapter = self.delivery.adapter_for(sender.channel, sender.account)
        run = self.decisions.run_info(
            jobs[-1].agent,
            key,
            channel=sender.channel,
            principal=_principal(jobs),
            peer_kind=sender.peer.kind,
            sender_id=sender.sender_id,
            sender_name=sender.sender_name,
            capabilities=adapter.capabilities if adapter is not None else None,
            target=sender.target(),
            reply_to=None if sender.message_id.startswith("click:") or scheduled else sender.message_id,
            turn=str(jobs[-1].inbound_id),
            depth=scheduled.depth if scheduled else 0,
            hops=scheduled.hops if scheduled else 0,
        )

        def interrupted(outcome: RunOutcome) -> bool:
            cut = outcome.result is None or outcome.result.stop_reason == "cancelled"
            return self.closing() and control.cancel.is_set() and cut

        # A person waits on a chat's answer; nobody watches a subagent or another session's message being answered.
        shown = adapter is not None and (scheduled is None or scheduled.kind not in ("subagent", "steer", "agent"))
        typing = _Typing(self._typing, sender) if shown else None

        async def take_steered() -> list[UserMessage]:
            taken = control.take_steered()
            steered.extend(taken)
            return [await self._message([job], run) for job in taken]

        try:
            outcome = await self.conversations.answer(
                run,
                await self._message(jobs, run),
                peer=sender.peer,
                target=sender.target(),
                emit=stream.on_event if stream is not None else discard,
                cancel=control.cancel,
                steer=take_steered,
                record=lambda outcome: not interrupted(outcome),
                timeout_seconds=timeout,
                touches=touches,
            )
        except SetupError as error:
            log.error("agent %s cannot answer: %s", run.agent, error)
            sorry = "Sorry, I have no model to answer with right now (the bot's configuration needs a provider)."
            return _Answer(sorry, "error")
        finally:
            control.ran()  # what is left is recording and sending: the next waiting turn may start
            if typing is not None:
                typing.stop()
        if interrupted(outcome):
            raise _Interrupted  # nothing recorded: the next start runs the turn again from the same history
        if outcome.result is not None:
            return _Answer(outcome.result.text, outcome.status)
        return _Answer(outcome.user_message or "Sorry, I could not answer that.", outcome.status)

    async def _message(self, jobs: list[Job], run: RunInfo) -> UserMessage:
        """The user message for the batch, with the files that came with it fetched into the run's workspace."""
        files = [await self._receive(job, run) for job in jobs]
        shown = self.decisions.config.media.image_turns > 0
        if not any(files):  # text alone: nothing to read from disk, no trip off the event loop
            return _user_message(jobs, files, shown)
        return await asyncio.to_thread(_user_message, jobs, files, shown)

    async def _receive(self, job: Job, run: RunInfo) -> list[Received]:
        message = job.message
        adapter = self.delivery.adapter_for(message.channel, message.account)
        if not message.attachments or adapter is None or run.workspace is None:
            return []
        when = datetime.fromtimestamp(job.received, zone(run.timezone))
        limits, transcription = adapter.settings.media, self.decisions.config.media.transcription
        book = InboxBook(self.store, job.inbound_ids)  # a turn run again takes the files from where they went
        received = await receive(adapter, message.attachments, Path(run.workspace), limits, when, transcription, book)
        for index, notice in enumerate(map(refusal, received)):
            if notice is not None:  # the person hears of it (once) whatever the agent makes of it
                await self.delivery.reply(message, notice, key=f"refusal:{job.inbound_id}:{index}")
        return received

    async def _typing(self, message: InboundMessage) -> None:
        adapter = self.delivery.adapter_for(message.channel, message.account)
        if adapter is None:
            return
        while True:
            with contextlib.suppress(Exception):
                await adapter.typing(message.target())
            await asyncio.sleep(TYPING_EVERY_SECONDS)


class _Typing:
    """The typing indicator of one turn: `show(message)` starts once the answer has taken TYPING_DELAY_SECONDS (an
    answer that comes at once needs none: an API call saved per message, and no task made for it)."""

    def __init__(self, show: Callable[[InboundMessage], Coroutine[None, None, None]], message: InboundMessage) -> None:
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(TYPING_DELAY_SECONDS, self._start, show, message)

    def _start(self, show: Callable[[InboundMessage], Coroutine[None, None, None]], message: InboundMessage) -> None:
        self._task = asyncio.create_task(show(message), name="typing")

    def stop(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


def _principal(jobs: Sequence[Job]) -> Principal:
    """Whom a batch's turn acts for: the one principal its messages share (agent.lanes batches no others). Should
    they ever differ, the least of them: an owner's powers only when every message is an owner's."""
    newest = jobs[-1].principal
    if all(job.principal.key == newest.key for job in jobs):
        return newest
    log.error("a batch of %d messages acts for different principals; it runs with the least of them", len(jobs))
    others = [job.principal for job in jobs if not job.owner]
    return Principal(owner=False, person=others[0].person if others else None)


def _user_message(jobs: Sequence[Job], files: Sequence[Sequence[Received]], show_images: bool) -> UserMessage:
    """One user message for a batch, starting with when it was sent; in groups (or a batch) each line names its
    sender, and a folded job's lines carry their own. `files` are what came of each job's attachments: a line
    each, and (`show_images`) the images a model may be shown. Reads files: call it off the event loop."""
    said = [_said(job.message, received) for job, received in zip(jobs, files, strict=True)]
    job = jobs[0]
    if len(jobs) == 1 and job.message.peer.kind == "direct":
        text = said[0] if job.folded_ids or not job.envelope else f"{job.envelope} {said[0]}"
    else:
        text = "\n".join(_line(job, text) for job, text in zip(jobs, said, strict=True))
    pictures = [image for received in files for image in images(received)] if show_images else []
    return UserMessage(content=[TextBlock(text=text), *pictures])
