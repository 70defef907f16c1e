"""The OpenAI-compatible API as a channel: each request is a message of its key (`http:<name>`) in the session the
client names, journaled and answered like any other; what the turn says comes back through the outbox to this
adapter, which hands it to the waiting request (as it streams, and whole), and the turn's end (`end_turn`)
finishes the response."""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from channels.base import (
    AccountSettings,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
    TextOnly,
)
from channels.health import ChannelHealth
from routing import Peer
from routing.errors import ChannelError

__all__ = ["API_CAPABILITIES", "Answer", "ApiChannel"]

CHANNEL = "http"
API_CAPABILITIES = Capabilities(
    max_text_length=1_000_000, markup="markdown", streaming=True, edit=True, edit_interval_seconds=0.2, ends_turns=True
)


@dataclass
class Answer:
    """A request's answer as the turn writes it: each message the turn sent to the session's chat (a streamed preview,
    an approval request, the answer), the text so far, and whether the turn is over."""

    message_id: str
    texts: dict[str, str] = field(default_factory=dict)
    done: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def text(self) -> str:
        return "\n\n".join(text for text in self.texts.values() if text)


class ApiChannel(TextOnly):
    """The API account of one agent (`account` is the agent's id): `ask` sends a request's message and follows its
    answer."""

    channel = CHANNEL
    bot_username: str | None = None

    def __init__(self, account: str) -> None:
        self.account = account
        self.capabilities = API_CAPABILITIES
        self._settings = AccountSettings(dm_policy="open", streaming="partial", require_mention=False)  # keys checked
        self.health = ChannelHealth(CHANNEL, account)
        self._waiting: dict[str, list[Answer]] = {}  # chat -> answers in the order their messages came
        self._on_message: OnMessage | None = None
        self._prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)

    @property
    def settings(self) -> AccountSettings:
        return self._settings

    @property
    def serving(self) -> bool:
        """Whether `ask` takes requests now (between start and stop)."""
        return self._on_message is not None

    async def ask(self, key: str, chat: str, text: str) -> AsyncIterator[Answer]:
        """Send `text` from the key `key` (its name) into the session chat `chat`; yields the answer each time it
        changes, until the turn is over (the last one yielded has `done`). Cancel the iteration to stop following."""
        if self._on_message is None:
            raise ChannelError(f"{CHANNEL}/{self.account} is not running")
        answer = Answer(self._new_id())
        self._waiting.setdefault(chat, []).append(answer)
        try:
            message = InboundMessage(
                channel=CHANNEL, account=self.account, peer=Peer("direct", chat), sender_id=key, text=text,
                message_id=answer.message_id,
            )  # fmt: skip
            await self._on_message(message)
            while True:
                await answer.changed.wait()
                answer.changed.clear()
                yield answer
                if answer.done:
                    return
        finally:
            waiting = self._waiting.get(chat, [])
            if answer in waiting:
                waiting.remove(answer)
            if not waiting:
                self._waiting.pop(chat, None)

    # --- the gateway's side (ChannelAdapter, TurnEnds) --------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        self._on_message = on_message
        self.health.set("connected")

    async def stop(self) -> None:
        self._on_message = None
        self.health.set("stopped")

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        message_id = self._new_id()
        self._write(target, message_id, message.text)
        return message_id

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        self._write(target, message_id, message.text)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        self._write(target, message_id, "")

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        return None

    async def typing(self, target: ChatTarget) -> None:
        return None

    async def end_turn(self, target: ChatTarget, answered: list[str]) -> None:
        for answer in self._waiting.get(target.peer.id or "", []):
            if answer.message_id in answered:
                answer.done = True
                answer.changed.set()

    def _write(self, target: ChatTarget, message_id: str, text: str) -> None:
        """What the turn says goes to the request its chat is answering now (the oldest one waiting)."""
        waiting = [answer for answer in self._waiting.get(target.peer.id or "", []) if not answer.done]
        if waiting:  # nobody waits any more (the client went): what was said stays in the transcript
            waiting[0].texts[message_id] = text
            waiting[0].changed.set()

    def _new_id(self) -> str:
        return f"api-{self._prefix}-{next(self._ids)}"
