"""Delivery on its own: everything the bot says (sends, edits, deletions, reactions) is recorded in the outbox first,
then carried out in the chat's order, split once to the channel's limit; what a crash left recorded is done after. A
message goes as its parts (text, albums, files, poll), each recorded as sent: one that fails half way resumes at the
part that failed, and none appears twice."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.telegram import FakeTelegram
from helpers import FakeClock, eventually
from telegram_adapter import dm, running

from bot.delivery.outbox import Delivery, message_parts
from bot.store import OutboxEntry, OutboxRecord, SqliteStore
from channels import MemoryChannel
from channels.base import Button, Capabilities, ChatTarget, OutboundFile, OutboundMessage, Poll
from routing import Peer
from routing.errors import ChannelError

CHAT = ChatTarget(channel="memory", peer=Peer("direct", "7"))
CAPS = Capabilities(buttons=True, edit=True, delete=True, reactions=True, max_text_length=12)


class LoggingChannel(MemoryChannel):
    """A memory channel that also keeps one log of every call, in the order the calls were made."""

    def __init__(self) -> None:
        super().__init__(capabilities=CAPS)
        self.log: list[tuple[str, str]] = []
        self.refused: set[str] = set()  # texts the platform refuses to send

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        if message.text in self.refused:
            raise ChannelError(f"refused {message.text!r}")
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


async def test_a_closes_replies_go_out_at_once_behind_what_another_process_left_pending_for_the_chat(
    tmp_path: Path,
) -> None:
    """A chat with nothing pending is sent without a look at the outbox; one with an entry another process recorded
    (`bot pairing approve`'s welcome) waits for the look, which sends that entry first."""
    chat = LoggingChannel()

    def said(text: str) -> OutboxEntry:
        target = CHAT.model_dump(mode="json")
        return OutboxEntry(inbound_id=None, channel="memory", account="default", target=target, payload={"text": text})

    async with delivery_to(chat, tmp_path) as delivery:
        looks = 0
        read = delivery.store.unsent_outbox

        async def counted() -> list[OutboxRecord]:
            nonlocal looks
            looks += 1
            return await read()

        delivery.store.unsent_outbox = counted  # type: ignore[method-assign]
        await delivery.close([], replies=[said("hello")])
        await eventually(lambda: chat.log == [("send", "hello")], "the reply to go out")
        assert looks == 0
        async with await SqliteStore.open(tmp_path) as cli:
            await cli.enqueue_once([said("welcome")])
        await delivery.close([], replies=[said("after")])
        await eventually(lambda: len(chat.log) == 3, "both to go out")
        assert looks >= 1
    assert chat.log == [("send", "hello"), ("send", "welcome"), ("send", "after")]


def written(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


def test_a_message_goes_as_its_text_then_its_files_an_album_at_a_time_then_its_poll(tmp_path: Path) -> None:
    photos = [OutboundFile(path=written(tmp_path, f"p{i}.jpg", b"jpeg"), name=f"p{i}.jpg", kind="image")
              for i in range(11)]  # fmt: skip
    video = OutboundFile(path=written(tmp_path, "v.mp4", b"mp4"), name="v.mp4", kind="video")
    report = OutboundFile(path=written(tmp_path, "r.pdf", b"pdf"), name="r.pdf")
    voices = [OutboundFile(path=written(tmp_path, f"{i}.ogg", b"ogg"), name=f"{i}.ogg", kind="voice") for i in range(2)]
    caps = Capabilities(files=True, polls=True, max_caption_length=20, max_upload_bytes=100)
    buttons = [[Button(label="OK", value="ok")]]
    poll = Poll(question="Which?", options=["a", "b"])
    whole = OutboundMessage(text="", media=[*photos, video, report, *voices], poll=poll, reply_to="9", thread_id="t")

    parts = message_parts(whole.model_copy(update={"text": "Look"}), ["Look"], caps)
    assert [([file.name for file in part.media], part.text, part.poll) for part in parts] == [
        ([f"p{i}.jpg" for i in range(10)], "Look", None),  # the text fits: the first album's caption
        (["p10.jpg", "v.mp4"], "", None),  # photos and videos share an album
        (["r.pdf"], "", None),
        (["0.ogg"], "", None),  # a voice note goes alone
        (["1.ogg"], "", None),
        ([], "", poll),
    ]
    assert [part.reply_to for part in parts] == ["9", None, None, None, None, None]
    assert {part.thread_id for part in parts} == {"t"}

    with_buttons = whole.model_copy(update={"text": "Look", "buttons": buttons, "media": photos[:2], "poll": None})
    parts = message_parts(with_buttons, ["Look"], caps)  # buttons ride on a text of its own
    assert [(part.text, len(part.media), part.buttons, part.reply_to) for part in parts] == [
        ("Look", 0, buttons, "9"),
        ("", 2, [], None),
    ]
    long = whole.model_copy(update={"text": "x", "media": photos[:1], "poll": None})
    parts = message_parts(long, ["one piece", "a piece too long for a caption"], caps)
    assert [(part.text, len(part.media)) for part in parts] == [("one piece", 0), ("a piece too long for a caption", 0),
                                                               ("", 1)]  # fmt: skip
    tiny = Capabilities(files=True, max_upload_bytes=7)  # 4 bytes each: two would not fit in one message
    assert [len(part.media) for part in message_parts(long.model_copy(update={"media": photos[:3]}), [], tiny)] == [
        1, 1, 1,
    ]  # fmt: skip


async def test_a_message_whose_album_failed_half_way_resumes_at_the_album_and_sends_nothing_twice(
    tmp_path: Path, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    clock = FakeClock()
    photos = [OutboundFile(path=written(tmp_path, f"p{i}.jpg", b"photo %d" % i), name=f"p{i}.jpg", kind="image")
              for i in range(2)]  # fmt: skip
    report = OutboundFile(path=written(tmp_path, "r.pdf", b"%PDF report"), name="r.pdf")
    text = "word " * 300  # longer than a caption (1,024 characters): a message of its own before the files
    async with running(tg) as (adapter, _), await SqliteStore.open(tmp_path / "state", clock=clock) as store:
        delivery = Delivery(store, {(adapter.channel, adapter.account): adapter}, clock)
        delivery.wait_seconds = 0  # nobody waits for it: the outbox carries it out and retries it (as after a crash)
        delivery.start()
        try:
            tg.fail_next("sendMediaGroup", retry_after=0)  # a 429 without a wait, which the adapter does not retry
            assert await delivery.send(dm(tg), OutboundMessage(text=text, media=[*photos, report])) is None

            async def album_failed() -> bool:
                return any(record.attempts == 1 for record in await store.unsent_outbox())

            await eventually(album_failed, "the album to fail and wait for its retry")
            clock.advance(60.0)  # past its retry
            delivery.wake()
            await tg.wait_uploads(3)

            async def all_sent() -> bool:
                return await store.unsent_outbox() == []

            await eventually(all_sent, "every part to be recorded as sent")
        finally:
            await delivery.stop()
    assert [call["text"].split() for call in tg.calls("sendMessage")] == [text.split()]  # the text once
    assert [(upload.method, upload.filename) for upload in tg.uploads] == [
        ("sendMediaGroup", "p0.jpg"), ("sendMediaGroup", "p1.jpg"), ("sendDocument", "r.pdf"),
    ]  # fmt: skip


async def test_a_long_message_whose_piece_failed_stops_there_and_says_what_went_out(tmp_path: Path) -> None:
    chat = LoggingChannel()
    chat.refused = {"three four"}
    async with delivery_to(chat, tmp_path) as delivery:
        with pytest.raises(ChannelError) as failed:
            await delivery.send(CHAT, OutboundMessage(text="one two three four five"))
        await delivery.send(CHAT, OutboundMessage(text="later"))  # the chat goes on
        assert await delivery.store.unsent_outbox() == []
    assert chat.log == [("send", "one two"), ("send", "later")]  # "five" would read as if the middle had gone out
    assert str(failed.value) == "refused 'three four' (the first 1 of its 3 parts went out; the rest were not sent)"
