"""A real TelegramAdapter on the fake Telegram, for the tests of the adapter and of what sends through it: what it
delivered (`Inbox`), its settings, the adapter started and stopped around a block, and the fake user's DM."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fakes.telegram import FakeTelegram
from helpers import eventually

from channels.base import ActionEvent, ChatTarget, InboundMessage
from channels.telegram import TelegramAccount, TelegramAdapter
from routing import Peer


class Inbox:
    """What the adapter delivered; `hold` makes on_message wait until released (to watch acknowledgement), and
    `failures` makes it raise that many times first (a gateway that could not record)."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.actions: list[ActionEvent] = []
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.failures = 0

    async def on_message(self, message: InboundMessage) -> None:
        self.entered.set()
        if self.failures:
            self.failures -= 1
            raise RuntimeError("database is locked")
        if self.hold is not None:
            await self.hold.wait()
        self.messages.append(message)

    async def on_action(self, event: ActionEvent) -> None:
        self.actions.append(event)

    async def wait(self, condition: Callable[[], bool], what: str) -> None:
        await eventually(condition, what)

    async def message(self, count: int = 1) -> InboundMessage:
        await self.wait(lambda: len(self.messages) >= count, f"message {count}")
        return self.messages[count - 1]


def settings(fake: FakeTelegram, **extra: Any) -> TelegramAccount:
    return TelegramAccount(token=fake.token, api_base_url=fake.url, poll_timeout=1, dm_policy="open", **extra)


@contextlib.asynccontextmanager
async def running(tg: FakeTelegram, **options: Any) -> AsyncIterator[tuple[TelegramAdapter, Inbox]]:
    """An adapter on the fake (built with `options`) delivering to a new Inbox; stopped at the end."""
    adapter = TelegramAdapter("default", settings(tg), **options)
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        yield adapter, inbox
    finally:
        await adapter.stop()


def dm(tg: FakeTelegram) -> ChatTarget:
    return ChatTarget(channel="telegram", peer=Peer("direct", tg.user_id))
