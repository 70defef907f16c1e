"""Delivery: replies are recorded in the outbox with the journal rows they answer, then sent in order per chat,
retried with backoff; what tools and approvals send reaches the same adapters (the Messenger they are given)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from bot.store import DeliveryStore, OutboxEntry, OutboxRecord
from channels.base import Capabilities, ChannelAdapter, ChatTarget, InboundMessage, OutboundMessage
from channels.chunking import chunk_text
from routing.errors import ChannelError
from tools.message import MessageTool

if TYPE_CHECKING:
    from bot.cluster import Cluster
    from bot.metrics import Metrics

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


class SendFailed(ChannelError):
    """A send recorded before (the same turn, run again) that was never delivered."""


class Delivery:
    """The outbox and its sender, and the Messenger (`tools.message`) through which tools and approvals act in the
    chats of the running adapters."""

    def __init__(self, store: DeliveryStore, adapters: Adapters, clock: Callable[[], float]) -> None:
        self.store = store
        self.adapters = adapters
        self.clock = clock
        self.message_tool: MessageTool | None = None  # told the ids of an answer's messages, to edit or delete them
        self.metrics: Metrics | None = None  # set by the gateway
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()  # one flush at a time: two would send the same entry twice
        self._task: asyncio.Task[None] | None = None
        # inbound id -> the session its answer is for: the answer's messages are that session's to edit or delete
        self._answer_sessions: OrderedDict[int, str] = OrderedDict()
        self._waiting: dict[int, asyncio.Future[str | None]] = {}  # outbox id -> the `send` waiting for it
        self.cluster: Cluster | None = None  # set by the gateway of a cluster: chats are sent by one process at a time
        self._mine: set[int] = set()  # in a cluster: the pending entries this process recorded
        self._elsewhere = False  # the last flush met a chat another process was sending

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

    async def send(self, target: ChatTarget, message: OutboundMessage, *, key: str | None = None) -> str | None:
        """Send through the outbox, in the chat's order: recorded first, split to the channel's limit (the buttons
        on the last piece); the last piece's message id once it is out (None if it is still queued after
        SEND_WAIT_SECONDS). A send recorded before under `key` is not made again: its id comes back. It is tried
        once while someone waits for it, and its failure raised to them; one that outlived a crash is retried."""
        pieces = self.split(target.channel, target.account, message.text) or [message.text]
        last = len(pieces) - 1
        payloads = [
            message.model_copy(
                update={
                    "text": piece,
                    "buttons": message.buttons if index == last else [],
                    "reply_to": message.reply_to if index == 0 else None,
                    "media": message.media if index == last else [],
                    "poll": message.poll if index == last else None,
                }
            ).model_dump(mode="json")
            for index, piece in enumerate(pieces)
        ]
        keys = [f"{key}:{index}" if key is not None else None for index in range(len(pieces))]
        ids = await self._record_and_wait(target, "message", payloads, keys)
        return ids[-1] if ids is not None else None

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
        the platform refused, LookupError when it is still queued after SEND_WAIT_SECONDS (it is created later)."""
        ids = await self._record_and_wait(target, "thread", [{"name": name, "message_id": message_id}], [None])
        if not ids or ids[0] is None:
            raise LookupError("the thread is not created yet: the chat's earlier messages are still going out")
        return ids[0]

    async def _act(self, target: ChatTarget, kind: str, payload: dict[str, Any]) -> None:
        await self._record_and_wait(target, kind, [payload], [None])

    async def _record_and_wait(
        self, target: ChatTarget, kind: str, payloads: list[dict[str, Any]], keys: list[str | None]
    ) -> list[str | None] | None:
        """Record the chat's entries, let the outbox carry them out, and wait for each outcome (None when they are
        still queued after SEND_WAIT_SECONDS: they go out later, in order). LookupError, with nothing recorded, for
        an account that is not running."""
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
        self.wake()
        try:
            async with asyncio.timeout(SEND_WAIT_SECONDS):
                return [await outcome for outcome in outcomes]
        except TimeoutError:
            return None
        finally:
            for record in records:
                self._waiting.pop(record.id, None)

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
    ) -> None:
        """Record the replies and finish the messages' journal rows in one step (a crash leaves both or
        neither), then let the outbox send the replies."""
        records = await self.store.finish_inbound(inbound_ids, status, error, session_key=session_key, replies=replies)
        self._recorded(records)
        if replies:
            self._wake.set()

    def _recorded(self, records: Sequence[OutboxRecord]) -> None:
        if self.cluster is not None:
            self._mine.update(record.id for record in records if record.status == "pending")

    def _due_at(self, record: OutboxRecord) -> float:
        """When this process should send `record`: at its retry time if it recorded it (or runs alone), else only
        once it is ORPHAN_SECONDS overdue."""
        if self.cluster is None or record.id in self._mine:
            return record.retry_at
        return record.retry_at + ORPHAN_SECONDS

    async def reply(self, message: InboundMessage, text: str) -> None:
        """A reply that answers no journaled message (a notice, a pairing confirmation)."""
        await self.close([], replies=self.replies(None, message, text))

    def start(self) -> None:
        """Send whatever is recorded from now on (and, after `wake()`, what was left unsent)."""
        self._task = asyncio.create_task(self._worker(), name="outbox")

    def wake(self) -> None:
        """Look for due entries now."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop the sender between two sends, then send once more what is due."""
        if self._task is not None:
            async with self._flush_lock:  # not in the middle of a send
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _worker(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
            await self._settle_waiting()
            due = await self.store.unsent_outbox()
            if due:  # what arrived meanwhile goes at once; what failed waits for its retry time
                wait = min(self._due_at(record) for record in due) - self.clock()
                if self._elsewhere:
                    wait = max(wait, ELSEWHERE_SECONDS)
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
                self._wake.set()

    async def flush(self) -> None:
        """Send every due entry: chats in parallel, each chat in order; a failure waits with backoff, and the
        chat's later entries wait behind it."""
        async with self._flush_lock:
            now = self.clock()
            self._elsewhere = False
            chats: dict[str, list[OutboxRecord]] = {}
            unsent = await self.store.unsent_outbox()
            for record in unsent:
                chats.setdefault(f"{record.channel}:{record.account}:{record.target}", []).append(record)
            if self._mine:  # forget what another process sent meanwhile (ids recorded since the read are newer)
                newest = max((record.id for record in unsent), default=0)
                pending = {record.id for record in unsent}
                self._mine = {entry for entry in self._mine if entry in pending or entry > newest}
            due = [records for records in chats.values() if any(self._due_at(r) <= now for r in records)]
            await asyncio.gather(*(self._send_chat(records, now) for records in due))

    async def _send_chat(self, records: list[OutboxRecord], now: float) -> None:
        """Send a chat's entries in order; in a cluster, holding the chat (or leaving it to the process that does),
        and sending every pending entry of it as it stands now, whoever recorded it."""
        if self.cluster is None:
            await self._send_in_order(records, now)
            return
        async with self.cluster.sending(records[0]) as current:
            if current is None:
                self._elsewhere = True
                return
            await self._send_in_order(current, now)

    async def _settle_waiting(self) -> None:
        """In a cluster: the `send`s waiting here for entries another process sent hear how it went."""
        if self.cluster is None:
            return
        for record in await self.cluster.settled(list(self._waiting)):
            self._mine.discard(record.id)
            waiting = self._waiting.pop(record.id, None)
            if waiting is None or waiting.done():
                continue
            if record.status == "sent":
                waiting.set_result(record.platform_message_id)
            else:
                waiting.set_exception(SendFailed(record.error or "not delivered"))

    async def _send_in_order(self, records: list[OutboxRecord], now: float) -> None:
        for record in records:
            if record.retry_at > now or not await self._send(record):
                return  # keep the chat's order: nothing after an entry that is waiting to retry
            self._mine.discard(record.id)

    async def _send(self, record: OutboxRecord) -> bool:
        adapter = self.adapter_for(record.channel, record.account)
        if adapter is None:
            await self.store.mark_dead(record.id, f"no running adapter for {record.channel}/{record.account}")
            return True
        try:
            message_id = await _carry_out(adapter, record)
        except Exception as error:
            attempts = record.attempts + 1
            waiting = self._waiting.pop(record.id, None)
            if waiting is not None:  # someone waits for this send: they hear of its failure and decide
                await self.store.mark_dead(record.id, str(error)[:300])
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
        if self.metrics is not None:
            self.metrics.sent(record.channel, record.account, record.kind)
        waiting = self._waiting.pop(record.id, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(message_id)
        session_key = self._answer_sessions.get(record.inbound_id) if record.inbound_id is not None else None
        if session_key is not None and message_id is not None and self.message_tool is not None:
            self.message_tool.remember(session_key, ChatTarget.model_validate(record.target), message_id)
        return True


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
    else:
        return await adapter.send(target, OutboundMessage.model_validate(payload))
    return None
