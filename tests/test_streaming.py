"""Streaming replies keep the platform's pace: one preview per interval at most, counted on the reply's own clock."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

from helpers import FakeClock, eventually

from agent.events import AssistantEvent
from bot.delivery import Delivery
from bot.store import SqliteStore
from bot.streaming import StreamingReply
from channels.base import Capabilities, ChannelAdapter, ChatTarget, OutboundMessage
from routing import Peer

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
