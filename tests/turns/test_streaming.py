"""Streaming replies keep the platform's pace: one preview per interval at most, counted on the reply's own clock; a
preview still queued when the stream gives up on it is never sent later."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

from helpers import FakeClock, eventually

from agent.events import AssistantEvent
from bot.delivery.outbox import Delivery
from bot.store import OutboxEntry, SqliteStore
from bot.turns.streaming import StreamingReply
from channels.base import Capabilities, ChannelAdapter, ChatTarget, OutboundMessage
from routing import Peer
from routing.errors import ChannelError

TARGET = ChatTarget(channel="chat", peer=Peer(kind="direct", id="7"))
PLATFORM_CALL = 0.3  # seconds each send or edit takes on the fake clock


class RecordingChat:
    """A chat that records, on the test's clock, when each preview was sent or edited and with what text."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.capabilities = Capabilities(edit=True, delete=True, streaming=True, max_text_length=40)
        self.shown: list[tuple[float, str]] = []

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str:
        self.shown.append((self.clock(), message.text))
        self.clock.advance(PLATFORM_CALL)
        return "1"

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        await self.send(target, message)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        self.shown.append((self.clock(), ""))


@contextlib.asynccontextmanager
async def streaming(clock: FakeClock, state: Path) -> AsyncIterator[tuple[StreamingReply, RecordingChat]]:
    """A streaming reply to the recording chat, through a real outbox (a SQLite store on the same clock)."""
    chat = RecordingChat(clock)
    async with await SqliteStore.open(state, clock=clock) as store:
        delivery = Delivery(store, {(TARGET.channel, TARGET.account): cast(ChannelAdapter, chat)}, clock)
        delivery.start()
        try:
            yield StreamingReply(delivery, TARGET, chat.capabilities, clock=clock, sleep=clock.sleep), chat
        finally:
            await delivery.stop()


def delta(text: str) -> AssistantEvent:
    return AssistantEvent(run_id="r", delta=text)


async def test_previews_are_at_least_one_interval_apart_the_final_edit_too(tmp_path: Path) -> None:
    clock = FakeClock()
    async with streaming(clock, tmp_path) as (reply, chat):
        began = clock()
        for word in ["one ", "two ", "three ", "four ", "five ", "six ", "seven "]:
            await reply.on_event(delta(word))
            await clock.sleep(0.4)  # the model writes a word every 0.4 s
        rest = await reply.finish("one two three four five six seven eight nine ten eleven")
        times = [at for at, _ in chat.shown]
        assert len(times) >= 2  # a first preview (and edits, as the outbox keeps up), and the final text
        assert times[0] - began >= 1.0  # the first preview waits one interval
        assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(times))
        texts = [text for _, text in chat.shown]
        assert all(earlier != later for earlier, later in itertools.pairwise(texts))
        assert texts[-1] == "one two three four five six seven eight"
        assert rest == ["nine ten eleven"]


async def test_a_quick_answer_is_not_streamed_but_goes_out_whole(tmp_path: Path) -> None:
    clock = FakeClock()
    async with streaming(clock, tmp_path) as (reply, chat):
        await reply.on_event(delta("Quick "))
        await reply.on_event(delta("answer."))
        assert await reply.finish("Quick answer.") == ["Quick answer."]
        assert chat.shown == [] and not reply.shown


async def test_a_reply_that_ends_with_nothing_to_say_takes_its_preview_back(tmp_path: Path) -> None:
    clock = FakeClock()
    async with streaming(clock, tmp_path) as (reply, chat):
        await reply.on_event(delta("Let me think"))
        await eventually(lambda: bool(chat.shown), "the first preview")
        assert [text for _, text in chat.shown] == ["Let me think"]
        assert await reply.finish("") == []
        assert [text for _, text in chat.shown] == ["Let me think", ""]  # "" marks the delete
        assert not reply.shown


class DownChat(RecordingChat):
    """A recording chat whose platform refuses every send while `down`."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.down = True
        self.refused: list[str] = []

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str:
        if self.down:
            self.refused.append(message.text)
            raise ChannelError("the platform is down")
        return await super().send(target, message)


async def test_a_preview_still_queued_when_the_stream_gives_up_on_it_is_never_sent_later(tmp_path: Path) -> None:
    clock = FakeClock()
    chat = DownChat(clock)
    async with await SqliteStore.open(tmp_path, clock=clock) as store:
        delivery = Delivery(store, {(TARGET.channel, TARGET.account): cast(ChannelAdapter, chat)}, clock)
        delivery.wait_seconds = 0.2  # how long a send waits behind the chat's earlier messages (real seconds)
        delivery.start()
        try:
            # A reply recorded earlier that the platform refuses: the chat's later messages queue behind it.
            earlier = OutboundMessage(text="earlier").model_dump(mode="json")
            where = TARGET.model_dump(mode="json")
            entry = OutboxEntry(inbound_id=None, channel=TARGET.channel, account=TARGET.account, target=where,
                                payload=earlier)  # fmt: skip
            await store.enqueue_once([entry])
            delivery.wake()
            await eventually(lambda: chat.refused == ["earlier"], "the earlier reply to be refused")

            reply = StreamingReply(delivery, TARGET, chat.capabilities, clock=clock, sleep=clock.sleep)
            await reply.on_event(delta("Let me think"))

            async def preview_queued() -> bool:
                return len(await store.unsent_outbox()) == 2

            await eventually(preview_queued, "the preview to queue behind the earlier reply")
            # The preview waits its turn, and is given up on: the whole answer goes out as messages of its own.
            assert await reply.finish("Let me think about it.") == ["Let me think about it."]
            assert not reply.shown

            chat.down = False
            clock.advance(60.0)  # past the earlier reply's retry
            await delivery.send(TARGET, OutboundMessage(text="later"))  # goes out after whatever was still queued
        finally:
            await delivery.stop()
    assert [text for _, text in chat.shown] == ["earlier", "later"]
