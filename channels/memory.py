"""An in-memory channel for tests and benchmarks: a test says something as a given sender and reads what the bot
sent, edited, deleted and reacted, without a platform or a network."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from channels.base import (
    AccountSettings,
    ActionEvent,
    Attachment,
    AttachmentKind,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
)
from channels.health import ChannelHealth
from routing import Peer
from routing.errors import ChannelError

__all__ = ["MemoryChannel", "Sent"]

WAIT = 30.0  # the longest `replies` waits by default: only ever reached when something is broken
CHUNK = 64 * 1024  # bytes per piece of a download


@dataclass(frozen=True)
class Sent:
    """One message the bot sent: where to, what (as sent, before any edit), the id it got, and when
    (`time.perf_counter()`)."""

    target: ChatTarget
    message: OutboundMessage
    message_id: str
    at: float

    @property
    def text(self) -> str:
        """The message's text as sent."""
        return self.message.text


class MemoryChannel:
    """A ChannelAdapter kept in memory. Serve it like any adapter (`App(..., adapters=[channel])`), then:

        await channel.say("hi", sender="alice")   # returns once the gateway has journaled the message
        [reply] = await channel.replies()          # the next message the bot sends (waits for it)

    Everything the bot does is recorded: `sent` (every message, in order, files and polls in it), `edits`,
    `deleted`, `reactions`, `typing_in`, `threads`, and `showing` (each message not deleted, by id, as last
    edited). `attach(data, name=...)` makes a file a message can carry (`say(..., attachments=[...])`). By
    default anyone may write to it in a direct chat (`dm_policy: open`) and it can only send plain text;
    `capabilities` and `settings` change that. Editing, deleting or reacting where `capabilities` says the
    channel cannot raises ChannelError, as does editing or deleting a message it never sent: a real platform
    would refuse too.
    """

    def __init__(
        self,
        channel: str = "memory",
        account: str = "default",
        *,
        capabilities: Capabilities | None = None,
        settings: AccountSettings | None = None,
        bot_username: str | None = None,
    ) -> None:
        self.channel = channel
        self.account = account
        self.capabilities = capabilities or Capabilities()
        self.bot_username = bot_username
        self._settings = settings or AccountSettings(dm_policy="open")
        self.sent: list[Sent] = []
        self.edits: list[tuple[ChatTarget, str, OutboundMessage]] = []
        self.deleted: list[tuple[ChatTarget, str]] = []
        self.reactions: list[tuple[ChatTarget, str, str]] = []
        self.typing_in: list[ChatTarget] = []
        self.showing: dict[str, OutboundMessage] = {}
        self.threads: list[tuple[ChatTarget, str, str, str | None]] = []  # (where, thread id, name, from message)
        self._files: dict[str, bytes] = {}  # what `attach` registered, by reference
        self._read = 0  # how many of `sent` earlier `replies()` calls returned
        self._changed = asyncio.Condition()
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None
        # Unique across instances, so a second channel on the same state directory is not taken for a redelivery.
        self._prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)
        # Connected while served; a test turns it degraded or stalled with `health.set(...)`.
        self.health = ChannelHealth(channel, account)

    @property
    def settings(self) -> AccountSettings:
        """Who may talk to this account, mention gating, streaming."""
        return self._settings

    # --- the test's side ---------------------------------------------------------------------------------------

    async def say(
        self,
        text: str,
        *,
        sender: str = "user",
        peer: Peer | None = None,
        sender_name: str | None = None,
        thread_id: str | None = None,
        reply_to: str | None = None,
        mentioned: bool = False,
        message_id: str | None = None,
        **fields: Any,
    ) -> InboundMessage:
        """Deliver `text` from `sender`, in a direct chat with them unless `peer` names another chat; returns the
        message as delivered, once the gateway has recorded it. `fields` sets any other InboundMessage field
        (`guild`, `member_roles`, `attachments` …); a `message_id` given twice is dropped as a redelivery."""
        if self._on_message is None:
            raise RuntimeError(f"channel {self.channel}/{self.account} is not running: serve it first")
        message = InboundMessage(
            channel=self.channel,
            account=self.account,
            peer=peer or Peer("direct", sender),
            sender_id=sender,
            sender_name=sender_name,
            text=text,
            message_id=message_id or self._new_id("in"),
            thread_id=thread_id,
            reply_to=reply_to,
            was_mentioned=mentioned,
            **fields,
        )
        await self._on_message(message)
        return message

    async def click(
        self,
        message_id: str,
        value: str,
        *,
        sender: str = "user",
        peer: Peer | None = None,
        thread_id: str | None = None,
    ) -> str | None:
        """Tap the button with `value` on message `message_id` as `sender`; returns the notice only they would see."""
        if self._on_action is None:
            raise RuntimeError(f"channel {self.channel}/{self.account} is not running: serve it first")
        event = ActionEvent(
            channel=self.channel,
            account=self.account,
            peer=peer or Peer("direct", sender),
            sender_id=sender,
            message_id=message_id,
            value=value,
            thread_id=thread_id,
            click_id=self._new_id("click"),
        )
        return await self._on_action(event)

    async def replies(self, count: int = 1, *, timeout: float = WAIT) -> list[Sent]:
        """The next `count` messages the bot sends (those no earlier call returned), waiting for them; TimeoutError
        naming what did arrive if they have not all come within `timeout` seconds."""
        async with self._changed:
            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(lambda: len(self.sent) - self._read >= count)
            except TimeoutError:
                got = [sent.text for sent in self.sent[self._read :]]
                wanted = f"expected {count} message(s) from the bot within {timeout:g} s"
                raise TimeoutError(f"{wanted}; got {got}") from None
            found = self.sent[self._read : self._read + count]
            self._read += count
            return found

    def attach(
        self, data: bytes, *, kind: AttachmentKind = "document", name: str | None = None, mime_type: str | None = None
    ) -> Attachment:
        """A file for a message to carry (`say(..., attachments=[chat.attach(b"...", name="a.txt")])`): its bytes
        are what the bot downloads."""
        ref = self._new_id("file")
        self._files[ref] = data
        return Attachment(kind=kind, ref=ref, name=name, mime_type=mime_type, size=len(data))

    # --- the gateway's side (ChannelAdapter) -------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        """Begin taking `say` and `click`."""
        self._on_message, self._on_action = on_message, on_action
        self.health.set("connected")

    async def stop(self) -> None:
        """Stop taking `say` and `click`; what was recorded stays."""
        self._on_message = self._on_action = None
        self.health.set("stopped")

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Record the message and give it a new id."""
        message_id = self._new_id("out")
        self.showing[message_id] = message
        async with self._changed:
            self.sent.append(Sent(target, message, message_id, time.perf_counter()))
            self._changed.notify_all()
        return message_id

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        """Record the edit and show the new version."""
        self._can("edit", self.capabilities.edit, message_id)
        self.edits.append((target, message_id, message))
        self.showing[message_id] = message

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        """Record the deletion and stop showing the message."""
        self._can("delete", self.capabilities.delete, message_id)
        self.deleted.append((target, message_id))
        del self.showing[message_id]

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        """Record the reaction."""
        self._can("react", self.capabilities.reactions)
        self.reactions.append((target, message_id, emoji))

    async def typing(self, target: ChatTarget) -> None:
        """Record that the bot showed itself typing."""
        self.typing_in.append(target)

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The bytes `attach` registered for the attachment, in chunks of CHUNK bytes."""
        data = self._files.get(attachment.ref)
        if data is None:
            raise ChannelError(f"{self.channel}: no file {attachment.ref!r}")
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """Record a new thread (`threads`: its id, name and the message it started from) and return its id."""
        self._can("create threads", self.capabilities.threads)
        thread_id = self._new_id("thread")
        self.threads.append((target, thread_id, name, message_id))
        return thread_id

    def _can(self, action: str, allowed: bool, message_id: str | None = None) -> None:
        if not allowed:
            raise ChannelError(f"{self.channel}: cannot {action} (its capabilities say so)")
        if message_id is not None and message_id not in self.showing:
            raise ChannelError(f"{self.channel}: cannot {action} message {message_id!r}: no such message")

    def _new_id(self, kind: str) -> str:
        return f"{kind}-{self._prefix}-{next(self._ids)}"
