"""Delivery on its own: everything the bot says (sends, edits, deletions, reactions) is recorded in the outbox first,
then carried out in the chat's order, split once to the channel's limit; what a crash left recorded is done after."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import eventually

from bot.delivery import Delivery
from bot.store import OutboxEntry, SqliteStore
from channels import MemoryChannel
from channels.base import Button, Capabilities, ChatTarget, OutboundMessage
from routing import Peer
from routing.errors import ChannelError

CHAT = ChatTarget(channel="memory", peer=Peer("direct", "7"))
CAPS = Capabilities(buttons=True, edit=True, delete=True, reactions=True, max_text_length=12)


class LoggingChannel(MemoryChannel):
    """A memory channel that also keeps one log of every call, in the order the calls were made."""

    def __init__(self) -> None:
        super().__init__(capabilities=CAPS)
        self.log: list[tuple[str, str]] = []

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        message_id = await super().send(target, message)
        self.log.append(("send", message.text))
        return message_id

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        await super().edit(target, message_id, message)
        self.log.append(("edit", message.text))

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        await super().delete(target, message_id)
        self.log.append(("delete", message_id))

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        await super().react(target, message_id, emoji)
        self.log.append(("react", emoji))


@contextlib.asynccontextmanager
async def delivery_to(chat: MemoryChannel, state: Path) -> AsyncIterator[Delivery]:
    async with await SqliteStore.open(state) as store:
        delivery = Delivery(store, {(chat.channel, chat.account): chat}, clock=time.time)
        delivery.start()
        try:
            yield delivery
        finally:
            await delivery.stop()


async def test_sends_edits_reactions_and_deletions_go_out_in_the_chats_order(tmp_path: Path) -> None:
    chat = LoggingChannel()
    async with delivery_to(chat, tmp_path) as delivery:
        first = await delivery.send(CHAT, OutboundMessage(text="hello"))
        assert first is not None
        await asyncio.gather(
            delivery.edit(CHAT, first, OutboundMessage(text="hello again")),
            delivery.send(CHAT, OutboundMessage(text="second")),
            delivery.react(CHAT, first, "👍"),
            delivery.delete(CHAT, first),
        )
        assert await delivery.store.unsent_outbox() == []
    assert chat.log == [("send", "hello"), ("edit", "hello again"), ("send", "second"), ("react", "👍"),
                        ("delete", first)]  # fmt: skip


async def test_a_long_message_is_split_once_to_the_channels_limit_with_its_buttons_on_the_last_piece(
    tmp_path: Path,
) -> None:
    chat = LoggingChannel()
    buttons = [[Button(label="OK", value="ok")]]
    async with delivery_to(chat, tmp_path) as delivery:
        last = await delivery.send(CHAT, OutboundMessage(text="one two three four five", buttons=buttons))
    assert [text for _, text in chat.log] == ["one two", "three four", "five"]
    assert all(len(sent.text) <= CAPS.max_text_length for sent in chat.sent)
    assert [sent.message.buttons for sent in chat.sent] == [[], [], buttons]
    assert last == chat.sent[-1].message_id


async def test_a_failed_edit_is_told_to_whoever_waits_and_not_tried_again(tmp_path: Path) -> None:
    chat = LoggingChannel()
    async with delivery_to(chat, tmp_path) as delivery:
        with pytest.raises(ChannelError, match="no such message"):
            await delivery.edit(CHAT, "never-sent", OutboundMessage(text="x"))
        assert await delivery.store.unsent_outbox() == []
        await delivery.send(CHAT, OutboundMessage(text="later"))  # the chat is not held up behind it
    assert chat.log == [("send", "later")]


async def test_what_a_crash_left_recorded_is_done_by_the_next_start(tmp_path: Path) -> None:
    chat = LoggingChannel()
    shown = await chat.send(CHAT, OutboundMessage(text="Approve?"))
    assert shown is not None
    where = CHAT.model_dump(mode="json")
    async with await SqliteStore.open(tmp_path) as store:  # the process that died had recorded an edit, not made it
        edit = {"message_id": shown, "message": OutboundMessage(text="Allowed").model_dump(mode="json")}
        entry = OutboxEntry(inbound_id=None, channel="memory", account="default", target=where, payload=edit,
                            kind="edit")  # fmt: skip
        await store.enqueue_once([entry])
    async with delivery_to(chat, tmp_path) as delivery:
        delivery.wake()
        await eventually(lambda: chat.showing[shown].text == "Allowed", "the recorded edit to be made")
    assert chat.log == [("send", "Approve?"), ("edit", "Allowed")]
