"""The gateway: adapters in, journal, commands, routing, lanes, runner, delivery via the outbox, transcripts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.events import discard
from agent.lanes import OWNER, Lanes, Party, RunControl
from agent.messages import TextBlock, UserMessage
from agent.prompt import quoted_name
from agent.runner import Runner, RunOutcome
from bot.access import check_access, owner_key
from bot.assemble import SetupError, model_refs
from bot.commands import HELP, Command, parse_command
from bot.config import Config, own_files
from bot.conversation import Conversations
from bot.retention import keep_pruning
from bot.store import InboundRecord, OutboxEntry, OutboxRecord, PreviewRecord, Store
from bot.streaming import StreamingReply
from channels.base import (
    AccountSettings,
    ActionEvent,
    Capabilities,
    ChannelAdapter,
    ChatTarget,
    InboundMessage,
    OutboundMessage,
)
from channels.chunking import chunk_text
from routing import Peer
from tools.base import RunInfo
from tools.hooks import Hooks
from tools.provenance import sender_workspace
from tools.registry import ToolRegistry
from tools.sandbox import sandbox_for

log = logging.getLogger(__name__)

RETRY_BASE_SECONDS = 1.0
RETRY_MAX_SECONDS = 300.0
MAX_SEND_ATTEMPTS = 8
MAX_ANSWER_SESSIONS = 1000  # answers still on their way whose messages are noted for the message tool
TYPING_EVERY_SECONDS = 4.0
TYPING_DELAY_SECONDS = 0.5
PAIR_MAX_MISSES = 5
PAIR_MISS_WINDOW_SECONDS = 600.0
_ADDRESSED = re.compile(r"^/[A-Za-z_]+@")  # `/cmd@somebot`


class _Interrupted(Exception):
    """The turn was cancelled by shutdown: its messages stay unfinished in the journal for the next start."""


@dataclass(frozen=True)
class Job:
    """One inbound message on its way to an agent: its journal row, the message, and where it routes."""

    inbound_id: int
    message: InboundMessage
    agent: str
    session_key: str
    folded_ids: tuple[int, ...] = ()  # journal rows of earlier messages folded into this one

    @property
    def inbound_ids(self) -> tuple[int, ...]:
        """Every journal row this job answers for."""
        return (*self.folded_ids, self.inbound_id)


def _chat(message: InboundMessage) -> str:
    thread = f":thread:{message.thread_id}" if message.thread_id else ""
    return f"{message.peer.kind}:{message.peer.id}{thread}"


def _said(message: InboundMessage) -> str:
    """What the person said; a click on one of the agent's buttons is marked as that button's value."""
    return f"[tapped the button with the value: {message.text}]" if message.button else message.text


def _line(message: InboundMessage) -> str:
    """One person's message in a batch: their name quoted as data, then what they said with every further line
    indented, so neither a name nor a text can start a line that looks like another speaker's."""
    said = _said(message).replace("\n", "\n  ")
    return f"{quoted_name(message.sender_name, message.sender_id)}: {said}"


def _fold(jobs: list[Job]) -> Job:
    """Many queued messages folded into one: the newest message's place, every text kept in order."""
    newest = jobs[-1]
    lines = [f"[{len(jobs)} earlier messages, combined because they arrived while I was busy]"]
    lines += [_line(job.message) for job in jobs]
    message = newest.message.model_copy(update={"text": "\n".join(lines), "button": False})
    folded = tuple(inbound_id for job in jobs for inbound_id in job.inbound_ids if inbound_id != newest.inbound_id)
    return Job(newest.inbound_id, message, newest.agent, newest.session_key, folded)


