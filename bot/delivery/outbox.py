"""Delivery: replies are recorded in the outbox with the journal rows they answer, then sent in order per chat,
retried with backoff; what tools and approvals send reaches the same adapters (the Messenger they are given)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol

from bot.observe.metrics import Metrics
from bot.store import DeliveryStore, OutboxEntry, OutboxRecord, SessionTouch
from channels.base import (
    Capabilities,
    ChannelAdapter,
    ChatTarget,
    InboundMessage,
    OutboundFile,
    OutboundMessage,
    TurnEnds,
)
from channels.chunking import chunk_text
from routing.errors import ChannelError
from tools.message import SentLog

log = logging.getLogger(__name__)

RETRY_BASE_SECONDS = 1.0
RETRY_MAX_SECONDS = 300.0
MAX_SEND_ATTEMPTS = 8
DEFAULT_LIMIT = 4000  # the length a reply is split to for an account that is not running (it is not sent anyway)
MAX_ANSWER_SESSIONS = 1000  # answers still on their way whose messages are noted for the message tool
SEND_WAIT_SECONDS = 60.0  # how long `send` waits behind the chat's earlier messages before it says "queued"
# In a cluster, a process sends what it recorded; an entry another process recorded is sent here only once it is
# this long overdue (that process died, or its chat is stuck behind it), and always in its chat's order.
ORPHAN_SECONDS = 5.0
ELSEWHERE_SECONDS = 0.2  # the wait before looking again at a chat another process is sending just now
# Files one message takes on every platform here (a Telegram album, a Discord message, a Slack share).
ALBUM_FILES = 10
# Photos and videos share a Telegram album; every other kind keeps to albums of its own, and a voice note goes alone.
_ALBUM_KINDS = {"image": "visual", "video": "visual"}

Adapters = Mapping[tuple[str, str], ChannelAdapter]


def quoted(message: InboundMessage) -> str | None:
    """The message an answer to `message` quotes: the person's own message in a group or channel (where the
    platform shows the quote: Telegram, Discord; Slack answers in the message's thread instead). None in a direct
    chat, for a button click, and for a turn the bot started itself (a schedule's, a subagent's)."""
    if message.peer.kind == "direct" or message.button or message.scheduled is not None:
        return None
    if message.message_id.startswith("click:"):
        return None
    return message.message_id


def message_parts(message: OutboundMessage, pieces: list[str], capabilities: Capabilities) -> list[OutboundMessage]:
    """`message` as the platform messages it goes out in, in order, each sent (and recorded as sent) on its own, so
    that a send that fails half way resumes at the part that failed: the text's `pieces`, then the files a group at
    a time, then the poll. The last piece is the first group's caption when it fits and carries no buttons (where
    buttons may ride on files differs by platform; a text of its own carries them on every one). The first part
    quotes `reply_to`; the buttons go on the last text part, or on the first part when there is no text."""
    texts = list(pieces)
    groups = _file_groups(message.media, capabilities.max_upload_bytes)
    caption = ""
    if groups and texts and not message.buttons and len(texts[-1]) <= capabilities.max_caption_length:
        caption = texts.pop()
    parts = [OutboundMessage(text=text, thread_id=message.thread_id) for text in texts]
    for index, group in enumerate(groups):
        parts.append(OutboundMessage(text="" if index else caption, media=group, thread_id=message.thread_id))
    if message.poll is not None:
        parts.append(OutboundMessage(text="", poll=message.poll, thread_id=message.thread_id))
    if not parts:
        return [message]  # nothing to send: the platform says so
    buttons_on = len(texts) - 1 if texts else 0
    parts[buttons_on] = parts[buttons_on].model_copy(update={"buttons": message.buttons})
    parts[0] = parts[0].model_copy(update={"reply_to": message.reply_to})
    return parts


def _file_groups(files: Sequence[OutboundFile], max_bytes: int) -> list[list[OutboundFile]]:
    """The files in order, in groups that each go as one platform message: up to ALBUM_FILES of one album kind,
    within `max_bytes` together (Discord's limit is per message)."""
    groups: list[list[OutboundFile]] = []
    room = 0.0
    for file in files:
        size = _size(file)
        kind = _ALBUM_KINDS.get(file.kind, file.kind)
        last = groups[-1] if groups else []
        joins = last and kind != "voice" and _ALBUM_KINDS.get(last[0].kind, last[0].kind) == kind
        if not joins or len(last) >= ALBUM_FILES or size > room:
            groups.append([])
            room = max_bytes or math.inf
        groups[-1].append(file)
        room -= size
    return groups


def _size(file: OutboundFile) -> int:
    """The file's size; 0 when it cannot be read (the adapter says why when it sends it)."""
    try:
        return os.stat(file.path).st_size
    except OSError:
        return 0


class SendFailed(ChannelError):
    """A send recorded before (the same turn, run again) that was never delivered, or a part of a message that was
    not sent because an earlier part failed."""


class ChatLocks(Protocol):
    """Who sends a chat when several processes share the outbox (bot.gateway.cluster): one at a time."""

    def sending(self, record: OutboxRecord) -> AbstractAsyncContextManager[list[OutboxRecord] | None]:
        """Hold `record`'s chat for sending: its pending entries as they stand now, in order; None when another
        process is sending that chat right now."""
        ...

    async def settled(self, ids: list[int]) -> list[OutboxRecord]:
        """Which of the outbox entries `ids` are sent or dead by now (by any process)."""
        ...


class Delivery:
    """The outbox and its sender, and the Messenger (`tools.message`) through which tools and approvals act in the
    chats of the running adapters."""

    def __init__(
        self,
        store: DeliveryStore,
        adapters: Adapters,
        clock: Callable[[], float],
        metrics: Metrics | None = None,
        *,
        sent: SentLog | None = None,
        chat_locks: ChatLocks | None = None,
    ) -> None:
        """`sent` is told the ids of each answer's messages (its session's to edit or delete); `chat_locks` (a
        cluster's) lets one process at a time send a chat."""
        self.store = store
        self.adapters = adapters
        self.clock = clock
        self.sent = sent or SentLog()
        self.metrics = metrics or Metrics()  # each entry sent is counted (a gateway's, shared)
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()  # one look at the outbox at a time: two would start a chat twice
        self._chats: dict[str, asyncio.Task[bool]] = {}  # chat -> its sender, while it sends (one per chat)
        self._again: set[str] = set()  # chats that got entries their sender, at work or being started, did not read
        self._task: asyncio.Task[None] | None = None
        # inbound id -> the session its answer is for: the answer's messages are that session's to edit or delete
        self._answer_sessions: OrderedDict[int, str] = OrderedDict()
        self._waiting: dict[int, asyncio.Future[str | None]] = {}  # outbox id -> the `send` waiting for it
        self.chat_locks = chat_locks
        self._mine: set[int] = set()  # in a cluster: the pending entries this process recorded
        self._elsewhere: dict[str, float] = {}  # in a cluster: chat -> when to look again (another process sent it)
        self.wait_seconds = SEND_WAIT_SECONDS  # how long `send` waits behind the chat's earlier messages
        self._sending: set[int] = set()  # the entries being carried out right now
        self._withdrawn: set[int] = set()  # entries taken back while still queued: never sent, whatever was read
        self._later: dict[int, list[int]] = {}  # a waited-for entry -> the later parts of its message

    def adapter_for(self, channel: str, account: str) -> ChannelAdapter | None:
        """The running adapter of this channel account, None if there is none."""
        return self.adapters.get((channel, account))

    def note_answer(self, inbound_id: int, session_key: str) -> None:
        """The answer to `inbound_id` belongs to `session_key`: its messages are that session's to change."""
        self._answer_sessions[inbound_id] = session_key
        while len(self._answer_sessions) > MAX_ANSWER_SESSIONS:
            self._answer_sessions.popitem(last=False)

    # --- the Messenger: what tools and approvals reach the chats with ---------------------------------------------

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        adapter = self.adapter_for(channel, account)
        return adapter.capabilities if adapter is not None else None

    def accounts(self) -> list[tuple[str, str]]:
        return list(self.adapters)

    def _adapter(self, target: ChatTarget) -> ChannelAdapter:
        adapter = self.adapter_for(target.channel, target.account)
        if adapter is None:
            raise LookupError(f"no running {target.channel} account {target.account!r}")
        return adapter

    def split(self, channel: str, account: str, text: str) -> list[str]:
        """`text` in the pieces the channel account takes, each within its declared limit: the one place a reply is
        chunked (no pieces for an empty text)."""
        adapter = self.adapter_for(channel, account)
        return chunk_text(text, adapter.capabilities.max_text_length if adapter is not None else DEFAULT_LIMIT)

    async def send(
        self, target: ChatTarget, message: OutboundMessage, *, key: str | None = None, withdraw_late: bool = False
    ) -> str | None:
        """Send through the outbox, in the chat's order: recorded first, as its parts (`message_parts`: the text
        split to the channel's limit, the files, the poll), each an entry of its own; the last part's message id
        once it is out (None if it is still queued after `wait_seconds`: it goes out later, unless `withdraw_late`
        takes it back, for something stale by then such as a streamed preview). A send recorded before under `key`
        is not made again: its id comes back. It is tried once while someone waits for it, and its failure raised
        to them (the parts after the failed one are not sent); one that outlived a crash is retried from the first
        part not sent."""
        parts = self.parts(target.channel, target.account, message)
        payloads = [part.model_dump(mode="json") for part in parts]
        keys = [f"{key}:{index}" if key is not None else None for index in range(len(parts))]
        ids = await self._record_and_wait(target, "message", payloads, keys, withdraw_late=withdraw_late)
        return ids[-1] if ids is not None else None

    def parts(self, channel: str, account: str, message: OutboundMessage) -> list[OutboundMessage]:
        """`message_parts` for the channel account."""
        adapter = self.adapter_for(channel, account)
        capabilities = adapter.capabilities if adapter is not None else Capabilities(max_text_length=DEFAULT_LIMIT)
        return message_parts(message, self.split(channel, account, message.text), capabilities)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        """Edit a message the bot sent, through the outbox: after everything recorded for the chat before."""
        payload = {"message_id": message_id, "message": message.model_dump(mode="json")}
        await self._act(target, "edit", payload)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        await self._act(target, "delete", {"message_id": message_id})

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        await self._act(target, "react", {"message_id": message_id, "emoji": emoji})

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """Start a thread through the outbox, after everything recorded for the chat before; its id. SendFailed when
        the platform refused, LookupError when it is still queued after `wait_seconds` (it is created later)."""
        ids = await self._record_and_wait(target, "thread", [{"name": name, "message_id": message_id}], [None])
        if not ids or ids[0] is None:
            raise LookupError("the thread is not created yet: the chat's earlier messages are still going out")
        return ids[0]

    async def _act(self, target: ChatTarget, kind: str, payload: dict[str, Any]) -> None:
        await self._record_and_wait(target, kind, [payload], [None])

    async def _record_and_wait(
        self,
        target: ChatTarget,
        kind: str,
        payloads: list[dict[str, Any]],
        keys: list[str | None],
        *,
        withdraw_late: bool = False,
    ) -> list[str | None] | None:
        """Record the chat's entries, let the outbox carry them out, and wait for each outcome (None when they are
        still queued after `wait_seconds`: they go out later, in order, or with `withdraw_late` never, except one
        being sent just then, which is waited for). The first failure is raised. LookupError, with nothing
        recorded, for an account that is not running."""
        self._adapter(target)
        where = target.model_dump(mode="json")
        entries = [
            OutboxEntry(
                inbound_id=None,
                channel=target.channel,
                account=target.account,
                target=where,
                payload=payload,
                kind=kind,
                key=key,
            )
            for payload, key in zip(payloads, keys, strict=True)
        ]
        records = await self.store.enqueue_once(entries)
        self._recorded(records)
        outcomes = [self._outcome(record) for record in records]
        for index, record in enumerate(records[:-1]):
            self._later[record.id] = [later.id for later in records[index + 1 :]]
        self.wake()
        try:
            _, late = await asyncio.wait(outcomes, timeout=self.wait_seconds)
            if late and not withdraw_late:
                return None
            for record, outcome in zip(records, outcomes, strict=True):
                if outcome in late and record.id not in self._sending:
                    await self._withdraw([record.id], "withdrawn: still queued when its sender stopped waiting")
            if late:
                await asyncio.wait(late)  # the one being sent just now: its outcome
            return _in_order(outcomes)
        finally:
            for record in records:
                self._waiting.pop(record.id, None)
                self._later.pop(record.id, None)

    async def _withdraw(self, outbox_ids: list[int], why: str) -> None:
        """Take back entries not yet sent: the sender skips them from now on (whatever it read before), whoever
        waits for them hears None, and they are recorded as dead. One sent meanwhile by another process stays sent."""
        self._withdrawn.update(outbox_ids)
        for outbox_id in outbox_ids:
            waiting = self._waiting.pop(outbox_id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(None)
            with contextlib.suppress(ValueError):
                await self.store.mark_dead(outbox_id, why)

    def _outcome(self, record: OutboxRecord) -> asyncio.Future[str | None]:
        """What becomes of a recorded entry: its message id once sent, its error if it died."""
        outcome: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        if record.status == "sent":
            outcome.set_result(record.platform_message_id)
        elif record.status == "dead":
            outcome.set_exception(SendFailed(record.error or "not delivered"))
        else:
            self._waiting[record.id] = outcome
        return outcome

    async def is_approval_card(self, target: ChatTarget, message_id: str) -> bool:
        peer = target.peer
        return await self.store.is_approval_message(
            target.channel, target.account, peer.kind, peer.id or "", message_id
        )

    # --- the outbox -------------------------------------------------------------------------------------------------

    def turn_end(self, inbound_id: int | None, message: InboundMessage, answered: Sequence[str]) -> list[OutboxEntry]:
        """What tells the message's chat, after the replies, that the turn is over and which of its messages
        (`answered`: their message ids) it answered; nothing for a channel that does not ask (`ends_turns`)."""
        adapter = self.adapter_for(message.channel, message.account)
        if adapter is None or not adapter.capabilities.ends_turns:
            return []
        target = message.target().model_dump(mode="json")
        payload = {"answered": list(answered)}
        entry = OutboxEntry(
            inbound_id=inbound_id, channel=message.channel, account=message.account, target=target, payload=payload,
            kind="end",
        )  # fmt: skip
        return [entry]

    def replies(
        self,
        inbound_id: int | None,
        message: InboundMessage,
        text: str,
        chunks: list[str] | None = None,
        *,
        quote: bool = True,
    ) -> list[OutboxEntry]:
        """The outbox entries that deliver `text` to the message's chat, in chunks the channel takes (`chunks`:
        already split, e.g. what a streamed message did not hold); none for an empty text. In a group the first
        chunk quotes the person's message (`quoted`), unless `quote` is off (a streamed message already did)."""
        target = message.target().model_dump(mode="json")
        pieces = self.split(message.channel, message.account, text) if chunks is None else chunks
        reply_to = quoted(message) if quote else None
        return [
            OutboxEntry(
                inbound_id=inbound_id,
                channel=message.channel,
                account=message.account,
                target=target,
                payload=OutboundMessage(
                    text=chunk, thread_id=message.thread_id, reply_to=reply_to if index == 0 else None
                ).model_dump(mode="json"),
            )
            for index, chunk in enumerate(pieces)
        ]

    async def close(
        self,
        inbound_ids: Sequence[int],
        status: Literal["done", "failed"] = "done",
        error: str | None = None,
        *,
        replies: Sequence[OutboxEntry] = (),
        session_key: str | None = None,
        touch: SessionTouch | None = None,
    ) -> None:
        """Record the replies, finish the messages' journal rows and write `touch` (the run's addition to its
        session's row) in one step (a crash leaves all or none), then send the replies: at once when their chat can
        go (`_start_now`), else by the outbox's next look."""
        records = await self.store.finish_inbound(
            inbound_ids, status, error, session_key=session_key, replies=replies, touch=touch
        )
        self._recorded(records)
        if replies and not self._start_now(records):
            self._wake.set()

    def _start_now(self, records: Sequence[OutboxRecord]) -> bool:
        """Start the sender of each chat of `records` (just recorded) that can go without a look at the outbox: the
        outbox is running and not being read, the chat has no sender at work, and nothing recorded before is pending
        for it (the store said so: `nothing_ahead`; in a cluster the sender reads the chat's entries itself, under
        its lock). Whether every chat was started: the others wait for the outbox's look."""
        if self._task is None or self._task.done() or self._flush_lock.locked():
            return False
        now = self.clock()
        started = True
        for chat, chat_records in _by_chat(records).items():
            head = chat_records[0]
            if (
                chat in self._chats
                or chat in self._elsewhere
                or head.retry_at > now
                or not (head.nothing_ahead or self.chat_locks is not None)
            ):
                started = False
                continue
            self._start_chat(chat, chat_records, now)
        return started

    def _recorded(self, records: Sequence[OutboxRecord]) -> None:
        reading = self._flush_lock.locked()  # a look at the outbox is under way: it may have read before these
        for record in records:
            chat = _chat_of(record)
            if reading or chat in self._chats:
                self._again.add(chat)
        if self.chat_locks is not None:
            self._mine.update(record.id for record in records if record.status == "pending")

    def _due_at(self, record: OutboxRecord) -> float:
        """When this process should send `record`: at its retry time if it recorded it (or runs alone), else only
        once it is ORPHAN_SECONDS overdue."""
        if self.chat_locks is None or record.id in self._mine:
            return record.retry_at
        return record.retry_at + ORPHAN_SECONDS

    async def reply(self, message: InboundMessage, text: str, *, key: str | None = None) -> None:
        """A reply that answers no journaled message (a notice, a pairing confirmation); one recorded before under
        `key` (the same turn, run again after a crash) is not recorded again."""
        replies = self.replies(None, message, text)
        if key is None:
            await self.close([], replies=replies)
            return
        keyed = [reply.model_copy(update={"key": f"{key}:{index}"}) for index, reply in enumerate(replies)]
        self._recorded(await self.store.enqueue_once(keyed))
        self.wake()

    def start(self) -> None:
        """Send whatever is recorded from now on (and, after `wake()`, what was left unsent)."""
        self._task = asyncio.create_task(self._worker(), name="outbox")

    def wake(self) -> None:
        """Look for due entries now."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop looking for due entries, let each chat's sender finish, then send once more what is due."""
        if self._task is not None:
            self._task.cancel()  # it never sends itself: the chats' senders do
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _worker(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            later = await self._start_due()
            await self._settle_waiting()
            # What is recorded from now on wakes this loop, and so does each chat's sender when it is done (its chat
            # may have more by then); what is left waits for its retry time.
            if later is not None:
                wait = later - self.clock()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._wake.wait()
                self._wake.set()

    async def flush(self) -> None:
        """Send every due entry, and return once each chat has sent what was due: chats in parallel, each chat in
        order; a failure waits with backoff, and the chat's later entries wait behind it."""
        await self._start_due()
        while self._chats:
            await asyncio.gather(*self._chats.values(), return_exceptions=True)

    async def _start_due(self) -> float | None:
        """Start a sender for each chat with a due entry and none at work already; when the first of the others is
        due (None: none waits). A chat's sender holds only that chat: one slow chat (a large upload, a platform that
        answers slowly) does not hold the others back."""
        async with self._flush_lock:
            now = self.clock()
            busy = set(self._chats)  # a sender that ends during the read below may have sent what it returns
            unsent = await self.store.unsent_outbox()
            self._withdrawn &= {record.id for record in unsent}  # the rest are recorded as dead: never read again
            chats = _by_chat(unsent)
            self._elsewhere = {chat: at for chat, at in self._elsewhere.items() if chat in chats}
            self._again &= busy | chats.keys()  # a chat with nothing pending is started by the pass its entry wakes
            if self._mine:  # forget what another process sent meanwhile (ids recorded since the read are newer)
                newest = max((record.id for record in unsent), default=0)
                pending = {record.id for record in unsent}
                self._mine = {entry for entry in self._mine if entry in pending or entry > newest}
            later: float | None = None
            for chat, records in chats.items():
                if chat in busy:  # its sender is at work (or just ended: it has woken the next pass)
                    continue
                due = self._due_for(chat, records)
                if due > now:
                    later = due if later is None else min(later, due)
                    continue
                self._elsewhere.pop(chat, None)
                self._start_chat(chat, records, now)
            return later

    def _start_chat(self, chat: str, records: list[OutboxRecord], now: float) -> None:
        """Start `chat`'s sender with its pending `records`."""
        task = asyncio.create_task(self._send_chat(chat, records, now), name=f"outbox {chat}")
        self._chats[chat] = task
        task.add_done_callback(functools.partial(self._chat_sent, chat))

    def _due_for(self, chat: str, records: list[OutboxRecord]) -> float:
        """When to send `chat` (its pending `records`): its first due entry's time, but not before another process
        that holds the chat has had ELSEWHERE_SECONDS."""
        return max(min(self._due_at(record) for record in records), self._elsewhere.get(chat, float("-inf")))

    def _chat_sent(self, chat: str, task: asyncio.Task[bool]) -> None:
        """A chat's sender is done: the outbox is looked at again when the chat got entries meanwhile, when the
        sender left some waiting (a retry, another process holding the chat), or in a cluster (whose other
        processes record entries this one is not told of)."""
        if self._chats.get(chat) is task:
            del self._chats[chat]
        again = chat in self._again
        self._again.discard(chat)
        if task.cancelled() or task.exception() is not None:
            if not task.cancelled():
                log.error("sending to %s failed", chat, exc_info=task.exception())
            self._wake.set()
        elif again or not task.result() or self.chat_locks is not None:
            self._wake.set()

    async def _send_chat(self, chat: str, records: list[OutboxRecord], now: float) -> bool:
        """Send a chat's entries in order; in a cluster, holding the chat (or leaving it to the process that does),
        and sending every pending entry of it as it stands now, whoever recorded it. Whether all of them went."""
        if self.chat_locks is None:
            return await self._send_in_order(records, now)
        async with self.chat_locks.sending(records[0]) as current:
            if current is None:
                self._elsewhere[chat] = self.clock() + ELSEWHERE_SECONDS
                return False
            return await self._send_in_order(current, now)

    async def _settle_waiting(self) -> None:
        """In a cluster: the `send`s waiting here for entries another process sent hear how it went."""
        if self.chat_locks is None:
            return
        for record in await self.chat_locks.settled(list(self._waiting)):
            self._mine.discard(record.id)
            waiting = self._waiting.pop(record.id, None)
            if waiting is None or waiting.done():
                continue
            if record.status == "sent":
                waiting.set_result(record.platform_message_id)
            else:
                waiting.set_exception(SendFailed(record.error or "not delivered"))

    async def _send_in_order(self, records: list[OutboxRecord], now: float) -> bool:
        """Send the entries in order; False when one waits to retry (and those after it with it)."""
        for record in records:
            if record.retry_at > now or not await self._send(record):
                return False  # keep the chat's order: nothing after an entry that is waiting to retry
            self._mine.discard(record.id)
        return True

    async def _send(self, record: OutboxRecord) -> bool:
        if record.id in self._withdrawn:
            return True  # taken back by whoever waited for it
        adapter = self.adapter_for(record.channel, record.account)
        if adapter is None:
            await self.store.mark_dead(record.id, f"no running adapter for {record.channel}/{record.account}")
            return True
        self._sending.add(record.id)  # until its outcome is recorded: a withdrawal now would come too late
        try:
            return await self._send_and_record(adapter, record)
        finally:
            self._sending.discard(record.id)

    async def _send_and_record(self, adapter: ChannelAdapter, record: OutboxRecord) -> bool:
        """Carry the entry out and record how it went; False when it waits for a retry."""
        try:
            message_id = await _carry_out(adapter, record)
        except Exception as error:
            attempts = record.attempts + 1
            waiting = self._waiting.pop(record.id, None)
            if waiting is not None:  # someone waits for this send: they hear of its failure and decide
                await self.store.mark_dead(record.id, str(error)[:300])
                # The rest of its message would read as if this part had gone out: they are not sent either.
                await self._withdraw(self._later.get(record.id, []), "not sent: an earlier part of its message failed")
                if not waiting.done():
                    waiting.set_exception(error)
                return True
            if attempts >= MAX_SEND_ATTEMPTS:
                log.error("giving up on reply %d after %d attempts: %s", record.id, attempts, error)
                await self.store.mark_dead(record.id, str(error)[:300])
                return True
            delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2**record.attempts)
            log.warning("sending reply %d failed (%s); retrying in %.0fs", record.id, error, delay)
            await self.store.mark_send_failed(record.id, str(error)[:300], self.clock() + delay)
            return False
        await self.store.mark_sent(record.id, message_id)
        self.metrics.sent(record.channel, record.account, record.kind)
        waiting = self._waiting.pop(record.id, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(message_id)
        session_key = self._answer_sessions.get(record.inbound_id) if record.inbound_id is not None else None
        if session_key is not None and message_id is not None:
            self.sent.remember(session_key, ChatTarget.model_validate(record.target), message_id)
        return True


def _chat_of(record: OutboxRecord) -> str:
    """The chat an outbox entry goes to: entries of one chat are sent in order, one at a time."""
    return f"{record.channel}:{record.account}:{record.target}"


def _by_chat(records: Sequence[OutboxRecord]) -> dict[str, list[OutboxRecord]]:
    """Outbox entries by the chat they go to, in order."""
    chats: dict[str, list[OutboxRecord]] = {}
    for record in records:
        chats.setdefault(_chat_of(record), []).append(record)
    return chats


def _in_order(outcomes: Sequence[asyncio.Future[str | None]]) -> list[str | None]:
    """The outcomes of a message's parts; the first failure raised, saying how many parts went out before it."""
    for index, outcome in enumerate(outcomes):
        error = outcome.exception()
        if error is None:
            continue
        if index == 0:
            raise error
        went = f"the first {index} of its {len(outcomes)} parts went out; the rest were not sent"
        raise SendFailed(f"{error} ({went})") from error
    return [outcome.result() for outcome in outcomes]


async def _carry_out(adapter: ChannelAdapter, record: OutboxRecord) -> str | None:
    """Do what an outbox entry records: a send (its message id), a new thread (its id), or an edit, deletion or
    reaction of a message."""
    target, payload = ChatTarget.model_validate(record.target), record.payload
    if record.kind == "edit":
        await adapter.edit(target, payload["message_id"], OutboundMessage.model_validate(payload["message"]))
    elif record.kind == "delete":
        await adapter.delete(target, payload["message_id"])
    elif record.kind == "react":
        await adapter.react(target, payload["message_id"], payload["emoji"])
    elif record.kind == "thread":
        return await adapter.create_thread(target, payload["name"], payload.get("message_id"))
    elif record.kind == "end":
        if isinstance(adapter, TurnEnds):
            await adapter.end_turn(target, list(payload["answered"]))
    else:
        return await adapter.send(target, OutboundMessage.model_validate(payload))
    return None