class Gateway:
    """Serves every configured channel account until `stop()`; one instance per process."""

    def __init__(
        self,
        config: Config,
        store: Store,
        state_dir: Path,
        adapters: Sequence[ChannelAdapter],
        *,
        runner: Runner | None = None,
        registry: ToolRegistry | None = None,
        hooks: Hooks | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from bot.approvals import Approvals
        from tools.builtins import builtin_registry
        from tools.exec import ProcessTable
        from tools.message import MessageTool

        self.config = config
        self.store = store
        self.state_dir = state_dir
        self.adapters = {(adapter.channel, adapter.account): adapter for adapter in adapters}
        own = own_files(config, state_dir)
        self.approvals = Approvals(config, store, self, clock=clock, own_files=own)
        self.processes = ProcessTable(hide=own)
        registry = registry or builtin_registry(
            messenger=self, authorize=self.approvals.authorize, processes=self.processes
        )
        message_tool = registry.get("message")
        self._message_tool = message_tool if isinstance(message_tool, MessageTool) else None
        self.conversations = Conversations(config, store, state_dir, runner or Runner(), registry, hooks or Hooks())
        self.router = config.router()
        self.clock = clock
        self.lanes: Lanes[Job] = Lanes(
            self._handle,
            fold=_fold,
            notify=self._notice,
            max_concurrent=config.defaults.max_concurrent,
            per_sender=config.lanes.per_sender,
            party=self._party,
            settings=config.session.queue,
        )
        self._outbox_wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()  # one flush at a time: two would send the same entry twice
        self._outbox_task: asyncio.Task[None] | None = None
        self._prune_task: asyncio.Task[None] | None = None
        self._accepting = False
        self._pair_misses: dict[str, list[float]] = {}
        self._unfinished_previews: dict[int, PreviewRecord] = {}  # inbound id -> its half-written streamed answer
        # inbound id -> the session its answer is for: the answer's messages are that session's to edit or delete
        self._answer_sessions: OrderedDict[int, str] = OrderedDict()
        self._owners = frozenset(owner_key(*owner.split(":", 1)) for owner in config.owners)

    def _owns(self, message: InboundMessage) -> bool:
        """Whether the message's sender is one of the config's owners."""
        return owner_key(message.channel, message.sender_id) in self._owners

    def _party(self, job: Job) -> Party:
        """Whom a turn runs for, so run slots are shared fairly: an owner, or one other person."""
        message = job.message
        if self._owns(message):
            return OWNER
        return Party(sender=owner_key(message.channel, message.sender_id), owner=False)

    # --- start and stop -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every adapter, then redo what a previous process left unfinished."""
        # Taken before any adapter runs: what arrives from now on is this process's own work, not a leftover
        # (re-running it too would answer it twice).
        leftovers = await self.store.unfinished_inbound()
        orphans = await self.store.pending_approvals()
        await self._keep_previews(leftovers)
        self._accepting = True
        self._outbox_task = asyncio.create_task(self._outbox_worker(), name="outbox")
        self._prune_task = asyncio.create_task(keep_pruning(self.store, self.config.state.retention_days), name="prune")
        for adapter in self.adapters.values():
            try:
                await adapter.start(self.on_message, self.on_action)
                log.info("channel %s account %s started", adapter.channel, adapter.account)
            except Exception:
                log.exception(
                    "channel %s account %s failed to start; the others keep running", adapter.channel, adapter.account
                )
        expired = await self.approvals.expire_orphans(orphans)
        if expired:
            log.info("expired %d approval request(s) left pending by the last run", expired)
        await self._recover(leftovers)

    async def _keep_previews(self, leftovers: list[InboundRecord]) -> None:
        """Streamed messages of turns that run again are kept, for the new answer to be written into them; the
        others belong to turns that finished (or failed) and are forgotten."""
        unfinished = {record.id for record in leftovers}
        previews = await self.store.previews()
        self._unfinished_previews = {p.inbound_id: p for p in previews if p.inbound_id in unfinished}
        await self.store.clear_previews([p.inbound_id for p in previews if p.inbound_id not in unfinished])

    async def _recover(self, leftovers: list[InboundRecord]) -> None:
        for record in leftovers:
            if await self.store.inbound_has_replies(record.id):
                self._unfinished_previews.pop(record.id, None)
                await self._close([record.id])  # answered; the outbox finishes the delivery
                continue
            log.info("re-running message %s from %s left unfinished by the last run", record.message_id, record.channel)
            await self._accept(record, InboundMessage.model_validate(record.payload))
        self._outbox_wake.set()

    async def idle(self) -> bool:
        """Nothing running, nothing queued, nothing left to send."""
        if self.lanes.lane_count() or await self.store.unfinished_inbound():
            return False
        return not await self.store.unsent_outbox()

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop accepting, let runs finish within the grace period (then cancel them), flush, stop adapters.

        Adapters stop last: the runs that finish during the grace period still need them to deliver.
        """
        self._accepting = False
        if self._prune_task is not None:
            self._prune_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prune_task
        await self.lanes.close(grace_seconds)
        if self._outbox_task is not None:
            async with self._flush_lock:  # not in the middle of a send
                self._outbox_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._outbox_task
        await self._flush_outbox()
        await self.processes.close()  # background commands do not outlive the bot
        for adapter in self.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        await self.conversations.runner.aclose()

    # --- intake ---------------------------------------------------------------------------------------------------

    async def on_message(self, message: InboundMessage) -> None:
        """Called by adapters: journal first (the adapter acknowledges the platform after this returns)."""
        record = await self.store.record_inbound(
            message.channel, message.account, _chat(message), message.message_id, message.model_dump(mode="json")
        )
        if record is None:
            log.info("dropped a second delivery of message %s in %s", message.message_id, _chat(message))
            return
        if not self._accepting:  # the adapter acknowledges it anyway, so the journal keeps it for the next start
            log.info("shutting down: message %s is kept for the next start", message.message_id)
            return
        try:
            await self._accept(record, message)
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

    async def _accept(self, record: InboundRecord, message: InboundMessage) -> None:
        adapter = self.adapters.get((message.channel, message.account))
        settings = adapter.settings if adapter is not None else AccountSettings()
        verdict = await check_access(message, settings, self.store, self._owners)
        if not verdict.allowed:  # strangers reach nothing: no typing, no agent, at most a pairing code
            replies = self._replies(record.id, message, verdict.reply or "")
            await self._close([record.id], "done", verdict.reason, replies=replies)
            return
        route = self.router.resolve(message.routing_input())
        job = Job(record.id, message, route.agent, route.session_key)
        command = self._parse_command(message)
        if command is not None:
            await self._command(job, command)
            return
        if self.lanes.closed:
            return  # shutting down: the journal keeps it pending for the next start
        await self.lanes.submit(route.session_key, job)

    def _parse_command(self, message: InboundMessage) -> Command | None:
        if message.button:
            return None  # a button's value is what the agent wrote: `/approve …` in it is text, not a command
        adapter = self.adapters.get((message.channel, message.account))
        username: str | None = getattr(adapter, "bot_username", None)
        command = parse_command(message.text, username)
        if command is not None and username is None and _ADDRESSED.match(message.text.strip()):
            return None  # addressed to a bot by name, and this adapter cannot tell whether that name is ours
        return command

    # --- chat commands --------------------------------------------------------------------------------------------

    async def _command(self, job: Job, command: Command) -> None:
        key = job.session_key
        queued = self.lanes.pending_items().get(key, [])
        if command.name in ("new", "reset"):
            dropped = await self.lanes.stop(key)
            await self._drop(queued, f"dropped by /{command.name}")
            if await self.store.get_session(key) is not None:
                await self.store.reset_session(key)
            text = "Started a new conversation."
            if dropped:
                text += f" ({dropped} queued message{'s' if dropped != 1 else ''} dropped.)"
        elif command.name == "pair":
            text = await self._pair(job, command.args)
        elif command.name == "stop":
            busy = self.lanes.busy(key)
            dropped = await self.lanes.stop(key)
            await self._drop(queued, "dropped by /stop")
            text = "Stopped." if busy else "Nothing was running."
            if dropped:
                text += f" {dropped} queued message{'s' if dropped != 1 else ''} dropped."
        elif command.name == "status":
            text = await self._status(job)
        elif command.name == "approve":
            who = owner_key(job.message.channel, job.message.sender_id)
            text = await self.approvals.on_command(command.args, who, job.message.sender_name)
        else:
            text = HELP
        replies = self._replies(job.inbound_id, job.message, text)
        await self._close([job.inbound_id], replies=replies, session_key=key)

    async def _drop(self, jobs: list[Job], reason: str) -> None:
        """Close the journal rows of queued messages that will never run, so that no restart runs them."""
        for job in jobs:
            for inbound_id in job.inbound_ids:
                with contextlib.suppress(KeyError, ValueError):
                    await self.store.mark_inbound(inbound_id, "done", reason)

    async def _pair(self, job: Job, code: str) -> str:
        message = job.message
        if not self._owns(message):
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
        await self._reply(stranger, "You're approved: I'm listening now.")
        return f"Approved {approved.sender_name or approved.sender_id}."

    async def _status(self, job: Job) -> str:
        session = await self.store.get_session(job.session_key)
        refs = model_refs(self.config, job.agent) if self.config.model_for(job.agent) else []
        lines = [
            f"Agent: {job.agent}",
            f"Model: {session.model if session and session.model else (refs[0] if refs else 'none configured')}",
            f"Session: {job.session_key}",
            f"Tokens used: {session.input_tokens if session else 0} in, {session.output_tokens if session else 0} out",
            f"Queue: {self.lanes.depth(job.session_key)} waiting"
            + (", answering now" if self.lanes.busy(job.session_key) else ""),
        ]
        return "\n".join(lines)

    async def _notice(self, key: str, job: Job, text: str) -> None:
        await self._reply(job.message, text)

    # --- one turn ---------------------------------------------------------------------------------------------------

    async def _handle(self, key: str, jobs: list[Job], control: RunControl[Job]) -> None:
        """Answer a batch of messages for one session: run the agent, deliver, record, mark the journal."""
        newest = jobs[-1]
        inbound_ids = [inbound_id for job in jobs for inbound_id in job.inbound_ids]
        stream = self._streaming_reply(newest, inbound_ids)
        if self._message_tool is not None:
            self._message_tool.forget(key)
        self._answer_sessions[newest.inbound_id] = key
        while len(self._answer_sessions) > MAX_ANSWER_SESSIONS:
            self._answer_sessions.popitem(last=False)
        try:
            text = await self._answer(key, jobs, control, stream)
            if self._delivered_by_tool(key, newest.message.target(), text):
                text = ""  # the agent already sent this answer with the message tool: not twice
                if stream is not None:
                    await stream.retract()
            chunks = await stream.finish(text) if stream is not None else None
            replies = self._replies(newest.inbound_id, newest.message, text, chunks)
            await self._close(inbound_ids, replies=replies, session_key=key)
        except asyncio.CancelledError:
            raise  # shutdown: the journal keeps them unfinished, so the next start runs them again
        except _Interrupted:
            # unfinished, its streamed message stays recorded too: the next start writes the answer into it
            log.info("turn for %s interrupted by shutdown; the next start runs it again", key)
        except Exception as error:
            log.exception("turn for %s failed", key)
            if stream is not None:
                await stream.abandon()
            replies = self._replies(newest.inbound_id, newest.message, "Sorry, something went wrong on my side.")
            await self._close(inbound_ids, "failed", type(error).__name__, replies=replies, session_key=key)

    def _streaming_reply(self, newest: Job, inbound_ids: list[int]) -> StreamingReply | None:
        """The reply that streams this turn's answer, if its account streams (or an earlier run of the same turn
        left a half-written answer, which this one finishes in place); None to send the answer whole."""
        message = newest.message
        adapter = self.adapters.get((message.channel, message.account))
        earlier = [self._unfinished_previews.pop(i) for i in inbound_ids if i in self._unfinished_previews]
        if adapter is None or not adapter.capabilities.edit:
            return None
        if adapter.settings.streaming != "partial" and not earlier:
            return None
        target = message.target()

        async def shown(message_id: str) -> None:
            target_json = target.model_dump(mode="json")
            await self.store.set_preview(newest.inbound_id, message.channel, message.account, target_json, message_id)
            if self._message_tool is not None:
                self._message_tool.remember(newest.session_key, target, message_id)

        return StreamingReply(
            adapter,
            target,
            thread_id=message.thread_id,
            message_id=earlier[-1].message_id if earlier else None,
            on_shown=shown,
        )

    def _delivered_by_tool(self, key: str, target: ChatTarget, text: str) -> bool:
        if self._message_tool is None or not text.strip():
            return False
        sent = self._message_tool.sent_in(key)
        self._message_tool.forget(key)
        chat = (target.channel, target.account, target.peer)
        return any(
            (s.target.channel, s.target.account, s.target.peer) == chat and s.text.strip() == text.strip() for s in sent
        )

    async def _answer(
        self, key: str, jobs: list[Job], control: RunControl[Job], stream: StreamingReply | None = None
    ) -> str:
        """Run the agent on the batch; returns the text to send ("" for none)."""
        sender = jobs[-1].message
        adapter = self.adapters.get((sender.channel, sender.account))
        is_owner = self._owns(sender)
        sandbox = self.config.agent(jobs[-1].agent).sandbox
        workspace = self.config.workspace(jobs[-1].agent)
        scoped = not is_owner and self.config.agent(jobs[-1].agent).memory.scope == "sender"
        home = sender_workspace(workspace, sender.channel, sender.sender_id) if scoped else workspace
        run = RunInfo(
            agent=jobs[-1].agent,
            session_key=key,
            channel=sender.channel,
            sender_id=sender.sender_id,
            sender_name=sender.sender_name,
            sender_is_owner=is_owner,
            workspace=str(home),  # a non-owner's own folder under memory.scope: sender (tools.provenance)
            agent_workspace=str(workspace),
            target=sender.target(),
            reply_to=sender.message_id if not sender.message_id.startswith("click:") else None,
            sandbox=sandbox_for(sandbox, channel=sender.channel, is_owner=is_owner, peer_kind=sender.peer.kind),
            cross_chat=self.config.agent(jobs[-1].agent).message.cross_chat,
            **({"capabilities": adapter.capabilities} if adapter is not None else {}),
        )

        def interrupted(outcome: RunOutcome) -> bool:
            cut = outcome.result is None or outcome.result.stop_reason == "cancelled"
            return self.lanes.closed and control.cancel.is_set() and cut

        typing = asyncio.create_task(self._typing(sender)) if adapter is not None else None
        try:
            outcome = await self.conversations.answer(
                run,
                _user_message(*jobs),
                peer=sender.peer,
                target=sender.target(),
                emit=stream.on_event if stream is not None else discard,
                cancel=control.cancel,
                steer=lambda: [_user_message(steered) for steered in control.take_steered()],
                record=lambda outcome: not interrupted(outcome),
            )
        except SetupError as error:
            log.error("agent %s cannot answer: %s", run.agent, error)
            return "Sorry, I have no model to answer with right now (the bot's configuration needs a provider)."
        finally:
            if typing is not None:
                typing.cancel()
        if interrupted(outcome):
            raise _Interrupted  # nothing recorded: the next start runs the turn again from the same history
        if outcome.result is not None:
            return outcome.result.text
        return outcome.user_message or "Sorry, I could not answer that."

    async def _typing(self, message: InboundMessage) -> None:
        adapter = self.adapters.get((message.channel, message.account))
        if adapter is None:
            return
        # An answer that comes at once needs no indicator: one API call saved per message.
        await asyncio.sleep(TYPING_DELAY_SECONDS)
        while True:
            with contextlib.suppress(Exception):
                await adapter.typing(message.target())
            await asyncio.sleep(TYPING_EVERY_SECONDS)

    # --- what tools and approvals reach the chats with (the Messenger protocol) -----------------------------------

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        adapter = self.adapters.get((channel, account))
        return adapter.capabilities if adapter is not None else None

    def accounts(self) -> list[tuple[str, str]]:
        return list(self.adapters)

    def _adapter(self, target: ChatTarget) -> ChannelAdapter:
        adapter = self.adapters.get((target.channel, target.account))
        if adapter is None:
            raise LookupError(f"no running {target.channel} account {target.account!r}")
        return adapter

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        return await self._adapter(target).send(target, message)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        await self._adapter(target).edit(target, message_id, message)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        await self._adapter(target).delete(target, message_id)

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        await self._adapter(target).react(target, message_id, emoji)

    async def is_approval_card(self, target: ChatTarget, message_id: str) -> bool:
        peer = target.peer
        return await self.store.is_approval_message(
            target.channel, target.account, peer.kind, peer.id or "", message_id
        )

    # --- delivery -------------------------------------------------------------------------------------------------

    def _replies(
        self, inbound_id: int | None, message: InboundMessage, text: str, chunks: list[str] | None = None
    ) -> list[OutboxEntry]:
        """The outbox entries that deliver `text` to the message's chat, in chunks the channel takes (`chunks`:
        already split, e.g. what a streamed message did not hold); none for an empty text."""
        adapter = self.adapters.get((message.channel, message.account))
        limit = adapter.capabilities.max_text_length if adapter is not None else 4000
        target = message.target().model_dump(mode="json")
        return [
            OutboxEntry(
                inbound_id=inbound_id,
                channel=message.channel,
                account=message.account,
                target=target,
                payload=OutboundMessage(text=chunk, thread_id=message.thread_id).model_dump(mode="json"),
            )
            for chunk in (chunk_text(text, limit) if chunks is None else chunks)
        ]

    async def _close(
        self,
        inbound_ids: Sequence[int],
        status: Literal["done", "failed"] = "done",
        error: str | None = None,
        *,
        replies: Sequence[OutboxEntry] = (),
        session_key: str | None = None,
    ) -> None:
        """Record the replies and finish the messages' journal rows in one step (a crash leaves both or
        neither), then let the outbox send the replies."""
        await self.store.finish_inbound(inbound_ids, status, error, session_key=session_key, replies=replies)
        if replies:
            self._outbox_wake.set()

    async def _reply(self, message: InboundMessage, text: str) -> None:
        """A reply that answers no journaled message (a notice, a pairing confirmation)."""
        await self._close([], replies=self._replies(None, message, text))

    async def _outbox_worker(self) -> None:
        while True:
            await self._outbox_wake.wait()
            self._outbox_wake.clear()
            await self._flush_outbox()
            due = await self.store.unsent_outbox()
            if due:  # what arrived meanwhile goes at once; what failed waits for its retry time
                wait = min(record.retry_at for record in due) - self.clock()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._outbox_wake.wait(), wait)
                self._outbox_wake.set()

    async def _flush_outbox(self) -> None:
        """Send every due entry: chats in parallel, each chat in order; a failure waits with backoff, and the
        chat's later entries wait behind it."""
        async with self._flush_lock:
            now = self.clock()
            chats: dict[str, list[OutboxRecord]] = {}
            for record in await self.store.unsent_outbox():
                chats.setdefault(f"{record.channel}:{record.account}:{record.target}", []).append(record)
            await asyncio.gather(*(self._send_in_order(records, now) for records in chats.values()))

    async def _send_in_order(self, records: list[OutboxRecord], now: float) -> None:
        for record in records:
            if record.retry_at > now or not await self._send(record):
                return  # keep the chat's order: nothing after an entry that is waiting to retry

    async def _send(self, record: OutboxRecord) -> bool:
        adapter = self.adapters.get((record.channel, record.account))
        if adapter is None:
            await self.store.mark_dead(record.id, f"no running adapter for {record.channel}/{record.account}")
            return True
        try:
            message_id = await adapter.send(
                ChatTarget.model_validate(record.target), OutboundMessage.model_validate(record.payload)
            )
        except Exception as error:
            attempts = record.attempts + 1
            if attempts >= MAX_SEND_ATTEMPTS:
                log.error("giving up on reply %d after %d attempts: %s", record.id, attempts, error)
                await self.store.mark_dead(record.id, str(error)[:300])
                return True
            delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2**record.attempts)
            log.warning("sending reply %d failed (%s); retrying in %.0fs", record.id, error, delay)
            await self.store.mark_send_failed(record.id, str(error)[:300], self.clock() + delay)
            return False
        await self.store.mark_sent(record.id, message_id)
        session_key = self._answer_sessions.get(record.inbound_id) if record.inbound_id is not None else None
        if session_key is not None and message_id is not None and self._message_tool is not None:
            self._message_tool.remember(session_key, ChatTarget.model_validate(record.target), message_id)
        return True


def _user_message(*jobs: Job) -> UserMessage:
    """One user message for a batch; in groups (or with several senders) each line names its sender."""
    if len(jobs) == 1 and jobs[0].message.peer.kind == "direct":
        return UserMessage(content=[TextBlock(text=_said(jobs[0].message))])
    lines = [_line(job.message) for job in jobs]
    return UserMessage(content=[TextBlock(text="\n".join(lines))])
